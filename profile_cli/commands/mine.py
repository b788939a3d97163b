"""The mining commands: questions of one export (or several, or a sweep folder).

``info``, ``kernels``, ``ranges``, ``nvtx-kernels``, ``dominant``, ``memops``, ``categories``,
``attention`` and ``report``: each parses options, opens the export once with
``reports.analysis.ExportAnalysis``, asks one question and hands the data to
``reports.render``. Heavy libraries (numpy, pandas, matplotlib) are imported inside the
commands, so that ``--help`` and small jobs start fast.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional

import typer

from profile_cli.commands.options import ANALYSIS_PANEL, AttributionOpt, analysis_options
from profile_cli.commands.output import (
    ExportArg,
    ExportsArg,
    OutputSpec,
    choice,
    emit,
    emit_report,
    open_analysis,
    option_group,
    output_options,
)
from reports.options import AnalysisOptions
from reports.shape import AttentionShape

# (command name, function) in the order of `nsys-mine --help`, filled by @_command.
COMMANDS: list[tuple[str, Callable[..., None]]] = []


def _command(name: str | None = None) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def add(fn: Callable[..., None]) -> Callable[..., None]:
        COMMANDS.append((name or fn.__name__, fn))
        return fn
    return add


def register(app: typer.Typer) -> None:
    for name, fn in COMMANDS:
        app.command(name)(fn)


def _one_blas_thread() -> None:
    """Mining uses no BLAS: keep OpenBLAS from starting a thread pool when numpy loads
    (about 50 ms of CPU). Called by the mining commands before they import numpy; the model
    commands (bench, profile) keep the user's setting."""
    import os

    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _single(exports: list[Path]) -> Path | None:
    """The export when one file is given (the one-export tables, unchanged), else None."""
    return exports[0] if len(exports) == 1 and not exports[0].is_dir() else None


def _emit_many(exports: list[Path], analysis: AnalysisOptions, ask: Any, columns: list[str],
               view: Any, out: OutputSpec, *, title: str,
               need_names: bool | None = None) -> None:
    """One question of several exports (or sweep folders): each export's rows with a
    `config` column; people see the top rows of each (--top, default 5 per export)."""
    from profile_cli.runs.targets import export_targets
    from reports.multi import TOP_EACH, ask_each, combine
    from reports.render import HUMAN_FORMATS

    targets = export_targets(exports)
    answers, skipped = ask_each(
        targets, ask, opener=lambda p: open_analysis(p, analysis, need_names=need_names))
    human = out.format in HUMAN_FORMATS
    top_each = out.top if out.top is not None else (TOP_EACH if human else None)
    report, people = combine(answers, columns, view, skipped=skipped, top_each=top_each)
    if analysis.within is None and all(t.config for t in targets):
        report.notes.append("these are `nsys-mine profile` exports: --within measure leaves "
                            "their warmup steps out (as profile and sweep do).")
    emit_report(report, report.columns, people, replace(out, top=0),
                title=f"{title}, {len(answers)} exports")


@_command()
@analysis_options(only=("nsys",))
@output_options(top=0)
def info(export: ExportArg, analysis: AnalysisOptions, out: OutputSpec) -> None:
    """Export metadata: nsys and schema version, GPUs, capture command, table row counts.

    Example: `nsys-mine info run.sqlite --format json`
    """
    _one_blas_thread()
    from reports.info import info_for_people
    from reports.render import render_object

    with open_analysis(export, analysis) as a:
        data = a.info()
    human, notes = info_for_people(data)
    out.emit(render_object(data, out.format, title=f"nsys export {export.name}",
                           width=out.width, human=human, notes=notes))


