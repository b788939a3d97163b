"""``nsys-mine profile`` and ``nsys-mine sweep``: the model under Nsight Systems, mined.

Thin commands over ``profile_cli.profiler`` (one config) and ``profile_cli.sweeper`` (many,
resumable); rendering through ``reports.render``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from nsys_parsers.errors import BadOption
from profile_cli.common import Format, FormatOpt, OutputOpt, choice_enum, emit, option_group
from nvtx_model.infer_config import DEFAULT_PROFILE_OUTPUT_LENGTH, WORKLOAD_KINDS
from profile_cli.profiler import NsysSpec
from nvtx_model.workload import WorkloadSpec
from profile_cli.progress import progress_bar
from profile_cli.workload import workload_options

NSYS_PANEL = "Nsight Systems"
SWEEP_TABLES = ("runs", "dominant", "mix", "ranges")
SweepTable = choice_enum("SweepTable", SWEEP_TABLES + ("all",))

OutOpt = Annotated[Path, typer.Option(
    "--out-dir", "--out", file_okay=False, metavar="DIR",
    help="Folder the runs go to (NAME.nsys-rep, NAME.sqlite, NAME.json); --output is the "
         "file the rendered tables go to.")]
NsysPathOpt = Annotated[Optional[str], typer.Option(
    "--nsys", rich_help_panel=NSYS_PANEL,
    help="The nsys binary (default: $NSYS, PATH, CUDA/Nsight folders, cached installs).")]
TraceOpt = Annotated[Optional[str], typer.Option(
    "--trace", rich_help_panel=NSYS_PANEL,
    help="nsys --trace set (default: cuda,nvtx,osrt with a GPU, nvtx,osrt on CPU).")]
SamplingOpt = Annotated[bool, typer.Option(
    "--quiet-sampling/--cpu-sampling", rich_help_panel=NSYS_PANEL,
    help="Pass --sample=none --cpuctxsw=none (default; without them nsys 2022.4's agent can "
         "hang after the program ends).")]
ExtraArgsOpt = Annotated[Optional[List[str]], typer.Option(
    "--nsys-arg", rich_help_panel=NSYS_PANEL,
    help="Extra argument for `nsys profile` (repeat the option for several).")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", min=1, rich_help_panel=NSYS_PANEL,
    help="Seconds before a hanging nsys run is ended (with its leftover processes).")]
InstallOpt = Annotated[bool, typer.Option(
    "--install-nsys", rich_help_panel=NSYS_PANEL,
    help="If no nsys is found, fetch nsys 2022.4 (Debian/Ubuntu x86-64) into the user cache.")]
# Give a command the nsys options; it receives them as ``nsys_spec: NsysSpec``.
nsys_options = option_group(NsysSpec, {
    "nsys": NsysPathOpt, "trace": TraceOpt, "quiet_sampling": SamplingOpt,
    "extra_args": ExtraArgsOpt, "timeout_s": TimeoutOpt, "install": InstallOpt,
}, "nsys_spec", convert={"extra_args": lambda v: list(v or [])})
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite existing exports.")]
WorkloadKind = choice_enum("WorkloadKind", WORKLOAD_KINDS)
WorkloadKindOpt = Annotated[WorkloadKind, typer.Option(
    "--workload",
    help="bench: warmup + measured steps of --mode; infer: KV-cache generation (NVTX prefill, "
         "decode, decode step) of --batch prompts of --context tokens, --output-length new "
         "tokens, --steps measured generate calls.")]
OutputLengthOpt = Annotated[int, typer.Option(
    "--output-length", min=1, help="--workload infer: tokens generated per prompt.")]
TopOpt = Annotated[int, typer.Option("--top", min=1, help="Top kernels to list.")]


def register(app: typer.Typer) -> None:
    app.command("profile")(profile)
    app.command("sweep")(sweep)


@workload_options(size="tiny", context="128", mode="train", nvtx="fine", warmup=2, steps=3)
@nsys_options()
def profile(
    workload: WorkloadSpec,
    nsys_spec: NsysSpec,
    out: OutOpt = Path("profiles"),
    force: ForceOpt = False,
    top: TopOpt = 15,
    workload_kind: WorkloadKindOpt = WorkloadKind.bench,
    output_length: OutputLengthOpt = DEFAULT_PROFILE_OUTPUT_LENGTH,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """Profile one config of the Transformer under nsys and show what dominates each range.

    Writes NAME.nsys-rep, NAME.sqlite and a NAME.json sidecar into --out, then mines the
    export: ranges (CPU and GPU time), the dominant kernel of step/forward/backward/optimizer
    and the attention parts, and the top kernels, measured steps only (warmup left out).
    --workload infer profiles KV-cache generation instead: ranges prefill, decode and (fine)
    decode step, so the dominant kernel of each phase shows.
    """
    from profile_cli.mining import mine_profile
    from profile_cli.profiler import ProfileFailed, profile_config

    if workload_kind.value == "infer":
        from nvtx_model.infer_config import infer_configs_from_workload

        configs = infer_configs_from_workload(workload, output_length)
    else:
        configs = workload.configs()
    if len(configs) != 1:
        raise BadOption(f"profile runs one config; these options give {len(configs)} "
                        f"({', '.join(c.label() for c in configs[:4])}...). Use `nsys-mine "
                        f"sweep` for several.")
    from nvtx_model.errors import require_torch

    require_torch("nsys-mine profile")
    result = profile_config(configs[0], out, nsys_spec, force=force)
    if result.status != "ok":
        raise ProfileFailed(f"{result.status}: {result.reason}\n(sidecar: {result.sidecar})")
    report = mine_profile(result, top=top)
    emit(render_profile(report, format.value), output)


def render_profile(report, fmt: str):
    from reports.dominant import DOMINANT_COLUMNS, DOMINANT_HUMAN_COLUMNS
    from reports.kernel_summary import KERNEL_COLUMNS
    from reports.range_summary import RANGE_COLUMNS
    from reports.render import Rendered, render_rows, to_json

    if fmt == "json":
        return Rendered(text=to_json({
            "export": report.export, "config": report.config,
            "ranges": [{c: r.get(c) for c in RANGE_COLUMNS} for r in report.ranges],
            "dominant": [{c: r.get(c) for c in DOMINANT_COLUMNS} for r in report.dominant],
            "kernels": [{c: r.get(c) for c in KERNEL_COLUMNS} for r in report.kernels],
            "notes": report.notes}))
    cfg = report.config
    shape = (f"{cfg['size']} (d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} "
             f"heads)")
    if cfg.get("mode") == "infer":
        what = (f"generating {cfg['output_length']} tokens after {cfg['batch']} prompts of "
                f"{cfg['input_length']} tokens")
        runs = "generate calls"
    else:
        what = f"context {cfg['context']}, batch {cfg['batch']}, {cfg['mode']}"
        runs = "steps"
    head = (f"{shape}, {what}, {cfg['precision']}, {cfg['attention']} attention, NVTX "
            f"{cfg['nvtx']}, {cfg['device']}, {cfg['warmup']} warmup + {cfg['steps']} measured "
            f"{runs}")
    cpu_only = not report.kernels and not report.dominant
    parts = [
        render_rows(report.ranges, RANGE_COLUMNS, fmt, title=f"NVTX ranges (measured {runs})",
                    sentences=[f"export: {report.export}", head], notes=report.notes,
                    human_columns=RANGE_COLUMNS[:9] if cpu_only else None),
        render_rows(report.dominant, DOMINANT_COLUMNS, fmt, title="Dominant kernel per range",
                    sentences=report.sentences, human_columns=DOMINANT_HUMAN_COLUMNS,
                    null_labels={"range": f"(measured {runs})"}),
        render_rows(report.kernels, KERNEL_COLUMNS, fmt, title="Top kernels"),
    ]
    if not report.dominant:
        parts = parts[:1]
    return _join(parts, fmt)


def _join(parts, fmt: str):
    from reports.render import Rendered

    if parts and parts[0].text is not None:
        sep = "\n" if fmt in ("md", "latex") else "\n\n"
        return Rendered(text=sep.join(p.text for p in parts))
    return Rendered(rich=[x for p in parts for x in p.rich])


@workload_options(size="tiny", context="128", mode="train", nvtx="fine", warmup=2, steps=3)
@nsys_options()
def sweep(
    workload: WorkloadSpec,
    nsys_spec: NsysSpec,
    out: OutOpt = Path("sweep"),
    report: Annotated[Optional[Path], typer.Option(
        "--report", file_okay=False, metavar="DIR",
        help="Only re-render the tables of an existing sweep folder; run nothing.")] = None,
    retry: Annotated[bool, typer.Option(
        "--retry", help="Run again the configs that did not end ok (resume skips them).")] = False,
    table: Annotated[SweepTable, typer.Option(
        "--table", help="Which table to show.")] = SweepTable.all,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """Profile sizes x contexts x modes x precisions x attention, one nsys run per config.

    An index (OUT/index.sqlite) records each config's status (ok, oom, failed, timeout,
    skipped), exports, wall time and dominant kernels; re-running resumes. Tables: dominant
    kernel per config and range, and the kernel-category mix of forward vs the whole step.
    """
    from profile_cli.sweeper import run_sweep, sweep_tables

    tables_wanted = list(SWEEP_TABLES) if table.value == "all" else [table.value]
    if report is None:
        from nvtx_model.errors import require_torch

        require_torch("nsys-mine sweep")
        with progress_bar("sweep", transient=False) as progress:
            outcome = run_sweep(workload, out, nsys_spec, retry=retry, progress=progress)
        folder = out
    else:
        outcome, folder = None, report
    tables = sweep_tables(folder)
    notes = list(tables.notes)
    if outcome is not None:
        notes.insert(0, f"{len(outcome.ran)} config(s) run, {len(outcome.resumed)} already in "
                        f"the index (resumed), of {outcome.planned}; index: "
                        f"{folder / 'index.sqlite'}")
        if outcome.interrupted:
            notes.insert(0, "interrupted: the index holds every config finished so far; run "
                            "the same command again to resume.")
    emit(render_sweep(tables, tables_wanted, format.value, notes), output)
    if outcome is not None and outcome.interrupted:
        raise typer.Exit(130)


def render_sweep(tables, wanted: list[str], fmt: str, notes: list[str]):
    from profile_cli.sweeper import DOMINANT_COLUMNS, MIX_COLUMNS, RANGE_TIME_COLUMNS, RUN_COLUMNS
    from reports.render import Rendered, render_rows, to_json

    data: dict[str, tuple[list[dict[str, Any]], list[str], str]] = {
        "runs": (tables.runs, RUN_COLUMNS, "Configs"),
        "dominant": (tables.dominant, DOMINANT_COLUMNS, "Dominant kernel per config and range"),
        "mix": (tables.mix, MIX_COLUMNS, "Kernel-category mix: forward vs the whole step (%)"),
        "ranges": (tables.range_times, RANGE_TIME_COLUMNS, "Range times (measured steps)"),
    }
    if fmt == "json":
        obj = {k: [{c: r.get(c) for c in data[k][1]} for r in data[k][0]] for k in wanted}
        obj["notes"] = notes
        return Rendered(text=to_json(obj))
    if len(wanted) > 1 and fmt != "csv":  # empty tables (CPU sweeps: no kernels) say nothing
        wanted = [k for k in wanted if data[k][0] or k == "runs"]
    parts = []
    for i, key in enumerate(wanted):
        rows, cols, title = data[key]
        if fmt == "csv" and len(wanted) > 1:
            parts.append(Rendered(text=f"# {key}\n" + render_rows(rows, cols, fmt).text))
            continue
        human = None
        if key == "runs":  # people: the config, not its file name; no all-empty columns
            human = [c for c in cols if c not in ("name", "sqlite", "batch")
                     and any(r.get(c) not in (None, "") for r in rows)]
        parts.append(render_rows(rows, cols, fmt, title=title, notes=notes if i == 0 else (),
                                 human_columns=human))
    return _join(parts, fmt)
