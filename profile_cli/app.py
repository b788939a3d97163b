"""The ``nsys-mine`` command line.

Each command parses options, calls one library function that returns data, and hands the data
to ``reports.render``. ``main()`` is the one place where library errors become
``Error: ...`` on stderr and exit code 1. Heavy libraries (pandas, numpy, torch) are imported
inside the commands, so that ``--help`` and small jobs start fast.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Annotated, Any, Iterator, List, Optional

import typer

from nsys_parsers.errors import NsysMineError
from nsys_parsers.schema import ATTRIBUTIONS, NAME_KINDS
from profile_cli.common import (
    ExportArg,
    OutputSpec,
    choice,
    emit_report,
    option_group,
    output_options,
)
from reports.options import MERGE_MODES, AnalysisOptions

app = typer.Typer(
    name="nsys-mine",
    help="Mine Nsight Systems exports of PyTorch models: which CUDA kernel dominates, and where.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)

ANALYSIS_PANEL = "Reading the export"

RulesOpt = Annotated[Optional[Path], typer.Option(
    "--rules", dir_okay=False, metavar="FILE", rich_help_panel=ANALYSIS_PANEL,
    help="TOML file with extra kernel-category rules (tried before the built-in ones).")]
WithinOpt = Annotated[Optional[str], typer.Option(
    "--within", metavar="RANGE", rich_help_panel=ANALYSIS_PANEL,
    help="Only what ran inside instances of this NVTX range (e.g. `measure`, to leave warmup "
         "steps out).")]
MergeOpt = Annotated[str, typer.Option(
    "--merge-op-ids", rich_help_panel=ANALYSIS_PANEL, **choice(MERGE_MODES),
    help="One name per PyTorch operator: drop the per-call suffixes (`, seq = N`, "
         "`, op_id = N`, `, sizes = ...`) from range names. auto: when the names look like "
         "an emit_nvtx capture.")]
NameKindOpt = Annotated[str, typer.Option(
    "--name-kind", rich_help_panel=ANALYSIS_PANEL, **choice(NAME_KINDS),
    help="Kernel names: short, demangled (as nsys prints them) or mangled.")]
NsysOpt = Annotated[Optional[str], typer.Option(
    "--nsys", metavar="PATH", rich_help_panel=ANALYSIS_PANEL,
    help="The nsys binary that exports a .nsys-rep report to SQLite (default: $NSYS, PATH, "
         "CUDA/Nsight folders, cached installs).")]
DepthOpt = Annotated[Optional[int], typer.Option(
    "--depth", min=1, metavar="N", rich_help_panel=ANALYSIS_PANEL,
    help="Only range instances at nesting depth <= N (1 = outermost on its thread).")]
MatchOpt = Annotated[Optional[List[str]], typer.Option(
    "--match", metavar="GLOB", rich_help_panel=ANALYSIS_PANEL,
    help="Only ranges whose name matches this glob pattern (e.g. 'aten::*'; repeatable).")]
CacheOpt = Annotated[bool, typer.Option(
    "--cache/--no-cache", rich_help_panel=ANALYSIS_PANEL,
    help="Keep the columns read from the export in the user cache dir ($NSYS_MINE_CACHE_DIR, "
         "default ~/.cache/nsys-mine/columns; never next to the export) and answer the next "
         "questions from there. --no-cache reads the export and writes nothing.")]
AttributionOpt = Annotated[str, typer.Option(
    "--attribution", rich_help_panel=ANALYSIS_PANEL, **choice(ATTRIBUTIONS),
    help="all: a kernel counts in every range that encloses its launch (as nsys "
         "nvtx_kern_sum); innermost: only in its deepest range.")]

# Give a command the analysis options it names (``only=``); it receives ``analysis``.
analysis_options = option_group(AnalysisOptions, {
    "within": WithinOpt, "merge_op_ids": MergeOpt, "name_kind": NameKindOpt,
    "rules": RulesOpt, "depth": DepthOpt, "match": MatchOpt, "nsys": NsysOpt,
    "cache": CacheOpt,
}, "analysis", convert={"match": lambda v: tuple(v or ()),
                        "rules": lambda v: v})


def _one_blas_thread() -> None:
    """Mining uses no BLAS: keep OpenBLAS from starting a thread pool when numpy loads
    (about 50 ms of CPU). Called by the mining commands before they import numpy; the model
    commands (bench, profile) keep the user's setting."""
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@contextlib.contextmanager
def _analysis(export: Path, analysis: AnalysisOptions) -> Iterator[Any]:
    """The export opened for questions, with a spinner on stderr while a long read runs."""
    from profile_cli.progress import status
    from reports.analysis import ExportAnalysis

    with status(f"reading {export.name}"), ExportAnalysis(export, analysis) as a:
        yield a


@app.command()
@analysis_options(only=("nsys",))
@output_options(top=0)
def info(export: ExportArg, analysis: AnalysisOptions, out: OutputSpec) -> None:
    """Export metadata: nsys and schema version, GPUs, capture command, table row counts.

    Example: `nsys-mine info run.sqlite --format json`
    """
    _one_blas_thread()
    from reports.info import info_for_people
    from reports.render import render_object

    with _analysis(export, analysis) as a:
        data = a.info()
    human, notes = info_for_people(data)
    out.emit(render_object(data, out.format, title=f"nsys export {export.name}",
                           width=out.width, human=human, notes=notes))


