"""Attribute CUDA kernels to the NVTX ranges that launched them (nsys semantics).

A kernel belongs to a range when its launch call lies inside the range on the same thread:
``range.start <= call.start`` and ``call.end <= range.end`` (the kernel itself may run later).
This is how ``nsys stats --report nvtx_kern_sum`` (2022.4: ``nvtxkernsum``) matches them.
Start/end ranges that ended on another thread are not used (as nsys).

``pairs()`` returns every (range, kernel) containment pair: the ``all`` attribution, where a
kernel counts in every enclosing range. ``innermost()`` keeps, for each kernel, only its
deepest range (latest start; ties: earliest end), so that per-range exclusive GPU time plus the
unattributed remainder adds up to the total kernel time exactly.

Algorithm: launches sorted by (thread, call start); for each range, the launches whose call
starts inside it form one contiguous slice, found with two binary searches; the slices are
expanded with numpy and filtered on the call's end. O((R + K) log K + P) for R ranges, K
kernels and P pairs, with no Python loop over rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from nsys_parsers.arrays import gather, let_go, sorted_unique, value_range
from nsys_parsers.cache import joined
from nsys_parsers.errors import BadOption
from nsys_parsers.kernels import Kernels
from nsys_parsers.ranges import Ranges
from nsys_parsers.schema import ATTRIBUTIONS

__all__ = ["ATTRIBUTIONS", "CHUNK", "Pairs", "attribute", "innermost", "launching_share",
           "pair_chunks", "pairs"]

# Ranges per chunk of the pair search: its temporaries stay in a few MB, reused chunk after
# chunk (1 << 20 took 136 MB on 0.8 M ranges), at no cost in time.
CHUNK = 1 << 16


@dataclass
class Pairs:
    range_idx: np.ndarray  # index into Ranges rows
    kernel_idx: np.ndarray  # index into Kernels rows

    def __len__(self) -> int:
        return int(self.range_idx.size)


def pairs(kernels: Kernels, ranges: Ranges, chunk: int | None = None) -> Pairs:
    """Every (range, kernel) pair where the kernel's launch call lies in the range."""
    parts = list(pair_chunks(kernels, ranges, chunk))
    if not parts:
        return Pairs(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    if len(parts) == 1:
        return parts[0]
    return Pairs(range_idx=joined([q.range_idx for q in parts]),  # in scratch when large
                 kernel_idx=joined([q.kernel_idx for q in parts]))


def pair_chunks(kernels: Kernels, ranges: Ranges, chunk: int | None = None
                ) -> Iterator[Pairs]:
    """``pairs`` a chunk of ``chunk`` ranges (default ``CHUNK``) at a time, in range order,
    every pair of a range in the one chunk of its range: what a question that reduces the
    pairs per range reads, never holding them all."""
    assert kernels.launch_tid is not None and kernels.launch_start is not None \
        and kernels.launch_end is not None, "attribution needs the kernels' launches"
    k_has = np.flatnonzero(kernels.launch_tid >= 0)
    if k_has.size == 0 or len(ranges) == 0:
        return
    l_tid = kernels.launch_tid[k_has]
    l_start = kernels.launch_start[k_has]
    # Thread codes from the (few) launching threads; ranges on other threads drop out.
    tids = sorted_unique(l_tid)
    lo_t = min(int(l_start.min()), value_range(ranges.start)[0])  # pages let go as read
    hi_t = max(int(kernels.launch_end[k_has].max()), value_range(ranges.end)[1])
    span = hi_t - lo_t + 1
    if span * (len(tids) + 1) >= 2**62:  # pragma: no cover - absurd time spans
        raise OverflowError("time span too large to pack with thread ids")
    # Pack (thread, time) into one sortable int64: each thread gets its own time zone.
    l_key = np.searchsorted(tids, l_tid) * span + (l_start - lo_t)
    order = np.argsort(l_key, kind="stable")
    l_key_sorted = l_key[order]
    del l_key, l_tid, l_start
    for column in (kernels.launch_tid, kernels.launch_start, kernels.launch_end):
        let_go(column)  # read through: their pages go
    chunk = chunk or CHUNK
    for a in range(0, len(ranges), chunk):
        b = min(a + chunk, len(ranges))
        if a:  # the mapped pages of the chunk before are passed
            for column in (ranges.tid, ranges.start, ranges.end):
                let_go(column[a - chunk:a])
            let_go(kernels.launch_end)  # what the chunk's check gathered
        r_tid = ranges.tid[a:b]
        r_pos = np.minimum(np.searchsorted(tids, r_tid), tids.size - 1)
        use = np.flatnonzero((tids[r_pos] == r_tid) & ~ranges.cross_thread[a:b])
        if use.size == 0:
            continue
        base = r_pos[use] * span
        lo = np.searchsorted(l_key_sorted, base + (ranges.start[a:b][use] - lo_t), side="left")
        hi = np.searchsorted(l_key_sorted, base + (ranges.end[a:b][use] - lo_t), side="right")
        counts = hi - lo
        nz = np.flatnonzero(counts > 0)
        if nz.size == 0:
            continue
        counts_nz = counts[nz]
        total = int(counts_nz.sum())
        offsets = np.repeat(np.cumsum(counts_nz) - counts_nz - lo[nz], counts_nz)
        pos = np.arange(total, dtype=np.int64) - offsets
        kernel_rows = k_has[order[pos]]
        range_rows = np.repeat(use[nz] + a, counts_nz)
        ok = kernels.launch_end[kernel_rows] <= ranges.end[range_rows]
        if ok.any():
            yield Pairs(range_idx=range_rows[ok], kernel_idx=kernel_rows[ok])


def launching_share(kernels: Kernels, ranges: Ranges, sample: int = 2048) -> float:
    """The share of ``ranges`` that launch a kernel (have attribution pairs), estimated on
    ``sample`` ranges evenly spaced in table order: known before the pairs of all ranges."""
    n = len(ranges)
    if n == 0:
        return 0.0
    pick = sorted_unique(np.linspace(0, n - 1, num=min(sample, n)).astype(np.int64))
    few = ranges.take(pick)
    for column in (ranges.start, ranges.end, ranges.tid, ranges.flags, ranges.rowid):
        let_go(column)  # the kernel mapped up to 16 pages around each row taken
    return sorted_unique(pairs(kernels, few).range_idx).size / pick.size


def innermost(p: Pairs, ranges: Ranges) -> Pairs:
    """For each kernel, its deepest enclosing range only: of the ranges that contain it, the
    one that starts last, then the one that ends first, then the highest index. In kernel
    order. Three passes of per-kernel maxima and minima (``ufunc.at``), no sort."""
    if len(p) == 0:
        return p
    ri, ki = p.range_idx, p.kernel_idx
    nk = int(ki.max()) + 1
    rs = gather(ranges.start, ri)  # a window at a time: the pairs are in range order
    latest = np.full(nk, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, ki, rs)
    cand = np.flatnonzero(rs == latest[ki])  # the pairs of each kernel's latest start
    del rs, latest  # each per-pair and per-kernel temporary goes once used
    re_ = gather(ranges.end, ri[cand])
    earliest = np.full(nk, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(earliest, ki[cand], re_)
    cand = cand[re_ == earliest[ki[cand]]]  # of those, the earliest end
    del re_, earliest
    top = np.full(nk, -1, dtype=np.int64)
    np.maximum.at(top, ki[cand], ri[cand])  # of those, the highest range index
    kernels = np.flatnonzero(top >= 0)
    return Pairs(range_idx=top[kernels], kernel_idx=kernels)


def attribute(kernels: Kernels, ranges: Ranges, mode: str = "all") -> Pairs:
    if mode not in ATTRIBUTIONS:
        raise BadOption(f"unknown attribution {mode!r}; use one of {', '.join(ATTRIBUTIONS)}")
    p = pairs(kernels, ranges)
    return innermost(p, ranges) if mode == "innermost" else p
