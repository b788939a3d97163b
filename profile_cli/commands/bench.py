"""``nsys-mine bench`` and ``nsys-mine memory``: sweeps of the instrumented Transformer.

Thin commands: workload options (``profile_cli.commands.workload``) ->
``nvtx_model.bench.benchmark`` or ``nvtx_model.memory.profile_memory`` -> ``reports.render``.
torch is imported inside the commands only (it is the optional extra ``nsys-mine[torch]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from profile_cli.commands.groups import grouped
from profile_cli.commands.output import OUTPUT, OutputSpec
from profile_cli.commands.progress import progress_bar
from profile_cli.commands.workload import WORKLOAD, DbOpt

# Columns that are usually the same for every row: shown in the sentence above human tables
# when they are, as columns when they vary.
SETTING_COLUMNS = ("batch", "attention", "device", "threads", "nvtx", "warmup", "steps", "adamw",
                   "compile")
# A setting equal in every row at this value goes without saying (eager runs).
UNSAID = {"compile": "none"}

BENCH_TABLE = ["size", "params", "context", "batch", "mode", "precision", "attention", "device",
               "threads", "nvtx", "warmup", "steps", "adamw", "compile", "mean_s", "gpu_busy_pct",
               "bound", "std_s", "median_s", "min_s", "forward_s", "loss_s", "backward_s",
               "optimizer_s", "tflops", "mfu_pct", "kernels", "status", "note"]
# Short headers for the rich table (JSON, CSV and markdown keep the column names).
MEMORY_HEADERS = {"params_bytes": "params mem", "grads_bytes": "grads mem",
                  "optimizer_bytes": "optimizer mem", "optimizer_temp_bytes": "AdamW temp",
                  "est_peak_at": "est. peak at"}
MEMORY_TABLE = ["size", "params", "context", "batch", "mode", "precision", "attention",
                "device", "threads", "nvtx", "warmup", "steps", "adamw", "compile",
                "peak_allocated_bytes",
                "peak_reserved_bytes", "rss_growth_bytes", "params_bytes", "grads_bytes",
                "optimizer_bytes", "optimizer_temp_bytes", "activations_est_bytes",
                "total_est_bytes", "est_peak_at", "snapshot", "status", "note"]

# Columns that give way first in a narrow terminal (bench and memory tables).
BENCH_DROP = ("note", "min_s", "median_s", "loss_s", "std_s", "kernels", "params", "mfu_pct",
              "tflops",
              "params_bytes", "grads_bytes", "optimizer_bytes", "optimizer_temp_bytes",
              "activations_est_bytes", "est_peak_at",
              "adamw", "threads")

PeakOpt = Annotated[Optional[float], typer.Option(
    "--peak-tflops", min=0.001,
    help="Peak TFLOP/s of the device for the mfu_pct column (default: NVIDIA's datasheet "
         "figure for known GPUs, dense (no sparsity): the tensor-core peak for bf16, the "
         "non-tensor-core FP32 rate for fp32, as TF32 is off; none for CPUs).")]
SnapshotDirOpt = Annotated[Path, typer.Option(
    "--snapshot-dir", file_okay=False,
    help="CUDA: where the memory snapshot pickles go (open them at pytorch.org/memory_viz).")]
MaxEntriesOpt = Annotated[int, typer.Option(
    "--max-entries", min=1,
    help="CUDA: how many allocator events the snapshot keeps (max_entries of PyTorch's "
         "_record_memory_history).")]


def register(app: typer.Typer) -> None:
    """Add ``bench`` and ``memory`` to ``app``."""
    app.command("bench", cls=grouped(WORKLOAD(), OUTPUT(top=0)))(bench)
    app.command("memory", cls=grouped(WORKLOAD(warmup=1, steps=1), OUTPUT(top=0)))(memory)


def bench(
    ctx: typer.Context,
    peak_tflops: PeakOpt = None,
    db: DbOpt = None,
) -> None:
    """Time forward, forward-backward and training steps of the Transformer LM.

    Warmup steps are excluded; every measured step ends with a device synchronize.
    Rows: mean/std/median/min step time, per-phase means, TFLOP/s and MFU; on a GPU, what
    bounds the step: one extra step under torch.profiler gives the GPU's busy share of it
    (gpu_busy_pct), its kernels, and bound (host below 80% busy, else device).
    Configs that do not fit become oom/skipped rows; Ctrl-C keeps the rows finished so far.

    Examples: `nsys-mine bench --size tiny --context 64 --mode forward,train` ·
    `nsys-mine bench --size small --precision fp32,bf16 --db results.db`
    """
    from nvtx_model.errors import require_torch

    configs = WORKLOAD.of(ctx).configs()
    require_torch("nsys-mine bench")
    from nvtx_model.bench import BENCH_COLUMNS, benchmark

    with progress_bar("bench") as progress:
        result = benchmark(configs, progress=progress, db=db, peak_tflops=peak_tflops)
    emit_sweep(result, BENCH_COLUMNS, BENCH_TABLE, OUTPUT.of(ctx), "Step time per config")


def memory(
    ctx: typer.Context,
    snapshot_dir: SnapshotDirOpt = Path("memory_snapshots"),
    max_entries: MaxEntriesOpt = 1_000_000,
    db: DbOpt = None,
) -> None:
    """Peak memory of forward or training steps, with an estimated breakdown.

    CUDA: peak allocated and reserved over the measured step(s), and a memory snapshot
    for https://pytorch.org/memory_viz.
    CPU: the peak RSS growth of the measured step(s).
    Both: parameters, gradients, AdamW state (exact) and activations (estimated).

    Examples: `nsys-mine memory --size tiny --context 64 --mode train` ·
    `nsys-mine memory --size small --context 512 --precision bf16 --device cuda`
    """
    from nvtx_model.errors import require_torch

    configs = WORKLOAD.of(ctx).configs()
    require_torch("nsys-mine memory")
    from nvtx_model.memory import MEMORY_COLUMNS, profile_memory

    with progress_bar("memory") as progress:
        result = profile_memory(configs, snapshot_dir=snapshot_dir, max_entries=max_entries,
                                progress=progress, db=db)
    emit_sweep(result, MEMORY_COLUMNS, MEMORY_TABLE, OUTPUT.of(ctx), "Peak memory per config",
               headers=MEMORY_HEADERS)


# ---- rendering helpers ----------------------------------------------------------------------
def emit_sweep(result: Any, columns: list[str], table_columns: list[str], out: OutputSpec,
               title: str, *, settings: tuple[str, ...] = SETTING_COLUMNS,
               sentences: list[str] | None = None, headers: dict[str, str] | None = None,
               drop: tuple[str, ...] = BENCH_DROP,
               row_label: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Render the rows of a sweep of configs (bench, memory, infer, micro). Human formats:
    compact columns in human units, the ``settings`` equal in every row said once, then
    ``sentences``; ``headers`` gives short column labels (``prefill_s`` -> ``TTFT``) and
    ``drop`` the columns that give way first in a narrow terminal. In the table, the rows'
    notes (why a config was skipped, ...) follow the table, each named by ``row_label``,
    instead of a wide note column. Exit 130 if the sweep was interrupted (after writing the
    rows it finished)."""
    from reports.render import HUMAN_FORMATS, View, render_rows

    rows, caption, view = result.rows, [], None
    notes = list(result.notes)
    if out.format in HUMAN_FORMATS and rows:
        shown, sentence = _table_columns(rows, table_columns, settings)
        caption = ([sentence] if sentence else []) + list(sentences or [])
        if out.format in ("table", "text") and "note" in shown:
            shown = [c for c in shown if c != "note"]
            notes = [n for n in notes if not n.endswith("see the note column")]
            notes += [f"{row_label(r) + ': ' if row_label else ''}{r['status']}: {r['note']}"
                      for r in rows if r.get("note")]
        rows = [_humanize(r) for r in rows]
        view = View(columns=shown, noun="configs", drop=drop, headers=headers or {},
                    hide_if_constant=("status",))
    if result.run_id is not None:
        notes.append(f"rows appended to the results database as run {result.run_id}")
    out.emit(render_rows(rows, columns, out.format, title=title, notes=notes, caption=caption,
                         view=view, top=out.top, width=out.width, wide=out.wide))
    if result.interrupted:
        raise typer.Exit(130)


