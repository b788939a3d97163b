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
    """The report of one run; ``within``: the range to restrict to (default: ``measure`` for
    the model, nothing for a command)."""
    if result.kind == "command":
        return mine_command(result, top=top, within=within)
    from reports.pipeline.ask import answer
    from reports.pipeline.session import Session

    notes = list(result.notes)
    if result.status != "ok" or result.sqlite is None:
        return ProfileReport(export=result.sqlite, config=result.config, ranges=[], dominant=[],
                             kernels=[], notes=notes, sentences=[], status=result.status,
                             reason=result.reason)
    window = within or WINDOW
    with Session(result.sqlite, within=window) as analysis:  # read once, for all three
        rs = answer(analysis, "ranges")
        if window == WINDOW:
            notes += [f"numbers cover the {WINDOW!r} range only: warmup steps are filtered out "
                      f"when mining (not by an nsys capture range)."]
        if analysis.has_kernels:
            wanted = [n for n in nv.HEADLINE_RANGES if any(r["range"] == n for r in rs.rows)]
            dom = answer(analysis, "dominant", range_names=wanted or None)
            ks = answer(analysis, "kernels")
            dominant, kernels, sentences = list(dom.rows), list(ks.rows[:top]), dom.sentences
        else:
            dominant, kernels, sentences = [], [], []
            notes.append(f"no CUDA kernels exist in this run (trace {result.trace}, device "
                         f"{result.config['device']}): the range times are CPU times.")
    order = {n: i for i, n in enumerate(nv.HEADLINE_RANGES)}
    ranges = sorted(rs.rows, key=lambda r: (order.get(r["range"], len(order)), -r["total_ns"]))
    return ProfileReport(export=result.sqlite, config=result.config, ranges=ranges,
                         dominant=dominant, kernels=kernels, notes=notes, sentences=sentences,
                         status=result.status, reason=result.reason)


def mine_command(result: ProfileResult, *, top: int = 15,
                 within: str | None = None) -> ProfileReport:
    """The report of a run of your own command: every NVTX range (the program's own, and the
    module/step ranges ``--nvtx`` added), the dominant kernel of the whole run and of each
    range, the top kernels. A program that failed is mined too when nsys wrote an export."""
    from reports.pipeline.ask import answer
    from reports.pipeline.session import Session

    notes = list(result.notes)
    empty = ProfileReport(export=result.sqlite, config=result.config, ranges=[], dominant=[],
                          kernels=[], notes=notes, sentences=[], status=result.status,
                          reason=result.reason)
    if not result.minable:
        return empty
    assert result.sqlite is not None
    ranges: list[dict[str, Any]] = []
    dominant: list[dict[str, Any]] = []
    kernels: list[dict[str, Any]] = []
    sentences: list[str] = []
    with Session(result.sqlite, within=within) as analysis:
        if analysis.has_ranges:
            ranges = list(answer(analysis, "ranges").rows)
        elif within is None and result.config.get("nvtx", "off") == "off":
            notes.append("the program emitted no NVTX ranges: --nvtx modules,steps adds a "
                         "range for every nn.Module call and every training step.")
        if analysis.has_kernels:
            dom = answer(analysis, "dominant")
            dominant, sentences = list(dom.rows), dom.sentences
            kernels = list(answer(analysis, "kernels").rows[:top])
        else:
            notes.append(f"no CUDA kernels in this run (trace {result.trace}, device "
                         f"{result.config.get('device')}): the range times are CPU times.")
    return ProfileReport(export=result.sqlite, config=result.config, ranges=ranges,
                         dominant=dominant, kernels=kernels, notes=notes, sentences=sentences,
                         status=result.status, reason=result.reason)


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
