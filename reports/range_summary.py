"""NVTX range summary: CPU-side durations (nsys ``nvtx_sum``) plus the GPU time of the kernels
each range launched.

CPU columns are over all ranges of a name and style, including start/end ranges that ended on
another thread. GPU columns use the kernel attribution of ``nsys_parsers.attribution``:
``kernel_instances`` and ``gpu_inclusive_ns`` count each kernel launched inside any range of
that name once; ``gpu_exclusive_ns`` only kernels whose innermost range it is (these add up,
with the unattributed rest, to the total kernel time); ``gpu_span_ns`` sums, over instances,
first attributed kernel start to last attributed kernel end (the GPU projection).
"""

from __future__ import annotations

import numpy as np

from nsys_parsers.activity import Activity
from nsys_parsers.arrays import is_sorted
from nsys_parsers.attribution import Pairs, innermost
from nsys_parsers.kernels import KernelData
from nsys_parsers.names import RangeNames
from nsys_parsers.ranges import RangeData
from reports.common import GroupStats, Report, group_stats, rows_of
from reports.grouping import distinct_pairs, group_ids, in_parallel
from reports.render import View

RANGE_VIEW_COLUMNS = [
    "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns",
    "gpu_inclusive_ns", "gpu_exclusive_ns", "kernel_instances", "style", "range",
]
# People see the ranges with the most GPU time (CPU time when there are no kernels) first.
RANGE_VIEW = View(
    columns=RANGE_VIEW_COLUMNS,
    drop=("stddev_ns", "max_ns", "min_ns", "med_ns", "style", "kernel_instances",
          "gpu_exclusive_ns"),
    rank_by=("gpu_inclusive_ns", "total_ns"), noun="ranges",
    hide_if_zero=("gpu_inclusive_ns", "gpu_exclusive_ns", "kernel_instances"),
    hide_if_constant=("style",))

RANGE_COLUMNS = [
    "range", "style", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns",
    "stddev_ns", "kernel_instances", "gpu_inclusive_ns", "gpu_exclusive_ns", "gpu_span_ns",
]


def range_report(act: Activity, names: RangeNames, p: Pairs | None,
                 shown: np.ndarray | None = None, inner: Pairs | None = None) -> Report:
    """Rows of RANGE_COLUMNS from ranges, their complete names and the ``all`` attribution
    pairs (None when there are no kernels). ``shown``: which range instances count (the
    depth/match filters); exclusive time is still decided among all ranges. ``inner``: the
    ``innermost`` pairs of ``p``, if known."""
    r = act.ranges
    assert r is not None
    notes = list(act.notes)
    if shown is None:  # every range (no copies of million-row columns)
        gid, (g_code, g_pushpop) = group_ids(names.code, r.pushpop.astype(np.int64))
        ng = g_code.size

        def cpu_stats() -> GroupStats:
            return group_stats(gid, r.end - r.start, ng)
    else:
        rows_idx = np.flatnonzero(shown)
        sub_gid, (g_code, g_pushpop) = group_ids(names.code[rows_idx],
                                                 r.pushpop[rows_idx].astype(np.int64))
        ng = g_code.size
        gid = np.full(len(r), -1, dtype=np.int64)  # group of each range; -1: not shown
        gid[rows_idx] = sub_gid

        def cpu_stats() -> GroupStats:
            return group_stats(sub_gid, (r.end - r.start)[rows_idx], ng)
    zeros = np.zeros(ng, dtype=np.int64)
    k = act.kernels
    if k is None:
        notes.append("CUDA kernels were not traced (no CUPTI_ACTIVITY_KIND_KERNEL table): CPU "
                     "times only (GPU columns 0); profile with `nsys profile --trace=cuda,nvtx` "
                     "for GPU time.")
    elif len(k):
        no_launch = int((k.launch_tid < 0).sum())
        if no_launch:
            notes.append(f"{no_launch} of {len(k)} kernels have no launch record (trimmed "
                         f"export): they cannot be attributed to ranges.")
    if k is not None and len(k) and p is not None and len(p):
        # the GPU columns: passes over the pairs, independent of the CPU statistics
        if shown is None:  # every range has a group: no copy of the pairs (35 ms at 1.6 M)
            p_range, p_kernel = p.range_idx, p.kernel_idx
        else:
            sel = gid[p.range_idx] >= 0
            p_range, p_kernel = p.range_idx[sel], p.kernel_idx[sel]
        st, excl, (kinst, incl), span = in_parallel(
            cpu_stats,
            lambda: _exclusive(k, r, p, inner, gid, ng),
            lambda: _inclusive(k, gid, p_range, p_kernel, ng),
            lambda: _span(k, gid, p_range, p_kernel, ng))
    else:
        st, excl, kinst, incl, span = cpu_stats(), zeros, zeros, zeros, zeros
    cross = int(r.cross_thread.sum())
    if cross:
        notes.append(f"{cross} start/end ranges ended on another thread: listed, but not used "
                     f"for kernel attribution (as nsys).")
    unclosed = int(r.unclosed.sum())
    if unclosed:
        notes.append(f"{unclosed} ranges were never closed: they end at the end of the capture.")
    range_names = names.names
    rows = rows_of({
        "range": [range_names[c] for c in g_code.tolist()],
        "style": ["PushPop" if s else "StartEnd" for s in g_pushpop.tolist()],
        "instances": st.count.tolist(),
        **st.columns(),
        "kernel_instances": kinst.tolist(),
        "gpu_inclusive_ns": incl.tolist(),
        "gpu_exclusive_ns": excl.tolist(),
        "gpu_span_ns": span.tolist(),
    })
    rows.sort(key=lambda x: (-x["total_ns"], x["range"], x["style"]))
    return Report(rows=rows, columns=RANGE_COLUMNS, notes=notes)


def _exclusive(k: KernelData, r: RangeData, p: Pairs, inner: Pairs | None, gid: np.ndarray,
               ng: int) -> np.ndarray:
    """Kernel time per group of the kernels whose innermost range is in the group."""
    inner = innermost(p, r) if inner is None else inner
    inner_g = gid[inner.range_idx]
    ok = inner_g >= 0
    return np.bincount(inner_g[ok], weights=k.duration[inner.kernel_idx[ok]],
                       minlength=ng).astype(np.int64)


def _inclusive(k: KernelData, gid: np.ndarray, p_range: np.ndarray, p_kernel: np.ndarray,
               ng: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct kernels per group and their time (each kernel once per group)."""
    ug, uk = distinct_pairs(gid[p_range], p_kernel, ng, ordered=False)  # (group, kernel)
    return (np.bincount(ug, minlength=ng).astype(np.int64),
            np.bincount(ug, weights=k.duration[uk], minlength=ng).astype(np.int64))


def _span(k: KernelData, gid: np.ndarray, p_range: np.ndarray, p_kernel: np.ndarray,
          ng: int) -> np.ndarray:
    """Per group, the sum over its instances of first kernel start to last kernel end."""
    if p_range.size == 0:  # no shown range launched a kernel
        return np.zeros(ng, dtype=np.int64)
    if is_sorted(p_range):  # pairs come range by range
        ri, pk = p_range, p_kernel
    else:
        order = np.argsort(p_range, kind="stable")
        ri, pk = p_range[order], p_kernel[order]
    starts = np.flatnonzero(np.r_[True, ri[1:] != ri[:-1]])
    inst_first = np.minimum.reduceat(k.start[pk], starts)
    inst_last = np.maximum.reduceat(k.end[pk], starts)
    return np.bincount(gid[ri[starts]], weights=inst_last - inst_first,
                       minlength=ng).astype(np.int64)
