"""The mining commands: one per analysis (``reports.pipeline.registry``), each built from its
declaration (``reports.pipeline.analysis.Analysis``): its export argument(s), the analysis
options it honours (``reports.pipeline.options.OPTIONS``), the output options and its own
parameters; and ``report``, built from the page's declaration (``reports.page.files``).

A command parses them, ``reports.pipeline.ask.ask`` opens the export(s) and answers, and
``write_answer`` renders the answer (``reports.render``) for the output options.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import typer

from profile_cli.commands.groups import (
    REQUIRED,
    GroupedCommand,
    OptionGroup,
    built,
    grouped,
    param_group,
)
from profile_cli.commands.output import (
    OUTPUT,
    ExportArg,
    ExportsArg,
    JobArg,
    OutputSpec,
    emit_report,
    open_session,
    output_folder,
)
from reports.pipeline.analysis import Analysis
from reports.pipeline.options import OPTIONS, AnalysisOptions
from reports.pipeline.report import MULTI_COLUMN, Report

# The analysis options -> ``AnalysisOptions`` (``ANALYSIS.of(ctx)``); a command takes those its
# analysis honours (``ANALYSIS(only=...)``).
ANALYSIS = param_group("analysis", OPTIONS, AnalysisOptions)


def register(app: typer.Typer, command: str | None = None) -> None:
    """Add one command per analysis to ``app``, in their order, and ``report`` after
    ``attention`` (the page comes after the analyses of one export); ``command``: only that
    one (the analyses' modules are then not all imported: ``registry.find``)."""
    from reports.pipeline.registry import all_analyses, find

    if command is not None:
        if command == "report":
            _register_report(app)
            return
        found = find(command)
        analyses: tuple[Analysis, ...] = (found,) if found is not None else ()
    else:
        analyses = all_analyses()
    for analysis in analyses:
        app.command(analysis.name, cls=analysis_command(analysis), help=analysis.help)(mine)
        if analysis.name == "attention" and command is None:
            _register_report(app)


def inputs_group(a: Analysis) -> OptionGroup:
    """The export arguments of ``a`` as a group that builds the list of paths: one export
    (``export``: its first), several (``exports``, ``job``), or none."""
    if a.inputs == "export":
        name = a.input_name
        return OptionGroup("inputs", lambda **v: [v[name]], {name: ExportArg}, {name: REQUIRED})
    if a.inputs in ("exports", "job"):
        return OptionGroup("inputs", lambda exports: list(exports or []),
                           {"exports": ExportsArg if a.inputs == "exports" else JobArg},
                           {"exports": REQUIRED})
    return OptionGroup("inputs", lambda: [], {}, {})


class AnalysisCommand(GroupedCommand):
    """The command of one analysis (``analysis``): its groups are the analysis options it
    honours, the output options, its export argument(s) and its own parameters."""

    def __init__(self, *args: Any, analysis: Analysis, **kwargs: Any) -> None:
        self.analysis = analysis
        super().__init__(*args, **kwargs)


def analysis_command(a: Analysis) -> Any:
    """Typer's ``cls=`` of the command of the analysis ``a``, from its declaration: --help
    order as ever (analysis options, output options, exports, own parameters)."""
    options = ANALYSIS(only=a.options, **(a.defaults if a.options else {}))
    return grouped(options, OUTPUT(top=a.default_top), inputs_group(a)(),
                   param_group("params", a.params)(), base=AnalysisCommand, analysis=a)


def mine(ctx: typer.Context) -> None:
    """Every analysis's command: its exports, options and parameters (as the command's groups
    built them) asked of the analysis (``reports.pipeline.ask.ask``: every hook runs there);
    the answer written for the output options; exit with the analysis's code."""
    command = ctx.command
    assert isinstance(command, AnalysisCommand)
    a, paths, options = command.analysis, built(ctx, "inputs"), ANALYSIS.of(ctx)
    params: dict[str, Any] = built(ctx, "params")
    out: OutputSpec = OUTPUT.of(ctx)
    from reports.pipeline.ask import ask
    from reports.pipeline.multi import TOP_EACH
    from reports.render import HUMAN_FORMATS

    human = out.format in HUMAN_FORMATS
    top_each = out.top if out.top is not None else (TOP_EACH if human else None)
    with contextlib.ExitStack() as stack:
        if a.inputs == "job":  # a job's exports are mined on Dask: a progress bar over them
            from profile_cli.commands.progress import progress_bar
            from reports.ranks.cluster import PROGRESS

            token = PROGRESS.set(stack.enter_context(progress_bar(a.name)))
            stack.callback(PROGRESS.reset, token)
        report = ask(a, paths, options, params, opener=open_session, targets=_export_targets,
                     top_each=top_each)
    write_answer(a, report, params, out)
    if report.exit_code:
        raise typer.Exit(report.exit_code)


def write_answer(a: Analysis, report: Report, params: dict[str, Any], out: OutputSpec) -> None:
    """Render ``report`` (``a``'s answer to ``params``) as ``out`` says, and write it: an
    object as a key/value table (JSON as itself), rows through the view people see them with
    (the rows of several exports come cut per export already); its warnings on stderr, a
    line each."""
    for warning in report.warnings:
        sys.stderr.write(f"Warning: {warning}\n")
    if report.obj is not None:
        from reports.render import render_object

        human = a.people(report.obj) if a.people is not None else None
        out.emit(render_object(report.obj, out.format, title=report.title, width=out.width,
                               human=human, notes=report.notes))
        return
    several = report.columns[:1] == [MULTI_COLUMN]
    emit_report(report, report.columns, a.view_of(report, params),
                OutputSpec(out.format, out.output, 0 if several else out.top, out.wide),
                title=report.title)


def _export_targets(paths: list[Path]) -> Any:
    """The exports of several paths, sweep folders read (``runs.targets``, imported only
    when a question has several)."""
    from profile_cli.runs.targets import export_targets

    return export_targets(paths)


def _register_report(app: typer.Typer) -> None:
    """``report``, from the page's declaration (``reports.page.files``): the analysis options
    its sections read with, the attention shape (``attention``'s parameters), its own."""
    from reports.page import files
    from reports.pipeline.registry import get

    options = ANALYSIS(only=files.OPTIONS, **files.DEFAULTS)
    shape = param_group("shape", get("attention").params)
    app.command("report", cls=grouped(options, shape(), param_group("page", files.PARAMS)()),
                help=files.HELP)(report)


def report(ctx: typer.Context) -> None:
    """``nsys-mine report TARGET``: the page of an export, a sweep folder or a folder of rank
    exports, written as one HTML file or markdown with its PNGs."""
    from profile_cli.runs.targets import build_report
    from reports.page.files import page_format, write_page

    page_params = built(ctx, "page")
    target, output = page_params["export"], page_params["output"]
    fmt = page_format(page_params["format"], output)
    output = output_folder(output or Path(f"report.{fmt}"))
    page = build_report(target, ANALYSIS.of(ctx), built(ctx, "shape"), top=page_params["top"],
                        opener=open_session)
    from nsys_parsers.errors import BadOption

    for warning in page.warnings:
        sys.stderr.write(f"Warning: {warning}\n")
    try:
        files = write_page(page, output, fmt)
    except OSError as exc:
        raise BadOption(f"cannot write --output {output}: {exc.strerror}; choose a writable "
                        f"path.") from None
    extra = f" and {len(files) - 1} PNG file(s) beside it" if fmt == "md" else ""
    sys.stderr.write(f"wrote {output}{extra} ({len(page.figures())} plot(s))\n")
