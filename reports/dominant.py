"""Which kernel dominates: for the whole export and for each NVTX range name.

For each range name, the kernels attributed to its instances (``all``: everything launched
inside the range, each kernel once; ``innermost``: only kernels whose deepest range it is) are
summed by kernel name; the top one, its share of the range's attributed kernel time, how many
times it runs per range instance, the runner-up, and the time share of each kernel category.

Rows: the whole export first; then the ranges asked for, in that order; else, for exports of
this project's model, its ranges in nesting order (step > forward > ... > attention internals,
``nvtx_model.nvtx_ranges.HEADLINE_RANGES``) followed by the others by attributed GPU time;
else every range by attributed GPU time. Computed in one grouping over the attribution pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from nsys_parsers.activity import Activity
from nsys_parsers.attribution import Pairs
from nsys_parsers.names import RangeNames
from nvtx_model.nvtx_ranges import HEADLINE_RANGES
from reports.common import Report, check_range_names, r1
from reports.grouping import distinct_pairs, group_ids, in_parallel
from reports.render import View, shorten

DOMINANT_COLUMNS = [
    "range", "kernel", "category", "share_pct", "total_ns", "instances", "range_instances",
    "per_range_instance", "runner_up", "runner_up_share_pct", "range_kernel_ns",
    "category_shares",
]
# What people read: the answer first, then the runner-up and the category mix.
DOMINANT_VIEW = View(
    columns=["range", "share_pct", "per_range_instance", "category", "kernel",
             "runner_up_share_pct", "runner_up", "category_shares"],
    drop=("category_shares", ("runner_up", "runner_up_share_pct")),
    noun="ranges", null_labels={"range": "(whole export)"}, pinned=1)


def _empty_row(range_name: str | None, range_instances: int | None) -> dict[str, Any]:
    return {"range": range_name, "kernel": None, "category": None, "share_pct": None,
            "total_ns": 0, "instances": 0, "range_instances": range_instances,
            "per_range_instance": None, "runner_up": None, "runner_up_share_pct": None,
            "range_kernel_ns": 0, "category_shares": {}}


class _Grouped:
    """Kernel time per (group, kernel name) and per (group, category), vectorized."""

    def __init__(self, group: np.ndarray, kname: np.ndarray, dur: np.ndarray,
                 cat_code: np.ndarray, ncat: int):
        # (group, kernel name) ranked by group_ids (a dense table at these sizes: np.unique
        # sorted the 1.6 M pairs of nested x100 in 0.1 s)
        inv, (groups, kernels) = group_ids(group, kname)
        total = np.bincount(inv, weights=dur).astype(np.int64)
        order = np.lexsort((kernels, -total, groups))  # per group: largest first
        self.first = {int(g): int(i) for g, i in zip(*_firsts(groups[order]), strict=True)}
        cu, cinv = np.unique(groups * ncat + cat_code[kernels], return_inverse=True)  # few
        cat_total = np.bincount(cinv.ravel(), weights=total).tolist()
        cat = (cu % ncat).tolist()
        cat_groups, starts = _firsts(cu // ncat)
        ends = np.append(starts[1:], cu.size).tolist() if starts.size else []  # no pairs
        # plain lists for row(): one row per range name, thousands of them
        self.cats = {g: [(cat[j], cat_total[j]) for j in range(a, b)]
                     for g, a, b in zip(cat_groups.tolist(), starts.tolist(), ends, strict=True)}
        self.grand = np.bincount(groups, weights=total).tolist()
        self.total, self.count = total.tolist(), np.bincount(inv).tolist()
        self.group, self.kernel, self.order = groups.tolist(), kernels.tolist(), order.tolist()

    def row(self, g: int, range_name: str | None, range_instances: int | None,
            names: list[str], categories: list[str], cat_names: list[str]) -> dict[str, Any]:
        total, order = self.total, self.order
        if g not in self.first or self.grand[g] <= 0 and self.count[order[self.first[g]]] == 0:
            return _empty_row(range_name, range_instances)
        grand = float(self.grand[g])
        i = self.first[g]
        top = order[i]
        second = order[i + 1] if (i + 1 < len(order) and self.group[order[i + 1]] == g
                                  and total[order[i + 1]] > 0) else None

        def share(t: float) -> float:
            return r1(100.0 * t / grand) if grand else 0.0

        cats = sorted(((cat_names[c], t) for c, t in self.cats.get(g, ()) if t > 0),
                      key=lambda kv: (-kv[1], kv[0]))
        kname = self.kernel[top]
        count = self.count[top]
        return {
            "range": range_name,
            "kernel": names[kname],
            "category": categories[kname],
            "share_pct": share(total[top]),
            "total_ns": total[top],
            "instances": count,
            "range_instances": range_instances,
            "per_range_instance": (round(count / range_instances, 2)
                                   if range_instances else None),
            "runner_up": names[self.kernel[second]] if second is not None else None,
            "runner_up_share_pct": share(total[second]) if second is not None else None,
            "range_kernel_ns": int(grand),
            "category_shares": {c: share(v) for c, v in cats},
        }


def _firsts(sorted_groups: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct values of a sorted array and the index of each one's first element."""
    if sorted_groups.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    start = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    return sorted_groups[start], start


