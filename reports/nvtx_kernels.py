"""Kernels grouped by the NVTX range that launched them: nsys ``nvtx_kern_sum`` and more.

With ``attribution="all"`` the rows equal ``nsys stats --report nvtxkernsum`` (2022.4 name;
``nvtx_kern_sum`` in newer nsys): grouped by range name, style, process, thread and kernel
name; ``range_instances`` counts the distinct ranges, ``kernel_instances`` the distinct
kernels, and the time statistics run over (range, kernel) pairs, exactly as nsys does (a
kernel inside two nested ranges of the same name counts twice in ``total_ns``).
Kernels launched outside every range get ``range = None`` (with the launching thread), and
kernels whose launch row is missing get ``range``, ``pid`` and ``tid`` all ``None``.

Deliberate difference from nsys: a launch recorded twice (nsys 2022.2's ``cudaLaunchKernel``
plus ``cudaLaunchKernel_v7000``) counts once; nsys doubles those kernels' times.
"""

from __future__ import annotations

import numpy as np

from nsys_parsers.activity import Activity
from nsys_parsers.arrays import sorted_unique
from nsys_parsers.attribution import Pairs
from nsys_parsers.names import RangeNames
from nsys_parsers.ranges import pid_of, tid_of
from reports.common import Report, group_stats, rows_of
from reports.grouping import distinct_count, group_ids, in_parallel
from reports.render import View

NVTX_KERNEL_VIEW = View(
    columns=["total_ns", "kernel_instances", "range_instances", "avg_ns", "med_ns", "min_ns",
             "max_ns", "stddev_ns", "pid", "tid", "style", "range", "kernel"],
    drop=("stddev_ns", "max_ns", "min_ns", "med_ns", "style", "range_instances", "tid",
          "pid"),
    hide_if_constant=("pid", "tid", "style"),
    rank_by=("total_ns",), noun="(range, kernel) rows",
    null_labels={"range": "(no range)"})

NVTX_KERNEL_COLUMNS = [
    "range", "style", "pid", "tid", "range_instances", "kernel_instances", "total_ns", "avg_ns",
    "med_ns", "min_ns", "max_ns", "stddev_ns", "kernel",
]


def loose_kernels(act: Activity, p: Pairs) -> np.ndarray:
    """The kernels in no range of all pairs ``p`` (a kernel in a range that is not shown is
    not "in no range")."""
    k = act.kernels
    assert k is not None
    in_range = np.zeros(len(k), dtype=bool)
    in_range[p.kernel_idx] = True
    return np.flatnonzero(~in_range)


def nvtx_kernel_report(act: Activity, names: RangeNames, p: Pairs,
                       shown: Pairs | None = None) -> Report:
    """Rows of NVTX_KERNEL_COLUMNS from attribution pairs ``p``, of which ``shown`` (default:
    all) are listed; ``names`` resolved at least for the ranges of ``shown``."""
    k, r = act.kernels, act.ranges
    assert k is not None and r is not None
    shown = p if shown is None else shown
    # The items: every shown pair, then every kernel in no range (range -1); no copies of
    # the pairs when there is no such kernel.
    loose = loose_kernels(act, p)
    n_in = len(shown)  # items [0, n_in) have a range, the rest are kernels in no range
    # The group key (range name, style, thread, kernel name) as two columns: the range's
    # name and style, and the kernel's thread and name (a key per kernel, gathered: thread
    # and name of an attributed kernel are its range's thread and its own), in the same
    # order as the four columns.
    range_key = names.code[shown.range_idx]
    range_key *= 2
    range_key += r.pushpop[shown.range_idx]
    if loose.size:
        item_range = np.concatenate([shown.range_idx, np.full(loose.size, -1, dtype=np.int64)])
        item_kernel = np.concatenate([shown.kernel_idx, loose])
        range_key = np.concatenate([range_key, np.full(loose.size, -1, dtype=np.int64)])
    else:
        item_range, item_kernel = shown.range_idx, shown.kernel_idx
    tids = sorted_unique(k.launch_tid)
    nnames = len(k.names)
    kernel_key = (np.searchsorted(tids, k.launch_tid) * nnames + k.name_code)[item_kernel]
    gid, (g_rkey, g_kkey) = group_ids(range_key, kernel_key)
    ngroups = g_rkey.size
    durations = k.duration[item_kernel]
    st, kinst, rinst = in_parallel(  # three sorts of the pairs, independent of each other
        lambda: group_stats(gid, durations, ngroups),
        lambda: distinct_count(gid, item_kernel, ngroups),
        lambda: distinct_count(gid[:n_in], item_range[:n_in], ngroups))
    # each group's key values, then Python lists: no loop over numpy scalars (that loop took
    # 0.19 s for the 5,384 groups of nested x100)
    g_has = (g_rkey >= 0).tolist()
    rname, style = np.divmod(np.maximum(g_rkey, 0), 2)
    g_thread_idx, kname = np.divmod(g_kkey, nnames)
    g_thread = tids[g_thread_idx]
    known = (g_thread >= 0).tolist()  # -1: the kernel's launch row is missing
    range_names, kernel_names = names.names, k.names
    rows = rows_of({
        "range": [range_names[c] if h else None for c, h in zip(rname.tolist(), g_has)],
        "style": [("PushPop" if s else "StartEnd") if h else None
                  for s, h in zip(style.tolist(), g_has)],
        "pid": [v if ok else None for v, ok in zip(pid_of(g_thread).tolist(), known)],
        "tid": [v if ok else None for v, ok in zip(tid_of(g_thread).tolist(), known)],
        "range_instances": rinst.tolist(),
        "kernel_instances": kinst.tolist(),
        **st.columns(),
        "kernel": [kernel_names[c] for c in kname.tolist()],
    })
    rows.sort(key=lambda x: (x["range"] is not None, x["range"] or "", x["pid"] or -1,
                             x["tid"] or -1, -x["total_ns"], x["kernel"]))
    notes = list(act.notes)
    no_launch = int((k.launch_tid < 0).sum())
    if no_launch:
        notes.append(f"{no_launch} of {len(k)} kernels have no launch record in the export "
                     f"(trimmed capture?): they are listed with no range, pid or tid.")
    return Report(rows=rows, columns=NVTX_KERNEL_COLUMNS, notes=notes)
