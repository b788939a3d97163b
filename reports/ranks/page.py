"""The page of a folder of rank exports (``nsys-mine report DIR``): the ``ranks`` answer with
its headline sentences, a rank x collective heatmap of lateness, per-rank stacked bars
(compute / exposed communication / waiting for others / idle), aligned timeline lanes of one
step (or of the middle collectives) for every rank, and the tables."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from reports.page.model import Figure, Page, Section, Sentences, Table, Text
from reports.pipeline.ask import ask
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.registry import get
from reports.pipeline.report import Report
from reports.ranks.answer import RanksAnswer
from reports.ranks.matching import collective_rows
from reports.render import View

LANE_COLLECTIVES = 10  # without steps, the lanes show the last this many collectives
PAGE_COLUMNS = ["rank", "export", "straggler", "late_ns", "wait_ns", "wait_pct", "last_at",
                "matched", "span_ns", "idle_ns", "exposed_comm_ns", "steps", "step_med_ns",
                "error"]  # the table's: the name where it reads, the figures that answer


def ranks_page(paths: Sequence[str | Path], options: AnalysisOptions | None = None, *,
               title: str | None = None, **engine: Any) -> Page:
    """The page of the ranks of ``paths`` (a folder, files or globs), asked of ``ranks``
    (``engine``: its engine parameters, e.g. ``scheduler``)."""
    report = ask("ranks", paths, options, engine)
    return answer_page(report, title or f"nsys-mine ranks report: {', '.join(map(str, paths))}")


def answer_page(report: Report, title: str) -> Page:
    """The page of a ``ranks`` answer (its rows, notes, sentences and ``detail``)."""
    from reports.ranks.plots import (
        lateness_bars_png,
        lateness_heatmap_png,
        rank_lanes_png,
        rank_time_bars_png,
    )

    a: RanksAnswer = report.detail
    rows = list(report.rows)
    said = list(report.sentences)
    notes = report.notes[len(said):]  # the answer's notes come after its sentences
    ranks_view, collective_view = get("ranks").view, get("ranks").shaped({"collectives": True})[1]
    assert ranks_view is not None and collective_view is not None
    stragglers = [r["rank"] for r in rows if r["straggler"]]
    n = a.matched.count
    lead = [f"{len(a.summaries)} rank(s), {n} matched collective{'' if n == 1 else 's'}",
            "straggler(s): " + (", ".join(f"rank {r}" for r in stragglers) if stragglers
                                else "none")]
    if a.failed:
        lead.append(f"{len(a.failed)} export(s) could not be read (their rows say why)")
    page = Page(title=title, lead=lead)
    page.sections.append(Section("Answers", "answers", [
        *([Sentences(said)] if said else []), *[Text(n) for n in notes]]))
    m = a.matched
    taking = np.flatnonzero(m.member.any(axis=1)) if m.count else np.zeros(0, np.int64)
    if taking.size > 1:
        late_ms = np.where(m.member[taking], a.late.late_at[taking] / 1e6, np.nan)
        ranks = [a.ranks[i] for i in taking.tolist()]
        what = ("Arrival at each matched collective against the median rank of its group "
                "(red: late, blue: early; grey: not in the collective's group)")
        figure = (Figure("lateness", lateness_bars_png(late_ms[:, 0], ranks, title=(
                      f"Arrival at the one matched collective ({m.kinds[0]}) against the "
                      f"median rank (red: late, blue: early)")),
                         "bars: each rank's arrival at the collective minus the median")
                  if m.count == 1 else
                  Figure("lateness", lateness_heatmap_png(late_ms, ranks, title=what),
                         "heatmap: ranks by matched collectives, each arrival minus the "
                         "median of the collective's group"))
        page.sections.append(Section("Lateness at each collective", "lateness", [figure]))
    read = [r for r in rows if r["error"] is None]
    wait = np.array([r["wait_ns"] for r in read], dtype=np.float64)
    exposed = np.array([r["exposed_comm_ns"] or 0 for r in read], dtype=np.float64)
    parts: dict[str, list[float]] = {
        "compute": [(r["compute_ns"] or 0) / 1e6 for r in read],
        "exposed comm": (np.maximum(exposed - wait, 0) / 1e6).tolist(),
        "wait for others": (wait / 1e6).tolist(),
        "idle": [(r["idle_ns"] or 0) / 1e6 for r in read]}
    page.sections.append(Section("Where each rank's time goes", "time", [Figure(
        "rank-time", rank_time_bars_png([r["rank"] for r in read], parts,
                                        title="Compute, exposed communication (less waiting), "
                                              "waiting for other ranks, idle"),
        "stacked bars per rank: compute, exposed communication, wait, idle")]))
    lanes = _lanes(a)
    if lanes is not None:
        page.sections.append(Section("Every rank on one clock", "lanes", [
            Figure("rank-lanes", rank_lanes_png(lanes[0], lanes[1], lanes[2], title=lanes[3]),
                   "timeline lanes per rank on one aligned clock"),
            Text("Each rank's kernels on the first rank's clock (how it was put there: the "
                 "clocks note above); red ticks: its arrivals at collectives.")]))
    shown = [{**r, "export": Path(r["export"]).name} for r in rows]
    page.sections.append(Section("Ranks", "ranks", [
        Table(shown, replace(ranks_view, columns=PAGE_COLUMNS, drop=()), top=0),
        Text("Each rank's communication, compute, process and device, and its clock "
             "offset: nsys-mine ranks --format csv (or json).")]))
    if m.count:
        coll = collective_rows(m, a.late, a.ranks)
        coll.sort(key=lambda r: -r["skew_ns"])
        page.sections.append(Section("Collectives with the largest skew", "collectives", [
            Table(coll[:30], View(columns=collective_view.columns, noun="collectives",
                                  rank_by=(), headers=collective_view.headers), top=0)]))
    return page


def _lanes(a: RanksAnswer) -> tuple[list[tuple[int, dict[str, np.ndarray]]],
                                    tuple[int, int], list[np.ndarray], str] | None:
    """(lanes per rank on the first rank's clock, the window, arrivals, title)."""
    m = a.matched
    off = m.offsets
    with_steps = [i for i, s in enumerate(a.summaries) if s.step_lanes]
    if with_steps and len(with_steps) == len(a.summaries):
        lanes, starts, ends = [], [], []
        for i, s in enumerate(a.summaries):
            mid = s.steps[s.steps.shape[0] // 2]
            starts.append(int(mid[0] + off[i]))
            ends.append(int(mid[1] + off[i]))
            lanes.append((a.ranks[i], {k: v + off[i] for k, v in s.step_lanes.items()}))
        window = (min(starts), max(ends))
        what = f"the middle {a.summaries[0].step_range!r} instance"
    elif m.count:
        lo, hi = max(0, m.count - LANE_COLLECTIVES), m.count - 1
        shown = m.member[:, lo:hi + 1]
        window = (int(m.arrive[:, lo:hi + 1][shown].min()) - 1,
                  int(m.end[:, lo:hi + 1][shown].max()) + 1)
        lanes = [(a.ranks[i], {k: v + off[i] for k, v in s.lanes.items()})
                 for i, s in enumerate(a.summaries)]
        what = ("the one matched collective" if m.count == 1 else
                f"collectives {lo + 1} to {hi + 1} of {m.count}")
    else:
        return None
    arrivals = [m.arrive[i, m.member[i]] if m.count else np.zeros(0, np.int64)
                for i in range(len(a.summaries))]
    return lanes, window, arrivals, f"Kernels of every rank during {what}, clocks aligned"


def is_rank_folder(folder: Path) -> bool:
    """Whether a folder (not a sweep's) holds nsys exports: the ranks page's."""
    return folder.is_dir() and any(q.suffix.lower() in (".sqlite", ".nsys-rep", ".qdrep")
                                   for q in folder.iterdir() if q.is_file())

