"""Wall-clock benchmarks: ``benchmark(configs)`` -> rows with step and phase times.

Warmup steps run first and are excluded; each measured step is timed with
``timeit.default_timer`` between device synchronizations. Rows report mean, std (sample),
median, min and max of the step time, the mean of each phase, and the achieved TFLOP/s and
MFU from the analytic FLOPs of ``nvtx_model.config``. On a GPU, one extra step runs under
torch.profiler (``nvtx_model.busy``): the GPU's busy share of it, its kernels and what bounds
the step (``host`` or ``device``).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from nvtx_model import busy as gpu_busy
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import RunConfig, step_flops
from nvtx_model.grid import CONFIG_COLUMNS, STATUS_COLUMNS, Progress, SweepResult, run_configs

# A first measured step this many times the median of the others is an outlier (--warmup 0).
OUTLIER_RATIO = 1.5

TIMING_COLUMNS: dict[str, type] = {
    "mean_s": float, "std_s": float, "median_s": float, "min_s": float, "max_s": float,
    "first_step_s": float, "forward_s": float, "loss_s": float, "backward_s": float,
    "optimizer_s": float, "flops_per_step": int, "tflops": float, "mfu_pct": float,
    "gpu_busy_pct": float, "kernels": int, "mean_kernel_us": float, "bound": str,
}
BENCH_COLUMN_TYPES: dict[str, type] = {**CONFIG_COLUMNS, **TIMING_COLUMNS, **STATUS_COLUMNS}
BENCH_COLUMNS = list(BENCH_COLUMN_TYPES)


def timing_stats(totals: list[float], phases: list[dict[str, float]]) -> dict[str, Any]:
    """Step statistics and per-phase means (None for phases the mode does not have)."""
    stats: dict[str, Any] = {
        "mean_s": statistics.fmean(totals),
        "std_s": statistics.stdev(totals) if len(totals) > 1 else None,
        "median_s": statistics.median(totals),
        "min_s": min(totals),
        "max_s": max(totals),
        "first_step_s": totals[0],
    }
    for phase in nv.PHASES:
        values = [p[phase] for p in phases if phase in p]
        stats[f"{phase}_s"] = statistics.fmean(values) if values else None
    return stats


def warmup_note(totals: list[float]) -> str:
    """What the first step of a run without warmup looked like."""
    if len(totals) < 2:
        return ("warmup 0: the only measured step includes one-time costs "
                "(allocation, kernel selection)")
    rest = statistics.median(totals[1:])
    ratio = totals[0] / rest if rest > 0 else float("inf")
    verdict = "an outlier, included in mean and std" if ratio >= OUTLIER_RATIO else "no outlier"
    return f"warmup 0: first step {ratio:.1f}x the median of the others ({verdict})"


def flops_column(cfg: RunConfig) -> dict[str, int]:
    return {"flops_per_step": step_flops(cfg.model, cfg.batch, cfg.mode)}


def add_note(row: dict, note: str) -> None:
    row["note"] = "; ".join(filter(None, [row.get("note"), note]))


def measure_bound(work, runtime, row: dict) -> None:
    """One more step of ``work`` under torch.profiler: the busy, kernels and bound columns."""
    try:
        busy = gpu_busy.profile_step(work.step, runtime.synchronize)
    except RuntimeError as exc:  # CUPTI taken by another profiler, ...
        add_note(row, f"gpu_busy_pct not measured: torch.profiler failed ({exc})")
        return
    if not busy.kernels:
        add_note(row, "gpu_busy_pct not measured: torch.profiler recorded no kernel (is another "
                      "profiler, such as nsys, holding CUPTI?)")
        return
    row.update(busy.columns())


def measure_time(cfg: RunConfig, runtime, instrumentation: nv.Instrumentation, row: dict,
                 *, peak_tflops: float | None = None, bound: bool = True) -> None:
    """Run ``cfg`` and put its timing columns into ``row`` (which has ``flops_per_step``);
    with ``bound``, on a GPU, also what bounds the step (``measure_bound``)."""
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import peak_tflops as device_peak

    work = Workload(cfg, runtime, instrumentation)
    timings = work.run()
    totals = [t.total_s for t in timings]
    row.update(timing_stats(totals, [t.phases for t in timings]))
    flops = row["flops_per_step"]
    tflops = flops / row["mean_s"] / 1e12 if row["mean_s"] > 0 else None
    peak = peak_tflops or device_peak(runtime.name, cfg.precision)
    row.update(tflops=tflops, mfu_pct=100 * tflops / peak if peak and tflops is not None else None)
    if cfg.warmup == 0:
        add_note(row, warmup_note(totals))
    if bound and runtime.kind == "cuda":
        measure_bound(work, runtime, row)


def bound_notes(rows: list[dict[str, Any]]) -> list[str]:
    """What bounds the steps the host bounds: one sentence for one such row; for several, a
    line each and what helps once. CPU rows: one note that the question does not apply."""
    host = [r for r in rows if r.get("bound") == gpu_busy.HOST]
    notes = []
    for r in host:
        notes.append(
            f"{r['size']} ctx {r['context']} b{r['batch']} {r['mode']} {r['precision']}: the GPU "
            f"is busy {r['gpu_busy_pct']:.0f}% of the step; the step is bound by the host "
            f"launching {r['kernels']:,} kernel{'s' if r['kernels'] != 1 else ''} (mean "
            f"{r['mean_kernel_us']:.1f} µs each)")
    if host:
        graphs = all(r.get("compile") in ("reduce-overhead", "max-autotune") for r in host)
        helps = ("a larger batch or model is what helps (the steps already replay CUDA graphs)"
                 if graphs else "CUDA graphs (--compile reduce-overhead) or a larger batch are "
                 "what help")
        if len(host) == 1:
            notes[0] += f", so bf16 or a faster GPU cannot shorten it; {helps}"
        else:
            notes.append(f"the {len(host)} steps above wait on the host: bf16 or a faster GPU "
                         f"cannot shorten them; {helps}")
    if any(r.get("device") == "cpu" and r["status"] == "ok" for r in rows):
        notes.append("gpu_busy_pct, bound: a CPU run has no GPU to wait on the host, so what "
                     "bounds the step does not apply; run on a GPU (--device cuda)")
    return notes


def benchmark(
    configs: list[RunConfig],
    *,
    progress: Progress | None = None,
    db: Path | None = None,
    peak_tflops: float | None = None,
    memory_limit_bytes: int | None = None,
    nvtx_backend: nv.Backend | None = None,
    bound: bool = True,
) -> SweepResult:
    """Time every config; rows have ``BENCH_COLUMNS``. With ``db``, rows are appended to that
    results database as they finish (table ``bench``), so an interrupted sweep keeps them.
    ``bound=False`` leaves out the profiled step (under nsys, which holds CUPTI itself)."""

    def measure(cfg, runtime, instrumentation, row):
        measure_time(cfg, runtime, instrumentation, row, peak_tflops=peak_tflops, bound=bound)

    result = run_configs(configs, measure, static_columns=flops_column, progress=progress, db=db,
                       table="bench", column_types=BENCH_COLUMN_TYPES,
                       memory_limit_bytes=memory_limit_bytes, nvtx_backend=nvtx_backend)
    ok = [r for r in result.rows if r["status"] == "ok"]
    if ok and all(r["mfu_pct"] is None for r in ok):
        result.notes.append("mfu_pct needs the device's peak TFLOP/s: pass --peak-tflops")
    if bound:
        result.notes.extend(bound_notes(ok))
    return result

