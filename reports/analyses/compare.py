"""``compare``: how the kernel mix changes between two ranges or two exports.

A *side* is a range of an export (its instances, as ``within``/``depth``/``match`` show them)
or the whole export. For each side: the GPU time of every kernel launched inside it (each
kernel once, ``all`` attribution), summed by kernel category and by kernel, as a share of the
side's time, with calls per range instance so that runs with different step counts compare.
Categories of a side add up to 100. When a side is a whole export that has NVTX ranges, the
kernels launched outside every range are their own category row, ``(no range)``.

Kernels are matched across sides on a normalised name (``kernel_family``): template
arguments, parameter lists, the return type and tile/launch-shape suffixes set aside
(``ampere_sgemm_128x64_nn`` and ``ampere_sgemm_64x64_nn`` are one family), the exact names
kept in ``a_name``/``b_name``. Without kernels on either side (CPU-only captures) the sides'
ranges are compared by CPU time instead, and a note says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from nsys_parsers.arrays import let_go
from nsys_parsers.errors import BadOption
from reports.families import kernel_family
from reports.pipeline.analysis import READING_PANEL, Analysis, Param
from reports.pipeline.report import Report, r1
from reports.pipeline.session import Session
from reports.render import View

# a_per_instance / b_per_instance: calls per range instance (kernels: of the family;
# categories: of their kernels; CPU-only ranges: instances); ratio: b/a of the GPU (or CPU)
# time per range instance, which a_instance_ns / b_instance_ns give.
COMPARE_COLUMNS = [
    "level", "key", "a_share_pct", "b_share_pct", "a_total_ns", "b_total_ns",
    "a_per_instance", "b_per_instance", "delta_share_pct", "ratio", "a_instance_ns",
    "b_instance_ns", "category", "a_name", "b_name", "only_in",
]
COMPARE_VIEW = View(
    columns=["level", "a_share_pct", "b_share_pct", "delta_share_pct", "a_instance_ns",
             "b_instance_ns", "ratio", "a_per_instance", "b_per_instance", "only_in",
             "key"],
    drop=("only_in", ("a_per_instance", "b_per_instance"),
          ("a_instance_ns", "b_instance_ns")),
    noun="rows", hide_if_zero=("only_in",),
    headers={"a_instance_ns": "a per inst", "b_instance_ns": "b per inst",
             "a_per_instance": "a calls/inst", "b_per_instance": "b calls/inst"})
NO_RANGE = "(no range)"


@dataclass
class Side:
    """One side of a comparison: its label, and per kernel (exact name) the time, calls and
    category of the kernels inside it; or, without kernels, per range its CPU time."""

    label: str
    instances: int
    kernels: dict[str, tuple[float, int, str]]  # exact name -> (total ns, calls, category)
    ranges: dict[str, tuple[float, int]]  # CPU-only: range -> (total ns, instances)
    no_range_ns: float = 0.0


def side_of(analysis: Session, range_name: str | None, label: str) -> Side:
    """The kernels (or, without kernels, the ranges) of one side of a comparison."""
    from reports.categories import categorize_many

    analysis.load("kernels", "launches", "ranges")
    k, ranges = analysis.kernels, analysis.ranges
    if k is None or len(k) == 0:
        cpu: dict[str, tuple[float, int]] = {}
        if ranges is not None:
            names = analysis.names()
            rows = (analysis.instances_of(range_name) if range_name is not None
                    else np.arange(len(ranges)))
            if range_name is not None:  # the ranges nested in its instances, itself included
                r = ranges
                keep = np.zeros(len(r), dtype=bool)
                for i in rows:
                    keep |= (r.tid == r.tid[i]) & (r.start >= r.start[i]) & (r.end <= r.end[i])
                rows = np.flatnonzero(keep)
            dur = (ranges.end - ranges.start)[rows]
            codes = names.code[rows]
            for code in np.unique(codes[codes >= 0]):
                sel = codes == code
                cpu[names.names[code]] = (float(dur[sel].sum()), int(sel.sum()))
        inst = len(analysis.instances_of(range_name)) if range_name is not None else 1
        return Side(label, inst, {}, cpu)
    rest = range_name is None and ranges is not None and len(ranges) > 0
    if rest:
        chosen = analysis.kernels_in_ranges()  # the rest: in no range (``no_range``)
    else:
        chosen = np.zeros(len(k), dtype=bool)
        chosen[analysis.kernels_in(range_name)] = True
    # a block of kernels at a time: sums of integer nanoseconds, exact in float64
    no_range, m = 0, len(k.names)
    totals, calls = np.zeros(m), np.zeros(m, dtype=np.int64)
    for block, dur in k.durations():
        mine, code = chosen[block], k.name_code[block]
        totals += np.bincount(code[mine], weights=dur[mine], minlength=m)
        calls += np.bincount(code[mine], minlength=m)
        if rest:
            no_range += int(dur.sum() - dur[mine].sum())
        let_go(k.name_code[block])
    used = np.flatnonzero(calls)
    cats = categorize_many([k.names[i] for i in used], analysis.rules)
    kernels = {k.names[i]: (float(totals[i]), int(calls[i]), c) for i, c in zip(used, cats,
                                                                                 strict=True)}
    inst = len(analysis.instances_of(range_name)) if range_name is not None else 1
    return Side(label, max(inst, 1), kernels, {}, float(no_range))


def compare_sides(a: Side, b: Side) -> Report:
    """Category rows (shares add up to 100 per side), then kernel-family rows, each sorted by
    the larger share of the two sides."""
    notes = [f"a = {a.label} ({a.instances:,} instance{'s' if a.instances != 1 else ''}), "
             f"b = {b.label} ({b.instances:,} instance{'s' if b.instances != 1 else ''})"]
    if not a.kernels and not b.kernels:
        notes.append("no CUDA kernels on either side (CPU-only captures): ranges are compared "
                     "by CPU time; shares are of the side's summed range time.")
        return Report(rows=_rows("range", _cpu_items(a), _cpu_items(b), a, b), notes=notes,
                      columns=COMPARE_COLUMNS)
    cat_a, cat_b = _categories(a), _categories(b)
    rows = _rows("category", cat_a, cat_b, a, b)
    rows += _rows("kernel", _families(a), _families(b), a, b)
    only_a = sum(1 for r in rows if r["level"] == "kernel" and r["only_in"] == "a")
    only_b = sum(1 for r in rows if r["level"] == "kernel" and r["only_in"] == "b")
    if only_a or only_b:
        notes.append(f"kernel families on one side only: {only_a} in a, {only_b} in b "
                     f"(only_in); ratio is b/a per instance where both have it.")
    return Report(rows=rows, columns=COMPARE_COLUMNS, notes=notes)


# (total ns, calls, category, exact name) per key
Items = dict[str, tuple[float, int, str, str]]


def _categories(side: Side) -> Items:
    out: dict[str, list[Any]] = {}
    for _name, (total, calls, cat) in side.kernels.items():
        item = out.setdefault(cat, [0.0, 0, cat, ""])
        item[0] += total
        item[1] += calls
    if side.no_range_ns:
        out[NO_RANGE] = [side.no_range_ns, 0, "", ""]  # calls unknown: kernels outside
    return {key: (v[0], v[1], v[2], v[3]) for key, v in out.items()}


def _families(side: Side) -> Items:
    out: dict[str, list[Any]] = {}
    for name, (total, calls, cat) in side.kernels.items():
        fam = kernel_family(name)
        item = out.setdefault(fam, [0.0, 0, cat, name, 0.0])
        item[0] += total
        item[1] += calls
        if total > item[4]:  # the exact name shown is the family's biggest member
            item[3], item[4] = name, total
    return {key: (v[0], v[1], v[2], v[3]) for key, v in out.items()}


def _cpu_items(side: Side) -> Items:
    return {name: (total, n, "", name) for name, (total, n) in side.ranges.items()}


def _rows(level: str, a: Items, b: Items, side_a: Side, side_b: Side) -> list[dict[str, Any]]:
    grand_a = sum(v[0] for v in a.values())
    grand_b = sum(v[0] for v in b.values())
    rows = []
    for key in set(a) | set(b):
        ta, ca, cat_a, name_a = a.get(key, (0.0, 0, "", ""))
        tb, cb, cat_b, name_b = b.get(key, (0.0, 0, "", ""))
        share_a = r1(100 * ta / grand_a) if grand_a and key in a else None
        share_b = r1(100 * tb / grand_b) if grand_b and key in b else None
        per_a = ta / side_a.instances if key in a else None
        per_b = tb / side_b.instances if key in b else None
        rows.append({
            "level": level, "key": key,
            "a_share_pct": share_a, "b_share_pct": share_b,
            "a_total_ns": int(ta) if key in a else None,
            "b_total_ns": int(tb) if key in b else None,
            "a_per_instance": round(ca / side_a.instances, 2) if key in a else None,
            "b_per_instance": round(cb / side_b.instances, 2) if key in b else None,
            "delta_share_pct": r1((share_b or 0.0) - (share_a or 0.0)),
            "ratio": round(per_b / per_a, 3) if per_a and per_b is not None else None,
            "a_instance_ns": round(per_a, 1) if per_a is not None else None,
            "b_instance_ns": round(per_b, 1) if per_b is not None else None,
            "category": cat_a or cat_b or None,
            "a_name": name_a or None, "b_name": name_b or None,
            "only_in": None if key in a and key in b else ("a" if key in a else "b"),
        })
    rows.sort(key=lambda r: (-max(float(r["a_share_pct"] or 0), float(r["b_share_pct"] or 0)),
                             str(r["key"])))
    return rows


def compare(a: Session, other: Session | None = None, range_a: str | None = None,
            range_b: str | None = None) -> Report:
    """Two ranges of export a (``other`` None), or a range (or the whole) of two exports."""
    b = other
    name_a = a.export.source.name
    if b is None:
        side_a = side_of(a, range_a, range_a or "the whole export")
        side_b = side_of(a, range_b, range_b or "the whole export")
        title = f"Kernel mix of {name_a}: a = {side_a.label}, b = {side_b.label}"
    else:
        rb = range_b if range_b is not None else range_a
        side_a = side_of(a, range_a, f"{range_a or 'whole export'} of {name_a}")
        side_b = side_of(b, rb, f"{rb or 'whole export'} of {b.export.source.name}")
        title = f"Kernel mix: a = {side_a.label}, b = {side_b.label}"
    report = compare_sides(side_a, side_b)
    report.title = title
    return report


def _two_sides(params: dict[str, Any], sources: list[Path]) -> dict[str, Any]:
    if params["other"] is None and params["range_a"] is None and params["range_b"] is None:
        raise BadOption("compare needs two sides: --range NAME and/or --vs-range NAME of one "
                        "export (e.g. --range forward --vs-range step), or a second export.")
    return params


ANALYSIS = Analysis(
    name="compare", bytes_per_row=5,
    help="""How the kernel mix changes: two ranges of one export, or two exports, side by side.

    By kernel category and by kernel (matched on a name without template arguments and tile
    shapes): share of the side's GPU time, calls per range instance, the change.

    Examples: `nsys-mine compare run.sqlite --range forward --vs-range step` ·
    `nsys-mine compare fp32.sqlite bf16.sqlite --range forward`
    """,
    run=compare,
    options=("within", "merge_op_ids", "name_kind", "rules", "depth", "match", "nsys",
             "cache", "graph_attribution"),
    defaults={"merge_op_ids": "auto"},
    params=(
        Param("other", ("[EXPORT_B]",), "A second export to compare with the first (fp32 vs "
              "bf16, before vs after).", type=Path, argument=True, export=True),
        Param("range_a", ("--range",), "Side a: this range (default: the whole export).",
              metavar="NAME", panel=READING_PANEL),
        Param("range_b", ("--vs-range",), "Side b: this range (default: --range of the "
              "second export, or the whole export).", metavar="NAME", panel=READING_PANEL),
    ),
    validate=_two_sides, columns=COMPARE_COLUMNS, view=COMPARE_VIEW, order=100,
)
