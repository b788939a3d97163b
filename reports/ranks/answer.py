"""The ``ranks`` answer as data (``RanksAnswer``): every rank's summary (``reports.ranks.summary``:
mined on Dask workers for a job's exports, here for one export), their rank numbers, the
matched collectives, clocks, lateness and waits (``reports.ranks.matching``), what differs
for a straggler (``reports.ranks.why``), the exports that could not be read; and the rows
and notes the ``ranks`` analysis answers with (a rank that could not be read is a row too,
with its ``error``)."""

from __future__ import annotations

import glob
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from nsys_parsers.errors import ExportNotFound, NsysMineError
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.report import r1
from reports.ranks.cluster import Engine, dask_client, map_exports
from reports.ranks.matching import STRAGGLER_RULE, Lateness, Matched, assign_ranks, lateness, match
from reports.ranks.summary import RankSummary, rank_from_name, summarize_export
from reports.ranks.why import Why, explain

GPUS_PART = ["span_ns", "busy_ns", "idle_ns", "comm_ns", "compute_ns", "exposed_comm_ns"]
RANK_COLUMNS = [
    "rank", "export", "pid", "device", *GPUS_PART, "late_ns", "wait_ns", "wait_pct",
    "last_at", "matched", "straggler", "rank_source", "clock_offset_ns", "steps",
    "step_med_ns", "wait_per_step_ns", "error",
]
EXPORT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


@dataclass
class RanksAnswer:
    """The whole answer: the summaries (by rank), the matching, lateness and explanations."""

    summaries: list[RankSummary]
    ranks: list[int]
    sources: list[str]
    matched: Matched
    late: Lateness
    why: list[Why]
    notes: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (export, reason)


def find_exports(paths: Sequence[str | Path]) -> list[Path]:
    """The exports of ``paths``: files as given (a missing one too: its rank's answer says
    so), glob patterns, and the exports inside folders (a report's ``.sqlite`` export beside
    it is read instead of the report)."""
    out: list[Path] = []
    for p in paths:
        text = str(p)
        if any(c in text for c in "*?[") and not Path(text).exists():
            hits = sorted(glob.glob(text))
            if not hits:
                raise ExportNotFound(f"{text}: no file matches this pattern.")
            out += [Path(h) for h in hits]
        elif Path(text).is_dir():
            found = sorted(q for q in Path(text).iterdir()
                           if q.is_file() and q.suffix.lower() in EXPORT_SUFFIXES)
            stems = {q.with_suffix("") for q in found if q.suffix.lower() == ".sqlite"}
            found = [q for q in found if q.suffix.lower() == ".sqlite"
                     or q.with_suffix("") not in stems]
            if not found:
                raise ExportNotFound(f"{text}: no nsys export (.sqlite, .nsys-rep) in this "
                                     f"folder.")
            out += found
        else:
            out.append(Path(text))
    if not out:
        raise ExportNotFound("no exports given: name one export per rank (files, a glob or a "
                             "folder), or one export that holds every rank's process.")
    return list(dict.fromkeys(out))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, NsysMineError):
        return str(exc)
    name = type(exc).__name__
    if name == "KilledWorker":
        return "its worker died each time it was tried (out of memory?)"
    return f"{name}: {exc}"


def mine_ranks(paths: Sequence[str | Path], options: AnalysisOptions | None = None, *,
               engine: Engine | None = None, client: Any = None) -> RanksAnswer:
    """Summarize every export on Dask (``engine``, or a ``client`` the caller owns) and
    answer: matching, clocks, lateness, explanations."""
    options = options or AnalysisOptions()
    engine = engine or Engine()
    engine.check()
    files = find_exports(paths)
    summaries: list[RankSummary] = []
    failed: list[tuple[str, str]] = []
    ctx = dask_client(engine, len(files)) if client is None else _given(client)
    with ctx as c:
        for path, result, error in map_exports(c, summarize_export, files, options,
                                               what="rank"):
            if error is not None:
                failed.append((str(path), _reason(error)))
            else:
                summaries += result
    if not summaries:
        raise NsysMineError("no export could be read: " + "; ".join(
            f"{Path(p).name}: {why}" for p, why in failed))
    return side_by_side(summaries, files, failed)


