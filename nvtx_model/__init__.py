"""NVTX-instrumented Transformer language model (CS336 basics architecture).

Modules (only ``config``, ``nvtx_ranges``, ``errors``, ``workload``, ``infer_config``,
``micro_config`` and ``hf_model`` are importable without torch):

- ``config``: size presets, ``ModelConfig``/``RunConfig``, closed-form parameter counts,
  FLOPs and memory estimates.
- ``model``: ``TransformerLM`` (RMSNorm, RoPE, causal MHA with naive or SDPA attention, SwiGLU).
- ``nvtx_ranges``: the NVTX range-name contract and the one helper that emits ranges.
- ``runtime``: CPU/CUDA differences (synchronize, autocast, peaks, OOM, memory history).
- ``harness``: one workload (model, AdamW, random batch) stepped with synchronized timing.
- ``bench`` / ``memory``: ``benchmark(configs)`` and ``profile_memory(configs)`` -> rows.
- ``grid``: the loop bench, memory, infer and micro share (skipped/oom rows, Ctrl-C, the
  results database).
- ``results_db``: ``--db`` appends rows and run metadata with sqlite-utils.
- ``workload``: ``WorkloadSpec`` (what the workload options mean) -> ``RunConfig`` list; the
  child that ``nsys profile`` runs is ``python -m profile_cli.run_workload``.
- ``program_nvtx`` / ``launch``: NVTX ranges for programs nsys-mine did not write (``--nvtx
  modules,ops,steps``) and the launcher that installs them at ``import torch``.
- ``infer_config`` (no torch) / ``infer``: inference-latency grids, skip rules, memory estimate;
  KV-cache ``generate`` and ``run_inference(configs)`` -> rows (TTFT, TPOT, ITL, tokens/s).
- ``hf_model``: optional local Hugging Face causal LM for ``infer --model hf:PATH``.
- ``micro_config`` (no torch) / ``micro``: matmul and MLP scaling micro-benchmarks, exponent fits.

See docs/MODEL.md.
"""
