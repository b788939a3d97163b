"""Micro-benchmarks: how matmul time grows with dimension, how an MLP's time grows with steps,
layers, batch and width. ``matmul_benchmark(configs)`` and ``mlp_benchmark(configs)`` -> rows.

Same timing rules as ``bench``: warmup repetitions first (excluded), then ``runs`` timed
samples between device synchronizations (``timeit.default_timer``). A matmul of a small
dimension takes microseconds, less than a timer read and a synchronize cost to resolve, so each
matmul sample repeats the product enough times to last ~``MIN_SAMPLE_S`` and reports the time of
one (``repeats`` says how many). Configs that cannot fit are ``skipped`` with the reason, an
out-of-memory error is an ``oom`` row, Ctrl-C keeps the rows finished so far, ``--db`` appends
rows (``nvtx_model.grid.run_configs``).

Scaling: ``fit_exponent(xs, ys)`` is the least-squares slope of log(time) against log(value),
so time ~ c * value^exponent; every row of a series carries the series' ``exponent``, and
``local_exponent`` is the slope from the previous point of its series (where the growth
becomes cubic or linear shows there).
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from timeit import default_timer as timer
from typing import Any, Callable

import torch

from nvtx_model.config import format_bytes
from nvtx_model.grid import (
    CPU_MEMORY_SHARE,
    STATUS_COLUMNS,
    STATUS_OK,
    Progress,
    SweepResult,
    run_configs,
)
from nvtx_model.micro_config import MatmulConfig, MLPConfig, fit_exponent

MIN_SAMPLE_S = 2e-3
MAX_REPEATS = 10_000


# ---- fitting (pure) -------------------------------------------------------------------------
def annotate_exponents(rows: list[dict[str, Any]], series: Callable[[dict], Any],
                       x: str, y: str = "mean_s") -> dict[Any, float | None]:
    """Set ``exponent`` (the series' fit) and ``local_exponent`` (slope from the previous
    ok point) on every row; returns the exponent per series key. Only ``ok`` rows count."""
    exponents: dict[Any, float | None] = {}
    groups: dict[Any, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(series(row), []).append(row)
    for key, members in groups.items():
        ok = sorted((r for r in members if r.get("status") == STATUS_OK and r.get(y)),
                    key=lambda r: r[x])
        fit = fit_exponent([r[x] for r in ok], [r[y] for r in ok])
        exponents[key] = None if fit is None else fit[0]
        previous = None
        for r in members:
            r["exponent"] = exponents[key]
            r["local_exponent"] = None
        for r in ok:
            if previous is not None and r[x] != previous[x]:
                r["local_exponent"] = (math.log(r[y] / previous[y])
                                       / math.log(r[x] / previous[x]))
            previous = r
    return exponents


# ---- measuring ------------------------------------------------------------------------------
MICRO_CONFIG_COLUMNS: dict[str, type] = {
    "precision": str, "device": str, "device_name": str, "threads": int, "warmup": int,
    "runs": int,
}
TIME_COLUMNS: dict[str, type] = {
    "mean_s": float, "std_s": float, "median_s": float, "min_s": float, "flops": int,
    "tflops": float, "exponent": float, "local_exponent": float,
}
MATMUL_COLUMN_TYPES: dict[str, type] = {"dim": int, **MICRO_CONFIG_COLUMNS, "repeats": int,
                                        **TIME_COLUMNS, **STATUS_COLUMNS}
MATMUL_COLUMNS = list(MATMUL_COLUMN_TYPES)
MLP_COLUMN_TYPES: dict[str, type] = {
    "param": str, "value": int, "num_steps": int, "num_layers": int, "batch_size": int,
    "dim": int, **MICRO_CONFIG_COLUMNS, **TIME_COLUMNS, **STATUS_COLUMNS}
MLP_COLUMNS = list(MLP_COLUMN_TYPES)


def _config_columns(cfg: Any, runtime: Any) -> dict[str, Any]:
    own = {k: getattr(cfg, k) for k in ("dim", "param", "value", "num_steps", "num_layers",
                                        "batch_size") if hasattr(cfg, k)}
    return {**own, "precision": cfg.precision, "device": runtime.kind,
            "device_name": runtime.name, "threads": cfg.threads or torch.get_num_threads(),
            "warmup": cfg.warmup, "runs": cfg.runs, "flops": cfg.flops}


def _check(cfg: Any, runtime: Any, limit: int | None) -> str | None:
    if cfg.precision == "bf16" and not runtime.bf16_supported():
        return f"bf16 is not supported on {runtime.name}; use --precision fp32"
    if limit is None:
        free = runtime.free_bytes()
        if free is None:
            return None
        limit = int(free * CPU_MEMORY_SHARE)
        label = f"= {CPU_MEMORY_SHARE:.0%} {runtime.free_label}"
    else:
        label = "(the given limit)"
    if cfg.bytes_needed > limit:
        return f"needs {format_bytes(cfg.bytes_needed)} > {format_bytes(limit)} {label}"
    return None


def _timed_samples(work: Callable[[], None], sync: Callable[[], None], warmup: int, runs: int,
                   repeats: int = 1) -> list[float]:
    for _ in range(warmup):
        work()
    sync()
    samples = []
    for _ in range(runs):
        start = timer()
        for _ in range(repeats):
            work()
        sync()
        samples.append((timer() - start) / repeats)
    return samples


def _time_columns(samples: list[float], flops: int) -> dict[str, Any]:
    mean = statistics.fmean(samples)
    return {"mean_s": mean, "std_s": statistics.stdev(samples) if len(samples) > 1 else None,
            "median_s": statistics.median(samples), "min_s": min(samples),
            "tflops": flops / mean / 1e12 if mean > 0 else None}


def _dtype(precision: str) -> Any:
    return torch.bfloat16 if precision == "bf16" else torch.float32


def measure_matmul(cfg: MatmulConfig, runtime: Any, instrumentation: Any, row: dict) -> None:
    gen = torch.Generator(device=runtime.device).manual_seed(cfg.seed)
    shape = (cfg.dim, cfg.dim)
    a = torch.randn(shape, generator=gen, device=runtime.device, dtype=_dtype(cfg.precision))
    b = torch.randn(shape, generator=gen, device=runtime.device, dtype=_dtype(cfg.precision))
    c = torch.empty_like(a)

    def work() -> None:
        torch.matmul(a, b, out=c)

    # calibrate after the warmup: repeat the product so a sample lasts >= MIN_SAMPLE_S
    one = min(_timed_samples(work, runtime.synchronize, cfg.warmup, 1))
    repeats = max(1, min(MAX_REPEATS, math.ceil(MIN_SAMPLE_S / one))) if one > 0 else MAX_REPEATS
    samples = _timed_samples(work, runtime.synchronize, 0, cfg.runs, repeats)
    row.update(repeats=repeats, **_time_columns(samples, cfg.flops))


def measure_mlp(cfg: MLPConfig, runtime: Any, instrumentation: Any, row: dict) -> None:
    from torch import nn

    torch.manual_seed(cfg.seed)
    dtype = _dtype(cfg.precision)
    layers: list[nn.Module] = []
    for _ in range(cfg.num_layers):
        layers += [nn.Linear(cfg.dim, cfg.dim), nn.GELU()]
    model = nn.Sequential(*layers).to(device=runtime.device, dtype=dtype)
    x = torch.randn(cfg.batch_size, cfg.dim, device=runtime.device, dtype=dtype)

    def work() -> None:
        for _ in range(cfg.num_steps):
            model(x).float().square().mean().backward()
            model.zero_grad(set_to_none=True)

    samples = _timed_samples(work, runtime.synchronize, cfg.warmup, cfg.runs)
    row.update(_time_columns(samples, cfg.flops))


def _run(configs: list[Any], measure: Callable, column_types: dict[str, type], table: str, *,
         progress: Progress | None, db: Path | None, memory_limit_bytes: int | None,
         series: Callable[[dict], Any], x: str) -> SweepResult:
    result = run_configs(configs, measure, config_columns=_config_columns, check=_check,
                         progress=progress, db=db, table=table, column_types=column_types,
                         memory_limit_bytes=memory_limit_bytes)
    annotate_exponents(result.rows, series, x)
    if db is not None and result.run_id is not None:
        from nvtx_model.results_db import update_rows

        update_rows(db, table, result.run_id, result.rows, ("exponent", "local_exponent"))
    return result


def matmul_benchmark(configs: list[MatmulConfig], *, progress: Progress | None = None,
                     db: Path | None = None, memory_limit_bytes: int | None = None
                     ) -> SweepResult:
    """Time every square matmul; rows have ``MATMUL_COLUMNS``, ``exponent`` per precision."""
    return _run(configs, measure_matmul, MATMUL_COLUMN_TYPES, "micro_matmul", progress=progress,
                db=db, memory_limit_bytes=memory_limit_bytes,
                series=lambda r: r["precision"], x="dim")


def mlp_benchmark(configs: list[MLPConfig], *, progress: Progress | None = None,
                  db: Path | None = None, memory_limit_bytes: int | None = None) -> SweepResult:
    """Time every MLP config; rows have ``MLP_COLUMNS``, ``exponent`` per (param, precision)."""
    return _run(configs, measure_mlp, MLP_COLUMN_TYPES, "micro_mlp", progress=progress, db=db,
                memory_limit_bytes=memory_limit_bytes,
                series=lambda r: (r["param"], r["precision"]), x="value")
