"""CUDA kernel summary by name: nsys ``cuda_gpu_kern_sum`` (2022.4: ``gpukernsum``).

nsys groups by name AND grid/block dimensions; this report groups by name only (aggregate
nsys's rows by name to compare). ``time_pct`` is each kernel's share of the listed kernels'
total time (before ``top`` cuts the list). With ``range_name``, only the kernels launched
inside ranges of that name (all attribution, each kernel counted once even if the ranges
nest).

An export of up to ``SMALL_KERNELS`` kernels is summarized in plain Python
(``small_kernel_report``, ``summarize_kernel_groups``), without loading numpy: on such a file
the import alone costs more than the summary. Larger ones go through numpy and the cache.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from reports.common import Report, duration_stats, r1
from reports.render import View

if TYPE_CHECKING:
    import numpy as np

    from nsys_parsers.kernel_groups import KernelGroupReads
    from reports.options import AnalysisOptions

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
    from reports.common import group_stats
    from reports.grouping import group_ids

    if durations.size == 0:
        return []
    gid, (used,) = group_ids(name_code)
    st = group_stats(gid, durations, used.size)
    return _kernel_rows([names[i] for i in used], st.count.tolist(),
                        [st.row(g) for g in range(used.size)], rules)


def summarize_kernel_groups(names: list[str], durations: list[list[int]],
                            rules: list | None = None) -> list[dict]:
    """``summarize_kernels`` for kernels given as each name's ascending durations (plain
    Python; the same rows, see ``reports.common.duration_stats``)."""
    return _kernel_rows(names, [len(d) for d in durations],
                        [duration_stats(d) for d in durations], rules)


def _kernel_rows(names: list[str], instances: list[int], stats: list[dict[str, Any]],
                 rules: list | None) -> list[dict]:
    """Rows of KERNEL_COLUMNS from each name's instances and duration columns, sorted by
    time; ``time_pct`` is the share of the total of all of them."""
    from reports.categories import categorize_many

    grand = sum(st["total_ns"] for st in stats)
    cats = categorize_many(names, rules)
    rows: list[dict[str, Any]] = [{
        "name": name, "category": cat, "instances": count, **st,
        "time_pct": r1(100.0 * st["total_ns"] / grand) if grand else 0.0,
    } for name, cat, count, st in zip(names, cats, instances, stats)]
    rows.sort(key=lambda r: (-r["total_ns"], r["name"]))
    return rows


def small_kernel_rows(export, name_kind: str, rules: list | None
                      ) -> tuple[list[dict], list[str]] | None:
    """(rows, notes) of the whole export's kernel summary, computed without numpy, or None
    when the export has more than ``SMALL_KERNELS`` kernels (then numpy and the cache are
    faster)."""
    from nsys_parsers.kernel_groups import start_kernel_groups

    reads = start_kernel_groups(export, name_kind)
    return None if reads is None else _small_rows(reads, rules)


def _small_rows(reads: KernelGroupReads, rules: list | None) -> tuple[list[dict], list[str]]:
    from reports.categories import compile_rules

    try:
        compile_rules(rules)  # 10-15 ms of regular expressions, while SQLite reads
    except BaseException:
        reads.close()
        raise
    groups = reads.result()
    return summarize_kernel_groups(groups.names, groups.durations, rules), groups.notes


def small_kernel_report(path: str | os.PathLike[str], options: AnalysisOptions,
                        top: int | None = None, *, reads: KernelGroupReads | None = None
                        ) -> Report | None:
    """``ExportAnalysis(path, options).kernels(top=top)`` for an export of up to
    ``SMALL_KERNELS`` kernels, without loading numpy (the analysis module does); None for a
    larger export, or with ``within`` (ask ``ExportAnalysis`` then). ``reads``: the
    export's reads, started by the caller (``open_kernel_groups``) before this module was
    imported; they are used, or closed."""
    from nsys_parsers.kernel_groups import open_kernel_groups
    from reports.categories import load_rules

    if options.within is not None:  # ExportAnalysis answers it
        if reads is not None:
            reads.close()
        return None
    try:
        rules = load_rules(options.rules)  # without reads: a bad file fails before reading
    except BaseException:
        if reads is not None:
            reads.close()
        raise
    if reads is None:
        reads = open_kernel_groups(path, options.name_kind, nsys=options.nsys)
        if reads is None:
            return None
    rows, notes = _small_rows(reads, rules)
    return Report(rows=rows[:top] if top else rows, columns=KERNEL_COLUMNS, notes=notes)
