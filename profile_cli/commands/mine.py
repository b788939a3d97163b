"""The mining commands: one per analysis of ``reports.analyses``, each built from its
declaration (``reports.analysis.Analysis``) with the shared analysis options it names, and
``report`` (the page of an export or a sweep).

A command parses its export(s), the analysis options the analysis declares, its own
parameters and the output options; ``reports.ask.ask`` opens the export(s) and answers; the
answer is rendered by ``reports.render`` and written by ``emit``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Callable, List, Optional

import typer

from nsys_parsers.schema import GRAPH_ATTRIBUTIONS, NAME_KINDS
from profile_cli.commands.groups import (
    REQUIRED,
    GroupedCommand,
    OptionGroup,
    built,
    dataclass_defaults,
    grouped,
)
from profile_cli.commands.output import (
    OUTPUT,
    ExportArg,
    ExportsArg,
    OutputSpec,
    choice,
    emit,
    emit_report,
    open_session,
    output_folder,
    write_bytes,
)
from reports.analysis import Analysis, Param
from reports.options import MERGE_MODES, AnalysisOptions

# -- the analysis options every export command shares (reports.options.AnalysisOptions) ----

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
    "--name-kind", rich_help_panel=ANALYSIS_PANEL, **choice(NAME_KINDS, "KIND"),
    help="Kernel names: short, demangled (as nsys prints them) or mangled.")]
NsysOpt = Annotated[Optional[str], typer.Option(
    "--nsys", metavar="PATH", rich_help_panel=ANALYSIS_PANEL,
    help="The nsys binary that exports a .nsys-rep report to SQLite (default: $NSYS, PATH, "
         "CUDA/Nsight folders, cached installs).")]
DepthOpt = Annotated[Optional[int], typer.Option(
    "--depth", min=1, metavar="N", rich_help_panel=ANALYSIS_PANEL,
    help="Only range instances at nesting depth <= N (1 = outermost on its thread; module "
         "ranges of --nvtx modules: their level, the model 1).")]
MatchOpt = Annotated[Optional[List[str]], typer.Option(
    "--match", metavar="GLOB", rich_help_panel=ANALYSIS_PANEL,
    help="Only ranges whose name matches this glob pattern (e.g. 'aten::*'; repeatable).")]
CacheOpt = Annotated[bool, typer.Option(
    "--cache/--no-cache", rich_help_panel=ANALYSIS_PANEL,
    help="Keep the columns read from the export in the user cache dir ($NSYS_MINE_CACHE_DIR, "
         "default ~/.cache/nsys-mine/columns; never next to the export) and answer the next "
         "questions from there. --no-cache reads the export and writes nothing.")]
# A panel of its own: its long name would narrow the help column of the others.
GraphAttributionOpt = Annotated[str, typer.Option(
    "--graph-attribution", rich_help_panel="CUDA graphs",
    **choice(GRAPH_ATTRIBUTIONS, "WHERE"),
    help="Where the kernels of CUDA graphs count: launch (in the NVTX ranges around the "
         "graph's launch, as nsys) or capture (in those open when the graph and its nodes "
         "were captured).")]
PathsArg = Annotated[List[Path], typer.Argument(
    help="nsys exports (.sqlite, or .nsys-rep/.qdrep), globs or folders of them.",
    show_default=False, metavar="EXPORT")]
# The analysis options -> ``AnalysisOptions`` (``ANALYSIS.of(ctx)``); a command takes those its
# analysis honours (``ANALYSIS(only=...)``).
ANALYSIS = OptionGroup("analysis", AnalysisOptions, {
    "within": WithinOpt, "merge_op_ids": MergeOpt, "name_kind": NameKindOpt,
    "rules": RulesOpt, "depth": DepthOpt, "match": MatchOpt, "nsys": NsysOpt,
    "cache": CacheOpt, "graph_attribution": GraphAttributionOpt,
}, dataclass_defaults(AnalysisOptions), convert={"match": lambda v: tuple(v or ())})


def register(app: typer.Typer, command: str | None = None) -> None:
    """Add one command per analysis to ``app``, in their order, and ``report`` after
    ``attention`` (the page comes after the analyses of one export); ``command``: only that
    one (the analyses' modules are then not all imported: ``reports.analyses.find``)."""
    from reports.analyses import all_analyses, find

    if command is not None:
        if command == "report":
            app.command("report", cls=grouped(REPORT_ANALYSIS, shape_group()()))(report)
            return
        found = find(command)
        analyses: tuple[Analysis, ...] = (found,) if found is not None else ()
    else:
        analyses = all_analyses()
    for analysis in analyses:
        app.command(analysis.name, cls=analysis_command(analysis), help=analysis.help)(mine)
        if analysis.name == "attention" and command is None:
            app.command("report", cls=grouped(REPORT_ANALYSIS, shape_group()()))(report)


def param_type(p: Param) -> Any:
    """The declaration of a parameter for Typer: ``Annotated[type, typer.Option(...)]`` (or
    ``typer.Argument`` for an argument)."""
    base: Any = List[p.type] if p.multiple else p.type  # type: ignore[name-defined]
    if not p.required and p.default is None and p.type is not bool:
        base = Optional[base]
    if p.argument:
        return Annotated[base, typer.Argument(help=p.help, metavar=p.flags[0],
                                              show_default=False)]
    extra: dict[str, Any] = {}
    if p.choices:
        extra.update(choice(p.choices, p.metavar))
    elif p.metavar:
        extra["metavar"] = p.metavar
    if p.minimum is not None:
        extra["min"] = p.minimum
    if p.maximum is not None:
        extra["max"] = p.maximum
    if p.panel:
        extra["rich_help_panel"] = p.panel
    if p.type is Path:
        extra["dir_okay"] = False
    if p.required or p.default is None:
        extra["show_default"] = False
    return Annotated[base, typer.Option(*p.flags, help=p.help, **extra)]


def param_group(key: str, params: tuple[Param, ...], build: Callable[..., Any] = dict
                ) -> OptionGroup:
    """The options of ``params`` (an analysis's own) as one group that builds
    ``build(**values)`` (default: the dict of the parameters by name)."""
    return OptionGroup(key, build, {p.name: param_type(p) for p in params},
                       {p.name: REQUIRED if p.required else p.default for p in params})


def inputs_group(a: Analysis) -> OptionGroup:
    """The export arguments of ``a`` as a group that builds the list of paths: one export
    (``export``, ``two``: its first), several (``exports``, ``paths``), or none."""
    if a.inputs in ("export", "two"):
        name = a.input_name
        return OptionGroup("inputs", lambda **v: [v[name]], {name: ExportArg}, {name: REQUIRED})
    if a.inputs in ("exports", "paths"):
        return OptionGroup("inputs", lambda exports: list(exports or []),
                           {"exports": PathsArg if a.inputs == "paths" else ExportsArg},
                           {"exports": REQUIRED})
    return OptionGroup("inputs", lambda: [], {}, {})


class AnalysisCommand(GroupedCommand):
    """The command of one analysis (``analysis``): its groups are the analysis options it
    honours, the output options, its export argument(s) and its own parameters."""

    analysis: Analysis


def analysis_command(a: Analysis) -> type[GroupedCommand]:
    """The command class (Typer's ``cls=``) of the analysis ``a``, built from its declaration:
    --help order as ever (analysis options, output options, exports, own parameters)."""
    options = ANALYSIS(only=a.options, **(a.defaults if a.options else {}))
    return grouped(options, OUTPUT(top=a.default_top), inputs_group(a)(),
                   param_group("params", a.params)(), base=AnalysisCommand, analysis=a)


def mine(ctx: typer.Context) -> None:
    """Every analysis's command: its exports, options and parameters (as the command's groups
    built them) asked of the analysis (``reports.ask.ask``: every hook runs there); the answer
    written for the output options; exit with the analysis's code."""
    command = ctx.command
    assert isinstance(command, AnalysisCommand)
    a, paths, options = command.analysis, built(ctx, "inputs"), ANALYSIS.of(ctx)
    params: dict[str, Any] = built(ctx, "params")
    out: OutputSpec = OUTPUT.of(ctx)
    from reports.ask import ask
    from reports.multi import TOP_EACH
    from reports.render import HUMAN_FORMATS

    human = out.format in HUMAN_FORMATS
    top_each = out.top if out.top is not None else (TOP_EACH if human else None)
    with contextlib.ExitStack() as stack:
        if a.inputs == "paths":  # it opens its exports itself: a progress bar over them
            from profile_cli.commands.progress import progress_bar
            from reports.cluster import PROGRESS

            token = PROGRESS.set(stack.enter_context(progress_bar(a.name)))
            stack.callback(PROGRESS.reset, token)
        report = ask(a, paths, options, params, opener=open_session, targets=_export_targets,
                     top_each=top_each)
    if report.obj is not None:
        from reports.render import render_object

        out.emit(render_object(report.obj, out.format, title=report.title, width=out.width,
                               human=report.obj_for_people, notes=report.notes))
    else:
        emit_report(report, report.columns, report.view, replace(out, top=0) if report.cut
                    else out, title=report.title)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def _export_targets(paths: list[Path]) -> Any:
    """The exports of several paths, sweep folders read (``runs.targets``, imported only
    when a question has several)."""
    from profile_cli.runs.targets import export_targets

    return export_targets(paths)


REPORT_FORMATS = ("html", "md")


# report's options: the analysis options of its sections, the attention shape (AttentionShape)
REPORT_ANALYSIS = ANALYSIS(only=("within", "merge_op_ids", "rules", "nsys", "graph_attribution"),
                           merge_op_ids="auto")


@functools.cache
def shape_group() -> OptionGroup:
    """The attention shape options of ``report`` (``AttentionShape``), made when ``report``
    is (the attention analysis is imported then, not at every start)."""
    from reports.analyses.attention import SHAPE_PARAMS, AttentionShape

    return param_group("shape", SHAPE_PARAMS, AttentionShape)


def report(
    ctx: typer.Context,
    target: Annotated[Path, typer.Argument(
        help="An nsys export (.sqlite, .nsys-rep) or a sweep folder (sweep --out-dir).",
        show_default=False, metavar="TARGET")],
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
    output = output_folder(output or Path(f"report.{fmt}"))
    page = build_report(target, ANALYSIS.of(ctx), shape_group().of(ctx), top=top,
                        opener=open_session)
    if fmt == "html":
        from reports.page.html import page_html

        emit(Rendered(text=page_html(page)), output)
        extra = ""
    else:
        from reports.page.model import page_markdown

        text, files = page_markdown(page, output.stem)
        emit(Rendered(text=text), output)
        for name, data in files.items():
            write_bytes(output.parent / name, data)
        extra = f" and {len(files)} PNG file(s) beside it"
    sys.stderr.write(f"wrote {output}{extra} ({len(page.figures())} plot(s))\n")