@_command()
@analysis_options(only=("within", "name_kind", "rules", "depth", "match", "nsys", "cache"))
@output_options()
def kernels(
    exports: ExportsArg,
    analysis: AnalysisOptions,
    out: OutputSpec,
    range_name: Annotated[Optional[str], typer.Option(
        "--range", metavar="NAME", rich_help_panel=ANALYSIS_PANEL,
        help="Only kernels launched inside NVTX ranges of this name.")] = None,
) -> None:
    """CUDA kernel summary by name (as nsys cuda_gpu_kern_sum / gpukernsum).

    Several exports or a sweep folder: one table with a `config` column.

    Examples: `nsys-mine kernels run.sqlite` ·
    `nsys-mine kernels sweep/ --range forward --within measure --top 3`
    """
    _one_blas_thread()
    title = "CUDA kernels" + (f" in range {range_name!r}" if range_name else "")
    export = _single(exports)
    reads = None
    if export is not None and range_name is None and analysis.within is None:
        # a small export's reads start before the report modules load (None: a large one)
        from nsys_parsers.kernel_groups import open_kernel_groups

        reads = open_kernel_groups(export, analysis.name_kind, nsys=analysis.nsys)
    from reports.kernel_summary import KERNEL_COLUMNS, KERNEL_VIEW, small_kernel_report

    if export is None:
        _emit_many(exports, analysis, lambda a: a.kernels(range_name=range_name),
                   KERNEL_COLUMNS, KERNEL_VIEW, out, title=title,
                   need_names=False if range_name else None)
        return
    # a small export's whole summary needs neither numpy nor the analysis module
    result = small_kernel_report(export, analysis, reads=reads) if reads is not None else None
    if result is None:
        with open_analysis(export, analysis, need_names=False if range_name else None) as a:
            result = a.kernels(range_name=range_name)
    emit_report(result, KERNEL_COLUMNS, KERNEL_VIEW, out, title=title)


@_command()
@analysis_options(only=("within", "merge_op_ids", "depth", "match", "nsys", "cache"))
@output_options()
def ranges(exports: ExportsArg, analysis: AnalysisOptions, out: OutputSpec) -> None:
    """NVTX range summary: CPU durations (as nsys nvtx_sum) plus the GPU time of their kernels.

    Several exports or a sweep folder: one table with a `config` column.

    Examples: `nsys-mine ranges run.sqlite --depth 2` ·
    `nsys-mine ranges a.sqlite b.sqlite --match forward --match backward`
    """
    _one_blas_thread()
    export = _single(exports)
    if export is None:
        from reports.range_summary import RANGE_COLUMNS, RANGE_VIEW

        _emit_many(exports, analysis, lambda a: a.ranges(), RANGE_COLUMNS, RANGE_VIEW, out,
                   title="NVTX ranges", need_names=True)
        return
    with open_analysis(export, analysis, need_names=True) as a:  # the reads start first
        result = a.ranges()
    from reports.range_summary import RANGE_COLUMNS, RANGE_VIEW

    emit_report(result, RANGE_COLUMNS, RANGE_VIEW, out, title="NVTX ranges")


@_command("nvtx-kernels")
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
    with open_analysis(export, analysis, need_names=False) as a:  # the reads start first
        result = a.nvtx_kernels(attribution=attribution)
    from reports.nvtx_kernels import NVTX_KERNEL_COLUMNS, NVTX_KERNEL_VIEW

    emit_report(result, NVTX_KERNEL_COLUMNS, NVTX_KERNEL_VIEW, out,
                title=f"CUDA kernels by NVTX range ({attribution})")


