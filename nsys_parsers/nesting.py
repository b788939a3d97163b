"""Nesting depth of NVTX ranges: 1 for a range no other range on its thread encloses.

Ranges of one thread sorted by (start, longest first); a range's depth is 1 + the number of
ranges before it in that order that have not ended when it starts. Exact for push/pop ranges
(which nest properly); for start/end ranges, which may overlap, it counts the ranges open at
its start. Vectorized: two sorts of packed keys and binary searches, a block of rows at a
time, no Python loop over rows and no order of all the rows.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from nsys_parsers.arrays import (
    ROWS,
    distinct_sorted,
    few_distinct,
    let_go,
    let_go_all,
    let_go_rows,
    sorted_blocks,
    value_range,
)
from nsys_parsers.cache import held
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
    """The depth of each range (in ``cache.held``: a scratch file's mapping when large).

    In (thread, start, longest first, row) order, a range's depth is 1 + its position among
    its thread's ranges - the ranges of its thread that ended by its start (end <= start).
    Its position is counted as the number of its thread's ranges that started before it (a
    binary search in the sorted (thread, start) keys) plus, where several ranges of a thread
    start at the same moment, its rank among them (longest first, then row): never a whole
    order of the rows. The sorted keys of the starts and of the ends are held as the depth
    is; the rows go a block (``ROWS``) at a time, their pages let go as they pass."""
    n = len(ranges)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    tids = few_distinct(ranges.tid)  # a block at a time: no sorted copy of the column
    (s_lo, s_hi), (e_lo, e_hi) = value_range(ranges.start), value_range(ranges.end)
    lo, hi = min(s_lo, e_lo), max(s_hi, e_hi)
    span = hi - lo + 1
    if span * (len(tids) + 1) >= 2**62:  # pragma: no cover - absurd time spans
        raise OverflowError("time span too large to pack with thread ids")
    def keys_of(time: np.ndarray) -> np.ndarray:
        def block(a: int) -> np.ndarray:
            key = _keys(ranges, tids, span, lo, a, time)
            _let_go(ranges, a)
            return key
        return sorted_blocks(n, block, np.int64, alloc=held)
    starts, ends = keys_of(ranges.start), keys_of(ranges.end)  # (thread, time), sorted
    first = np.arange(len(tids), dtype=np.int64) * span  # each thread's first key
    first_start, first_end = np.searchsorted(starts, first), np.searchsorted(ends, first)
    depth = held(n, np.int64)
    for a in range(0, n, ROWS):
        code = np.searchsorted(tids, ranges.tid[a:a + ROWS])
        key = _keys(ranges, tids, span, lo, a, ranges.start)
        d = depth[a:a + ROWS]
        np.subtract(np.searchsorted(starts, key), first_start[code], out=d)  # started before
        d -= np.searchsorted(ends, key, side="right")  # of those, ended by its start
        d += first_end[code] + 1
        _let_go(ranges, a, starts, ends, d)
    _add_tie_ranks(ranges, starts, tids, span, lo, depth)
    return depth


def _keys(ranges: Spans, tids: np.ndarray, span: int, lo: int, a: int,
          time: np.ndarray | None = None) -> np.ndarray:
    """The packed (thread, time - lo) keys of the block of rows from ``a`` (each thread its
    own span of keys); without ``time``, the thread's part alone (its base, less ``lo``)."""
    key = np.searchsorted(tids, ranges.tid[a:a + ROWS]) * span
    key -= lo
    if time is not None:
        key += time[a:a + ROWS]
    return key


def _let_go(ranges: Spans, a: int, *more: np.ndarray) -> None:
    """The mapped pages of a block of the ranges' columns and of ``more``, once read."""
    let_go_rows(slice(a, a + ROWS), ranges.tid, ranges.start, ranges.end)
    let_go_all(more)


def _add_tie_ranks(ranges: Spans, starts: np.ndarray, tids: np.ndarray, span: int, lo: int,
                   depth: np.ndarray) -> None:
    """Add to the depth of each range that starts at the same moment as others of its thread
    its rank among them, longest first, then by row (what a stable sort of the rows by
    (thread, start, -end) gives)."""
    tied = []  # the keys that occur more than once, a block of the sorted keys at a time
    for a in range(0, starts.size - 1, ROWS):
        block = starts[a:a + ROWS + 1]
        tied.append(block[1:][block[1:] == block[:-1]])
        let_go(starts)
    keys = distinct_sorted(np.concatenate(tied)) if tied else np.zeros(0, np.int64)
    if keys.size == 0:
        return
    rows_at, keys_at = [], []
    for a in range(0, len(ranges), ROWS):
        key = _keys(ranges, tids, span, lo, a, ranges.start)
        at = np.searchsorted(keys, key)
        hit = keys[np.minimum(at, keys.size - 1)] == key
        rows_at.append(np.flatnonzero(hit) + a)
        keys_at.append(key[hit])
        _let_go(ranges, a)
    rows, key = np.concatenate(rows_at), np.concatenate(keys_at)
    order = np.lexsort((-ranges.end[rows], key))  # stable: rows in order among equal ends
    key = key[order]
    group_first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    sizes = np.diff(np.r_[group_first, key.size])
    rank = np.arange(key.size, dtype=np.int64) - np.repeat(group_first, sizes)
    depth[rows[order]] += rank
    let_go(depth)


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
