"""The page of a folder of rank exports (``nsys-mine report DIR``): the ``ranks`` answer with
its headline sentences, a rank x collective heatmap of lateness, per-rank stacked bars
(compute / exposed communication / waiting for others / idle), aligned timeline lanes of one
step (or of the middle collectives) for every rank, and the tables."""

from __future__ import annotations

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


def ranks_page(paths: Sequence[str | Path], options: AnalysisOptions | None = None, *,
               title: str | None = None, **engine: Any) -> Page:
    """The page of the ranks of ``paths`` (a folder, files or globs), asked of ``ranks``
    (``engine``: its engine parameters, e.g. ``scheduler``)."""
    report = ask("ranks", paths, options, engine)
    return answer_page(report, title or f"nsys-mine ranks report: {', '.join(map(str, paths))}")


def answer_page(report: Report, title: str) -> Page:
    """The page of a ``ranks`` answer (its rows, notes, sentences and ``detail``)."""
    from reports.ranks.plots import lateness_heatmap_png, rank_lanes_png, rank_time_bars_png

    a: RanksAnswer = report.detail
    rows = list(report.rows)
    said = list(report.sentences)
    notes = report.notes[len(said):]  # the answer's notes come after its sentences
    ranks_view, collective_view = get("ranks").view, get("ranks").shaped({"collectives": True})[1]
    assert ranks_view is not None and collective_view is not None
    stragglers = [r["rank"] for r in rows if r["straggler"]]
    page = Page(title=title, lead=[
        f"{len(rows)} rank(s), {a.matched.count} matched collectives",
        "straggler(s): " + (", ".join(f"rank {r}" for r in stragglers) if stragglers
                            else "none")])
    page.sections.append(Section("Answers", "answers", [
        Sentences(said or ["no straggler: no rank arrives last often and late enough."]),
        *[Text(n) for n in notes]]))
    m = a.matched
    present = m.index[:, 0] >= 0 if m.count else np.zeros(0, dtype=bool)
    if m.count and present.sum() > 1:
        arrive = m.arrive[present]
        late_ms = (arrive - np.median(arrive, axis=0)[None, :]) / 1e6
        ranks = [a.ranks[i] for i in np.flatnonzero(present).tolist()]
        page.sections.append(Section("Lateness at each collective", "lateness", [
            Figure("lateness", lateness_heatmap_png(
                late_ms, ranks, title="Arrival at each matched collective against the median "
                                      "rank (red: late, blue: early)"),
                   "heatmap: ranks by matched collectives, each arrival minus the median")]))
    wait = np.array([r["wait_ns"] for r in rows], dtype=np.float64)
    exposed = np.array([r["exposed_comm_ns"] or 0 for r in rows], dtype=np.float64)
    parts: dict[str, list[float]] = {
        "compute": [(r["compute_ns"] or 0) / 1e6 for r in rows],
        "exposed comm": (np.maximum(exposed - wait, 0) / 1e6).tolist(),
        "wait for others": (wait / 1e6).tolist(),
        "idle": [(r["idle_ns"] or 0) / 1e6 for r in rows]}
    page.sections.append(Section("Where each rank's time goes", "time", [Figure(
        "rank-time", rank_time_bars_png([r["rank"] for r in rows], parts,
                                        title="Compute, exposed communication (less waiting), "
                                              "waiting for other ranks, idle"),
        "stacked bars per rank: compute, exposed communication, wait, idle")]))
    lanes = _lanes(a)
    if lanes is not None:
        page.sections.append(Section("One step on every rank", "lanes", [
            Figure("rank-lanes", rank_lanes_png(lanes[0], lanes[1], lanes[2], title=lanes[3]),
                   "timeline lanes per rank on one aligned clock"),
            Text("Each rank's kernels on the first rank's clock (offsets in the table); red "
                 "ticks: its arrivals at collectives.")]))
    shown = [{**r, "export": Path(r["export"]).name} for r in rows]
    page.sections.append(Section("Ranks", "ranks", [Table(shown, ranks_view, top=0)]))
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
        present = m.index[:, 0] >= 0
        window = (int(m.arrive[present, lo].min()) - 1, int(m.end[present, hi].max()) + 1)
        lanes = [(a.ranks[i], {k: v + off[i] for k, v in s.lanes.items()})
                 for i, s in enumerate(a.summaries)]
        what = f"collectives {lo + 1} to {hi + 1} of {m.count}"
    else:
        return None
    arrivals = [m.arrive[i] if m.count and m.index[i, 0] >= 0 else np.zeros(0, np.int64)
                for i in range(len(a.summaries))]
    return lanes, window, arrivals, f"Kernels of every rank during {what}, clocks aligned"


def is_rank_folder(folder: Path) -> bool:
    """Whether a folder (not a sweep's) holds nsys exports: the ranks page's."""
    return folder.is_dir() and any(q.suffix.lower() in (".sqlite", ".nsys-rep", ".qdrep")
                                   for q in folder.iterdir() if q.is_file())

