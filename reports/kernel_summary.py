"""CUDA kernel summary by name: nsys ``cuda_gpu_kern_sum`` (2022.4: ``gpukernsum``).

nsys groups by name AND grid/block dimensions; this report groups by name only (aggregate
nsys's rows by name to compare). ``time_pct`` is each kernel's share of the listed kernels'
total time (before ``top`` cuts the list). With ``range_name``, only the kernels launched
inside ranges of that name (all attribution, each kernel counted once even if the ranges
nest).
"""

from __future__ import annotations

import numpy as np

from reports.common import group_stats, r1
from reports.grouping import group_ids
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
                      rules: list | None = None) -> list[dict]:
    """Rows of KERNEL_COLUMNS for kernels given by name code and duration, sorted by time."""
    from reports.categories import categorize_many

    if durations.size == 0:
        return []
    gid, first = group_ids(name_code)
    used = name_code[first]
    st = group_stats(gid, durations, used.size)
    grand = int(st.total.sum())
    cats = categorize_many([names[i] for i in used], rules)
    rows = []
    for g, code in enumerate(used):
        rows.append({
            "name": names[code],
            "category": cats[g],
            "instances": int(st.count[g]),
            **st.row(g),
            "time_pct": r1(100.0 * st.total[g] / grand) if grand else 0.0,
        })
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    return rows
