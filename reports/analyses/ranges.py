"""NVTX range summary: CPU-side durations (nsys ``nvtx_sum``) plus the GPU time of the kernels
each range launched.

CPU columns are over all ranges of a name and style, including start/end ranges that ended on
another thread. GPU columns use the kernel attribution of ``nsys_parsers.attribution``:
``kernel_instances`` and ``gpu_inclusive_ns`` count each kernel launched inside any range of
that name once; ``gpu_exclusive_ns`` only kernels whose innermost range it is (these add up,
with the unattributed rest, to the total kernel time); ``gpu_span_ns`` sums, over instances,
first attributed kernel start to last attributed kernel end (the GPU projection). Rows: by
CPU time; for exports with module ranges (``--nvtx modules``), the module tree
(``reports.module_tree``: each row with its ``depth`` and ``parent``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np

from nsys_parsers.arrays import distinct_pairs, group_ids, is_sorted
from nsys_parsers.attribution import Pairs, innermost
from nsys_parsers.errors import BadOption
from nsys_parsers.kernels import Kernels
from nsys_parsers.names import RangeNames
from nsys_parsers.ranges import Ranges
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE
from reports.analysis import Analysis, CheckKey, Rule, Verdict
from reports.module_tree import as_tree
from reports.render import View, human_ns
from reports.report import Report, group_stats, rows_of
from reports.session import Session

RANGE_VIEW_COLUMNS = [
    "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns",
    "gpu_inclusive_ns", "gpu_exclusive_ns", "kernel_instances", "style", "range",
]
# People see the ranges with the most GPU time (CPU time when there are no kernels) first.
RANGE_VIEW = View(
    columns=RANGE_VIEW_COLUMNS,
    drop=("stddev_ns", "max_ns", "min_ns", "med_ns", "style", "kernel_instances",
          "gpu_exclusive_ns"),
    rank_by=("gpu_inclusive_ns", "total_ns"), noun="ranges",
    hide_if_zero=("gpu_inclusive_ns", "gpu_exclusive_ns", "kernel_instances"),
    hide_if_constant=("style",),
    headers={"gpu_inclusive_ns": "gpu incl", "gpu_exclusive_ns": "gpu excl",
             "gpu_span_ns": "gpu span", "kernel_instances": "kernels"})
RANGE_TREE_VIEW = replace(RANGE_VIEW, rank_by=(), tree="range")  # a module tree, in its order

RANGE_COLUMNS = [
    "range", "style", "instances", "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns",
    "stddev_ns", "kernel_instances", "gpu_inclusive_ns", "gpu_exclusive_ns", "gpu_span_ns",
]


def range_summary(s: Session) -> Report:
    """The NVTX range summary of a session (nsys nvtx_sum, plus GPU time)."""
    s.export.require(NVTX_TABLE, "the NVTX range summary")
    k = s.kernels
    p = inner = None
    if k is not None and len(k):
        p, inner = s.pairs("all"), s.pairs("innermost")
    report = range_report(s.ranges, k, s.names(), p, shown=s.shown(), inner=inner,
                          notes=s.notes)
    report.notes += s.merge_notes() + s.filter_notes()
    tree = s.module_tree()
    if tree is not None:  # siblings by GPU time, or CPU time without kernels
        key = "gpu_inclusive_ns" if any(r["gpu_inclusive_ns"] for r in report.rows) else "total_ns"
        report = as_tree(report, tree, RANGE_TREE_VIEW, weight=lambda r: r[key])
    return report


def range_report(r: Ranges | None, k: Kernels | None, names: RangeNames, p: Pairs | None,
                 shown: np.ndarray | None = None, inner: Pairs | None = None,
                 notes: list[str] | None = None) -> Report:
    """Rows of RANGE_COLUMNS from ranges, their complete names, the kernels (None: not
    traced) and the ``all`` attribution pairs (None without kernels). ``shown``: which range
    instances count (the depth/match filters); exclusive time is still decided among all
    ranges. ``inner``: the ``innermost`` pairs of ``p``, if known."""
    assert r is not None
    notes = list(notes or [])
    if shown is None:
        rows_idx = np.arange(len(r))
        gid, (g_code, g_pushpop) = group_ids(names.code, r.pushpop.astype(np.int64))
    else:
        rows_idx = np.flatnonzero(shown)
        sub_gid, (g_code, g_pushpop) = group_ids(names.code[rows_idx],
                                                 r.pushpop[rows_idx].astype(np.int64))
        gid = np.full(len(r), -1, dtype=np.int64)  # group of each range; -1: not shown
        gid[rows_idx] = sub_gid
    ng = g_code.size
    zeros = np.zeros(ng, dtype=np.int64)
    st = group_stats(gid[rows_idx], (r.end - r.start)[rows_idx], ng)
    if k is None:
        notes.append("CUDA kernels were not traced (no CUPTI_ACTIVITY_KIND_KERNEL table): CPU "
                     "times only (GPU columns 0); profile with `nsys profile --trace=cuda,nvtx` "
                     "for GPU time.")
    elif len(k):
        assert k.launch_tid is not None
        no_launch = int((k.launch_tid < 0).sum())
        if no_launch:
            notes.append(f"{no_launch} of {len(k)} kernels have no launch record (trimmed "
                         f"export): they cannot be attributed to ranges.")
    if k is not None and len(k) and p is not None and len(p):
        sel = gid[p.range_idx] >= 0
        p_range, p_kernel = p.range_idx[sel], p.kernel_idx[sel]
        excl = _exclusive(k, r, p, inner, gid, ng)
        kinst, incl = _inclusive(k, gid, p_range, p_kernel, ng)
        span = _span(k, gid, p_range, p_kernel, ng)
    else:
        excl, kinst, incl, span = zeros, zeros, zeros, zeros
    cross = int(r.cross_thread.sum())
    if cross:
        notes.append(f"{cross} start/end ranges ended on another thread: listed, but not used "
                     f"for kernel attribution (as nsys).")
    unclosed = int(r.unclosed.sum())
    if unclosed:
        notes.append(f"{unclosed} ranges were never closed: they end at the end of the capture.")
    range_names = names.names
    rows = rows_of({
        "range": [range_names[c] for c in g_code.tolist()],
        "style": ["PushPop" if s else "StartEnd" for s in g_pushpop.tolist()],
        "instances": st.count.tolist(),
        **st.columns(),
        "kernel_instances": kinst.tolist(),
        "gpu_inclusive_ns": incl.tolist(),
        "gpu_exclusive_ns": excl.tolist(),
        "gpu_span_ns": span.tolist(),
    })
    rows.sort(key=lambda x: (-x["total_ns"], x["range"], x["style"]))
    return Report(rows=rows, columns=RANGE_COLUMNS, notes=notes)


def _exclusive(k: Kernels, r: Ranges, p: Pairs, inner: Pairs | None, gid: np.ndarray,
               ng: int) -> np.ndarray:
    """Kernel time per group of the kernels whose innermost range is in the group."""
    inner = innermost(p, r) if inner is None else inner
    inner_g = gid[inner.range_idx]
    ok = inner_g >= 0
    return np.bincount(inner_g[ok], weights=k.duration[inner.kernel_idx[ok]],
                       minlength=ng).astype(np.int64)


def _inclusive(k: Kernels, gid: np.ndarray, p_range: np.ndarray, p_kernel: np.ndarray,
               ng: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct kernels per group and their time (each kernel once per group)."""
    ug, uk = distinct_pairs(gid[p_range], p_kernel, ng)  # (group, kernel)
    return (np.bincount(ug, minlength=ng).astype(np.int64),
            np.bincount(ug, weights=k.duration[uk], minlength=ng).astype(np.int64))


