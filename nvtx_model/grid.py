"""The grid loop shared by ``bench``, ``memory``, ``infer`` and ``micro``: configs in, rows out.

For every config: check the estimated footprint against available CPU RAM (``skipped``), run
the measurement, turn an out-of-memory error into an ``oom`` row, free memory, append the row
to the results database, go on. Ctrl-C stops the sweep and keeps the rows finished so far.

Configs are ``RunConfig``s by default; other commands pass their own config objects (anything
with ``device``, ``nvtx``, ``threads`` and ``label()``) together with the ``config_columns``
and ``check`` functions that describe and pre-check them.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import RunConfig, memory_estimate, param_counts
from nvtx_model.runtime import Runtime, resolve_runtime

# (configs done, configs in the sweep, the label of the config about to run or None at the end)
Progress = Callable[[int, int, "str | None"], None]
# Fills ``row`` with the measurement of one config; raises the device's OOM error on OOM.
Measure = Callable[[Any, Runtime, nv.Instrumentation, dict], None]
# The columns that describe a config on a runtime (they start every row).
ConfigColumns = Callable[[Any, Runtime], "dict[str, Any]"]
# Why a config should not run on a runtime, given the memory limit (None: run it).
Check = Callable[[Any, Runtime, "int | None"], "str | None"]

GIB = 1024**3
# Skip a CPU config when its estimate exceeds this share of MemAvailable: the estimate is rough
# and the OS, Python and torch need room too.
CPU_MEMORY_SHARE = 0.9

STATUS_OK, STATUS_OOM, STATUS_SKIPPED = "ok", "oom", "skipped"
# Columns every row of bench and memory starts with; types are for the results database.
CONFIG_COLUMNS: dict[str, type] = {
    "size": str, "params": int, "d_model": int, "d_ff": int, "layers": int, "heads": int,
    "vocab": int, "context": int, "batch": int, "mode": str, "precision": str, "attention": str,
    "nvtx": str, "device": str, "device_name": str, "threads": int, "adamw": str, "seed": int,
    "warmup": int, "steps": int, "compile": str,
}
STATUS_COLUMNS: dict[str, type] = {"status": str, "note": str}


@dataclass
class SweepResult:
    rows: list[dict[str, Any]]
    planned: int
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    run_id: int | None = None
    device_names: list[str] = field(default_factory=list)


def config_row(cfg: RunConfig, runtime: Runtime) -> dict[str, Any]:
    m = cfg.model
    return {
        "size": cfg.size, "params": param_counts(m)["total"], "d_model": m.d_model,
        "d_ff": m.d_ff, "layers": m.num_layers, "heads": m.num_heads, "vocab": m.vocab_size,
        "context": m.context_length, "batch": cfg.batch, "mode": cfg.mode,
        "precision": cfg.precision, "attention": cfg.attention, "nvtx": cfg.nvtx,
        "device": runtime.kind, "device_name": runtime.name,
        "threads": cfg.threads or torch.get_num_threads(), "adamw": cfg.adamw, "seed": cfg.seed,
        "warmup": cfg.warmup, "steps": cfg.steps, "compile": cfg.compile,
    }


def precheck(cfg: RunConfig, runtime: Runtime, memory_limit_bytes: int | None) -> str | None:
    """Why ``cfg`` should not run on ``runtime`` (the reason of a ``skipped`` row), or None."""
    if cfg.precision == "bf16" and not runtime.bf16_supported():
        return f"bf16 is not supported on {runtime.name}; use --precision fp32"
    limit = memory_limit_bytes
    if limit is None and runtime.kind == "cpu":
        available = runtime.available_bytes()
        limit = None if available is None else int(available * CPU_MEMORY_SHARE)
    if limit is None:
        return None
    need = memory_estimate(cfg.model, cfg.batch, cfg.mode, cfg.precision, cfg.attention,
                           cfg.adamw).total_bytes
    if need > limit:
        return (f"estimated footprint {need / GIB:.1f} GiB exceeds the {limit / GIB:.1f} GiB "
                f"this run may use ({'given limit' if memory_limit_bytes else 'of MemAvailable'}); "
                "use a smaller --size, --context or --batch")
    return None


def oom_reason(exc: BaseException) -> str:
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return f"out of memory: {first[:200]}"


def run_configs(
    configs: list[RunConfig] | list[Any],
    measure: Measure,
    *,
    static_columns: Callable[[Any], dict[str, Any]] | None = None,
    progress: Progress | None = None,
    db: Path | None = None,
    table: str = "",
    column_types: dict[str, type] | None = None,
    memory_limit_bytes: int | None = None,
    nvtx_backend: nv.Backend | None = None,
    config_columns: ConfigColumns = config_row,
    check: Check = precheck,
) -> SweepResult:
    """Run ``measure`` for every config; each row ends with ``status`` and ``note``.

    ``config_columns(cfg, runtime)`` starts each row (default: the RunConfig columns);
    ``static_columns(cfg)`` gives columns known without running (they appear in skipped and
    OOM rows too); ``check(cfg, runtime, memory_limit_bytes)`` gives the reason of a
    ``skipped`` row (default: ``precheck``, the training-step estimate vs available RAM).
    With ``db``, each row is appended to ``table`` of that results database as soon as it is
    done (so an interrupted sweep keeps it), under one ``runs`` row of metadata.
    ``memory_limit_bytes`` replaces the CPU check against MemAvailable (and applies on CUDA
    too); ``nvtx_backend`` replaces the default NVTX backend (tests pass a recording one)."""
    runtimes: dict[str, Runtime] = {}
    for cfg in configs:  # resolve devices first: --device cuda without CUDA fails before any run
        if cfg.device not in runtimes:
            runtimes[cfg.device] = resolve_runtime(cfg.device)
    # NVTX backends too (a missing PyPI nvtx package is an error before any run)
    instrumentations = {level: nv.Instrumentation(level, nvtx_backend if level != "off" else None)
                        for level in {cfg.nvtx for cfg in configs}}
    result = SweepResult(rows=[], planned=len(configs),
                         device_names=sorted({r.name for r in runtimes.values()}))
    store = None
    if db is not None:
        from nvtx_model.results_db import ResultsDb, run_metadata

        store = ResultsDb(db, table, column_types or {}, run_metadata(table, result.device_names))
        result.run_id = store.run_id
    for index, cfg in enumerate(configs):
        if progress is not None:
            progress(index, len(configs), cfg.label())
        try:
            row = _run_one(cfg, runtimes[cfg.device], instrumentations[cfg.nvtx], measure,
                           static_columns, memory_limit_bytes, config_columns, check)
        except KeyboardInterrupt:
            result.interrupted = True
            result.notes.append(f"interrupted: {index} of {len(configs)} configs finished; "
                                "the rows below are those")
            break
        if column_types:  # every row has every column, in order
            row = {c: row.get(c) for c in column_types}
        result.rows.append(row)
        if store is not None:
            store.append(row)
    if progress is not None and not result.interrupted:
        progress(len(configs), len(configs), None)
    for status, why in ((STATUS_SKIPPED, "skipped"), (STATUS_OOM, "ran out of memory")):
        n = sum(r["status"] == status for r in result.rows)
        if n:
            result.notes.append(f"{n} config{'s' if n > 1 else ''} {why}; see the note column")
    return result


def _run_one(cfg: Any, runtime: Runtime, instrumentation: nv.Instrumentation,
             measure: Measure, static_columns: Callable[[Any], dict[str, Any]] | None,
             memory_limit_bytes: int | None, config_columns: ConfigColumns,
             check: Check) -> dict[str, Any]:
    row = config_columns(cfg, runtime)
    if static_columns is not None:
        row.update(static_columns(cfg))
    reason = check(cfg, runtime, memory_limit_bytes)
    if reason is not None:
        return {**row, "status": STATUS_SKIPPED, "note": reason}
    status = STATUS_OK
    threads_before = torch.get_num_threads()
    try:
        if cfg.threads is not None:
            torch.set_num_threads(cfg.threads)
        measure(cfg, runtime, instrumentation, row)
    except Exception as exc:  # only OOM is a row; anything else is a bug or a user error
        if not runtime.is_oom(exc):
            raise
        status = STATUS_OOM
        row["note"] = "; ".join(filter(None, [oom_reason(exc), row.get("note")]))
    finally:
        torch.set_num_threads(threads_before)
        gc.collect()
        runtime.release()
    note = row.pop("note", None)
    return {**row, "status": status, "note": note}

