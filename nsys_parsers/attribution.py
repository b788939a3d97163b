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

from nsys_parsers.arrays import ROWS, few_distinct, gather, let_go, sorted_unique, value_range
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
# Pairs held in memory before they are joined in scratch (``pairs``): 16 bytes each.
PIECE = 1 << 22
NO_LAUNCH = np.iinfo(np.int64).max  # the key of a kernel with no launch call: sorts last


@dataclass
class Pairs:
    range_idx: np.ndarray  # index into Ranges rows
    kernel_idx: np.ndarray  # index into Kernels rows

    def __len__(self) -> int:
        return int(self.range_idx.size)


def pairs(kernels: Kernels, ranges: Ranges, chunk: int | None = None) -> Pairs:
    """Every (range, kernel) pair where the kernel's launch call lies in the range: the
    chunks' pairs joined in scratch (when large) every ``PIECE`` pairs, then at the end."""
    pieces: list[Pairs] = []
    parts: list[Pairs] = []
    n = 0  # the pairs of ``parts``
    for part in pair_chunks(kernels, ranges, chunk):
        parts.append(part)
        n += len(part)
        if n >= PIECE:
            pieces.append(_joined(parts))
            parts, n = [], 0
    if parts:  # fewer than PIECE pairs: a lone part stays itself
        pieces.append(parts[0] if len(parts) == 1 else _joined(parts))
    if not pieces:
        return Pairs(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return pieces[0] if len(pieces) == 1 else _joined(pieces)


def _joined(parts: list[Pairs]) -> Pairs:
    """Pairs one after the other, in scratch when large (``cache.joined``)."""
    return Pairs(range_idx=joined([q.range_idx for q in parts]),
                 kernel_idx=joined([q.kernel_idx for q in parts]))


def pair_chunks(kernels: Kernels, ranges: Ranges, chunk: int | None = None
                ) -> Iterator[Pairs]:
    """``pairs`` a chunk of ``chunk`` ranges (default ``CHUNK``) at a time, in range order,
    every pair of a range in the one chunk of its range: what a question that reduces the
    pairs per range reads, never holding them all."""
    assert kernels.launch_tid is not None and kernels.launch_start is not None \
        and kernels.launch_end is not None, "attribution needs the kernels' launches"
    tids = few_distinct(kernels.launch_tid)  # the (few) launching threads, -1 (none) out
    tids = tids[tids >= 0]
    if tids.size == 0 or len(ranges) == 0:
        return
    lo_l, hi_l = _launch_bounds(kernels)
    lo_t = min(lo_l, value_range(ranges.start)[0])  # pages let go as read
    hi_t = max(hi_l, value_range(ranges.end)[1])
    span = hi_t - lo_t + 1
    if span * (len(tids) + 1) >= 2**62:  # pragma: no cover - absurd time spans
        raise OverflowError("time span too large to pack with thread ids")
    # Pack (thread, time) into one sortable int64: each thread gets its own time zone;
    # kernels with no launch sort last, past every range's key. Ranges on other threads
    # drop out.
    l_key = _launch_keys(kernels, tids, span, lo_t)
    order = np.argsort(l_key, kind="stable")  # ties: in kernel order
    order = order.astype(np.int32) if order.size < 2**31 else order
    l_key.sort(kind="stable")  # in place: the same values as l_key[order]
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
        lo = np.searchsorted(l_key, base + (ranges.start[a:b][use] - lo_t), side="left")
        hi = np.searchsorted(l_key, base + (ranges.end[a:b][use] - lo_t), side="right")
        counts = hi - lo
        nz = np.flatnonzero(counts > 0)
        if nz.size == 0:
            continue
        counts_nz = counts[nz]
        total = int(counts_nz.sum())
        offsets = np.repeat(np.cumsum(counts_nz) - counts_nz - lo[nz], counts_nz)
        pos = np.arange(total, dtype=np.int64) - offsets
        kernel_rows = order[pos].astype(np.int64)
        range_rows = np.repeat(use[nz] + a, counts_nz)
        ok = kernels.launch_end[kernel_rows] <= ranges.end[range_rows]
        if ok.any():
            yield Pairs(range_idx=range_rows[ok], kernel_idx=kernel_rows[ok])


def _launch_bounds(kernels: Kernels) -> tuple[int, int]:
    """(earliest start, latest end) of the kernels' launch calls, a block at a time."""
    assert kernels.launch_tid is not None and kernels.launch_start is not None \
        and kernels.launch_end is not None
    lo, hi = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    for a in range(0, len(kernels), ROWS):
        cols = (kernels.launch_tid[a:a + ROWS], kernels.launch_start[a:a + ROWS],
                kernels.launch_end[a:a + ROWS])
        has = cols[0] >= 0
        lo = min(lo, int(cols[1].min(where=has, initial=lo)))
        hi = max(hi, int(cols[2].max(where=has, initial=hi)))
        for c in cols:
            let_go(c)
    return lo, hi


def _launch_keys(kernels: Kernels, tids: np.ndarray, span: int, lo_t: int) -> np.ndarray:
    """Each kernel's (launching thread, call start) packed, ``NO_LAUNCH`` where it has no
    launch call; a block at a time, the mapped pages let go."""
    assert kernels.launch_tid is not None and kernels.launch_start is not None
    key = np.empty(len(kernels), dtype=np.int64)
    for a in range(0, key.size, ROWS):
        tid, start = kernels.launch_tid[a:a + ROWS], kernels.launch_start[a:a + ROWS]
        key[a:a + ROWS] = np.where(tid >= 0, np.searchsorted(tids, tid) * span + (start - lo_t),
                                   NO_LAUNCH)
        let_go(tid)
        let_go(start)
    return key


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
    order. Three passes over the pairs, a block (``ROWS``) at a time, of per-kernel maxima
    and minima (``ufunc.at``), no sort: what is held is three values per kernel."""
    if len(p) == 0:
        return p
    nk = value_range(p.kernel_idx)[1] + 1
    latest = np.full(nk, np.iinfo(np.int64).min, dtype=np.int64)
    for ri, ki in _pair_blocks(p):
        np.maximum.at(latest, ki, gather(ranges.start, ri))
    earliest = np.full(nk, np.iinfo(np.int64).max, dtype=np.int64)
    for ri, ki in _pair_blocks(p):  # of the pairs of each kernel's latest start,
        cand = gather(ranges.start, ri) == latest[ki]
        np.minimum.at(earliest, ki[cand], gather(ranges.end, ri[cand]))  # the earliest end
    top = np.full(nk, -1, dtype=np.int64)
    for ri, ki in _pair_blocks(p):  # of those, the highest range index
        cand = gather(ranges.start, ri) == latest[ki]
        cand[cand] = gather(ranges.end, ri[cand]) == earliest[ki[cand]]
        np.maximum.at(top, ki[cand], ri[cand])
    del latest, earliest
    kernels = np.flatnonzero(top >= 0)
    return Pairs(range_idx=top[kernels], kernel_idx=kernels)


def _pair_blocks(p: Pairs) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(ranges, kernels) of the pairs a block (``ROWS``) at a time, the mapped pages of
    the pairs and of the ranges' times let go after each."""
    for a in range(0, len(p), ROWS):
        yield np.asarray(p.range_idx[a:a + ROWS]), np.asarray(p.kernel_idx[a:a + ROWS])
        let_go(p.range_idx[a:a + ROWS])
        let_go(p.kernel_idx[a:a + ROWS])


def attribute(kernels: Kernels, ranges: Ranges, mode: str = "all") -> Pairs:
    if mode not in ATTRIBUTIONS:
        raise BadOption(f"unknown attribution {mode!r}; use one of {', '.join(ATTRIBUTIONS)}")
    p = pairs(kernels, ranges)
    return innermost(p, ranges) if mode == "innermost" else p
