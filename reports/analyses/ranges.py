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
from typing import Any, Callable, Iterator

import numpy as np

from nsys_parsers.arrays import (
    ROWS,
    Grouping,
    distinct_pairs,
    group_ids,
    is_sorted,
    let_go,
    let_go_all,
    let_go_fields,
    runs_by_code,
    sample_bounds,
    sorted_unique,
)
from nsys_parsers.attribution import Pairs, innermost, pair_chunks
from nsys_parsers.cache import held
from nsys_parsers.errors import BadOption
from nsys_parsers.ids import pid_of, tid_of
from nsys_parsers.kernels import Kernels
from nsys_parsers.names import RangeNames
from nsys_parsers.nesting import nesting_depth
from nsys_parsers.ranges import Ranges
from nsys_parsers.schema import NVTX_TABLE
from reports.by import KEY_COLUMNS, by_shape, kernel_keys, notes_once
from reports.module_tree import TREE_COLUMN_TYPES, as_tree
from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.options import BY
from reports.pipeline.report import Report, group_stats, group_stats_of, rows_of
from reports.pipeline.rules import CheckKey, CheckRule, RuleOutcome
from reports.pipeline.session import Session
from reports.render import View, human_ns
from reports.render.rows import ColumnRows

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


def range_summary(s: Session, instances: bool = False, by: str | None = None) -> Report:
    """The NVTX range summary of a session (nsys nvtx_sum, plus GPU time); ``instances``:
    one row per range instance with its GPU projection; ``by``: per device, process or
    stream (``reports.by``)."""
    s.export.require(NVTX_TABLE, "the NVTX range summary")
    if instances:
        if by is not None:
            raise BadOption("--by does not apply to --instances: each row is one instance, "
                            "with its pid and tid.")
        return range_instances(s)
    if by is not None:
        return _by_key(s, by)
    k = s.kernels
    p = inner = None
    if k is not None and len(k):
        p, inner = s.pairs("all"), s.pairs("innermost")
    report = range_report(s.ranges, k, s.names(), p, shown=s.shown(), inner=inner,
                          notes=s.notes)
    report.notes += s.operator_notes() + s.filter_notes()
    tree = s.module_tree()
    if tree is not None:  # siblings by GPU time, or CPU time without kernels
        key = "gpu_inclusive_ns" if any(r["gpu_inclusive_ns"] for r in report.rows) else "total_ns"
        report = as_tree(report, tree, weight=lambda r: r[key])
    return report


def _by_key(s: Session, by: str) -> Report:
    """The range summary per device, process or stream: the instances of each key value,
    with the kernels of that key they launched."""
    k = s.kernels
    r = s.ranges
    assert r is not None
    names = s.names()
    shown = s.shown()
    key_cols = KEY_COLUMNS[by]
    if by != "process" and (k is None or not len(k)):
        s.require_kernels(f"ranges by {by}")
    p = inner = None
    if k is not None and len(k):
        s.load("kernel_ids")
        k, r = s.kernels, s.ranges
        assert k is not None and r is not None
        p, inner = s.pairs("all"), s.pairs("innermost")
    parts: list[tuple[dict[str, Any], np.ndarray, Pairs | None, Pairs | None]] = []
    if by == "process":
        r_pid = pid_of(r.tid)
        for value in sorted_unique(r_pid).tolist():
            mine = np.flatnonzero(r_pid == value)
            parts.append(({"pid": value}, mine, *_pairs_of(p, inner, mine, len(r))))
    else:
        assert k is not None and p is not None and inner is not None
        k_code, keys = kernel_keys(k, by)
        pair_code = k_code[p.kernel_idx]
        for c, key in enumerate(keys):
            mine = sorted_unique(p.range_idx[pair_code == c])
            kp, ki = _pairs_of(p, inner, mine, len(r), kernels=k_code == c)
            parts.append((key, mine, kp, ki))
        launched = np.zeros(len(r), dtype=bool)
        launched[p.range_idx] = True
        none = np.flatnonzero(~launched)
        if none.size:
            parts.append(({c: None for c in key_cols}, none, None, None))
    rows: list[dict[str, Any]] = []
    notes: list[list[str]] = []
    for key, mine, kp, ki in parts:
        rep = range_report(r.take(mine), k, names.take(mine), kp,
                           shown=shown[mine] if shown is not None else None, inner=ki,
                           notes=s.notes)
        rows += [{**key, **row} for row in rep.rows]
        notes.append(rep.notes)
    rows.sort(key=lambda x: (-x["total_ns"], x["range"], x["style"],
                             *((x[c] is None, x[c] or 0) for c in key_cols)))
    if by == "process":
        extra = ["one row per range and process: a range instance counts for the process of "
                 "its thread."]
    else:
        extra = [f"one row per range and {by}: a range instance counts for the {by}s of the "
                 f"kernels it launched; instances that launched no kernel have no {by}."]
    return Report(rows=rows, columns=key_cols + RANGE_COLUMNS,
                  notes=notes_once(*notes) + extra + s.operator_notes() + s.filter_notes(),
                  title=f"NVTX ranges by {by}")


