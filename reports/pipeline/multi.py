"""One question asked of several exports: the rows of each, with a ``config`` column.

``kernels``, ``ranges`` and ``dominant`` take several exports or a sweep folder; each export
is asked the same question on its own (``reports.pipeline.ask``), and its rows get the label
of its config (the config fields that vary, from the ``profile`` sidecars or the sweep index:
the command line's ``profile_cli.runs.targets``) or its file name. Rows keep their keys, with
``config`` first; people see the top rows of each export (``combine``'s ``top_each``),
machines every row.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from nsys_parsers.errors import BadOption, NsysMineError
from reports.pipeline.report import MULTI_COLUMN, Report
from reports.render import View, rank_rows

TOP_EACH = 5  # rows per export that people see by default


@dataclass(frozen=True)
class ExportTarget:
    """One export of a multi-export question, and the label its rows carry."""

    path: Path
    label: str
    config: dict[str, Any] | None = None  # from its profile sidecar, when it has one


@dataclass
class Answer:
    target: ExportTarget
    report: Report


def ask_each(targets: list[ExportTarget], ask: Callable[[ExportTarget], Report]
             ) -> tuple[list[Answer], list[str]]:
    """``ask(target)`` of every target; an export that cannot answer (no kernels in a CPU
    profile, ...) is left out with a note, unless none can: then its error is raised."""
    answers, skipped = [], []
    first_error: NsysMineError | None = None
    for t in targets:
        try:
            answers.append(Answer(t, ask(t)))
        except NsysMineError as exc:
            first_error = first_error or exc
            skipped.append(f"left out: {exc}" if t.path.name in str(exc)
                           else f"left out {t.label}: {exc}")
    if not answers and first_error is not None:
        raise first_error
    return answers, skipped


def file_targets(paths: list[Path]) -> list[ExportTarget]:
    """Export files labelled by their name (their path, where names repeat). A folder is
    refused: the command line finds the exports of sweep folders (``targets=`` of
    ``reports.pipeline.ask.ask``)."""
    for p in paths:
        if p.is_dir():
            raise BadOption(f"{p} is a folder: give export files, or ask through `nsys-mine`, "
                            f"which reads sweep folders.")
    labels = [p.name.rsplit(".", 1)[0] for p in paths]
    if len(set(labels)) != len(paths):
        labels = [str(p) for p in paths]
    return [ExportTarget(path=p, label=lbl) for p, lbl in zip(paths, labels)]


def combine(answers: list[Answer], columns: list[str], view: View, *,
            skipped: Sequence[str] = (), top_each: int | None = None) -> Report:
    """One report of every answer's rows with ``config`` first, each export's rows ranked by
    ``view``. ``top_each``: the top rows of each export (pinned rows kept); None or 0: all
    rows. Notes that every export gives are said once; others name their export."""
    rows: list[dict[str, Any]] = []
    sentences: list[str] = []
    for a in answers:
        own = dict(zip(map(id, a.report.rows), a.report.sentences, strict=False))
        ranked = rank_rows(a.report.rows, view)
        if top_each:
            ranked = ranked[:view.pinned + top_each]
        for r in ranked:
            rows.append({MULTI_COLUMN: a.target.label, **{c: r.get(c) for c in columns}})
            if id(r) in own:
                sentences.append(f"{a.target.label}: {own[id(r)]}")
    notes: list[str] = []
    every = [set(a.report.notes) for a in answers]
    shared = set.intersection(*every) if every else set()
    for a in answers:
        for n in a.report.notes:
            text = n if n in shared else f"{a.target.label}: {n}"
            if text not in notes:
                notes.append(text)
    cut = [a.target.label for a in answers if top_each and
           len(a.report.rows) > view.pinned + top_each]
    if cut:
        notes.insert(0, f"the top {top_each} {view.noun} of each export; --top N shows N "
                        f"per export, --top 0 all")
    notes += list(skipped)
    warnings = [f"{a.target.label}: {w}" for a in answers for w in a.report.warnings]
    return Report(rows=rows, columns=[MULTI_COLUMN, *columns], notes=notes,
                  sentences=sentences, warnings=list(dict.fromkeys(warnings)))