@_command()
@analysis_options(merge_op_ids="auto")
@output_options()
def dominant(
    exports: ExportsArg,
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
    sentence per range. Several exports or a sweep folder: one table with a `config` column.

    Examples: `nsys-mine dominant run.sqlite --within measure` ·
    `nsys-mine dominant sweep/ --range forward --within measure --format text`
    """
    _one_blas_thread()
    export = _single(exports)
    if export is None:
        from reports.dominant import DOMINANT_COLUMNS, DOMINANT_VIEW

        _emit_many(exports, analysis, lambda a: a.dominant(range_names=range_names or None,
                                                           attribution=attribution),
                   DOMINANT_COLUMNS, DOMINANT_VIEW, out, title="Dominant kernel per range",
                   need_names=True)
        return
    with open_analysis(export, analysis, need_names=True) as a:  # the reads start first
        result = a.dominant(range_names=range_names or None, attribution=attribution)
    from reports.dominant import DOMINANT_COLUMNS, DOMINANT_VIEW

    emit_report(result, DOMINANT_COLUMNS, DOMINANT_VIEW, out,
                title="Dominant kernel per range")


@_command()
@analysis_options(only=("nsys",))
@output_options()
def memops(export: ExportArg, analysis: AnalysisOptions, out: OutputSpec) -> None:
    """Memory operations: memcpy by kind and memset, count, bytes, time and throughput.

    Example: `nsys-mine memops run.sqlite`
    """
    _one_blas_thread()
    from reports.memops import MEMOPS_COLUMNS, MEMOPS_VIEW

    with open_analysis(export, analysis) as a:
        result = a.memops()
    emit_report(result, MEMOPS_COLUMNS, MEMOPS_VIEW, out, title="Memory operations")


@_command()
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


SHAPE_PANEL = "Attention FLOPs (default: the profile sidecar NAME.json)"
# Give a command the attention-shape options; it receives them as ``shape: AttentionShape``.
shape_options = option_group(AttentionShape, {
    "size": Annotated[Optional[str], typer.Option(
        "--size", metavar="PRESET", rich_help_panel=SHAPE_PANEL,
        help="Model size preset: gives --d-model and --heads.")],
    "d_model": Annotated[Optional[int], typer.Option(
        "--d-model", min=1, metavar="N", rich_help_panel=SHAPE_PANEL, help="Model width d.")],
    "heads": Annotated[Optional[int], typer.Option(
        "--heads", min=1, metavar="N", rich_help_panel=SHAPE_PANEL, help="Attention heads h.")],
    "context": Annotated[Optional[int], typer.Option(
        "--context", min=1, metavar="N", rich_help_panel=SHAPE_PANEL,
        help="Context length T (tokens).")],
    "batch": Annotated[Optional[int], typer.Option(
        "--batch", min=1, metavar="N", rich_help_panel=SHAPE_PANEL, help="Batch size B.")],
}, "shape")
REPORT_FORMATS = ("html", "md")


@_command()
@analysis_options(only=("within", "nsys"))
@shape_options()
@output_options()
def attention(export: ExportArg, analysis: AnalysisOptions, shape: AttentionShape,
              out: OutputSpec) -> None:
    """Attention runtime vs FLOPs: scores, softmax and final matmul of the naive attention.

    Per sub-range: the analytic FLOPs of one instance (one layer, one forward pass), the
    measured time per instance (GPU kernel time, else CPU range time: said which), achieved
    GFLOP/s, and the ratios to `computing attention scores`. The shape comes from the
    `profile` sidecar (NAME.json) or the options; `profile` exports count measured steps only.

    Examples: `nsys-mine attention profiles/tiny_ctx128_b4_train_fp32_naive_nvtx-fine_w2s3.sqlite`
    ·
    `nsys-mine attention run.sqlite --size small --context 512 --batch 4 --format md`
    """
    from reports.attention import ATTENTION_COLUMNS, ATTENTION_VIEW, attention_for_export

    result = attention_for_export(export, analysis, shape, opener=open_analysis)
    emit_report(result, ATTENTION_COLUMNS, ATTENTION_VIEW, out,
                title="Attention: runtime vs FLOPs per instance")


@_command()
@analysis_options(only=("within", "merge_op_ids", "rules", "nsys"), merge_op_ids="auto")
@shape_options()
def report(
    target: Annotated[Path, typer.Argument(
        help="An nsys export (.sqlite, .nsys-rep) or a sweep folder (sweep --out-dir).",
        show_default=False, metavar="TARGET")],
    analysis: AnalysisOptions,
    shape: AttentionShape,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", dir_okay=False, metavar="FILE", show_default=False,
        help="The file to write (default: report.html, or report.md with --format md).")
    ] = None,
    fmt: Annotated[Optional[str], typer.Option(
        "--format", "-f", show_default=False, **choice(REPORT_FORMATS),
        help="html: one self-contained file (plots inside, nothing fetched, no scripts); "
             "md: markdown with PNG files beside it. Default: from the --output suffix, "
             "else html.")] = None,
    top: Annotated[int, typer.Option(
        "--top", min=0, metavar="N", help="Rows of the kernel and range tables (0: all).")
    ] = 20,
) -> None:
    """The page people open: headline answers, plots and tables of an export or a sweep.

    One export: the dominant kernel per range, kernel categories per range (plot), attention
    FLOPs vs runtime, top kernels, the forward vs step mix, memory operations, metadata. A
    sweep folder: heatmaps of step time and of the dominant category over size x context,
    forward/backward time vs context, dominant kernels per config, failed configs and why.

    Examples: `nsys-mine report run.sqlite -o run.html` ·
    `nsys-mine report sweep/ --format md -o sweep.md`
    """
    from profile_cli.runs.targets import build_report
    from reports.render import Rendered

    fmt = fmt or ("md" if output is not None and output.suffix.lower() == ".md" else "html")
    output = output or Path(f"report.{fmt}")
    page = build_report(target, analysis, shape, top=top, opener=open_analysis)
    if fmt == "html":
        from reports.html import page_html

        emit(Rendered(text=page_html(page)), output)
        extra = ""
    else:
        from reports.page import page_markdown

        text, files = page_markdown(page, output.stem)
        for name, data in files.items():
            (output.parent / name).write_bytes(data)
        emit(Rendered(text=text), output)
        extra = f" and {len(files)} PNG file(s) beside it"
    sys.stderr.write(f"wrote {output}{extra} ({len(page.figures())} plot(s))\n")