def _pairs_of(p: Pairs | None, inner: Pairs | None, mine: np.ndarray, n: int,
              kernels: np.ndarray | None = None) -> tuple[Pairs | None, Pairs | None]:
    """The pairs of the ranges ``mine`` (renumbered in that order), of the ``kernels`` (a
    mask) when given."""
    if p is None or inner is None:
        return None, None
    pos = np.full(n, -1, dtype=np.int64)
    pos[mine] = np.arange(mine.size)

    def sub(x: Pairs) -> Pairs:
        sel = pos[x.range_idx] >= 0
        if kernels is not None:
            sel &= kernels[x.kernel_idx]
        return Pairs(range_idx=pos[x.range_idx[sel]], kernel_idx=x.kernel_idx[sel])
    return sub(p), sub(inner)


INSTANCE_COLUMNS = [
    "range", "style", "pid", "tid", "start_ns", "duration_ns", "gpu_start_ns",
    "gpu_duration_ns", "gpu_ops", "depth",
]
INSTANCE_VIEW = View(
    columns=["start_ns", "duration_ns", "gpu_start_ns", "gpu_duration_ns", "gpu_ops", "depth",
             "pid", "tid", "style", "range"],
    drop=("depth", "style", "tid", "gpu_start_ns"), noun="range instances",
    hide_if_constant=("pid", "tid", "style"),
    headers={"gpu_start_ns": "gpu start", "gpu_duration_ns": "gpu time",
             "gpu_ops": "gpu ops", "duration_ns": "cpu time"})


def range_instances(s: Session) -> Report:
    """One row per (shown) range instance: its CPU-side start and duration and its GPU
    projection (nsys nvtxgpuproj): the first start to the last end of the GPU operations
    (kernels, memcpy, memset) launched inside it, and how many launch calls made them.

    A range's values are held in scratch files (``cache.held``) and the rows are ordered by
    start (ties: by depth, then row) with one stable sort of the starts: what the answer
    holds in memory grows by about 13 bytes a range (the order, and whether it launched)."""
    r = s.ranges
    assert r is not None
    names = s.names()
    notes = list(s.notes)
    first, span, count = _projection(s, r, notes)
    shown = s.shown()
    depth = nesting_depth(r)
    order = by_start_then_depth(r.start, depth, shown)
    has = np.empty(order.size, dtype=bool)
    cross = 0
    for a in range(0, order.size, ROWS):
        at = order[a:a + ROWS]
        np.greater(count[at], 0, out=has[a:a + ROWS])
        cross += int(r.cross_thread[at].sum())
        let_go_all((count, r.cross_thread))
    rows = ColumnRows(order.size, _instance_columns(
        order, names, r, first, span, has, count, depth))
    notes.append(f"{int(has.sum()):,} of {order.size:,} instances launched GPU operations: "
                 f"gpu start and time run from the first one's start to the last one's end "
                 f"(the GPU projection of nsys's nvtxgpuproj); gpu ops counts their launch "
                 f"calls.")
    if cross:
        notes.append(f"{cross} start/end ranges ended on another thread: no GPU projection "
                     f"(as nsys).")
    return Report(rows=rows, columns=INSTANCE_COLUMNS,
                  notes=notes + s.operator_notes() + s.filter_notes(),
                  title="NVTX range instances")


