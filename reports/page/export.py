"""The report page of one export: its lead lines, then the sections of
``reports.page.sections`` in order, from one ``Session`` (one load for the whole page)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reports.page.model import Page
from reports.page.sections import SECTIONS, PageContext
from reports.pipeline.ask import Opener
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.session import Session
from reports.sidecar import config_line, measured_steps, read_sidecar

# The page's peak per row of the tables it reads (all its sections' answers held at once),
# measured as the analyses' bytes_per_row are (nsys_parsers.budget): x1200 of the benchmark.
PAGE_BYTES_PER_ROW = 7


def export_page(session: Session, *, label: str, sidecar: dict[str, Any] | None = None,
                shape: dict[str, Any] | None = None, top: int = 20,
                notes: list[str] | tuple[str, ...] = ()) -> Page:
    """The page of one export: its lead lines, then each section. ``shape``: the attention
    shape (``attention``'s parameters by name: size, d_model, heads, context, batch)."""
    ctx = PageContext(session, label, sidecar, dict(shape or {}), top, list(notes))
    lead = [f"export: {label}"]
    config = (sidecar or {}).get("config")
    if config:
        lead.append(config_line(config))
    scope = (f"only what ran inside the {session.within!r} range" if session.within
             else "the whole capture")
    times = ("GPU kernel times (range times are CPU times)" if session.has_kernels
             else "CPU times of the NVTX ranges (no CUDA kernels)")
    lead.append(f"covers {scope}; {times}")
    warnings = session.trace_warnings
    lead += [f"Warning: {w}" for w in warnings]
    page = Page(title=f"nsys-mine report: {Path(label).name}", lead=lead, warnings=warnings)
    session.expect("`report`", PAGE_BYTES_PER_ROW)  # the page's need, not its first section's
    try:
        for section in SECTIONS:
            page.sections += section(ctx)
            session.let_go()  # what a section read is not resident through the next
    finally:
        session.expect(None)
    return page


def report_for_export(path: str | os.PathLike[str], options: AnalysisOptions,
                      shape: dict[str, Any] | None = None, *, top: int = 20,
                      opener: Opener | None = None) -> Page:
    """The page of one export file: its ``profile`` sidecar read when there is one (config,
    measured steps only unless ``within`` is given), then one ``Session`` for it all.
    ``opener(path, options)``: a context manager giving the session (default: open it)."""
    sidecar = read_sidecar(path)
    options, notes = measured_steps(options, sidecar)
    with (opener or Session)(Path(path), options) as session:
        return export_page(session, label=str(path), sidecar=sidecar, shape=shape, top=top,
                           notes=notes)
