"""Mine a profiled run: its ranges, the dominant kernel per headline range, the top kernels,
measured steps only (the ``measure`` range; warmup is filtered out when mining)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nvtx_model import nvtx_ranges as nv
from profile_cli.runs.nsys_run import ProfileResult

WINDOW = nv.MEASURE


@dataclass
class ProfileReport:
    """What ``nsys-mine profile`` shows: the run, its ranges, dominant kernels, top kernels."""

    export: str | None
    config: dict[str, Any]
    ranges: list[dict[str, Any]]
    dominant: list[dict[str, Any]]
    kernels: list[dict[str, Any]]
    notes: list[str]
    sentences: list[str]
    status: str
    reason: str | None


def mine_profile(result: ProfileResult, *, top: int = 15) -> ProfileReport:
    from reports.ask import answer
    from reports.session import Session

    notes = list(result.notes)
    if result.status != "ok" or result.sqlite is None:
        return ProfileReport(export=result.sqlite, config=result.config, ranges=[], dominant=[],
                             kernels=[], notes=notes, sentences=[], status=result.status,
                             reason=result.reason)
    with Session(result.sqlite, within=WINDOW) as analysis:  # read once, for all three
        rs = answer(analysis, "ranges")
        notes += [f"numbers cover the {WINDOW!r} range only: warmup steps are filtered out "
                  f"when mining (not by an nsys capture range)."]
        if analysis.has_kernels:
            wanted = [n for n in nv.HEADLINE_RANGES if any(r["range"] == n for r in rs.rows)]
            dom = answer(analysis, "dominant", range_names=wanted or None)
            ks = answer(analysis, "kernels")
            dominant, kernels, sentences = dom.rows, ks.rows[:top], dom.sentences
        else:
            dominant, kernels, sentences = [], [], []
            notes.append(f"no CUDA kernels exist in this run (trace {result.trace}, device "
                         f"{result.config['device']}): the range times are CPU times.")
    order = {n: i for i, n in enumerate(nv.HEADLINE_RANGES)}
    ranges = sorted(rs.rows, key=lambda r: (order.get(r["range"], len(order)), -r["total_ns"]))
    return ProfileReport(export=result.sqlite, config=result.config, ranges=ranges,
                         dominant=dominant, kernels=kernels, notes=notes, sentences=sentences,
                         status=result.status, reason=result.reason)
