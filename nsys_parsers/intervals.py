"""Interval arithmetic on GPU operations, per group (a process and device): how long the union
of the intervals lasts, and where it has holes.

The holes are found as nsys's ``gpu-starv`` rule finds them: within a group, the starts and the
ends sorted apart; the j-th smallest end and the (j+1)-th smallest start bound a hole when the
end comes first (then exactly j intervals have started and j have ended: none is running).
The union lasts from the first start to the last end, less its holes. Every length here is an
exact integer; intersections come from unions (``|A ∩ B| = |A| + |B| - |A ∪ B|``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_parsers.arrays import ROWS, Rows, let_go, value_range
from nsys_parsers.cache import held_where, joined


@dataclass(frozen=True)
class Holes(Rows):
    """The holes of each group's union: the group, the start (an interval's end) and the end
    (the next interval's start) of each, ordered by group, then time; ``before`` and
    ``after``: the intervals (indices) that end where a hole starts and start where it ends."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray
    before: np.ndarray
    after: np.ndarray


def holes(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> Holes:
    """The holes of the union of the intervals ``[start, end)`` of each group (``group``:
    non-negative codes)."""
    return long_holes(group, start, end, 0)[0]


def _gaps(group: np.ndarray, start: np.ndarray, end: np.ndarray
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(the intervals by group then start, those by group then end (less the last), the
    starts in that order from the second on, and the gap before each: > 0 a hole, 0 where
    one group ends and the next begins); at least two intervals. The orders are int32 where
    that holds them, and the mapped pages of ``start`` and ``end`` are let go once read."""
    index = np.int32 if group.size < 2**31 else np.int64
    by_start = np.lexsort((start, group)).astype(index)
    let_go(start)
    nxt = start[by_start[1:]]
    let_go(start)
    by_end = np.lexsort((end, group))[:-1].astype(index)
    let_go(end)
    gap = end[by_end]
    let_go(end)
    np.subtract(nxt, gap, out=gap)  # > 0: a hole, when both sides are of one group
    _between_groups(gap, np.bincount(group))
    return by_start, by_end, nxt, gap


def _between_groups(gap: np.ndarray, counts: np.ndarray) -> None:
    """Set to 0 the gaps (of intervals sorted by group) where one group ends and the next
    begins; ``counts``: the intervals of each group code."""
    gap[np.cumsum(counts[counts > 0])[:-1] - 1] = 0


def long_holes(group: np.ndarray, start: np.ndarray, end: np.ndarray, longer_than: int
               ) -> tuple[Holes, int]:
    """The holes longer than ``longer_than`` of each group's union (as ``holes``), and how
    long all the holes last together. Five arrays of the intervals' length at most: the
    holes are found between almost every two intervals, and only the long ones are kept."""
    empty = np.zeros(0, dtype=np.int64)
    if group.size < 2:
        return Holes(empty, empty, empty, empty, empty), 0
    by_start, by_end, nxt, gap = _gaps(group, start, end)
    idle = int(gap.sum(where=gap > 0))  # no copy of the holes
    keep = np.flatnonzero(gap > max(longer_than, 0))
    after = by_start[1:][keep]
    return Holes(group=group[after], start=nxt[keep] - gap[keep], end=nxt[keep],
                 before=by_end[keep].astype(np.int64), after=after.astype(np.int64)), idle


def union_length(group: np.ndarray, start: np.ndarray, end: np.ndarray, ngroups: int
                 ) -> np.ndarray:
    """How long the union of each group's intervals lasts (0 for a group without any): from
    its first start to its last end, less its holes (summed per group where the sorted
    gaps lie, without listing the holes)."""
    out = np.zeros(ngroups, dtype=np.int64)
    if group.size == 0:
        return out
    first = np.full(ngroups, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(ngroups, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, group, start)
    np.maximum.at(last, group, end)
    counts = np.bincount(group, minlength=ngroups)
    present = np.flatnonzero(counts > 0)
    out[present] = last[present] - first[present]
    if group.size > 1:
        gap = _sorted_gaps(group, start, end, counts)
        np.maximum(gap, 0, out=gap)
        # the gaps of a group lie at its sorted positions, less its last (its first
        # interval's position, where reduceat starts a group's sum; the last group's sum
        # runs to the end)
        lo = np.cumsum(counts[present]) - counts[present]
        out[present] -= np.add.reduceat(np.append(gap, 0), lo)
    return out


def _sorted_gaps(group: np.ndarray, start: np.ndarray, end: np.ndarray, counts: np.ndarray
                 ) -> np.ndarray:
    """``_gaps``' gaps (its fourth array) from the starts and the ends each sorted by value,
    as keys of (group, time) built a block at a time and sorted in place: two arrays of the
    intervals' length, where ``_gaps`` holds orders too (``union_length`` needs no order).
    ``counts``: the intervals of each group code."""
    (s_lo, s_hi), (e_lo, e_hi) = value_range(start), value_range(end)
    lo = min(s_lo, e_lo)
    width = max(s_hi, e_hi) - lo + 1
    if counts.size * width >= 2**62:  # pragma: no cover - spans of years
        return _gaps(group, start, end)[3]
    keys = []
    for t in (start, end):
        key = np.empty(t.size, dtype=np.int64)
        for a in range(0, t.size, ROWS):
            part = key[a:a + ROWS]
            part[...] = group[a:a + ROWS]  # int64 before the product
            part *= width
            part += t[a:a + ROWS]
            part -= lo
            let_go(t[a:a + ROWS])
        key.sort(kind="stable")  # runs of sorted times: fast
        keys.append(key)
    by_start, gap = keys[0], keys[1][:-1]
    np.subtract(by_start[1:], gap, out=gap)  # the ends' keys become the gaps, in place
    del keys, by_start
    _between_groups(gap, counts)
    return gap


def span(group: np.ndarray, start: np.ndarray, end: np.ndarray, ngroups: int
         ) -> tuple[np.ndarray, np.ndarray]:
    """(first start, last end) of each group (-1, -1 for a group without intervals)."""
    first = np.full(ngroups, np.iinfo(np.int64).max, dtype=np.int64)
    last = np.full(ngroups, np.iinfo(np.int64).min, dtype=np.int64)
    np.minimum.at(first, group, start)
    np.maximum.at(last, group, end)
    empty = np.bincount(group, minlength=ngroups) == 0
    first[empty], last[empty] = -1, -1
    return first, last


@dataclass(frozen=True)
class Intervals:
    """Intervals of several groups, to combine into unions (``|``) and measure."""

    group: np.ndarray
    start: np.ndarray
    end: np.ndarray

    def __or__(self, other: Intervals) -> Intervals:  # in scratch files when large
        return Intervals(*(joined([a, b]) for a, b in
                           ((self.group, other.group), (self.start, other.start),
                            (self.end, other.end))))

    def length(self, ngroups: int) -> np.ndarray:
        """The length of each group's union."""
        return union_length(self.group, self.start, self.end, ngroups)

    def take(self, keep: np.ndarray) -> Intervals:
        """The intervals at ``keep`` (indices) or where the mask ``keep`` is set (in scratch
        files when large)."""
        cols = (self.group, self.start, self.end)
        if keep.dtype != np.bool_:
            return Intervals(*(c[keep] for c in cols))
        return Intervals(*(held_where(c, keep) for c in cols))


def intersection(a: Intervals, b: Intervals, ngroups: int) -> np.ndarray:
    """``|A ∩ B|`` per group."""
    return a.length(ngroups) + b.length(ngroups) - (a | b).length(ngroups)


def intersection3(a: Intervals, b: Intervals, c: Intervals, ngroups: int) -> np.ndarray:
    """``|A ∩ B ∩ C|`` per group (inclusion and exclusion)."""
    return (a.length(ngroups) + b.length(ngroups) + c.length(ngroups)
            - (a | b).length(ngroups) - (a | c).length(ngroups) - (b | c).length(ngroups)
            + (a | b | c).length(ngroups))


def open_at_some(start: np.ndarray, end: np.ndarray, times: np.ndarray) -> np.ndarray:
    """Which intervals ``[start, end)`` hold one of the sorted ``times``."""
    return (np.searchsorted(times, end, side="left")
            > np.searchsorted(times, start, side="left"))


def open_at(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """For each time of ``t``, the interval ``[start, end)`` open then that started last
    (ties: the one that ends first), as an index; -1 where none is open. Intervals may nest
    or overlap in any way.

    Sorted by start, the answer for ``t`` is the last interval that started by ``t`` if it
    has not ended, else the first one with a later end on the chain of "previous interval
    that ends later" links from there (every interval between two links ends earlier). The
    links are found by pointer jumping and the chains walked by binary lifting: numpy
    passes, no Python loop over intervals."""
    out = np.full(t.size, -1, dtype=np.int64)
    if start.size == 0 or t.size == 0:
        return out
    # only intervals open at one of the times can be an answer: few, for a few times
    useful = np.flatnonzero(open_at_some(start, end, np.sort(t)))
    if useful.size == 0:
        return out
    start, end = start[useful], end[useful]
    n = start.size
    order = np.lexsort((-end, start))
    s, e = start[order], end[order]
    link = np.arange(n, dtype=np.int64) - 1  # every interval between link[i] and i ends by e[i]
    while True:
        has = np.flatnonzero(link >= 0)
        jump = has[e[link[has]] <= e[has]]
        if jump.size == 0:
            break
        link[jump] = link[link[jump]]
    ups = [link]
    while True:  # 2^k links up
        last = ups[-1]
        nxt = np.where(last >= 0, last[np.maximum(last, 0)], -1)
        if (nxt < 0).all():
            break
        ups.append(nxt)
    p = np.searchsorted(s, t, side="right") - 1
    ok = p >= 0
    done = ok & (e[np.maximum(p, 0)] > t)
    walk = ok & ~done
    q = p.copy()
    for up in reversed(ups):  # go up while the interval reached has still ended by t
        cand = np.where(walk & (q >= 0), up[np.maximum(q, 0)], -1)
        move = walk & (cand >= 0) & (e[np.maximum(cand, 0)] <= t)
        q = np.where(move, cand, q)
    found = np.where(walk, link[np.maximum(q, 0)], -1)
    found = np.where(done, p, found)
    hit = found >= 0
    out[hit] = useful[order[found[hit]]]
    return out


def open_at_grouped(group: np.ndarray, start: np.ndarray, end: np.ndarray,
                    t_group: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``open_at`` within groups: for each time ``t`` of group ``t_group``, the interval of
    that group open then that started last (-1: none). Groups are non-negative codes."""
    if start.size == 0 or t.size == 0:
        return np.full(t.size, -1, dtype=np.int64)
    lo = int(min(start.min(), t.min()))
    width = int(max(end.max(), t.max())) - lo + 1
    if width * (int(max(group.max(), t_group.max())) + 2) >= 2**62:  # pragma: no cover
        raise OverflowError("time span too large to pack with group codes")
    # each group gets its own stretch of the clock: intervals of other groups never contain t
    return open_at(group * width + (start - lo), group * width + (end - lo),
                   t_group * width + (t - lo))
