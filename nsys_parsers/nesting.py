"""Nesting depth of NVTX ranges: 1 for a range no other range on its thread encloses.

Ranges of one thread sorted by (start, longest first); a range's depth is 1 + the number of
ranges before it in that order that have not ended when it starts. Exact for push/pop ranges
(which nest properly); for start/end ranges, which may overlap, it counts the ranges open at
its start. Vectorized: two sorts and binary searches, no Python loop over rows.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from nsys_parsers.arrays import sorted_unique
from nsys_parsers.ranges import Ranges


class Spans(Protocol):
    """What nesting depth reads of ranges: their thread, start and end."""

    @property
    def start(self) -> np.ndarray: ...
    @property
    def end(self) -> np.ndarray: ...
    @property
    def tid(self) -> np.ndarray: ...
    def __len__(self) -> int: ...


def nesting_depth(ranges: Spans) -> np.ndarray:
    n = len(ranges)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    tids = sorted_unique(ranges.tid)
    code = np.searchsorted(tids, ranges.tid)
    lo = int(min(ranges.start.min(), ranges.end.min()))
    span = int(max(ranges.start.max(), ranges.end.max())) - lo + 1
    if span * (len(tids) + 1) >= 2**62:  # pragma: no cover - absurd time spans
        raise OverflowError("time span too large to pack with thread ids")
    # In place, a few arrays of n at a time (a range instance answer holds the rest).
    order = np.lexsort((-ranges.end, ranges.start, code))  # thread, start, longest first
    depth = np.empty(n, dtype=np.int64)
    depth[order] = np.arange(n, dtype=np.int64)  # position in that order
    del order
    per_thread = np.bincount(code, minlength=tids.size)
    depth -= (np.cumsum(per_thread) - per_thread)[code]  # ranges of the thread before it
    ends = code * span
    ends += ranges.end
    ends -= lo
    ends.sort()  # the ends, thread by thread
    starts = code * span
    starts += ranges.start
    starts -= lo
    closed = np.searchsorted(ends, starts, side="right")
    del starts
    closed -= np.searchsorted(ends, np.arange(tids.size, dtype=np.int64) * span)[code]
    depth -= closed  # of those, the ones ended by its start (same thread)
    depth += 1
    return depth


def enclosing(ranges: Ranges) -> np.ndarray:
    """The index of the innermost push/pop range that encloses each push/pop range on its
    thread (-1: none, and for start/end ranges, which need not nest). Among push/pop ranges
    of a thread in (start, longest first) order, a range's parent is the last range before
    it one level up."""
    parent = np.full(len(ranges), -1, dtype=np.int64)
    pp = np.flatnonzero(ranges.pushpop)
    if pp.size == 0:
        return parent
    sub = ranges.take(pp)
    depth = nesting_depth(sub)
    order = np.lexsort((-sub.end, sub.start, sub.tid))  # as nesting_depth orders them
    depth_in_order = depth[order]
    for d in range(2, int(depth.max()) + 1):
        at = np.flatnonzero(depth_in_order == d)
        above = np.flatnonzero(depth_in_order == d - 1)
        if at.size == 0 or above.size == 0:
            continue
        before = np.searchsorted(above, at, side="left") - 1
        ok = before >= 0
        parent[pp[order[at[ok]]]] = pp[order[above[before[ok]]]]
    return parent