@app.command()
@analysis_options(only=("within", "name_kind", "rules", "depth", "match", "nsys", "cache"))
@output_options()
def kernels(
    export: ExportArg,
    analysis: AnalysisOptions,
    out: OutputSpec,
    range_name: Annotated[Optional[str], typer.Option(
        "--range", metavar="NAME", rich_help_panel=ANALYSIS_PANEL,
        help="Only kernels launched inside NVTX ranges of this name.")] = None,
) -> None:
    """CUDA kernel summary by name (as nsys cuda_gpu_kern_sum / gpukernsum).

    Examples: `nsys-mine kernels run.sqlite` ·
    `nsys-mine kernels run.sqlite --range forward --within measure --top 10`
    """
    _one_blas_thread()
    from reports.kernel_summary import KERNEL_COLUMNS, KERNEL_VIEW

    with _analysis(export, analysis) as a:
        result = a.kernels(range_name=range_name)
    title = "CUDA kernels" + (f" in range {range_name!r}" if range_name else "")
    emit_report(result, KERNEL_COLUMNS, KERNEL_VIEW, out, title=title)


@app.command()
@analysis_options(only=("within", "merge_op_ids", "depth", "match", "nsys", "cache"))
@output_options()
def ranges(export: ExportArg, analysis: AnalysisOptions, out: OutputSpec) -> None:
    """NVTX range summary: CPU durations (as nsys nvtx_sum) plus the GPU time of their kernels.

    Examples: `nsys-mine ranges run.sqlite --depth 2` ·
    `nsys-mine ranges capture.sqlite --merge-op-ids on --match 'aten::*'`
    """
    _one_blas_thread()
    from reports.range_summary import RANGE_COLUMNS, RANGE_VIEW

    with _analysis(export, analysis) as a:
        result = a.ranges()
    emit_report(result, RANGE_COLUMNS, RANGE_VIEW, out, title="NVTX ranges")


@app.command("nvtx-kernels")
@analysis_options(only=("within", "merge_op_ids", "name_kind", "depth", "match", "nsys",
                        "cache"))
@output_options()
def nvtx_kernels(
    export: ExportArg,
    analysis: AnalysisOptions,
    out: OutputSpec,
    attribution: AttributionOpt = "all",
) -> None:
    """Kernels grouped by the NVTX range that launched them (as nsys nvtx_kern_sum).

    Examples: `nsys-mine nvtx-kernels run.sqlite` ·
    `nsys-mine nvtx-kernels run.sqlite --attribution innermost --format csv`
    """
    _one_blas_thread()
    from reports.nvtx_kernels import NVTX_KERNEL_COLUMNS, NVTX_KERNEL_VIEW

    with _analysis(export, analysis) as a:
        result = a.nvtx_kernels(attribution=attribution)
    emit_report(result, NVTX_KERNEL_COLUMNS, NVTX_KERNEL_VIEW, out,
                title=f"CUDA kernels by NVTX range ({attribution})")


@app.command()
@analysis_options(merge_op_ids="auto")
@output_options()
def dominant(
    export: ExportArg,
    analysis: AnalysisOptions,
    out: OutputSpec,
    range_names: Annotated[Optional[List[str]], typer.Option(
        "--range", metavar="NAME", rich_help_panel=ANALYSIS_PANEL,
        help="Only these ranges (repeat the option for several).")] = None,
    attribution: AttributionOpt = "all",
) -> None:
    """Which kernel dominates: for the whole export and for each NVTX range.

    One row per range: the dominant kernel, its share of the range's GPU time, its calls per
    range instance, the runner-up and the kernel-category mix. `--format text` gives one
    sentence per range.

    Examples: `nsys-mine dominant run.sqlite --within measure` ·
    `nsys-mine dominant run.sqlite --range forward --range backward --format text`
    """
    _one_blas_thread()
    from reports.dominant import DOMINANT_COLUMNS, DOMINANT_VIEW

    with _analysis(export, analysis) as a:
        result = a.dominant(range_names=range_names or None, attribution=attribution)
    emit_report(result, DOMINANT_COLUMNS, DOMINANT_VIEW, out,
                title="Dominant kernel per range")


@app.command()
@analysis_options(only=("nsys",))
@output_options()
def memops(export: ExportArg, analysis: AnalysisOptions, out: OutputSpec) -> None:
    """Memory operations: memcpy by kind and memset, count, bytes, time and throughput.

    Example: `nsys-mine memops run.sqlite`
    """
    _one_blas_thread()
    from reports.memops import MEMOPS_COLUMNS, MEMOPS_VIEW

    with _analysis(export, analysis) as a:
        result = a.memops()
    emit_report(result, MEMOPS_COLUMNS, MEMOPS_VIEW, out, title="Memory operations")


@app.command()
@output_options(top=0)
def categories(
    out: OutputSpec,
    rules: Annotated[Optional[Path], typer.Option(
        "--rules", dir_okay=False, metavar="FILE",
        help="TOML file with extra kernel-category rules (listed first: they are tried "
             "first).")] = None,
) -> None:
    """The kernel-category rule table (first match wins; rules of --rules come first).

    Examples: `nsys-mine categories` · `nsys-mine categories --rules my_rules.toml`
    """
    from reports.categories import CATEGORY_VIEW, load_rules, rules_report

    emit_report(rules_report(load_rules(rules)), CATEGORY_VIEW.columns, CATEGORY_VIEW, out,
                title="Kernel category rules (first match wins)")


def _register_optional_commands() -> None:
    """Commands that live in their own modules (model benchmarks, profiling)."""
    import importlib

    for module in ("profile_cli.bench_cmds", "profile_cli.profile_cmds"):
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
