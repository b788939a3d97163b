"""CUDA kernel summary by name: nsys ``cuda_gpu_kern_sum`` (2022.4: ``gpukernsum``).

nsys groups by name AND grid/block dimensions; this report groups by name only (aggregate
nsys's rows by name to compare). ``time_pct`` is each kernel's share of the listed kernels'
total time (before ``top`` cuts the list). With ``range_name``, only the kernels launched
inside ranges of that name (all attribution, each kernel counted once even if the ranges
nest).
"""

from __future__ import annotations

import os

import numpy as np
from nsys_parsers.arrays import sorted_unique

from nsys_parsers.activity import (
    Activity, load_activity, load_kernel_durations, resolve_range_names, restrict_to_range,
)
from nsys_parsers.attribution import attribute
from nsys_parsers.export import KERNEL_TABLE, NVTX_TABLE, Export
from reports.common import Report, group_stats, opened, r1, check_range_names

KERNEL_COLUMNS = [
    "name", "category", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns",
    "stddev_ns", "time_pct",
]


def summarize_kernels(names: list[str], name_code: np.ndarray, durations: np.ndarray,
                      rules=None) -> list[dict]:
    """Rows of KERNEL_COLUMNS for kernels given by name code and duration, sorted by time."""
    from reports.categories import categorize_many

    if durations.size == 0:
        return []
    used, gid = np.unique(name_code, return_inverse=True)
    gid = gid.ravel()
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


def kernel_summary(export: "Export | str | os.PathLike", *, range_name: str | None = None,
                   name_kind: str = "demangled", top: int | None = None,
                   rules: "str | os.PathLike | None" = None,
                   within: str | None = None, activity: Activity | None = None) -> Report:
    """``activity``: data already loaded to summarize instead of reading (whole-export
    summary of its kernels, or with ``range_name``)."""
    from reports.categories import load_rules

    rule_list = load_rules(rules)
    with opened(export) as ex:
        ex.require(KERNEL_TABLE, "the kernel summary")
        if range_name is not None:
            ex.require(NVTX_TABLE, f"kernels in range {range_name!r}")
        if range_name is None and within is None and activity is None:
            names, codes, durations, notes = load_kernel_durations(ex, name_kind=name_kind)
            rows = summarize_kernels(names, codes, durations, rule_list)
            return Report(rows=rows[:top] if top else rows, columns=KERNEL_COLUMNS, notes=notes)
        act = activity or load_activity(ex, name_kind=name_kind, range_names=False,
                                        ranges=ex.has_table(NVTX_TABLE))
        if within:
            act = restrict_to_range(ex, act, within)
        k = act.kernels
        notes = list(act.notes)
        select = None
        if range_name is not None:
            r = act.ranges
            p = attribute(k, r, "all")
            resolve_range_names(ex, r, rows=sorted_unique(p.range_idx))
            if range_name not in r.names:  # no kernels in it: does it exist at all?
                resolve_range_names(ex, r)
                check_range_names([range_name], r.names)
            code = r.names.index(range_name)
            in_named = r.name_code[p.range_idx] == code
            select = sorted_unique(p.kernel_idx[in_named])
            if select.size == 0:
                notes.append(f"no kernel was launched inside a range named {range_name!r}.")
    durations = k.duration
    codes = k.name_code
    if select is not None:
        durations, codes = durations[select], codes[select]
    rows = summarize_kernels(k.names, codes, durations, rule_list)
    if top is not None:
        rows = rows[:top]
    return Report(rows=rows, columns=KERNEL_COLUMNS, notes=notes)
