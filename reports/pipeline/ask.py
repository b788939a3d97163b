"""The one path of a question: every hook of an analysis's declaration runs here, in this
order, for every caller (the command line, the Python API, the several-exports tables, the
report page, the MCP server, rank workers):

    ask(analysis, sources, options, params)
      1. the question (``question``): options and parameters apart, defaults filled in,
         unknown ones refused; then ``validate`` (before any export is read)
      2. ``exports`` of several exports (or a sweep folder): each one answered as in 3
         (``multi.ask_each``), one table with a ``config`` column; ``job`` of several exports
         (or a folder, or a glob): ``run_job(paths, options, **params)``
      3. one export: ``prepare`` (options from what lies beside it), the export and the
         parameters that are exports (``Param.export``) opened with ``opener``, ``answer``
      4. ``outputs`` (the files a gate writes) and ``exit_code``: ``Report.exit_code``

    answer(session, analysis, **params): an open session (one load for several questions, as
      the report page asks them): ``needs`` loaded, ``run``, the declared title and columns
      (``Analysis.finish``)

For Python users (``reports.Memo`` keeps the exports and answers of a session in between):

    from reports import answer, ask, Session
    report = ask("dominant", ["run.sqlite"], within="measure", range_names=["forward"])
    report.to_pandas()
    with Session("run.sqlite") as s:           # several questions of one export, one load
        answer(s, "ranges"), answer(s, "kernels", range_name="forward")
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

from nsys_parsers.paths import check_path
from reports.pipeline.analysis import Analysis
from reports.pipeline.multi import ExportTarget, ask_each, combine, file_targets
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.report import Report
from reports.pipeline.session import Session

Opener = Callable[[Path, AnalysisOptions], ContextManager[Session]]
Targets = Callable[[list[Path]], list[ExportTarget]]
GLOB = "*?["


@dataclass(frozen=True)
class Question:
    """One question before it is answered: the analysis, the exports (files, folders or
    globs), the options and the parameters (defaults filled in, not yet validated)."""

    analysis: Analysis
    paths: tuple[Path, ...]
    options: AnalysisOptions
    params: dict[str, Any]


def question(analysis: Analysis | str, sources: Sequence[str | os.PathLike[str]] = (),
             options: AnalysisOptions | None = None, params: dict[str, Any] | None = None,
             **kwargs: Any) -> Question:
    """The question ``ask`` answers. ``kwargs``: analysis options (``within``...) and the
    analysis's parameters, by name: a keyword is the analysis's parameter when it declares
    one of that name (check's --rules), else an option."""
    a = _analysis(analysis)
    fields = set(AnalysisOptions.__dataclass_fields__) - {p.name for p in a.params}
    options = replace(options or AnalysisOptions(**a.defaults),
                      **{k: v for k, v in kwargs.items() if k in fields})
    given = {**(params or {}), **{k: v for k, v in kwargs.items() if k not in fields}}
    paths = [check_path(s, "the export") for s in sources]
    for p in a.params:  # the parameters that are exports: checked as paths before any use
        if p.export and given.get(p.name) is not None:
            given[p.name] = check_path(given[p.name], f"--{p.name.replace('_', '-')}")
    if a.inputs == "export":  # the exports after the first: its export arguments, in order
        for p in a.params:
            if p.export and p.argument and len(paths) > 1 and given.get(p.name) is None:
                given[p.name] = paths.pop(1)
    return Question(a, tuple(paths), options, a.fill(given))


def ask(analysis: Analysis | str, sources: Sequence[str | os.PathLike[str]] = (),
        options: AnalysisOptions | None = None, params: dict[str, Any] | None = None, *,
        opener: Opener | None = None, targets: Targets | None = None,
        top_each: int | None = None, **kwargs: Any) -> Report:
    """The answer of ``analysis`` (or its name) for ``sources``: none, one export, several (or
    sweep folders) for those that answer each, or the exports of a job (``question`` says
    what ``kwargs`` are). ``opener(path, options)`` opens a session (default ``Session``; the
    command line adds a spinner, ``reports.Memo`` keeps it loaded); ``targets(paths)`` finds
    the exports of several paths and labels them (default ``multi.file_targets``: files,
    labelled by name); ``top_each``: rows kept of each export of several (None: all)."""
    return ask_question(question(analysis, sources, options, params, **kwargs),
                        opener=opener, targets=targets, top_each=top_each)


def ask_question(q: Question, *, opener: Opener | None = None, targets: Targets | None = None,
                 top_each: int | None = None) -> Report:
    """The answer of ``q`` (steps 1 to 4 of the module docstring)."""
    a, paths, options = q.analysis, list(q.paths), q.options
    params = a.validate(dict(q.params), paths) if a.validate is not None else dict(q.params)
    if a.inputs == "job" and not one_export(paths):
        assert a.run_job is not None
        report = a.finish(a.run_job(paths, options, **params), params)
    elif a.inputs == "exports" and not one_export(paths):
        report = _ask_several(a, (targets or file_targets)(paths), options, params,
                              opener or Session, top_each)
    else:
        report = _ask_one(a, paths, options, params, opener or Session)
    if a.outputs is not None and paths:
        a.outputs(report, params, paths[0])
    report.exit_code = a.exit_code(report, params) if a.exit_code is not None else 0
    return report


def one_export(paths: list[Path]) -> bool:
    """Whether ``paths`` name one export (not several, a folder or a glob pattern; a missing
    file is one: opening it says so)."""
    if len(paths) != 1:
        return False
    p = paths[0]
    return p.is_file() or (not p.exists() and not any(c in str(p) for c in GLOB))


def answer(session: Session, analysis: Analysis | str, **params: Any) -> Report:
    """The answer of ``analysis`` (or its name) for an open session (an analysis that reads no
    export, such as ``categories``, ignores it): its ``needs`` loaded, ``run``, the declared
    title and columns. A parameter that is an export (``Param.export``) is given as a
    session."""
    return _answer(_analysis(analysis), [session], params)


def _analysis(analysis: Analysis | str) -> Analysis:
    from reports.pipeline.registry import get

    return get(analysis) if isinstance(analysis, str) else analysis


def _answer(a: Analysis, sessions: list[Session], params: dict[str, Any]) -> Report:
    if a.inputs == "none":
        sessions = []
    params = a.fill(params)
    opened = [params[p.name] for p in a.params if p.export]
    live = [s for s in [*sessions, *opened] if s is not None]
    # a caller that set its own expectation (the report page, for all its sections) keeps it
    mine = [s for s in live if s.trace.expected is None]
    try:
        for s in live:
            if s in mine:
                s.expect(f"`{a.name}`", a.bytes_per_row)
            if a.needs:
                s.load(*a.needs)
        report = a.finish(a.run(*sessions, **params), params)
    finally:  # a question that loaded nothing new leaves no expectation to the next load
        for s in mine:
            s.expect(None)
    said = [w for s in live for w in s.trace_warnings]
    if said:
        report.warnings = list(dict.fromkeys([*said, *report.warnings]))
    return report


def _ask_one(a: Analysis, paths: list[Path], options: AnalysisOptions,
             params: dict[str, Any], opener: Opener) -> Report:
    """The answer for one export (none for ``none``), and the exports among the parameters,
    opened with the options ``prepare`` makes from what lies beside it."""
    notes: list[str] = []
    if a.prepare is not None and paths:
        options, notes = a.prepare(options, paths[0])
    with contextlib.ExitStack() as stack:
        sessions = [stack.enter_context(opener(p, options)) for p in paths[:1]]
        for p in a.params:
            if p.export and params.get(p.name) is not None:
                params[p.name] = stack.enter_context(opener(Path(params[p.name]), options))
        report = _answer(a, sessions, params)
    report.notes = notes + report.notes
    return report


def _ask_several(a: Analysis, targets: list[ExportTarget], options: AnalysisOptions,
                 params: dict[str, Any], opener: Opener, top_each: int | None) -> Report:
    """One question of several exports: each export's rows with a ``config`` column, the
    top ``top_each`` of each (None: all), in one report."""
    columns, view = a.shaped(params)
    assert view is not None
    answers, skipped = ask_each(
        targets, lambda t: _ask_one(a, [t.path], options, dict(params), opener))
    columns = list(dict.fromkeys([*columns, *(c for x in answers for c in x.report.columns)]))
    report = combine(answers, columns, view, skipped=skipped, top_each=top_each)
    if options.within is None and all(t.config for t in targets):
        report.notes.append("these are `nsys-mine profile` exports: --within measure leaves "
                            "their warmup steps out (as profile and sweep do).")
    report.title = f"{answers[0].report.title or a.title}, {len(answers)} exports"
    return report
