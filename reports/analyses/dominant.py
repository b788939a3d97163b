"""Which kernel dominates: for the whole export and for each NVTX range name.

For each range name, the kernels attributed to its instances (``all``: everything launched
inside the range, each kernel once; ``innermost``: only kernels whose deepest range it is) are
summed by kernel name; the top one, its share of the range's attributed kernel time, how many
times it runs per range instance, the runner-up, and the time share of each kernel category.

Rows: the whole export first; then the ranges asked for, in that order; else, for exports of
this project's model, its ranges in nesting order (step > forward > ... > attention internals,
``nvtx_model.nvtx_ranges.HEADLINE_RANGES``) followed by the others by attributed GPU time;
for exports with module ranges (``--nvtx modules``), the module tree (``reports.module_tree``:
each row with its ``depth`` and ``parent``); else every range by attributed GPU time.
Computed in one grouping over the attribution pairs.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from nsys_parsers.arrays import distinct_pairs, gather, group_ids, let_go_fields
from nsys_parsers.attribution import Pairs
from nsys_parsers.ids import pid_of
from nsys_parsers.kernels import Kernels
from nsys_parsers.names import RangeNames
from nsys_parsers.ranges import Ranges
from nsys_parsers.schema import NVTX_TABLE
from reports.by import KEY_COLUMNS, by_shape, kernel_keys, key_notes, notes_once
from reports.categories import CATEGORIES, categorize_many
from reports.model_ranges import model_order
from reports.module_tree import TREE_COLUMN_TYPES, as_tree
from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.ask import answer
from reports.pipeline.options import ATTRIBUTION, BY
from reports.pipeline.report import Report, check_range_names, r1
from reports.pipeline.rules import CheckKey, CheckRule, RuleOutcome, share_bounds
from reports.pipeline.session import Session
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
    noun="ranges", null_labels={"range": "(whole export)"}, pinned=1,
    headers={"per_range_instance": "calls per range", "runner_up": "runner-up",
             "runner_up_share_pct": "runner-up %", "range_kernel_ns": "range gpu"})
# A module tree: the ranges indented by level, with their GPU time; module names need room.
DOMINANT_TREE_VIEW = replace(
    DOMINANT_VIEW, columns=["range", "range_kernel_ns", *DOMINANT_VIEW.columns[1:]],
    drop=(*DOMINANT_VIEW.drop, "per_range_instance", "category"), tree="range")


def _empty_row(range_name: str | None, range_instances: int | None) -> dict[str, Any]:
    return {"range": range_name, "kernel": None, "category": None, "share_pct": None,
            "total_ns": 0, "instances": 0, "range_instances": range_instances,
            "per_range_instance": None, "runner_up": None, "runner_up_share_pct": None,
            "range_kernel_ns": 0, "category_shares": {}}


class _Grouped:
    """Kernel time per (group, kernel name) and per (group, category), vectorized."""

    def __init__(self, group: np.ndarray, kname: np.ndarray, dur: np.ndarray,
                 cat_code: np.ndarray, ncat: int):
        # (group, kernel name) ranked by group_ids
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


def dominant(s: Session, range_names: list[str] | None = None,
             attribution: str = "all", by: str | None = None) -> Report:
    """The dominant kernel of the whole export and of each (shown) range name; ``by``: per
    device, process or stream (``reports.by``)."""
    s.require_kernels("the dominant-kernel report")
    range_names = list(range_names or []) or None
    if range_names and not s.has_ranges:
        s.export.require(NVTX_TABLE, "per-range dominant kernels")
    if by is not None:
        return _by_key(s, by, range_names, attribution)
    if s.ranges is None:
        return dominant_report(s.kernels, None, None, None, range_names=None, rules=s.rules,
                               notes=s.notes)
    s.keep_calls_for(range_names)
    names = s.names()
    report = dominant_report(s.kernels, s.ranges, names, s.shown_pairs(s.pairs(attribution)),
                             range_names=range_names, attribution=attribution, rules=s.rules,
                             instances=s.shown_instances(names),
                             filtered=s.options.filtered, notes=s.notes)
    report.notes += s.operator_notes() + s.filter_notes()
    tree = s.module_tree() if not range_names else None
    if tree is not None:
        report = as_tree(report, tree, pinned=1, weight=lambda r: r["range_kernel_ns"])
    return report


def _by_key(s: Session, by: str, range_names: list[str] | None, attribution: str) -> Report:
    """``dominant`` per device, process or stream: each key's kernels and the instances that
    launched them (``--by process``: every instance of the process)."""
    s.load("kernel_ids")
    k = s.kernels
    assert k is not None
    key_code, keys = kernel_keys(k, by)
    has_ranges = s.ranges is not None
    if has_ranges:
        s.keep_calls_for(range_names)
        names = s.names()
        p = s.shown_pairs(s.pairs(attribution))
        r_pid = pid_of(s.ranges.tid) if s.ranges is not None else None
    rows, notes = [], []
    for c, key in enumerate(keys):
        mine = np.flatnonzero(key_code == c)
        pos = np.full(len(k), -1, dtype=np.int64)
        pos[mine] = np.arange(mine.size)
        if not has_ranges:
            rep = dominant_report(k.take(mine), None, None, None, rules=s.rules, notes=s.notes)
        else:
            sel = pos[p.kernel_idx] >= 0
            sub = Pairs(range_idx=p.range_idx[sel], kernel_idx=pos[p.kernel_idx[sel]])
            if by == "process" and r_pid is not None:
                shown = s.shown()
                own = (r_pid == key["pid"]) & (shown if shown is not None else True)
                inst = np.bincount(names.code[own & (names.code >= 0)],
                                   minlength=len(names.names))
            else:
                launched = np.unique(sub.range_idx)
                inst = np.bincount(names.code[launched][names.code[launched] >= 0],
                                   minlength=len(names.names))
            rep = dominant_report(k.take(mine), s.ranges, names, sub, range_names=range_names,
                                  attribution=attribution, rules=s.rules, instances=inst,
                                  filtered=s.options.filtered, notes=s.notes)
        rows += [{**key, **row} for row in rep.rows]
        notes.append(rep.notes)
    extra = key_notes(by) + (s.operator_notes() + s.filter_notes() if has_ranges else [])
    key_cols = KEY_COLUMNS[by]
    return Report(rows=rows, columns=key_cols + DOMINANT_COLUMNS,
                  notes=notes_once(*notes) + extra,
                  sentences=[", ".join(f"{c} {row[c]}" for c in key_cols) + f": {sentence(row)}"
                             for row in rows],
                  title=f"Dominant kernel per range, by {by}")


def dominant_report(k: Kernels | None, r: Ranges | None, names: RangeNames | None,
                    p: Pairs | None, *, range_names: list[str] | None = None,
                    attribution: str = "all", rules: list | None = None,
                    instances: np.ndarray | None = None, filtered: bool = False,
                    notes: list[str] | None = None) -> Report:
    """The whole-export row, then one row per range name (see the module docstring).
    ``names`` must be complete; ``p`` are the pairs to count (already filtered to the shown
    ranges: ``filtered`` says whether a filter chose them); ``instances`` the shown instances
    per name code (default: all). ``names`` and ``p`` are None when the export has no NVTX
    ranges."""
    assert k is not None and k.launch_tid is not None
    notes = list(notes or [])
    categories = categorize_many(k.names, rules)
    cat_names = list(CATEGORIES) + sorted(set(categories) - set(CATEGORIES))
    cat_code = np.array([cat_names.index(c) for c in categories], dtype=np.int64)

    def whole_export() -> _Grouped:
        return _Grouped(np.zeros(len(k), dtype=np.int64), k.name_code, k.duration,
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
        let_go_fields(names)  # the gather mapped the code of nearly every range
        pk = p.kernel_idx
        if attribution == "all" and len(p):
            # each kernel once per range name, even inside nested same-name ranges
            pname, pk = distinct_pairs(pname, pk, len(names.names))
        let_go_fields(k, p)
        kdur = gather(k.end, pk)  # a block at a time: pages of a window of kernels
        kdur -= gather(k.start, pk)
        return _Grouped(pname, gather(k.name_code, pk), kdur, cat_code, len(cat_names))

    whole, grouped = whole_export(), per_range_name()
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


def _dominant_row(s: Session, rng: str | None) -> dict[str, Any]:
    report = answer(s, ANALYSIS, range_names=[rng] if rng is not None else None)
    return report.rows[1] if rng is not None else report.rows[0]


def _dominant_check(s: Session, rule: CheckRule,
                    baseline: Session | None, alpha: float) -> RuleOutcome:
    row, v = _dominant_row(s, rule.range), rule.values
    if row.get("kernel") is None:
        return RuleOutcome(False, None, rule.name.split(": ", 1)[-1], "no kernels attributed")
    kernel = shorten(row["kernel"], 60, signature=True)
    if rule.assertion == "dominant_category":
        return RuleOutcome(row["category"] == v["category"], row["category"], v["category"],
                       f"dominant kernel {kernel} ({row['category']}, {row['share_pct']:g}%)")
    return RuleOutcome(bool(v["regex"].search(row["kernel"])), row["kernel"],
                   f"/{v['regex'].pattern}/", f"dominant kernel {kernel} "
                   f"({row['share_pct']:g}%)")


def _share_check(s: Session, rule: CheckRule,
                 baseline: Session | None, alpha: float) -> RuleOutcome:
    row, v = _dominant_row(s, rule.range), rule.values
    share = float((row.get("category_shares") or {}).get(v["category"], 0.0))
    ok = share >= v.get("min_share_pct", -1) and share <= v.get("max_share_pct", 101)
    return RuleOutcome(ok, share, share_bounds(v), f"{v['category']} is {share:g}% of the GPU time")


def _share_name(where: str, v: dict[str, Any]) -> str:
    return f"{where}: {v['category']} share {share_bounds(v)}"


ANALYSIS = Analysis(
    name="dominant", bytes_per_row=5,
    help="""Which kernel dominates: for the whole export and for each NVTX range.

    One row per range: the dominant kernel, its share of the range's GPU time, its calls per
    range instance, the runner-up and the kernel-category mix. `--format text` gives one
    sentence per range. Several exports or a sweep folder: one table with a `config` column.
    Module ranges (`nsys-mine profile --nvtx modules`) come as the model's module tree:
    indented by level, with each range's GPU time, and `depth` and `parent` in JSON and CSV.

    Examples: `nsys-mine dominant run.sqlite --within measure` ·
    `nsys-mine dominant sweep/ --range forward --within measure --format text`
    """,
    run=dominant, inputs="exports", needs=("kernels", "launches", "ranges", "names"),
    options=("within", "merge_op_ids", "name_kind", "rules", "depth", "match", "nsys",
             "cache", "graph_attribution"),
    defaults={"merge_op_ids": "auto"},
    params=(Param("range_names", ("--range",), "Only these ranges (repeat the option for "
                  "several).", metavar="NAME", multiple=True), ATTRIBUTION, BY),
    columns=DOMINANT_COLUMNS, view=DOMINANT_VIEW, tree_view=DOMINANT_TREE_VIEW,
    title="Dominant kernel per range",
    shape=lambda params: by_shape(DOMINANT_COLUMNS, DOMINANT_VIEW, params["by"]),
    column_types=TREE_COLUMN_TYPES,
    order=50,
    checks=(
        CheckKey("dominant_category", "category", _dominant_check, order=2,
                 describe=lambda where, v: f"{where}: dominant kernel is {v['category']}"),
        CheckKey("dominant_kernel", "regex", _dominant_check, order=3,
                 describe=lambda where, v: f"{where}: dominant kernel matches "
                                           f"/{v['regex'].pattern}/"),
        CheckKey("category", "share", _share_check, order=4, describe=_share_name),
    ),
)
