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

from nsys_parsers.arrays import distinct_count, group_ids, sorted_unique
from nsys_parsers.attribution import Pairs
from nsys_parsers.ids import pid_of, tid_of
from nsys_parsers.kernels import Kernels
from nsys_parsers.names import RangeNames
from nsys_parsers.ranges import Ranges
from nsys_parsers.schema import NVTX_TABLE
from reports.pipeline.analysis import Analysis
from reports.pipeline.options import ATTRIBUTION
from reports.pipeline.report import Report, group_stats, rows_of
from reports.pipeline.session import Session
from reports.render import View

NVTX_KERNEL_VIEW = View(
    columns=["total_ns", "kernel_instances", "range_instances", "avg_ns", "med_ns", "min_ns",
             "max_ns", "stddev_ns", "pid", "tid", "style", "range", "kernel"],
    drop=("stddev_ns", "max_ns", "min_ns", "med_ns", "style", "range_instances", "tid",
          "pid"),
    hide_if_constant=("pid", "tid", "style"),
    rank_by=("total_ns",), noun="(range, kernel) rows",
    null_labels={"range": "(no range)"},
    headers={"range_instances": "ranges", "kernel_instances": "kernels"})

NVTX_KERNEL_COLUMNS = [
    "range", "style", "pid", "tid", "range_instances", "kernel_instances", "total_ns", "avg_ns",
    "med_ns", "min_ns", "max_ns", "stddev_ns", "kernel",
]


def kernels_by_range(s: Session, attribution: str = "all") -> Report:
    """Kernels grouped by the range that launched them (nsys nvtx_kern_sum)."""
    s.require_kernels("kernels by NVTX range")
    s.export.require(NVTX_TABLE, "kernels by NVTX range")
    p = s.pairs(attribution)
    shown = s.shown_pairs(p)
    names = s.names(rows=sorted_unique(shown.range_idx))
    report = nvtx_kernel_report(s.kernels, s.ranges, names, p, shown=shown, notes=s.notes)
    report.notes += s.operator_notes() + s.filter_notes()
    report.title = f"CUDA kernels by NVTX range ({attribution})"
    return report


def loose_kernels(k: Kernels, p: Pairs) -> np.ndarray:
    """The kernels in no range of all pairs ``p`` (a kernel in a range that is not shown is
    not "in no range")."""
    in_range = np.zeros(len(k), dtype=bool)
    in_range[p.kernel_idx] = True
    return np.flatnonzero(~in_range)


def nvtx_kernel_report(k: Kernels | None, r: Ranges | None, names: RangeNames, p: Pairs,
                       shown: Pairs | None = None, notes: list[str] | None = None) -> Report:
    """Rows of NVTX_KERNEL_COLUMNS from attribution pairs ``p``, of which ``shown`` (default:
    all) are listed; ``names`` resolved at least for the ranges of ``shown``."""
    assert k is not None and r is not None and k.launch_tid is not None
    shown = p if shown is None else shown
    # The items: every shown pair, then every kernel in no range (range -1); no copies of
    # the pairs when there is no such kernel.
    loose = loose_kernels(k, p)
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
    st = group_stats(gid, durations, ngroups)
    kinst = distinct_count(gid, item_kernel, ngroups)
    rinst = distinct_count(gid[:n_in], item_range[:n_in], ngroups)
    # each group's key values as Python lists: no loop over numpy scalars
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
    notes = list(notes or [])
    no_launch = int((k.launch_tid < 0).sum())
    if no_launch:
        notes.append(f"{no_launch} of {len(k)} kernels have no launch record in the export "
                     f"(trimmed capture?): they are listed with no range, pid or tid.")
    return Report(rows=rows, columns=NVTX_KERNEL_COLUMNS, notes=notes)


ANALYSIS = Analysis(
    name="nvtx-kernels", bytes_per_row=28,
    help="""Kernels grouped by the NVTX range that launched them (as nsys nvtx_kern_sum).

    Examples: `nsys-mine nvtx-kernels run.sqlite` ·
    `nsys-mine nvtx-kernels run.sqlite --attribution innermost --format csv`
    """,
    run=kernels_by_range, needs=("kernels", "launches", "ranges"),
    options=("within", "merge_op_ids", "name_kind", "depth", "match", "nsys", "cache",
             "graph_attribution"),
    params=(ATTRIBUTION,), columns=NVTX_KERNEL_COLUMNS, view=NVTX_KERNEL_VIEW, order=40,
)
