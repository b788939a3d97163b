"""The ``nsys-mine`` command line.

Each command parses options, calls one library function that returns data, and hands the data
to ``reports.render``. ``main()`` is the one place where library errors become
``Error: ...`` on stderr and exit code 1. Heavy libraries (pandas, numpy, torch) are imported
inside the commands, so that ``--help`` and small jobs start fast.
"""

from __future__ import annotations

import enum
import sys
from pathlib import Path
from typing import Annotated, List, Optional

import typer

from nsys_parsers.errors import NsysMineError
from nsys_parsers.schema import ATTRIBUTIONS, NAME_KINDS
from profile_cli.common import ExportArg, Format, FormatOpt, OutputOpt, choice_enum, emit

app = typer.Typer(
    name="nsys-mine",
    help="Mine Nsight Systems exports of PyTorch models: which CUDA kernel dominates, and where.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


NameKind = choice_enum("NameKind", NAME_KINDS)
Attribution = choice_enum("Attribution", ATTRIBUTIONS)


RulesOpt = Annotated[
    Optional[Path],
    typer.Option("--rules", help="TOML file with extra kernel-category rules (tried first).",
                 exists=False, dir_okay=False),
]
WithinOpt = Annotated[
    Optional[str],
    typer.Option("--within", help="Only what ran inside instances of this NVTX range (e.g. "
                 "`measure`, to leave warmup steps out)."),
]
MergeOpt = Annotated[
    bool,
    typer.Option("--merge-op-ids", help="One name per operator: drop PyTorch's per-call "
                 "suffixes (`, seq = N`, `, op_id = N`, `, sizes = ...`) from range names."),
]
NameKindOpt = Annotated[
    NameKind,
    typer.Option("--name-kind", help="Kernel names: short, demangled (as nsys prints) or mangled."),
]


@app.command()
def info(export: ExportArg, format: FormatOpt = Format.table, output: OutputOpt = None) -> None:
    """Export metadata: nsys and schema version, GPUs, table row counts, capture command."""
    from reports.analysis import ExportAnalysis
    from reports.render import render_object

    with ExportAnalysis(export) as analysis:
        data = analysis.info()
    emit(render_object(data, format.value, title=f"nsys export {export.name}"), output)


@app.command()
def kernels(
    export: ExportArg,
    range_name: Annotated[
        Optional[str],
        typer.Option("--range", help="Only kernels launched inside NVTX ranges of this name."),
    ] = None,
    name_kind: NameKindOpt = NameKind.demangled,
    top: Annotated[Optional[int], typer.Option("--top", min=1, help="Show the N kernels with most time.")] = None,
    rules: RulesOpt = None,
    within: WithinOpt = None,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """CUDA kernel summary by name (as nsys cuda_gpu_kern_sum / gpukernsum)."""
    from reports.analysis import ExportAnalysis
    from reports.kernel_summary import KERNEL_COLUMNS
    from reports.render import render_rows

    with ExportAnalysis(export, within=within, name_kind=name_kind.value,
                        rules=rules) as analysis:
        result = analysis.kernels(range_name=range_name, top=top)
    title = "CUDA kernels" + (f" in range {range_name!r}" if range_name else "")
    emit(render_rows(result.rows, KERNEL_COLUMNS, format.value, title=title, notes=result.notes),
         output)


@app.command()
def ranges(
    export: ExportArg,
    name_kind: NameKindOpt = NameKind.demangled,
    within: WithinOpt = None,
    merge_op_ids: MergeOpt = False,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """NVTX range summary: CPU durations (as nsys nvtx_sum) plus the GPU time of their kernels."""
    from reports.analysis import ExportAnalysis
    from reports.range_summary import RANGE_COLUMNS
    from reports.render import render_rows

    with ExportAnalysis(export, within=within, merge_op_ids=merge_op_ids) as analysis:
        result = analysis.ranges()
    emit(render_rows(result.rows, RANGE_COLUMNS, format.value, title="NVTX ranges",
                     notes=result.notes), output)


@app.command("nvtx-kernels")
def nvtx_kernels(
    export: ExportArg,
    attribution: Annotated[
        Attribution,
        typer.Option("--attribution", help="all: a kernel counts in every enclosing range (as "
                     "nsys nvtx_kern_sum); innermost: only in its deepest range."),
    ] = Attribution.all,
    name_kind: NameKindOpt = NameKind.demangled,
    within: WithinOpt = None,
    merge_op_ids: MergeOpt = False,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """Kernels grouped by the NVTX range that launched them (as nsys nvtx_kern_sum)."""
    from reports.analysis import ExportAnalysis
    from reports.nvtx_kernels import NVTX_KERNEL_COLUMNS
    from reports.render import render_rows

    with ExportAnalysis(export, within=within, merge_op_ids=merge_op_ids,
                        name_kind=name_kind.value) as analysis:
        result = analysis.nvtx_kernels(attribution=attribution.value)
    emit(render_rows(result.rows, NVTX_KERNEL_COLUMNS, format.value,
                     title=f"CUDA kernels by NVTX range ({attribution.value})",
                     notes=result.notes, null_labels={"range": "(no range)"}), output)


@app.command()
def dominant(
    export: ExportArg,
    range_names: Annotated[
        Optional[List[str]],
        typer.Option("--range", help="Only these ranges (repeat the option for several)."),
    ] = None,
    attribution: Annotated[
        Attribution,
        typer.Option("--attribution", help="all (default): everything launched inside the range; "
                     "innermost: only kernels whose deepest range it is."),
    ] = Attribution.all,
    name_kind: NameKindOpt = NameKind.demangled,
    rules: RulesOpt = None,
    within: WithinOpt = None,
    merge_op_ids: MergeOpt = False,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """Which kernel dominates: for the whole export and for each NVTX range."""
    from reports.analysis import ExportAnalysis
    from reports.dominant import DOMINANT_COLUMNS, DOMINANT_HUMAN_COLUMNS
    from reports.render import render_rows

    with ExportAnalysis(export, within=within, merge_op_ids=merge_op_ids,
                        name_kind=name_kind.value, rules=rules) as analysis:
        result = analysis.dominant(range_names=range_names or None,
                                   attribution=attribution.value)
    emit(render_rows(result.rows, DOMINANT_COLUMNS, format.value,
                     title="Dominant kernel per range", notes=result.notes,
                     sentences=result.sentences, human_columns=DOMINANT_HUMAN_COLUMNS,
                     null_labels={"range": "(whole export)"}), output)


@app.command()
def memops(export: ExportArg, format: FormatOpt = Format.table, output: OutputOpt = None) -> None:
    """Memory operations: memcpy by kind and memset, count, bytes and time."""
    from reports.analysis import ExportAnalysis
    from reports.memops import MEMOPS_COLUMNS
    from reports.render import render_rows

    with ExportAnalysis(export) as analysis:
        result = analysis.memops()
    emit(render_rows(result.rows, MEMOPS_COLUMNS, format.value, title="Memory operations",
                     notes=result.notes), output)


@app.command()
def categories(
    rules: RulesOpt = None,
    format: FormatOpt = Format.table,
    output: OutputOpt = None,
) -> None:
    """The kernel-category rule table (built-in rules, after those of --rules)."""
    from reports.categories import load_rules, rules_table
    from reports.render import render_rows

    rows = rules_table(load_rules(rules))
    emit(render_rows(rows, ["order", "category", "pattern", "source"], format.value,
                     title="Kernel category rules (first match wins)"), output)


def _register_optional_commands() -> None:
    """Commands that live in their own modules (model benchmarks, profiling, inference and
    micro-benchmarks)."""
    import importlib

    for module in ("profile_cli.bench_cmds", "profile_cli.profile_cmds",
                   "profile_cli.infer_cmds"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:
                continue
            raise
        mod.register(app)


_register_optional_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app; NsysMineError -> ``Error: ...`` on stderr, exit code 1."""
    try:
        app(args=argv, standalone_mode=True, prog_name="nsys-mine")
    except NsysMineError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(1)
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        sys.exit(130)
