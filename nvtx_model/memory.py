"""Memory profiling: ``profile_memory(configs)`` -> rows of measured peaks and an estimate.

On CUDA: after the warmup steps, reset the peak statistics and start
``torch.cuda.memory._record_memory_history(max_entries=...)``; run the measured step(s); dump
the snapshot pickle (open it at https://pytorch.org/memory_viz); stop recording. Rows report
``torch.cuda.max_memory_allocated`` / ``max_memory_reserved``. On an OOM the snapshot is still
dumped (``..._oom.pickle``): it shows what filled the memory.

On CPU: the peak RSS growth of the measured step(s) over the RSS before them (Linux VmHWM,
reset through /proc/self/clear_refs), labelled ``cpu rss growth``; parameters and optimizer
state allocated before the measured steps are not part of it.

Both carry the breakdown of ``nvtx_model.config.memory_estimate``: parameters, gradients,
AdamW state and its temporary (exact) and activations (an estimate), the total at the moment
the peak is (``est_peak_at``: the end of the forward pass or the optimizer step).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import RunConfig, memory_estimate
from nvtx_model.grid import CONFIG_COLUMNS, STATUS_COLUMNS, Progress, SweepResult, run_configs
from nvtx_model.runtime import CpuRuntime

DEFAULT_MAX_ENTRIES = 1_000_000
DEFAULT_SNAPSHOT_DIR = Path("memory_snapshots")

MEMORY_VALUE_COLUMNS: dict[str, type] = {
    "measured": str, "peak_allocated_bytes": int, "peak_reserved_bytes": int,
    "rss_growth_bytes": int, "params_bytes": int, "grads_bytes": int, "optimizer_bytes": int,
    "optimizer_temp_bytes": int, "activations_est_bytes": int, "total_est_bytes": int,
    "est_peak_at": str, "snapshot": str,
}
MEMORY_COLUMN_TYPES: dict[str, type] = {**CONFIG_COLUMNS, **MEMORY_VALUE_COLUMNS, **STATUS_COLUMNS}
MEMORY_COLUMNS = list(MEMORY_COLUMN_TYPES)


def estimate_columns(cfg: RunConfig) -> dict[str, Any]:
    est = memory_estimate(cfg.model, cfg.batch, cfg.mode, cfg.precision, cfg.attention,
                          cfg.adamw)
    return {"params_bytes": est.params_bytes, "grads_bytes": est.grads_bytes,
            "optimizer_bytes": est.optimizer_bytes,
            "optimizer_temp_bytes": est.optimizer_temp_bytes,
            "activations_est_bytes": est.activations_bytes, "total_est_bytes": est.total_bytes,
            "est_peak_at": est.peak_at}


def snapshot_path(directory: Path, cfg: RunConfig, suffix: str = "") -> Path:
    """A file name that identifies the config (``RunConfig.name``), e.g.
    ``small_ctx512_b4_train_bf16_naive_nvtx-off_w1s1.pickle``."""
    return directory / f"{cfg.name}{suffix}.pickle"


def measure_memory(cfg: RunConfig, runtime, instrumentation: nv.Instrumentation, row: dict, *,
                   snapshot_dir: Path = DEFAULT_SNAPSHOT_DIR,
                   max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
    """Run ``cfg`` and put the measured peaks (and the snapshot path on CUDA) into ``row``."""
    from nvtx_model.harness import Workload

    row["measured"] = runtime.memory_measure
    recording = False

    def start() -> None:
        nonlocal recording
        runtime.reset_peak()
        recording = runtime.start_history(max_entries)

    try:
        Workload(cfg, runtime, instrumentation).run(before_measure=start)
        row.update(runtime.peak())
        if recording:
            path = snapshot_path(snapshot_dir, cfg)
            runtime.dump_snapshot(path)
            row["snapshot"] = str(path)
    except Exception as exc:
        if recording and runtime.is_oom(exc):
            row.update(runtime.peak())
            path = snapshot_path(snapshot_dir, cfg, "_oom")
            try:
                runtime.dump_snapshot(path)
            except Exception as dump_error:  # keep the OOM row; say why there is no snapshot
                row["note"] = f"the snapshot of the OOM could not be written: {dump_error}"
            else:
                row["snapshot"] = str(path)
                row["note"] = f"snapshot of the OOM in {path}"
        raise
    finally:
        if recording:
            runtime.stop_history()
    if runtime.kind == "cpu" and row.get("rss_growth_bytes") is None:
        row["note"] = "peak RSS unavailable: /proc/self/clear_refs or VmHWM cannot be used here"


def profile_memory(
    configs: list[RunConfig],
    *,
    snapshot_dir: Path = DEFAULT_SNAPSHOT_DIR,
    max_entries: int = DEFAULT_MAX_ENTRIES,
    progress: Progress | None = None,
    db: Path | None = None,
    memory_limit_bytes: int | None = None,
    nvtx_backend: nv.Backend | None = None,
) -> SweepResult:
    """Measure the memory of every config; rows have ``MEMORY_COLUMNS``; skipped and OOM rows
    carry the estimate too. With ``db``, rows go to table ``memory`` of that results database."""

    def measure(cfg, runtime, instrumentation, row):
        measure_memory(cfg, runtime, instrumentation, row, snapshot_dir=snapshot_dir,
                       max_entries=max_entries)

    result = run_configs(configs, measure, static_columns=estimate_columns, progress=progress,
                       db=db, table="memory", column_types=MEMORY_COLUMN_TYPES,
                       memory_limit_bytes=memory_limit_bytes, nvtx_backend=nvtx_backend)
    if any(r["measured"] == CpuRuntime.memory_measure for r in result.rows):
        result.notes.append(
            "cpu: rss_growth is the peak RSS growth of the measured step(s) over the RSS before "
            "them (parameters and optimizer state created earlier are not in it); params, grads "
            "and optimizer bytes are exact, activations_est and total_est are estimates "
            "(formula in docs/MODEL.md)")
    if any(r["grads_bytes"] for r in result.rows):
        result.notes.append(
            "total_est is params + optimizer state + the larger of activations_est (the end of "
            "the forward pass, before any gradient) and grads + the AdamW temporary (the "
            "optimizer step); est_peak_at says which")
    if any(r["snapshot"] for r in result.rows):
        result.notes.append("open the snapshot pickles at https://pytorch.org/memory_viz")
    return result