def by_start_then_depth(start: np.ndarray, depth: np.ndarray, keep: np.ndarray | None
                        ) -> np.ndarray:
    """The rows (where the mask ``keep`` is set, else all) ordered by start, ties by depth,
    then by row: what ``np.lexsort((depth, start))`` of those rows gives, in ``cache.held``
    (32-bit rows where they fit), never a sort of every row at once. The rows are put in
    buckets of about ``ROWS`` by their start (``sample_bounds``: rows that start together
    share a bucket), placed bucket by bucket in row order by a counting sort
    (``runs_by_code``), and each bucket sorted on its own."""
    n = start.size
    m = n if keep is None else int(np.count_nonzero(keep))

    def kept() -> Iterator[np.ndarray]:  # each block's pages let go once it is sampled
        for a in range(0, n, ROWS):
            part = start[a:a + ROWS]
            yield part if keep is None else part[keep[a:a + ROWS]]
            let_go(start[a:a + ROWS])
    bounds = sample_bounds(kept(), m)
    bucket = held(n, np.int32)
    for a in range(0, n, ROWS):
        np.copyto(bucket[a:a + ROWS], np.searchsorted(bounds, start[a:a + ROWS], side="right"),
                  casting="unsafe")
        let_go_all((start[a:a + ROWS], bucket))
    order, at = runs_by_code(bucket, bounds.size + 1, keep, alloc=held)
    del bucket
    for b in range(bounds.size + 1):
        rows = order[at[b]:at[b + 1]]
        if rows.size > 1:
            rows[...] = rows[np.lexsort((depth[rows], start[rows]))]  # stable: rows in order
        let_go_all((order, start, depth))
    return order