def _span(k: Kernels, gid: np.ndarray, p_range: np.ndarray, p_kernel: np.ndarray,
          ng: int) -> np.ndarray:
    """Per group, the sum over its instances of first kernel start to last kernel end."""
    if p_range.size == 0:  # no shown range launched a kernel
        return np.zeros(ng, dtype=np.int64)
    if is_sorted(p_range):  # pairs come range by range
        ri, pk = p_range, p_kernel
    else:
        order = np.argsort(p_range, kind="stable")
        ri, pk = p_range[order], p_kernel[order]
    starts = np.flatnonzero(np.r_[True, ri[1:] != ri[:-1]])
    inst_first = np.minimum.reduceat(k.start[pk], starts)
    inst_last = np.maximum.reduceat(k.end[pk], starts)
    return np.bincount(gid[ri[starts]], weights=inst_last - inst_first,
                       minlength=ng).astype(np.int64)


def _min_instances(s: Session, rule: Rule, baseline: Session | None, alpha: float) -> Verdict:
    n = int(s.instances_of(rule.range or "").size)
    return Verdict(n >= rule.values["min"], n, f">= {rule.values['min']}",
                   f"{n} instance(s) of {rule.range!r}")


def _max_gpu(s: Session, rule: Rule, baseline: Session | None, alpha: float) -> Verdict:
    k = s.kernels
    if k is None:
        s.export.require(KERNEL_TABLE, "GPU time per instance")
        raise AssertionError("unreachable")
    if rule.range is None:
        per = float(k.duration.sum())
    else:
        each = s.instance_gpu_ns(rule.range, "all")
        per = float(each.mean()) if each.size else 0.0
    limit = rule.values["limit"]
    return Verdict(per <= limit, per, f"<= {limit:g}", f"{human_ns(per)} of GPU time per "
                   f"instance")


