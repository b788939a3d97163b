"""The report page of one export: the sections the analyses declare (``Analysis.page``), in
their order, from one ``Session`` (one load for the whole page)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reports.analyses.attention import AttentionShape
from reports.ask import answer
from reports.page.model import Page
from reports.report import Report
from reports.session import Session
from reports.sidecar import config_line, measured_steps, read_sidecar


@dataclass
class PageContext:
    """What the sections of one export's page are made from: the session, the export's
    label, its ``profile`` sidecar (None if it has none), the attention shape options, how
    many rows the tables show, and notes about how the export was read. ``answer`` asks an
    analysis once for the whole page."""

    session: Session
    label: str
    sidecar: dict[str, Any] | None = None
    shape: AttentionShape = field(default_factory=AttentionShape)
    top: int = 20
    notes: list[str] = field(default_factory=list)
    _answers: dict[str, Report] = field(default_factory=dict)

    def answer(self, name: str) -> Report:
        """The analysis ``name``'s answer, asked once for the page."""
        if name not in self._answers:
            self._answers[name] = answer(self.session, name)
        return self._answers[name]

    @property
    def has_kernels(self) -> bool:
        return self.session.has_kernels

    @property
    def has_ranges(self) -> bool:
        return self.session.has_ranges

    def range_rows(self) -> dict[str, dict[str, Any]]:
        """The NVTX range summary's rows by range name ({} without NVTX)."""
        ranges = self.answer("ranges") if self.has_ranges else None
        return {r["range"]: r for r in (ranges.rows if ranges else [])}


def export_page(session: Session, *, label: str, sidecar: dict[str, Any] | None = None,
                shape: AttentionShape | None = None, top: int = 20,
                notes: list[str] | tuple[str, ...] = ()) -> Page:
    """The page of one export: its lead lines, then each analysis's sections."""
    from reports.analyses import all_analyses

    ctx = PageContext(session, label, sidecar, shape or AttentionShape(), top, list(notes))
    lead = [f"export: {label}"]
    config = (sidecar or {}).get("config")
    if config:
        lead.append(config_line(config))
    scope = (f"only what ran inside the {session.within!r} range" if session.within
             else "the whole capture")
    times = ("GPU kernel times (range times are CPU times)" if session.has_kernels
             else "CPU times of the NVTX ranges (no CUDA kernels)")
    lead.append(f"covers {scope}; {times}")
    page = Page(title=f"nsys-mine report: {Path(label).name}", lead=lead)
    for analysis in sorted((a for a in all_analyses() if a.page is not None),
                           key=lambda a: a.page_order):
        assert analysis.page is not None
        page.sections += analysis.page(ctx)
    return page


def report_for_export(path: Any, options: Any, shape: AttentionShape | None = None, *,
                      top: int = 20, opener: Any = None) -> Page:
    """The page of one export file: its ``profile`` sidecar read when there is one (config,
    measured steps only unless ``within`` is given), then one ``Session`` for it all.
    ``opener(path, options)``: a context manager giving the session (default: open it)."""
    sidecar = read_sidecar(path)
    options, notes = measured_steps(options, sidecar)
    with (opener or Session)(path, options) as session:
        return export_page(session, label=str(path), sidecar=sidecar, shape=shape, top=top,
                           notes=notes)
