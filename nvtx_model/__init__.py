"""NVTX-instrumented Transformer language model (CS336 basics architecture).

Modules (only ``config``, ``nvtx_ranges`` and ``errors`` are importable without torch):

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

See docs/MODEL.md.
"""