def model_order(names: list[str]) -> dict[str, int] | None:
    """Positions of this project's model ranges when ``names`` come from its model (a
    ``step`` and a ``forward`` range), else None."""
    present = set(names)
    if not {"step", "forward"} <= present:
        return None
    return {n: i for i, n in enumerate(HEADLINE_RANGES) if n in present}


def sentence(row: dict[str, Any]) -> str:
    """One line: ``forward: sm80_xmma_gemm… (gemm), 41.2% of GPU time, 12 calls per forward``
    (``per instance`` when the range name is long)."""
    where = shorten(row["range"], 60) if row["range"] is not None else "whole export"
    if row["kernel"] is None:
        return f"{where}: no kernels attributed"
    text = (f"{where}: {shorten(row['kernel'], 60, signature=True)} ({row['category']}), "
            f"{row['share_pct']:g}% of GPU time")
    if row["range"] is not None and row["per_range_instance"] is not None:
        calls = row["per_range_instance"]
        per = row["range"] if len(row["range"]) <= 24 and "," not in row["range"] else "instance"
        text += f", {calls:g} call{'s' if calls != 1 else ''} per {per}"
    else:
        text += f", {row['instances']:,} call{'s' if row['instances'] != 1 else ''}"
    return text


def dominant_report(act: Activity, names: RangeNames | None, p: Pairs | None, *,
                    range_names: list[str] | None = None, attribution: str = "all",
                    rules: list | None = None, instances: np.ndarray | None = None,
                    filtered: bool = False) -> Report:
    """The whole-export row, then one row per range name (see the module docstring).
    ``names`` must be complete; ``p`` are the pairs to count (already filtered to the shown
    ranges: ``filtered`` says whether a filter chose them); ``instances`` the shown instances
    per name code (default: all). ``names`` and ``p`` are None when the export has no NVTX
    ranges."""
    from reports.categories import CATEGORIES, categorize_many

    k, r = act.kernels, act.ranges
    assert k is not None
    notes = list(act.notes)
    categories = categorize_many(k.names, rules)
    cat_names = list(CATEGORIES) + sorted(set(categories) - set(CATEGORIES))
    cat_code = np.array([cat_names.index(c) for c in categories], dtype=np.int64)
    dur = k.duration

    def whole_export() -> _Grouped:
        return _Grouped(np.zeros(len(k), dtype=np.int64), k.name_code, dur,
                        cat_code, len(cat_names))

    if r is None or names is None or p is None:
        rows = [whole_export().row(0, None, None, k.names, categories, cat_names)]
        notes.append("NVTX was not traced (no NVTX_EVENTS table): only the whole-export answer; "
                     "profile with `nsys profile --trace=cuda,nvtx` and NVTX ranges.")
        return Report(rows=rows, columns=DOMINANT_COLUMNS, notes=notes,
                      sentences=[sentence(x) for x in rows])
    if range_names:
        check_range_names(range_names, names.names)
    inst = (instances if instances is not None
            else np.bincount(names.code[names.code >= 0], minlength=len(names.names)))

    def per_range_name() -> _Grouped:
        pname = names.code[p.range_idx]
        pk = p.kernel_idx
        if attribution == "all" and len(p):
            # each kernel once per range name, even inside nested same-name ranges (in any
            # order: _Grouped sums integer durations, exactly, whatever their order)
            pname, pk = distinct_pairs(pname, pk, len(names.names), ordered=False)
        return _Grouped(pname, k.name_code[pk], dur[pk], cat_code, len(cat_names))

    whole, grouped = in_parallel(whole_export, per_range_name)  # independent passes
    rows = [whole.row(0, None, None, k.names, categories, cat_names)]
    if range_names:
        wanted = [names.names.index(n) for n in range_names]
    else:
        wanted = sorted(grouped.first, key=lambda g: (-grouped.grand[g], names.names[g]))
        order = model_order(names.names)
        if order:
            wanted.sort(key=lambda g: (order.get(names.names[g], len(order)),))
    rows += [grouped.row(g, names.names[g], int(inst[g]), k.names, categories, cat_names)
             for g in wanted]
    if len(p) == 0:
        notes.append("no kernel launch lies inside a shown range on the same thread." if filtered
                     else "no kernel launch lies inside an NVTX range on the same thread.")
    no_launch = int((k.launch_tid < 0).sum())
    if no_launch:
        notes.append(f"{no_launch} of {len(k)} kernels have no launch record (trimmed export); "
                     f"they count in the whole-export row only.")
    return Report(rows=rows, columns=DOMINANT_COLUMNS, notes=notes,
                  sentences=[sentence(x) for x in rows])
