"""What bounds a step, size by size, on a GPU: the table of docs/GPU.md.

For each size, mode and precision: the mean of the measured steps (as ``bench`` times them),
then one more step under torch.profiler (``nvtx_model.busy.profile_step``): the GPU's busy
share of it, its kernel count and mean kernel duration, and the bound. On the lent GPU machine
(no nsys-mine installed; the checkout on PYTHONPATH)::

    python benchmarks/gpu_bound.py OUT_DIR --sizes small,medium,large,xl,2.7B --time-limit 100

Writes ``OUT_DIR/gpu_bound.json`` and ``gpu_bound.md`` row by row, so a run stopped by the
time limit keeps the rows it finished. Without CUDA it says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nvtx_model.busy import profile_step  # noqa: E402
from nvtx_model.config import PRESETS, ModelConfig, RunConfig  # noqa: E402

COLUMNS = ("size", "mode", "precision", "context", "batch", "step_ms", "profiled_step_ms",
           "gpu_busy_pct", "kernels", "mean_kernel_us", "bound", "with_cpu_busy_pct")


def measure(size: str, mode: str, precision: str, context: int, batch: int, warmup: int,
            steps: int) -> dict:
    import torch

    from nvtx_model.harness import Workload
    from nvtx_model.runtime import CudaRuntime

    runtime = CudaRuntime()
    model = ModelConfig.from_shape(PRESETS[size], context_length=context)
    cfg = RunConfig(size=size, model=model, batch=batch, mode=mode, precision=precision,
                    device="cuda", warmup=warmup, steps=steps)
    work = Workload(cfg, runtime)
    timings = work.run()
    profile_step(work.step, runtime.synchronize)  # CUPTI's first use costs extra: not kept
    busy = profile_step(work.step, runtime.synchronize)
    with_cpu = profile_step(work.step, runtime.synchronize, with_cpu=True)
    row = {"size": size, "mode": mode, "precision": precision, "context": context,
           "batch": batch, "step_ms": 1e3 * statistics.fmean(t.total_s for t in timings),
           "profiled_step_ms": busy.span_ns / 1e6, **busy.columns(),
           "with_cpu_busy_pct": with_cpu.busy_pct, "with_cpu_kernels": with_cpu.kernels,
           "with_cpu_step_ms": with_cpu.span_ns / 1e6}
    del work
    torch.cuda.empty_cache()
    return row


def markdown(rows: list[dict]) -> str:
    def cell(v):
        return f"{v:.1f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--sizes", default="small,medium,large,xl,2.7B")
    parser.add_argument("--modes", default="train,forward")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--time-limit", type=float, default=0, help="seconds; 0: none")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        print(f"gpu_bound: no CUDA device (torch {torch.__version__}): nothing measured")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    began = time.monotonic()
    for size in args.sizes.split(","):
        for mode in args.modes.split(","):
            for precision in args.precisions.split(","):
                if args.time_limit and time.monotonic() - began > args.time_limit:
                    print("gpu_bound: time limit reached; rows so far kept")
                    return 0
                try:
                    row = measure(size, mode, precision, args.context, args.batch,
                                  args.warmup, args.steps)
                except torch.cuda.OutOfMemoryError as exc:
                    row = {"size": size, "mode": mode, "precision": precision,
                           "bound": f"oom: {str(exc).splitlines()[0][:80]}"}
                    torch.cuda.empty_cache()
                rows.append(row)
                print(json.dumps(row), flush=True)
                (args.out / "gpu_bound.json").write_text(json.dumps(rows, indent=1))
                (args.out / "gpu_bound.md").write_text(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
