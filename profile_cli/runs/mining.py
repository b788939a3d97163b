"""Mine a profiled run: its ranges, the dominant kernel per range, the top kernels.

A run of the built-in model counts its measured steps only (the ``measure`` range; warmup is
filtered out when mining); a run of your own command counts the whole run, or what ran
inside the ranges named by ``within`` (e.g. ``step`` with ``--nvtx steps``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from nsys_parsers.errors import NsysMineError
from nvtx_model import nvtx_ranges as nv
from profile_cli.runs.nsys_spec import ProfileResult

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


def mine_profile(result: ProfileResult, *, top: int = 15,
                 within: str | None = None) -> ProfileReport:
    """The report of one run: its ranges, the dominant kernel per range, the top ``top``
    kernels. A run of the model counts inside ``within`` (default ``measure``), its ranges
    in the model's order and its dominant kernels of the headline ranges; a run of your own
    command counts the whole run (or inside ``within``), every range, and is mined when it
    failed too, if nsys wrote an export."""
    from reports.pipeline.ask import answer
    from reports.pipeline.session import Session

    command = result.kind == "command"
    notes = list(result.notes)
    report = ProfileReport(export=result.sqlite, config=result.config, ranges=[], dominant=[],
                           kernels=[], notes=notes, sentences=[], status=result.status,
                           reason=result.reason)
    if not (result.minable if command else result.status == "ok" and result.sqlite):
        return report
    assert result.sqlite is not None
    window = within if command else within or WINDOW
    with Session(result.sqlite, within=window) as s:  # read once, for all three
        if s.has_ranges or not command:
            report.ranges = list(answer(s, "ranges").rows)
        elif within is None and result.config.get("nvtx", "off") == "off":
            notes.append("the program emitted no NVTX ranges: --nvtx modules,steps adds a "
                         "range for every nn.Module call and every training step.")
        if window == WINDOW and not command:
            notes.append(f"numbers cover the {WINDOW!r} range only: warmup steps are "
                         f"filtered out when mining (not by an nsys capture range).")
        if s.has_kernels:
            present = {r["range"] for r in report.ranges}
            headline = None if command else [n for n in nv.HEADLINE_RANGES if n in present]
            dom = answer(s, "dominant", range_names=headline or None)
            report.dominant, report.sentences = list(dom.rows), dom.sentences
            report.kernels = list(answer(s, "kernels").rows[:top])
        else:
            notes.append(f"no CUDA kernels {'in' if command else 'exist in'} this run "
                         f"(trace {result.trace}, device {result.config.get('device')}): the "
                         f"range times are CPU times.")
    if not command:
        order = {n: i for i, n in enumerate(nv.HEADLINE_RANGES)}
        report.ranges.sort(key=lambda r: (order.get(r["range"], len(order)), -r["total_ns"]))
    return report


def mine_outcome(result: ProfileResult, mine: Any = None
                 ) -> tuple[ProfileReport | None, str, str | None]:
    """(report, status, reason) of a profiled config for the sweep index: mined (by ``mine``,
    default ``mine_profile``) when there is something to mine (``result.minable``); a mining
    failure makes the config ``failed``."""
    if not result.minable:
        return None, result.status, result.reason
    try:
        return (mine or mine_profile)(result), result.status, result.reason
    except NsysMineError as exc:
        reason = f"mining the export failed: {exc}"
        return None, "failed", f"{result.reason}; {reason}" if result.reason else reason