def _max_cpu(s: Session, rule: Rule, baseline: Session | None, alpha: float) -> Verdict:
    if rule.range is None:
        raise BadOption(f"rule {rule.index}: max_cpu_ns_per_instance needs a range.")
    cpu = s.instance_cpu_ns(rule.range)
    per = float(cpu.mean()) if cpu.size else 0.0
    limit = rule.values["limit"]
    return Verdict(per <= limit, per, f"<= {limit:g}", f"{human_ns(per)} of CPU time per "
                   f"instance")


def _per_instance(unit: str) -> Callable[[str, dict[str, Any]], str]:
    return lambda where, v: f"{where}: {unit} time per instance <= {human_ns(v['limit'])}"


def _page(ctx: Any) -> list[Any]:
    """The range table, in the model's nesting order for exports of this project's model, as
    the module tree for exports with module ranges."""
    from nvtx_model.nvtx_ranges import HEADLINE_RANGES
    from reports.analyses.dominant import model_order
    from reports.page.model import Section, Table

    if not ctx.has_ranges:
        return []
    ranges = ctx.answer("ranges")
    order = {n: i for i, n in enumerate(HEADLINE_RANGES)}
    view, rows = ranges.view or RANGE_VIEW, ranges.rows
    if ranges.view is None and model_order([r["range"] for r in rows]):
        view = replace(RANGE_VIEW, rank_by=())
        rows = sorted(rows, key=lambda r: (order.get(r["range"], len(order)), r["range"]))
    return [Section("NVTX ranges", "ranges", [Table(rows, view, notes=ranges.notes,
                                                    top=ctx.top)])]


ANALYSIS = Analysis(
    name="ranges",
    help="""NVTX range summary: CPU durations (as nsys nvtx_sum) plus the GPU time of their kernels.

    Several exports or a sweep folder: one table with a `config` column. Module ranges
    (`nsys-mine profile --nvtx modules`) come as the model's module tree: indented by level,
    with `depth` and `parent` in JSON and CSV; `--depth N` counts module levels there.

    Examples: `nsys-mine ranges run.sqlite --depth 2` ·
    `nsys-mine ranges a.sqlite b.sqlite --match forward --match backward`
    """,
    run=range_summary, inputs="exports",
    needs=("kernels", "launches", "ranges", "names"),
    options=("within", "merge_op_ids", "depth", "match", "nsys", "cache",
             "graph_attribution"),
    columns=RANGE_COLUMNS, view=RANGE_VIEW, title="NVTX ranges", order=30,
    page=_page, page_order=50,
    checks=(
        CheckKey("min_instances", "count", _min_instances, needs_range=True, order=1,
                 describe=lambda where, v: f"{where}: at least {v['min']} instances"),
        CheckKey("max_gpu_ns_per_instance", "limit", _max_gpu, order=5,
                 describe=_per_instance("GPU")),
        CheckKey("max_cpu_ns_per_instance", "limit", _max_cpu, order=6,
                 describe=_per_instance("CPU")),
    ),
)