def _projection(s: Session, r: Ranges, notes: list[str]
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Of each range, the first start and the span (to the last end) of the GPU operations
    launched inside it, and how many launch calls made them (-1, 0, 0: none), reduced a
    chunk of pairs at a time into scratch arrays (``cache.held``), their pages and those of
    the operations' columns gathered let go after each chunk; the operations are let go
    before the rows are sorted."""
    n = len(r)
    first, last, count = held(n, np.int64), held(n, np.int64), held(n, np.int64)
    for a in range(0, n, ROWS):
        first[a:a + ROWS], last[a:a + ROWS], count[a:a + ROWS] = -1, -1, 0
        let_go_all((first, last, count))
    ops = s.gpu_ops(launches=True, keep=False)
    if ops is None:
        notes.append("no CUDA kernels, memcpy or memset were traced: no GPU projection; "
                     "profile with `nsys profile --trace=cuda,nvtx`.")
        _spans(first, last, count)
        return first, last, count
    assert ops.launch_tid is not None
    for p in pair_chunks(ops.as_launched(), r):  # never every pair at once
        if len(p) == 0:
            continue
        # a range's pairs are all in one chunk, whose ranges are a run of rows
        base = int(p.range_idx.min())
        lo = np.full(int(p.range_idx.max()) - base + 1, np.iinfo(np.int64).max,
                     dtype=np.int64)
        np.minimum.at(lo, p.range_idx - base, ops.start[p.kernel_idx])
        at = sorted_unique(p.range_idx)
        first[at] = lo[at - base]
        np.maximum.at(last, p.range_idx, ops.end[p.kernel_idx])
        # launch calls, not operations (nsys counts distinct correlationIds)
        _, (call_range, _) = group_ids(p.range_idx, ops.correlation[p.kernel_idx])
        np.add.at(count, call_range, 1)
        let_go_all((first, last, count, ops.start, ops.end, ops.correlation))
    no_launch = 0
    for a in range(0, len(ops), ROWS):  # a block at a time: the column's pages let go
        no_launch += int(np.count_nonzero(ops.launch_tid[a:a + ROWS] < 0))
        let_go(ops.launch_tid[a:a + ROWS])
    if no_launch:
        notes.append(f"{no_launch:,} of {len(ops):,} GPU operations have no launch record "
                     f"(trimmed export): they are in no range's projection.")
    _spans(first, last, count)
    return first, last, count


def _spans(first: np.ndarray, last: np.ndarray, count: np.ndarray) -> None:
    """``last`` turned into the span from ``first`` in place (0 where nothing launched), a
    block at a time."""
    for a in range(0, first.size, ROWS):
        f, la = first[a:a + ROWS], last[a:a + ROWS]
        la -= f
        la[count[a:a + ROWS] == 0] = 0
        let_go_all((first, last, count))


def _instance_columns(order: np.ndarray, names: RangeNames, r: Ranges, first: np.ndarray,
                      span: np.ndarray, has: np.ndarray, count: np.ndarray, depth: np.ndarray
                      ) -> dict[str, Callable[[slice], list[Any]]]:
    """The columns of ``range_instances``, each a function of a slice of its rows (the
    instances in ``order``), made when they are written."""
    def at_rows(values: np.ndarray, at: slice) -> np.ndarray:
        """``values`` of the rows of the slice; the mapped pages read are let go once a
        block (``ROWS``) of rows is passed (rows in order of start: a window of time)."""
        got = values[order[at]]
        if (at.stop or 0) // ROWS != (at.start or 0) // ROWS:
            let_go(values)
        return got

    def maybe(values: np.ndarray) -> Callable[[slice], list[Any]]:
        return lambda at: [v if h else None for v, h in zip(at_rows(values, at).tolist(),
                                                           has[at].tolist())]
    return {
        "range": lambda at: [names.names[c] if c >= 0 else None
                             for c in at_rows(names.code, at).tolist()],
        "style": lambda at: ["PushPop" if x else "StartEnd"
                             for x in at_rows(r.pushpop, at).tolist()],
        "pid": lambda at: pid_of(at_rows(r.tid, at)).tolist(),
        "tid": lambda at: tid_of(r.tid[order[at]]).tolist(),
        "start_ns": lambda at: r.start[order[at]].tolist(),
        "duration_ns": lambda at: (at_rows(r.end, at) - at_rows(r.start, at)).tolist(),
        "gpu_start_ns": maybe(first),
        "gpu_duration_ns": maybe(span),
        "gpu_ops": lambda at: at_rows(count, at).tolist(),
        "depth": lambda at: at_rows(depth, at).tolist(),
    }


def range_report(r: Ranges | None, k: Kernels | None, names: RangeNames, p: Pairs | None,
                 shown: np.ndarray | None = None, inner: Pairs | None = None,
                 notes: list[str] | None = None) -> Report:
    """Rows of RANGE_COLUMNS from ranges, their complete names, the kernels (None: not
    traced) and the ``all`` attribution pairs (None without kernels). ``shown``: which range
    instances count (the depth/match filters); exclusive time is still decided among all
    ranges. ``inner``: the ``innermost`` pairs of ``p``, if known."""
    assert r is not None
    notes = list(notes or [])
    tabled = Grouping.of(names.code, r.pushpop) if shown is None else None
    gid: np.ndarray | Grouping
    if tabled is not None:  # the group of a range computed when asked, never held for all
        gid, (g_code, g_pushpop) = tabled, tabled.values
        st = group_stats_of(lambda: ((tabled[rows], values) for rows, values in r.durations()),
                            tabled.ngroups)
    elif shown is None:
        gid, (g_code, g_pushpop) = group_ids(names.code, r.pushpop)
        st = group_stats(gid, r.duration, g_code.size)
    else:
        rows_idx = np.flatnonzero(shown)
        sub_gid, (g_code, g_pushpop) = group_ids(names.code[rows_idx], r.pushpop[rows_idx])
        st = group_stats(sub_gid, r.duration[rows_idx], g_code.size)
        gid = np.full(len(r), -1, dtype=np.int64)  # group of each range; -1: not shown
        gid[rows_idx] = sub_gid
        del sub_gid, rows_idx
    ng = g_code.size
    zeros = np.zeros(ng, dtype=np.int64)
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
    let_go_fields(r, names)
    if k is not None and len(k) and p is not None and len(p):
        if tabled is not None:  # every range has a group: every pair counts
            p_range, p_kernel = p.range_idx, p.kernel_idx
        else:
            sel = gid[p.range_idx] >= 0
            p_range, p_kernel = p.range_idx[sel], p.kernel_idx[sel]
            del sel
        excl = _exclusive(k, r, p, inner, gid, ng)
        let_go_fields(k, r, p, inner)
        kinst, incl = _inclusive(k, gid, p_range, p_kernel, ng)
        let_go_fields(k, p)
        span = _span(k, gid, p_range, p_kernel, ng)
        let_go_fields(k, p)
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


def _exclusive(k: Kernels, r: Ranges, p: Pairs, inner: Pairs | None, gid: np.ndarray | Grouping,
               ng: int) -> np.ndarray:
    """Kernel time per group of the kernels whose innermost range is in the group."""
    inner = innermost(p, r) if inner is None else inner
    inner_g = gid[inner.range_idx]
    ok = inner_g >= 0
    return np.bincount(inner_g[ok], weights=k.duration[inner.kernel_idx[ok]],
                       minlength=ng).astype(np.int64)


def _inclusive(k: Kernels, gid: np.ndarray | Grouping, p_range: np.ndarray, p_kernel: np.ndarray,
               ng: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct kernels per group and their time (each kernel once per group)."""
    ug, uk = distinct_pairs(gid[p_range], p_kernel, ng)  # (group, kernel)
    return (np.bincount(ug, minlength=ng).astype(np.int64),
            np.bincount(ug, weights=k.duration[uk], minlength=ng).astype(np.int64))


def _span(k: Kernels, gid: np.ndarray | Grouping, p_range: np.ndarray, p_kernel: np.ndarray,
          ng: int) -> np.ndarray:
    """Per group, the sum over its instances of first kernel start to last kernel end."""
    if p_range.size == 0:  # no shown range launched a kernel
        return np.zeros(ng, dtype=np.int64)
    if is_sorted(p_range):  # pairs come range by range
        ri, pk = p_range, p_kernel
    else:
        order = np.argsort(p_range, kind="stable")
        ri, pk = p_range[order], p_kernel[order]
        del order
    # a block of whole instances at a time: the sums are of integer nanoseconds, exact in
    # float64 (below 2**53) in any order, so the same as at once
    total = np.zeros(ng)
    a, n = 0, ri.size
    while a < n:
        b = min(a + ROWS, n)
        if b < n:  # end the block where an instance ends (ri is sorted)
            cut = a + int(np.searchsorted(ri[a:b], ri[b], side="left"))
            b = cut if cut > a else a + int(np.searchsorted(ri[a:], ri[a], side="right"))
        blk_r, blk_k = np.asarray(ri[a:b]), np.asarray(pk[a:b])
        starts = np.flatnonzero(np.r_[True, blk_r[1:] != blk_r[:-1]])
        inst_first = np.minimum.reduceat(k.start[blk_k], starts)
        inst_last = np.maximum.reduceat(k.end[blk_k], starts)
        total += np.bincount(gid[blk_r[starts]], weights=inst_last - inst_first, minlength=ng)
        a = b
    return total.astype(np.int64)


def _min_instances(s: Session, rule: CheckRule,
                   baseline: Session | None, alpha: float) -> RuleOutcome:
    n = int(s.instances_of(rule.range or "").size)
    return RuleOutcome(n >= rule.values["min"], n, f">= {rule.values['min']}",
                   f"{n} instance(s) of {rule.range!r}")


def _max_gpu(s: Session, rule: CheckRule, baseline: Session | None, alpha: float) -> RuleOutcome:
    k = s.kernels
    if k is None:
        s.require_kernels("GPU time per instance")
        raise AssertionError("unreachable")
    if rule.range is None:
        per = float(k.duration.sum())
    else:
        each = s.instance_gpu_ns(rule.range, "all")
        per = float(each.mean()) if each.size else 0.0
    limit = rule.values["limit"]
    return RuleOutcome(per <= limit, per, f"<= {limit:g}", f"{human_ns(per)} of GPU time per "
                   f"instance")


def _max_cpu(s: Session, rule: CheckRule, baseline: Session | None, alpha: float) -> RuleOutcome:
    if rule.range is None:
        raise BadOption(f"rule {rule.index}: max_cpu_ns_per_instance needs a range.")
    cpu = s.instance_cpu_ns(rule.range)
    per = float(cpu.mean()) if cpu.size else 0.0
    limit = rule.values["limit"]
    return RuleOutcome(per <= limit, per, f"<= {limit:g}", f"{human_ns(per)} of CPU time per "
                   f"instance")


def _per_instance(unit: str) -> Callable[[str, dict[str, Any]], str]:
    return lambda where, v: f"{where}: {unit} time per instance <= {human_ns(v['limit'])}"


ANALYSIS = Analysis(
    # bytes_per_row holds for --instances too: it takes 828 MiB cold at x4800, where plain
    # ranges takes 841 (docs/PERFORMANCE.md, Memory)
    name="ranges", bytes_per_row=5,
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
    params=(Param("instances", ("--instances",), "One row per range instance: its start, "
                  "CPU time and GPU projection (first to last GPU operation launched inside, "
                  "as nsys nvtxgpuproj).", type=bool, default=False), BY),
    columns=RANGE_COLUMNS, view=RANGE_VIEW, tree_view=RANGE_TREE_VIEW, title="NVTX ranges",
    order=30,
    shape=lambda params: ((INSTANCE_COLUMNS, INSTANCE_VIEW) if params["instances"] else
                          by_shape(RANGE_COLUMNS, RANGE_VIEW, params["by"])),
    column_types=TREE_COLUMN_TYPES,
    checks=(
        CheckKey("min_instances", "count", _min_instances, needs_range=True, order=1,
                 describe=lambda where, v: f"{where}: at least {v['min']} instances"),
        CheckKey("max_gpu_ns_per_instance", "limit", _max_gpu, order=5,
                 describe=_per_instance("GPU")),
        CheckKey("max_cpu_ns_per_instance", "limit", _max_cpu, order=6,
                 describe=_per_instance("CPU")),
    ),
)
