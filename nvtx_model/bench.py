"""Wall-clock benchmarks: ``benchmark(configs)`` -> rows with step and phase times.

Warmup steps run first and are excluded; each measured step is timed with
``timeit.default_timer`` between device synchronizations. Rows report mean, std (sample),
median, min and max of the step time, the mean of each phase, and the achieved TFLOP/s and
MFU from the analytic FLOPs of ``nvtx_model.config``.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import RunConfig, step_flops
from nvtx_model.grid import CONFIG_COLUMNS, STATUS_COLUMNS, Progress, SweepResult, run_configs

# A first measured step this many times the median of the others is an outlier (--warmup 0).
OUTLIER_RATIO = 1.5

TIMING_COLUMNS: dict[str, type] = {
    "mean_s": float, "std_s": float, "median_s": float, "min_s": float, "max_s": float,
    "first_step_s": float, "forward_s": float, "loss_s": float, "backward_s": float,
    "optimizer_s": float, "flops_per_step": int, "tflops": float, "mfu_pct": float,
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


def measure_time(cfg: RunConfig, runtime, instrumentation: nv.Instrumentation, row: dict,
                 *, peak_tflops: float | None = None) -> None:
    """Run ``cfg`` and put its timing columns into ``row`` (which has ``flops_per_step``)."""
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import peak_tflops as device_peak

    timings = Workload(cfg, runtime, instrumentation).run()
    totals = [t.total_s for t in timings]
    row.update(timing_stats(totals, [t.phases for t in timings]))
    flops = row["flops_per_step"]
    tflops = flops / row["mean_s"] / 1e12 if row["mean_s"] > 0 else None
    peak = peak_tflops or device_peak(runtime.name, cfg.precision)
    row.update(tflops=tflops, mfu_pct=100 * tflops / peak if peak and tflops is not None else None)
    if cfg.warmup == 0:
        row["note"] = warmup_note(totals)


def benchmark(
    configs: list[RunConfig],
    *,
    progress: Progress | None = None,
    db: Path | None = None,
    peak_tflops: float | None = None,
    memory_limit_bytes: int | None = None,
    nvtx_backend: nv.Backend | None = None,
) -> SweepResult:
    """Time every config; rows have ``BENCH_COLUMNS``. With ``db``, rows are appended to that
    results database as they finish (table ``bench``), so an interrupted sweep keeps them."""

    def measure(cfg, runtime, instrumentation, row):
        measure_time(cfg, runtime, instrumentation, row, peak_tflops=peak_tflops)

    result = run_configs(configs, measure, static_columns=flops_column, progress=progress, db=db,
                       table="bench", column_types=BENCH_COLUMN_TYPES,
                       memory_limit_bytes=memory_limit_bytes, nvtx_backend=nvtx_backend)
    ok = [r for r in result.rows if r["status"] == "ok"]
    if ok and all(r["mfu_pct"] is None for r in ok):
        result.notes.append("mfu_pct needs the device's peak TFLOP/s: pass --peak-tflops")
    return result