def _table_columns(rows: list[dict[str, Any]], columns: list[str],
                   settings: tuple[str, ...] = SETTING_COLUMNS) -> tuple[list[str], str]:
    """Drop columns empty in every row; settings equal in every row move into one sentence
    (with the device names) instead of repeating in each row."""
    shown, constant = [], []
    for col in columns:
        values = [r.get(col) for r in rows]
        if all(v is None or v == "" for v in values):
            continue
        if col in settings and len({str(v) for v in values}) == 1:
            if UNSAID.get(col) != values[0]:
                constant.append(f"{col} {values[0]}")
        else:
            shown.append(col)
    sentence = ", ".join(constant)
    names = sorted({r["device_name"] for r in rows if r.get("device_name")})
    if names:
        sentence += f" ({'; '.join(names)})"
    return shown, sentence


def _humanize(row: dict[str, Any]) -> dict[str, Any]:
    """Parameter counts in millions, TFLOP/s to 3 digits, fitted exponents to 2 decimals
    (reports.render formats the _s and _bytes columns for people)."""
    out = dict(row)
    for key, value in row.items():
        if value is None or isinstance(value, bool):
            continue
        if key == "params":
            out[key] = f"{value / 1e9:.2f} B" if value >= 1e9 else f"{value / 1e6:.2f} M"
        elif key == "tflops":
            out[key] = f"{value:.3g}"
        elif key in ("exponent", "local_exponent"):
            out[key] = f"{value:.2f}"
    return out