def side_by_side(summaries: list[RankSummary], files: list[Path],
                 failed: list[tuple[str, str]] | None = None) -> RanksAnswer:
    """The answer of the ranks of ``summaries`` (of ``files``, in their order): rank numbers,
    matching, clocks, lateness, explanations."""
    order = sorted(range(len(summaries)), key=lambda i: (files.index(Path(
        summaries[i].export)) if Path(summaries[i].export) in files else 0, summaries[i].pid,
        summaries[i].device))
    summaries = [summaries[i] for i in order]
    ranks, sources, notes = assign_ranks(summaries)
    by_rank = sorted(range(len(summaries)), key=lambda i: (ranks[i], summaries[i].device))
    summaries = [summaries[i] for i in by_rank]
    ranks = [ranks[i] for i in by_rank]
    sources = [sources[i] for i in by_rank]
    m = match(summaries, ranks)
    whole = np.array([_whole(s) for s in summaries], dtype=np.float64)
    lt = lateness(m, whole)
    why = [explain(i, g, summaries, m, lt, ranks, whole) for i, g in lt.groups]
    return RanksAnswer(summaries, ranks, sources, m, lt, why, notes + m.notes,
                       list(failed or []))


def _whole(s: RankSummary) -> float:
    """A rank's time a straggler's cost is measured against: its step time, else its GPU
    span."""
    if s.steps.shape[0]:
        return float((s.steps[:, 1] - s.steps[:, 0]).sum())
    return float(s.gpus.get("span_ns") or 0)


class _given:
    """A client the caller owns: used, not closed."""

    def __init__(self, client: Any):
        self.client = client

    def __enter__(self) -> Any:
        return self.client

    def __exit__(self, *exc: object) -> None:
        return None


def per_rank_rows(a: RanksAnswer) -> list[dict[str, Any]]:
    """One row per rank (and device), then one per export that could not be read: its rank
    where its file name says it, its ``error``, every figure empty."""
    rows = []
    for i, s in enumerate(a.summaries):
        span = s.gpus.get("span_ns") or 0
        wait = int(a.late.wait[i])
        steps = int(s.steps.shape[0])
        row = {"rank": a.ranks[i], "export": s.export, "pid": s.pid, "device": s.device}
        row.update({c: s.gpus.get(c) for c in GPUS_PART})
        row.update({
            "late_ns": int(a.late.late[i]), "wait_ns": wait,
            "wait_pct": r1(100.0 * wait / span) if span else None,
            "last_at": int(a.late.last_count[i]),
            "matched": int(a.matched.member[i].sum()),
            "straggler": bool(a.late.straggler[i]), "rank_source": a.sources[i],
            "clock_offset_ns": int(a.matched.offsets[i]), "steps": steps,
            "step_med_ns": (r1(float(np.median(s.steps[:, 1] - s.steps[:, 0])))
                            if steps else None),
            "wait_per_step_ns": r1(wait / steps) if steps else None, "error": None,
        })
        rows.append(row)
    for export, why in a.failed:
        hint = rank_from_name(Path(export).name)
        rows.append({**dict.fromkeys(RANK_COLUMNS), "rank": hint, "export": export,
                     "rank_source": "file name" if hint is not None else "",
                     "straggler": False, "error": why})
    return rows


def failed_lines(a: RanksAnswer) -> list[str]:
    """One line per export that could not be read (what stderr says of each)."""
    out = []
    for export, why in a.failed:
        hint = rank_from_name(Path(export).name)
        who = f"rank {hint} ({Path(export).name})" if hint is not None else Path(export).name
        out.append(f"{who} left out: {why}")
    return out


def answer_notes(a: RanksAnswer) -> list[str]:
    notes = []
    n = len(a.summaries)
    exports = len({s.export for s in a.summaries})
    src = Counter(a.sources)
    notes.append(f"{n} rank(s) from {exports} export(s); rank numbers from "
                 + ", ".join(f"{k} ({v})" for k, v in src.items()) + ".")
    notes += failed_lines(a)
    if n == 1:
        notes.append("one GPU process: there is nothing to compare it with (give one export "
                     "per rank, or one export of every rank's process).")
        return notes + a.notes
    m = a.matched
    if not m.count:
        return notes + a.notes
    notes.append(f"{m.count} collective{'' if m.count == 1 else 's'} matched; arrival = "
                 f"start of the rank's collective kernel.")
    notes.append(f"late_ns: in the group of ranks where it is latest, the median over the "
                 f"group's collectives of its arrival minus the group's median arrival "
                 f"(integer ns); wait_ns: time its "
                 f"collective kernels ran before the last rank arrived; {STRAGGLER_RULE}.")
    if m.count and not a.late.straggler.any():
        if (a.late.last_rank < 0).all() and not a.matched.clocks.measured:
            notes.append("no straggler: with the clock error unknown between some ranks, no "
                         "rank is last by more than it.")
        else:
            notes.append("no straggler: no rank arrives last often and late enough.")
    return notes + a.notes
