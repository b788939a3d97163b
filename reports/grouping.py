"""Vectorized group-by helpers on integer code columns (no Python loop over rows)."""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

import numpy as np

from nsys_parsers.arrays import sorted_unique

_DENSE_LIMIT = 1 << 16  # rank keys below this (or 4x the rows) with a table, not a sort


def group_ids(*cols: np.ndarray) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Group rows by several integer code columns (values >= -1, ideally small and dense).

    Returns ``(gid, keys)``: a group id per row (groups ordered by the key columns), and for
    each column its value in each group (``keys[i][g]``, int64).

    The columns make one mixed-radix key, ranked densely (a table of ``present`` flags) when
    that table is small, else by sorting; the distinct keys decode back into the columns'
    values. When their product is too large for one integer, they are combined one at a
    time (the groups so far times the next column's values). Dense ranks keep the order, so
    the final ids follow the key columns. One column of codes that are all used (a range's
    name code) is its own id: no copy of the million-row column (shallow x100's ranges:
    30-70 ms of page faults and gathers)."""
    n = cols[0].size
    if n == 0:
        return np.zeros(0, dtype=np.int64), tuple(np.zeros(0, dtype=np.int64) for _ in cols)
    highs = [int(c.max()) for c in cols]
    lows = [int(c.min()) for c in cols]
    # a constant column (all ranges PushPop) neither splits nor orders
    keep = [i for i in range(len(cols)) if lows[i] != highs[i]] or [0]
    kept = [cols[i] for i in keep]
    radices = [highs[i] + 2 for i in keep]  # values shifted by one: -1 -> 0
    bound = 1
    for r in radices:
        bound *= r
    if len(keep) == 1 and lows[keep[0]] >= 0:  # one column of codes: ranked as it is
        gid, values = _rank(kept[0], highs[keep[0]] + 1)
        values_of = {keep[0]: values}
    elif bound < 2**62:  # one mixed-radix key of all columns, ranked once (in place)
        key = np.array(kept[0], dtype=np.int64)
        key += 1
        for c, r in zip(kept[1:], radices[1:]):
            key *= r
            key += c
            key += 1
        gid, distinct = _rank(key, bound)
        decoded = []
        for r in reversed(radices):  # the last column is the lowest digit
            distinct, digit = np.divmod(distinct, r)
            decoded.append(digit - 1)
        values_of = dict(zip(keep, reversed(decoded)))
    else:  # column by column: the groups so far times the next column's values
        shifted = [np.asarray(c, dtype=np.int64) + 1 for c in kept]
        gid = np.zeros(n, dtype=np.int64)
        ngroups = 1
        for c, radix in zip(shifted, radices):
            if ngroups * radix >= 2**62:  # pragma: no cover - only with huge raw ids
                _, c = np.unique(c, return_inverse=True)
                c = c.ravel().astype(np.int64)
                radix = int(c.max()) + 1
            gid, distinct = _rank(gid * radix + c, ngroups * radix)
            ngroups = distinct.size
        first = np.full(ngroups, -1, dtype=np.int64)
        first[gid[::-1]] = np.arange(n - 1, -1, -1, dtype=np.int64)
        values_of = {i: np.asarray(cols[i][first], dtype=np.int64) for i in keep}
    ngroups = next(iter(values_of.values())).size
    return gid, tuple(values_of[i] if i in values_of
                      else np.full(ngroups, highs[i], dtype=np.int64) for i in range(len(cols)))


def _rank(key: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """Dense ranks of ``key`` (values in [0, bound)) and its distinct values, ascending.
    When every value is used, the key is its own rank (not copied)."""
    if bound <= max(_DENSE_LIMIT, 4 * key.size):
        present = np.zeros(bound, dtype=bool)
        present[key] = True
        if present.all():
            return key.astype(np.int64, copy=False), np.arange(bound, dtype=np.int64)
        dense = np.cumsum(present, dtype=np.int64) - 1
        return dense[key], np.flatnonzero(present)
    values = sorted_unique(key)
    return np.searchsorted(values, key), values


def distinct_pairs(gid: np.ndarray, member: np.ndarray, ngroups: int, *, ordered: bool = True
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (group, member) pairs (members >= 0), as two integer arrays in member
    order; ``ordered=False``: in any order (when every pair is distinct, the input arrays
    themselves: the sorted keys are not split back, 20-60 ms of the 1.6 M pairs of nested
    x100, where no kernel lies in two ranges of one name).

    One sort of a packed (member, group) key: uint32 when it fits (quicksort: the fastest
    sort of 1.6 M such keys here, 21 ms), else int64 with a stable (merge) sort: attribution
    pairs come range by range, each range's kernels in launch order, so the key is made of
    long runs in order, which that sort takes almost in one pass."""
    if gid.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    radix = int(member.max()) + 1
    if ngroups * radix >= 2**62:  # pragma: no cover - astronomically many groups
        _, (g, m) = group_ids(gid, member)
        return g, m
    small = ngroups * radix < 2**32
    key: np.ndarray = member.astype(np.uint32 if small else np.int64)  # a copy, sorted in place
    key *= np.uint32(ngroups) if small else ngroups
    key += gid.astype(np.uint32) if small else gid
    key.sort(kind="quicksort" if small else "stable")
    keep = np.empty(key.size, dtype=bool)
    keep[0] = True
    np.not_equal(key[1:], key[:-1], out=keep[1:])
    if not ordered and keep.all():
        return gid.astype(np.int64, copy=False), member.astype(np.int64, copy=False)
    member_out, gid_out = np.divmod(key[keep], ngroups)
    return gid_out.astype(np.int64, copy=False), member_out.astype(np.int64, copy=False)


def distinct_count(gid: np.ndarray, member: np.ndarray, ngroups: int) -> np.ndarray:
    """Number of distinct ``member`` values (>= 0) per group."""
    g, _ = distinct_pairs(gid, member, ngroups, ordered=False)
    return np.bincount(g, minlength=ngroups).astype(np.int64)


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS has no affinity call
        return os.cpu_count() or 1


def in_parallel(*calls: Callable[[], Any]) -> list[Any]:
    """The results of ``calls``, run in threads when there is more than one CPU.

    For independent passes over the same million-row arrays: numpy releases the GIL while it
    sorts, gathers and compares, so two or three such passes take the time of the longest
    plus a little (3 passes of nested x100's nvtx-kernels: 0.20 s serial, 0.12 s on 2 CPUs).
    The first exception of a call is raised once every call has ended."""
    if len(calls) < 2 or _cpus() < 2:
        return [c() for c in calls]
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException | None] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            results[i] = calls[i]()
        except BaseException as e:  # re-raised in the caller's thread below
            errors[i] = e

    threads = [threading.Thread(target=run, args=(i,)) for i in range(1, len(calls))]
    for t in threads:
        t.start()
    run(0)
    for t in threads:
        t.join()
    for e in errors:
        if e is not None:
            raise e
    return results
