"""``nsys-mine bench`` and ``nsys-mine memory``: sweeps of the instrumented Transformer.

Thin commands: workload options (``profile_cli.workload``) -> ``nvtx_model.bench.benchmark``
or ``nvtx_model.memory.profile_memory`` -> ``reports.render``. torch is imported inside the
commands only (it is the optional extra ``nsys-mine[torch]``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from profile_cli.common import Format, FormatOpt, OutputOpt, emit
from nvtx_model.workload import WorkloadSpec
from profile_cli.progress import progress_bar
from profile_cli.workload import DbOpt, workload_options

# Columns that are usually the same for every row: shown in the sentence above human tables
# when they are, as columns when they vary.
SETTING_COLUMNS = ("batch", "attention", "device", "threads", "nvtx", "warmup", "steps", "adamw")
HUMAN_FORMATS = (Format.table, Format.md, Format.latex)

BENCH_TABLE = ["size", "params", "context", "batch", "mode", "precision", "attention", "device",
               "threads", "nvtx", "warmup", "steps", "adamw", "mean_s", "std_s", "median_s",
               "min_s", "forward_s", "loss_s", "backward_s", "optimizer_s", "tflops", "mfu_pct",
               "status", "note"]
MEMORY_TABLE = ["size", "params", "context", "batch", "mode", "precision", "attention",
                "device", "threads", "nvtx", "warmup", "steps", "adamw", "peak_allocated_bytes",
                "peak_reserved_bytes", "rss_growth_bytes", "params_bytes", "grads_bytes",
                "optimizer_bytes", "activations_est_bytes", "total_est_bytes", "snapshot",
                "status", "note"]

PeakOpt = Annotated[Optional[float], typer.Option(
    "--peak-tflops", min=0.001,
    help="Peak TFLOP/s of the device for the mfu_pct column (default: from a table of NVIDIA "
         "GPUs; none for CPUs).")]
SnapshotDirOpt = Annotated[Path, typer.Option(
    "--snapshot-dir", file_okay=False,
    help="CUDA: where the memory snapshot pickles go (open them at pytorch.org/memory_viz).")]
MaxEntriesOpt = Annotated[int, typer.Option(
    "--max-entries", min=1,
    help="CUDA: allocator events kept by torch.cuda.memory._record_memory_history.")]


def register(app: typer.Typer) -> None:
    app.command("bench")(bench)
    app.command("memory")(memory)


@workload_options()
def bench(
    workload: WorkloadSpec,
    peak_tflops: PeakOpt = None,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
    db: DbOpt = None,
) -> None:
    """Time forward, forward-backward and training steps of the Transformer LM.

    Warmup steps are excluded; every measured step ends with a device synchronize.
    Rows: mean/std/median/min step time, per-phase means, TFLOP/s and MFU.
    Configs that do not fit become oom/skipped rows; Ctrl-C keeps the rows finished so far.
    """
    from nvtx_model.errors import require_torch

    configs = workload.configs()
    require_torch("nsys-mine bench")
    from nvtx_model.bench import BENCH_COLUMNS, benchmark

    with progress_bar("bench") as progress:
        result = benchmark(configs, progress=progress, db=db, peak_tflops=peak_tflops)
    emit_sweep(result, BENCH_COLUMNS, BENCH_TABLE, format, output, "Step time per config")


@workload_options(warmup=1, steps=1)
def memory(
    workload: WorkloadSpec,
    snapshot_dir: SnapshotDirOpt = Path("memory_snapshots"),
    max_entries: MaxEntriesOpt = 1_000_000,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
    db: DbOpt = None,
) -> None:
    """Peak memory of forward or training steps, with an estimated breakdown.

    CUDA: peak allocated and reserved over the measured step(s), and a memory snapshot
    for https://pytorch.org/memory_viz.
    CPU: the peak RSS growth of the measured step(s).
    Both: parameters, gradients, AdamW state (exact) and activations (estimated).
    """
    from nvtx_model.errors import require_torch

    configs = workload.configs()
    require_torch("nsys-mine memory")
    from nvtx_model.memory import MEMORY_COLUMNS, profile_memory

    with progress_bar("memory") as progress:
        result = profile_memory(configs, snapshot_dir=snapshot_dir, max_entries=max_entries,
                                progress=progress, db=db)
    emit_sweep(result, MEMORY_COLUMNS, MEMORY_TABLE, format, output, "Peak memory per config")


# ---- rendering helpers ----------------------------------------------------------------------
def emit_sweep(result: Any, columns: list[str], table_columns: list[str], fmt: Format,
               output: Path | None, title: str, *,
               settings: tuple[str, ...] = SETTING_COLUMNS,
               sentences: list[str] | None = None,
               headers: dict[str, str] | None = None,
               drop_order: tuple[str, ...] = (),
               row_label: Callable[[dict[str, Any]], str] | None = None) -> None:
    """Render a sweep (bench, memory, infer, micro); human formats get compact columns, human
    units, the ``settings`` equal in every row as one sentence, then ``sentences``. Exit 130
    if the sweep was interrupted (after writing the rows it finished).

    The rich table only: ``headers`` gives short headers (column -> header key, keeping the
    unit suffix, e.g. ``prefill_s`` -> ``TTFT_s``), and the columns of ``drop_order`` are
    hidden, first to last, until the table fits the terminal (a note names them; when the
    ``note`` column is hidden, the rows' notes follow the table, named by ``row_label``)."""
    from reports.render import render_rows

    rows, extra, sentences = result.rows, list(sentences or []), []
    notes = list(result.notes)
    if fmt in HUMAN_FORMATS and rows:
        columns, sentence = _table_columns(rows, table_columns, settings)
        sentences = ([sentence] if sentence else []) + extra
        rows = [_humanize(r) for r in rows]
        if fmt == Format.table and (headers or drop_order):
            rows, columns, hidden = _fit_table(rows, columns, headers or {}, drop_order,
                                               _table_width(output))
            if hidden:
                notes.append(f"hidden to fit the terminal: {', '.join(hidden)} (widen it, or "
                             "use --format md/csv/json)")
                if "note" in hidden:
                    notes = [n for n in notes if not n.endswith("see the note column")]
                    notes += [f"{row_label(r) + ': ' if row_label else ''}{r['status']}: "
                              f"{r['note']}" for r in result.rows if r.get("note")]
    if result.run_id is not None:
        notes.append(f"rows appended to the results database as run {result.run_id}")
    emit(render_rows(rows, columns, fmt.value, title=title, notes=notes, sentences=sentences),
         output)
    if result.interrupted:
        raise typer.Exit(130)


NOTE_WIDTH = 30  # the narrowest a folded note column may get when fitting a table


def _table_width(output: Path | None) -> int:
    """The width ``emit`` renders a rich table at."""
    import shutil
    import sys

    if output is not None:
        return 160
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else 200


def _fit_table(rows: list[dict[str, Any]], columns: list[str], headers: dict[str, str],
               drop_order: tuple[str, ...], width: int
               ) -> tuple[list[dict[str, Any]], list[str], list[str]]:
    """Rows and columns under their short headers, without the columns of ``drop_order``
    needed to fit ``width``; and the hidden columns."""
    from rich.console import Console

    from reports.render import rich_table

    console = Console(width=10_000)  # measure the natural width, unconstrained
    shown, hidden = list(columns), []
    for col in (None, *drop_order):
        if col is not None:
            if col not in shown:
                continue
            shown.remove(col)
            hidden.append(col)
        keys = [headers.get(c, c) for c in shown]
        renamed = [{headers.get(k, k): v for k, v in r.items()} for r in rows]
        # a note column folds its text: give it NOTE_WIDTH, measure the rest at full width
        fixed = [k for k in keys if k != "note"]
        need = console.measure(rich_table(renamed, fixed)).maximum
        if "note" in keys and any(r.get("note") for r in renamed):
            need += NOTE_WIDTH + 3
        if need <= width:
            break
    return renamed, keys, hidden


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
