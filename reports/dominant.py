"""Which kernel dominates: for the whole export and for each NVTX range name.

For each range name, the kernels attributed to its instances (``all``: everything launched
inside the range, each kernel once; ``innermost``: only kernels whose deepest range it is) are
summed by kernel name; the top one, its share of the range's attributed kernel time, how many
times it runs per range instance, the runner-up, and the time share of each kernel category.
"""

from __future__ import annotations

import numpy as np

from nsys_parsers.activity import Activity
from nsys_parsers.arrays import sorted_unique
from nsys_parsers.attribution import Pairs
from nsys_parsers.names import RangeNames
from reports.common import Report, check_range_names, r1
from reports.render import shorten

DOMINANT_COLUMNS = [
    "range", "kernel", "category", "share_pct", "total_ns", "instances", "range_instances",
    "per_range_instance", "runner_up", "runner_up_share_pct", "range_kernel_ns",
    "category_shares",
]


# The table/markdown/LaTeX view: the answer, without the raw totals.
DOMINANT_HUMAN_COLUMNS = [
    "range", "kernel", "category", "share_pct", "per_range_instance", "runner_up",
    "runner_up_share_pct", "category_shares",
]


def _dominant_row(range_name, kernel_codes, durations, names, categories, range_instances):
    if durations.size == 0:
        return {"range": range_name, "kernel": None, "category": None, "share_pct": None,
                "total_ns": 0, "instances": 0, "range_instances": range_instances,
                "per_range_instance": None, "runner_up": None, "runner_up_share_pct": None,
                "range_kernel_ns": 0, "category_shares": {}}
    ncodes = len(names)
    totals = np.bincount(kernel_codes, weights=durations, minlength=ncodes)
    counts = np.bincount(kernel_codes, minlength=ncodes)
    grand = float(totals.sum())
    order = np.lexsort((np.arange(ncodes), -totals))
    top = int(order[0])
    second = int(order[1]) if ncodes > 1 and totals[order[1]] > 0 else None
    cat_tot: dict[str, float] = {}
    for code in np.flatnonzero(totals > 0):
        cat_tot[categories[code]] = cat_tot.get(categories[code], 0.0) + float(totals[code])
    shares = {c: r1(100.0 * v / grand) if grand else 0.0
              for c, v in sorted(cat_tot.items(), key=lambda kv: (-kv[1], kv[0]))}
    share = lambda t: r1(100.0 * t / grand) if grand else 0.0  # noqa: E731
    return {
        "range": range_name,
        "kernel": names[top],
        "category": categories[top],
        "share_pct": share(totals[top]),
        "total_ns": int(totals[top]),
        "instances": int(counts[top]),
        "range_instances": range_instances,
        "per_range_instance": (round(counts[top] / range_instances, 2)
                               if range_instances else None),
        "runner_up": names[second] if second is not None else None,
        "runner_up_share_pct": share(totals[second]) if second is not None else None,
        "range_kernel_ns": int(grand),
        "category_shares": shares,
    }


def sentence(row: dict) -> str:
    where = shorten(row["range"], 60) if row["range"] is not None else "whole export"
    if row["kernel"] is None:
        return f"{where}: no kernels attributed"
    text = f"{where}: {shorten(row['kernel'], 60)} ({row['category']}), " \
           f"{row['share_pct']:g}% of GPU time"
    if row["range"] is not None and row["per_range_instance"] is not None:
        calls = row["per_range_instance"]
        calls_s = f"{calls:g}"
        text += f", {calls_s} call{'s' if calls != 1 else ''} per {where}"
    else:
        text += f", {row['instances']} call{'s' if row['instances'] != 1 else ''}"
    return text


def dominant_report(act: Activity, names: RangeNames | None, p: Pairs | None, *,
                    range_names: list[str] | None = None, attribution: str = "all",
                    rules: list | None = None) -> Report:
    """The whole-export row, then one row per range name (``range_names``, else every range
    that launched kernels, by attributed GPU time). ``names`` must be complete; ``names`` and
    ``p`` are None when the export has no NVTX ranges."""
    from reports.categories import categorize_many

    k, r = act.kernels, act.ranges
    assert k is not None
    notes = list(act.notes)
    categories = categorize_many(k.names, rules)
    dur = k.duration
    rows = [_dominant_row(None, k.name_code, dur, k.names, categories, None)]
    if r is None or names is None or p is None:
        notes.append("NVTX was not traced (no NVTX_EVENTS table): only the whole-export answer; "
                     "profile with `nsys profile --trace=cuda,nvtx` and NVTX ranges.")
    else:
        if range_names:
            check_range_names(range_names, names.names)
        inst = np.bincount(names.code, minlength=len(names.names))
        pname = names.code[p.range_idx]
        if attribution == "all" and len(p):
            # each kernel once per range name, even inside nested same-name ranges
            key = pname * (len(k) + 1) + p.kernel_idx
            _, keep = np.unique(key, return_index=True)
            pname, pk = pname[keep], p.kernel_idx[keep]
        else:
            pk = p.kernel_idx
        wanted = ([names.names.index(n) for n in range_names] if range_names
                  else list(sorted_unique(pname)))
        order = np.argsort(pname, kind="stable")
        pname_s, pk_s = pname[order], pk[order]
        lo = np.searchsorted(pname_s, wanted, side="left")
        hi = np.searchsorted(pname_s, wanted, side="right")
        range_rows = []
        for code, a, b in zip(wanted, lo, hi):
            sel = pk_s[a:b]
            range_rows.append(_dominant_row(names.names[code], k.name_code[sel], dur[sel],
                                            k.names, categories, int(inst[code])))
        if not range_names:
            range_rows.sort(key=lambda x: (-x["range_kernel_ns"], x["range"]))
        rows += range_rows
        if len(p) == 0:
            notes.append("no kernel launch lies inside an NVTX range on the same thread.")
    no_launch = int((k.launch_tid < 0).sum())
    if no_launch and r is not None:
        notes.append(f"{no_launch} of {len(k)} kernels have no launch record (trimmed export); "
                     f"they count in the whole-export row only.")
    return Report(rows=rows, columns=DOMINANT_COLUMNS, notes=notes,
                  sentences=[sentence(x) for x in rows])
