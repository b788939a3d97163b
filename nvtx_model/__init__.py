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
- ``sweep``: the loop both share (skipped/oom rows, Ctrl-C, results database).
- ``results_db``: ``--db`` appends rows and run metadata with sqlite-utils.
- ``run``: ``python -m nvtx_model.run ...`` for running a workload under ``nsys profile``.
- ``infer_config`` (no torch) / ``infer``: inference-latency grids, skip rules, memory estimate;
  KV-cache ``generate`` and ``run_inference(configs)`` -> rows (TTFT, TPOT, ITL, tokens/s).
- ``hf_model``: optional local Hugging Face causal LM for ``infer --model hf:PATH``.
- ``micro_config`` (no torch) / ``micro``: matmul and MLP scaling micro-benchmarks, exponent fits.

See docs/MODEL.md.
"""
