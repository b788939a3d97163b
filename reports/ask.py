"""Ask one analysis of its exports: open them (``Session``), answer, close. What every
command does, for Python users too:

    from reports.ask import answer, ask
    report = ask("dominant", ["run.sqlite"], within="measure", range_names=["forward"])
    report.to_pandas()
    with Session("run.sqlite") as s:           # several questions of one export, one load
        answer(s, "ranges"), answer(s, "kernels", range_name="forward")
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

from reports.analysis import Analysis
from reports.options import AnalysisOptions
from reports.report import Report
from reports.session import Session

Opener = Callable[[Path, AnalysisOptions], ContextManager[Any]]


def split_params(a: Analysis, paths: list[Path], params: dict[str, Any]
                 ) -> tuple[list[Path], dict[str, Any]]:
    """(the exports to open: ``paths`` and the export arguments among ``params``, the other
    parameters)."""
    sources = list(paths)
    rest = dict(params)
    for p in a.params:
        if p.argument:
            value = rest.pop(p.name, None)
            if value is not None:
                sources.append(Path(value))
    return sources, rest


def ask(analysis: Analysis | str, sources: Sequence[str | os.PathLike[str]],
        options: AnalysisOptions | None = None, params: dict[str, Any] | None = None, *,
        opener: Opener | None = None, **kwargs: Any) -> Report:
    """The answer of ``analysis`` (or its name) for ``sources`` (none, one export, or two for
    the analyses that compare two). ``kwargs``: analysis options (``within``...) and the
    analysis's parameters, by name."""
    from reports.analyses import get

    a = get(analysis) if isinstance(analysis, str) else analysis
    fields = set(AnalysisOptions.__dataclass_fields__)
    options = replace(options or AnalysisOptions(**a.defaults),
                      **{k: v for k, v in kwargs.items() if k in fields})
    params = {**(params or {}), **{k: v for k, v in kwargs.items() if k not in fields}}
    paths = [Path(s) for s in sources]
    if a.inputs == "paths":
        return a.finish(a.run(paths, options, **a.fill(params)), params)
    notes: list[str] = []
    if a.prepare is not None and paths:
        options, notes = a.prepare(options, paths[0])
    with contextlib.ExitStack() as stack:
        sessions = [stack.enter_context((opener or Session)(p, options)) for p in paths]
        if a.inputs == "two" and len(sessions) == 1:
            sessions.append(None)
        report = a.answer(*sessions, **params)
    report.notes = notes + report.notes
    return report


def answer(session: Session, name: str, **params: Any) -> Report:
    """The answer of the analysis ``name`` for an open session (an analysis that reads no
    export, such as ``categories``, ignores it)."""
    from reports.analyses import get

    a = get(name)
    return a.answer(**params) if a.inputs == "none" else a.answer(session, **params)
