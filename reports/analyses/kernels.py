"""CUDA kernel summary by name: nsys ``cuda_gpu_kern_sum`` (2022.4: ``gpukernsum``).

nsys groups by name AND grid/block dimensions; this report groups by name only (aggregate
nsys's rows by name to compare). ``time_pct`` is each kernel's share of the listed kernels'
total time (before ``--top`` cuts the list). With ``--range``, only the kernels launched
inside ranges of that name (``all`` attribution, each kernel counted once even if the ranges
nest).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nsys_parsers.arrays import group_ids, sorted_unique
from nsys_parsers.schema import NVTX_TABLE
from reports.by import KEY_COLUMNS, by_shape, kernel_keys, key_notes
from reports.categories import categorize_many
from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.options import BY
from reports.pipeline.report import Report, check_range_names, group_stats, r1
from reports.pipeline.session import Session
from reports.render import View

KERNEL_COLUMNS = [
    "name", "category", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns",
    "stddev_ns", "time_pct",
]
# As nsys stats prints it: the share first, the name last.
KERNEL_VIEW = View(
    columns=["time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns",
             "stddev_ns", "category", "name"],
    rank_by=("total_ns",), noun="kernels")


def summarize_kernels(names: list[str], name_code: np.ndarray, durations: np.ndarray,
                      rules: list | None = None) -> list[dict[str, Any]]:
    """Rows of KERNEL_COLUMNS for kernels given by name code and duration, by time."""
    if durations.size == 0:
        return []
    gid, (used,) = group_ids(name_code)
    st = group_stats(gid, durations, used.size)
    stats = [st.row(g) for g in range(used.size)]
    grand = sum(s["total_ns"] for s in stats)
    group_names = [names[i] for i in used.tolist()]
    rows: list[dict[str, Any]] = [{
        "name": name, "category": cat, "instances": count, **s,
        "time_pct": r1(100.0 * s["total_ns"] / grand) if grand else 0.0,
    } for name, cat, count, s in zip(group_names, categorize_many(group_names, rules),
                                     st.count.tolist(), stats)]
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    return rows


def kernel_summary(s: Session, range_name: str | None = None, by: str | None = None) -> Report:
    """The kernel summary of the whole export (within ``within``), or of the kernels
    launched inside the shown instances of ranges named ``range_name``; ``by``: per device,
    process or stream (``reports.by``)."""
    s.require_kernels("the kernel summary")
    if range_name is not None:
        s.export.require(NVTX_TABLE, f"kernels in range {range_name!r}")
        s.load("kernels", "launches", "ranges")
    if by is not None:
        s.load("kernels", "kernel_ids")
    k = s.kernels
    assert k is not None
    notes = s.notes
    durations, codes = k.duration, k.name_code
    if range_name is not None:
        p = s.shown_pairs(s.pairs("all"))
        names = s.names(rows=sorted_unique(p.range_idx))
        code = names.index(range_name)
        if code is None:  # no kernels in it: does it exist at all?
            check_range_names([range_name], s.names().names)
            select = np.zeros(0, dtype=np.int64)
        else:
            select = sorted_unique(p.kernel_idx[names.code[p.range_idx] == code])
        if select.size == 0:
            notes.append(f"no kernel was launched inside a range named {range_name!r}.")
        durations, codes = durations[select], codes[select]
        notes += s.filter_notes(f"kernels in {range_name!r} instances")
    else:
        select = np.arange(len(k))
    title = "CUDA kernels" + (f" in range {range_name!r}" if range_name else "")
    if by is None:
        return Report(rows=summarize_kernels(k.names, codes, durations, s.rules),
                      columns=KERNEL_COLUMNS, notes=notes, title=title)
    key_code, keys = kernel_keys(k, by)
    key_code = key_code[select]
    rows = []
    for c, key in enumerate(keys):
        mine = key_code == c
        rows += [{**key, **r} for r in summarize_kernels(k.names, codes[mine], durations[mine],
                                                         s.rules)]
    key_cols = KEY_COLUMNS[by]
    rows.sort(key=lambda r: (-r["total_ns"], *(r[c] for c in key_cols), r["name"]))
    return Report(rows=rows, columns=key_cols + KERNEL_COLUMNS, notes=notes + key_notes(by),
                  title=f"{title} by {by}")


ANALYSIS = Analysis(
    name="kernels", bytes_per_row=20,
    help="""CUDA kernel summary by name (as nsys cuda_gpu_kern_sum / gpukernsum).

    Several exports or a sweep folder: one table with a `config` column.

    Examples: `nsys-mine kernels run.sqlite` ·
    `nsys-mine kernels sweep/ --range forward --within measure --top 3`
    """,
    run=kernel_summary, inputs="exports", needs=("kernels",),
    options=("within", "name_kind", "rules", "depth", "match", "nsys", "cache",
             "graph_attribution"),
    params=(Param("range_name", ("--range",), "Only kernels launched inside NVTX ranges of "
                  "this name.", metavar="NAME"), BY),
    columns=KERNEL_COLUMNS, view=KERNEL_VIEW, title="CUDA kernels", order=20,
    shape=lambda params: by_shape(KERNEL_COLUMNS, KERNEL_VIEW, params["by"]),
)
