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

from collections.abc import Iterator

import numpy as np

from nsys_parsers.arrays import (
    ROWS,
    Grouping,
    distinct_count,
    group_ids,
    let_go,
    let_go_fields,
    sorted_unique,
)
from nsys_parsers.attribution import Pairs
from nsys_parsers.cache import held
from nsys_parsers.ids import pid_of, tid_of
from nsys_parsers.kernels import Kernels
from nsys_parsers.names import RangeNames
from nsys_parsers.ranges import Ranges
from nsys_parsers.schema import NVTX_TABLE
from reports.pipeline.analysis import Analysis
from reports.pipeline.options import ATTRIBUTION
from reports.pipeline.report import Report, group_stats_of, rows_of
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
    # The items: every shown pair, then every kernel in no range (range -1), taken a block
    # at a time (``_items``): no column of them is copied whole.
    loose = loose_kernels(k, p)
    n_in = len(shown)  # items [0, n_in) have a range, the rest are kernels in no range
    n = n_in + loose.size
    tids = sorted_unique(k.launch_tid)
    nnames = len(k.names)
    # The group key (range name, style, thread, kernel name) as two columns: the range's
    # name and style, and the kernel's thread and name (thread and name of an attributed
    # kernel are its range's thread and its own), in the same order as the four columns.
    # Both keys are written and read a block at a time: held in scratch when large.
    range_key, kernel_key = held(n, np.int64), held(n, np.int64)
    for at, ranges_of, kernels_of in _items(shown, loose):
        rk = np.full(at.stop - at.start, -1, dtype=np.int64)
        rk[:ranges_of.size] = names.code[ranges_of]
        rk[:ranges_of.size] *= 2
        rk[:ranges_of.size] += r.pushpop[ranges_of]
        range_key[at] = rk
        kernel_key[at] = np.searchsorted(tids, k.launch_tid[kernels_of]) * nnames
        kernel_key[at] += k.name_code[kernels_of]
        let_go_fields(k, r, names, shown, p)  # what the block's gathers mapped
        let_go(range_key[at])
        let_go(kernel_key[at])
    tabled = Grouping.of(range_key, kernel_key)
    if tabled is not None:  # each item's group as 4 bytes, not its two 8-byte keys
        g_rkey, g_kkey = tabled.values
        gid = tabled.ids(np.int32 if tabled.ngroups < 2**31 else np.int64)
        del tabled
    else:
        gid, (g_rkey, g_kkey) = group_ids(range_key, kernel_key)
    del range_key, kernel_key
    ngroups = g_rkey.size

    def durations() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for at, _, kernels_of in _items(shown, loose):
            yield gid[at], k.end[kernels_of] - k.start[kernels_of]
    st = group_stats_of(durations, ngroups)
    kinst = distinct_count(gid, (kernels_of for _, _, kernels_of in _items(shown, loose)),
                           n, ngroups)
    rinst = distinct_count(gid, (ranges_of for _, ranges_of, _ in _items(shown, loose)),
                           n_in, ngroups)
    let_go_fields(k, r, names, shown, p)
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


def _items(shown: Pairs, loose: np.ndarray
           ) -> Iterator[tuple[slice, np.ndarray, np.ndarray]]:
    """The items a block (``ROWS``) at a time: (their rows, the ranges of those that have
    one, which come first, and the kernels of all)."""
    n_in, n = len(shown), len(shown) + loose.size
    for a in range(0, n, ROWS):
        b = min(a + ROWS, n)
        ranges_of = np.asarray(shown.range_idx[a:min(b, n_in)]) if a < n_in else _NONE
        kernels_of = np.concatenate([shown.kernel_idx[a:min(b, n_in)] if a < n_in else _NONE,
                                     loose[max(a - n_in, 0):max(b - n_in, 0)]])
        yield slice(a, b), ranges_of, kernels_of


_NONE = np.zeros(0, dtype=np.int64)


ANALYSIS = Analysis(
    name="nvtx-kernels", bytes_per_row=5,
    help="""Kernels grouped by the NVTX range that launched them (as nsys nvtx_kern_sum).

    Examples: `nsys-mine nvtx-kernels run.sqlite` ·
    `nsys-mine nvtx-kernels run.sqlite --attribution innermost --format csv`
    """,
    run=kernels_by_range, needs=("kernels", "launches", "ranges"),
    options=("within", "merge_op_ids", "name_kind", "depth", "match", "nsys", "cache",
             "graph_attribution"),
    params=(ATTRIBUTION,), columns=NVTX_KERNEL_COLUMNS, view=NVTX_KERNEL_VIEW, order=40,
)
