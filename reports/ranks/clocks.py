"""The ranks' clocks put on one: the offset that moves each export's times onto the first
one's clock, how each offset was found, and the error of every pair of exports.

Each export has its clock (its ranks share it exactly). Between two exports, in this order
of preference:

1. **the ends of their shared collectives**, when they share at least two: a collective ends
   within microseconds on every rank that takes part, so the offset is the median difference
   of the ends, and the error is measured: each collective left out in turn, the distance of
   its difference from the median of the others (the median of those distances);
2. **one machine**: two exports whose sessions ran on the same machine and recorded their UTC
   start share that machine's clock (their error: none to speak of);
3. **the sessions' UTC start times** (``TARGET_INFO_SESSION_START_TIME``; timestamps that are
   UTC already, ``nsys profile --ts-normalize``, need none): the machines' clocks, which
   disagree by what NTP leaves (milliseconds). With one shared collective, its ends on the two
   clocks say by how much: that disagreement is the error; with none, the error is unknown;
4. the ends of one shared collective, without UTC times: the offset, its error unknown.

The exports are joined by the best of these links, from the first export outwards (a tree);
a pair's error is the sum of the errors on the path between them (-1: unknown). All in
integer nanoseconds: timestamps near 1.7e18 (UTC) are past float64's exact range.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from reports.ranks.summary import RankSummary, rank_list
from reports.render import human_ns

UNKNOWN = -1
# the links between two exports, best first
ENDS, HOST, UTC, ONE_END = "ends", "host", "utc", "one end"
Link = tuple[str, int, int, Optional[int]]  # how, offset, error, the UTC starts' offset


@dataclass
class Clocks:
    """Per rank (rows of the summaries): its offset onto the first rank's clock and its
    export's place (``export``); per pair of exports, the error (``error``, -1 unknown); the
    notes that say how."""

    offsets: np.ndarray  # R
    export: np.ndarray  # R: index into exports
    error: np.ndarray  # E x E: ns, UNKNOWN where it cannot be said
    links: list[str] = field(default_factory=list)  # per export: how it was linked
    notes: list[str] = field(default_factory=list)

    def pair_error(self, i: int, j: int) -> int:
        """The clock error between ranks ``i`` and ``j`` (0 within an export)."""
        return int(self.error[self.export[i], self.export[j]])

    @property
    def measured(self) -> bool:
        """Whether every error is known."""
        return bool((self.error >= 0).all())


def median_int(values: np.ndarray) -> int:
    """The median of integers, exactly (an even count: the mean of the middle two, rounded
    down to the nanosecond)."""
    v = np.sort(np.asarray(values, dtype=np.int64))
    n = v.size
    if n == 0:
        return 0
    lo, hi = int(v[(n - 1) // 2]), int(v[n // 2])
    return lo + (hi - lo) // 2


def align(summaries: list[RankSummary], ends: np.ndarray, index: np.ndarray,
          ranks: list[int]) -> Clocks:
    """The clocks of ``summaries`` (R ranks), from the ends of the matched collectives
    (``ends``: R x K on each rank's own clock; ``index`` < 0 where a rank takes no part) and
    the exports' UTC starts and machines; ``ranks``: each one's rank number (for the
    notes)."""
    exports = list(dict.fromkeys(s.export for s in summaries))
    of = np.array([exports.index(s.export) for s in summaries], dtype=np.int64)
    first = [int(np.flatnonzero(of == e)[0]) for e in range(len(exports))]
    rep = [summaries[i] for i in first]  # one summary of each export
    n = len(exports)
    if n == 1:
        return Clocks(np.zeros(len(summaries), dtype=np.int64), of,
                      np.zeros((1, 1), dtype=np.int64), ["one export"],
                      ["clocks: one export, one clock."])
    member = index >= 0
    # each export's end of each collective (the median of its ranks' ends there)
    export_end = np.zeros((n, ends.shape[1]), dtype=np.int64)
    has = np.zeros((n, ends.shape[1]), dtype=bool)
    for e in range(n):
        rows = of == e
        has[e] = member[rows].any(axis=0)
        for j in np.flatnonzero(has[e]).tolist():
            export_end[e, j] = median_int(ends[rows & member[:, j], j])
    links: dict[tuple[int, int], Link] = {
        (a, b): _link(rep[a], rep[b], export_end[a] - export_end[b], has[a] & has[b])
             for a in range(n) for b in range(n) if a != b}
    parent, offset, err, how = _tree(n, links)
    offsets = offset[of]
    error = _pair_errors(parent, err)
    return Clocks(offsets, of, error, how,
                  _notes(how, links, parent, of, ranks, [s.host for s in rep]))


def _link(a: RankSummary, b: RankSummary, diff: np.ndarray, shared: np.ndarray
          ) -> tuple[str, int, int, int | None]:
    """(how, offset, error, the UTC starts' offset) that put ``b``'s times on ``a``'s clock:
    ``diff`` is ``a``'s end minus ``b``'s of each collective, ``shared`` where both take
    part."""
    d = diff[shared]
    utc = _utc_offset(a, b)
    if d.size >= 2:
        off = median_int(d)
        loo = [abs(int(d[k]) - median_int(np.delete(d, k))) for k in range(d.size)]
        return ENDS, off, median_int(np.array(loo, dtype=np.int64)), utc
    if utc is not None and a.host is not None and a.host == b.host:
        return HOST, utc, 0, utc
    if utc is not None:
        return UTC, utc, abs(int(d[0]) - utc) if d.size else UNKNOWN, utc
    if d.size:
        return ONE_END, int(d[0]), UNKNOWN, None
    return "none", 0, UNKNOWN, None


def _utc_offset(a: RankSummary, b: RankSummary) -> int | None:
    """What puts ``b``'s times on ``a``'s clock by their UTC starts (None: one lacks it)."""
    if a.utc_start_ns is None or b.utc_start_ns is None:
        return None
    base_a = 0 if a.utc_clock else a.utc_start_ns
    base_b = 0 if b.utc_clock else b.utc_start_ns
    return int(base_b - base_a)


RANK = {ENDS: 0, HOST: 1, UTC: 2, ONE_END: 3, "none": 4}


def _tree(n: int, links: dict[tuple[int, int], Link]
          ) -> tuple[list[int], np.ndarray, list[int], list[str]]:
    """Each export joined to the tree by its best link to an export already in it (Prim's
    order, from export 0): (parent, offset onto export 0's clock, the link's error, how)."""
    parent = [-1] * n
    offset = np.zeros(n, dtype=np.int64)
    err = [0] * n
    how = ["the first export"] + [""] * (n - 1)
    joined = [0]
    while len(joined) < n:
        best = None
        for a in joined:
            for b in range(n):
                if b in joined:
                    continue
                kind, off, e, _ = links[a, b]
                score = (RANK[kind], e if e >= 0 else 1 << 62)
                if best is None or score < best[0]:
                    best = (score, a, b, kind, off, e)
        assert best is not None
        _, a, b, kind, off, e = best
        parent[b], offset[b], err[b], how[b] = a, offset[a] + off, e, kind
        joined.append(b)
    return parent, offset, err, how


def _pair_errors(parent: list[int], err: list[int]) -> np.ndarray:
    """The error between every two exports: the sum of the link errors on the tree path
    between them (UNKNOWN where one of them is)."""
    n = len(parent)

    def path(e: int) -> list[int]:
        out = [e]
        while parent[out[-1]] >= 0:
            out.append(parent[out[-1]])
        return out

    paths = [path(e) for e in range(n)]
    out = np.zeros((n, n), dtype=np.int64)
    for a in range(n):
        for b in range(a + 1, n):
            common = set(paths[a]) & set(paths[b])
            steps = [x for x in paths[a] + paths[b] if x not in common]
            errors = [err[x] for x in steps]
            total = UNKNOWN if any(e < 0 for e in errors) else sum(errors)
            out[a, b] = out[b, a] = total
    return out


def _notes(how: list[str], links: dict[tuple[int, int], Link], parent: list[int],
           of: np.ndarray, ranks: list[int], hosts: list[str | None]) -> list[str]:
    """What clock each export was put on, and what that is worth, in few words for many
    ranks: the machines whose exports share a clock; then the links, those of one kind onto
    one clock together (with the range of their errors); and how the sessions' UTC start
    times agree with the offsets the collectives measured."""
    def ranks_of(exports: list[int]) -> list[int]:
        return [ranks[i] for e in exports for i in np.flatnonzero(of == e).tolist()]

    def who(exports: list[int]) -> str:
        r = ranks_of(exports)
        return f"rank {r[0]}" if len(r) == 1 else f"ranks {rank_list(r)}"

    machine = list(range(len(how)))  # the export whose machine's clock each one is on
    for e in range(1, len(how)):
        if how[e] == HOST:
            machine[e] = machine[parent[e]]
    members = {m: [e for e in range(len(how)) if machine[e] == m] for m in set(machine)}
    parts = [f"{who(members[m])} share {hosts[m]}'s clock (their UTC starts)"
             for m in dict.fromkeys(machine) if len(members[m]) > 1]

    def clock(e: int) -> str:
        m = machine[e]
        return f"{hosts[m]}'s" if len(members[m]) > 1 else f"{who([e])}'s"

    joined: dict[str, list[int]] = {}
    for e in range(1, len(how)):
        if how[e] != HOST:
            joined.setdefault(how[e], []).append(e)
    onto = clock(0)
    agree = []
    for kind, exports in joined.items():
        errs = [links[parent[e], e][2] for e in exports]
        lo, hi = min(errs), max(errs)
        err = human_ns(lo) if lo == hi else f"{human_ns(lo)} to {human_ns(hi)}"
        machines = [str(hosts[machine[e]]) for e in exports if len(members[machine[e]]) > 1]
        singles = [e for e in exports if len(members[machine[e]]) == 1]
        names = [*machines, *([who(singles)] if singles else [])]
        clocks = (f"{names[0]}'s clock" if len(exports) == 1 else
                  f"the clocks of {', '.join(names)}")
        via = (" (each through a rank it shares collectives with)"
               if kind == ENDS and any(parent[e] != 0 for e in exports) else "")
        if kind == ENDS:
            parts.append(f"{clocks} onto {onto}{via} by the ends of the collectives they share "
                         f"(error {err}, measured leaving each out)")
            for e in exports:
                _, off, _, utc = links[parent[e], e]
                if utc is not None:
                    agree.append(abs(off - utc))
        elif kind == UTC:
            parts.append(f"{clocks} onto {onto} by the sessions' UTC start times (error " + (
                f"{err}: how far the end of the collective they share disagrees on them)"
                if lo >= 0 else "unknown: no collective to measure it)"))
        elif kind == ONE_END:
            parts.append(f"{clocks} onto {onto} by the end of the one collective they share "
                         f"(error unknown)")
        else:
            parts.append(f"{who(exports)}: nothing shared with the others, its times taken "
                         f"as they are (error unknown)")
    lines = [f"clocks: {'; '.join(parts)}."]
    if agree:
        lines.append(f"the sessions' UTC start times put those exports within "
                     f"{human_ns(max(agree))} of where their collectives do.")
    return lines
