"""Idle GPU gaps: where each (process, device) ran nothing, as nsys's ``gpu-starv`` rule finds
them, and what the host was doing then.

A gap is a hole in the union of the GPU operations of one (process, device) (kernels, memcpy
and memset, ``nsys_parsers.gpu_ops``) between its first start and last end, longer than
``--min-gap-ms`` (strictly, as gpu-starv: ``gap=<ms>``). As gpu-starv, the CUDA profiling
overhead (``PROFILER_OVERHEAD``: "CUDA profiling data flush overhead" ...) inside that span
counts as busy: those gaps are nsys's, not the program's. Rows by duration (longest first),
then start.

What people need to act on one, at the moment the gap starts, on the process's launching
threads (those that launched any GPU operation; all its threads where no launch is known):

    before_kernel, after_kernel   the operations (a kernel, ``memcpy Host-to-Device``,
           ``memset``) that end where the gap starts and start where it ends

    range  the innermost NVTX range open (the one that started last)
    api    the CUDA API call in flight (the one that started last)
    cause  sync: that call waits on the device (a synchronize, a blocking memcpy or memset,
           a free): the host waits, then works; api: another CUDA call (allocation, module
           load...); cpu: no CUDA call in flight, the CPU is not launching work; unknown:
           no CUDA API record covers that moment (a trimmed export, or no runtime trace)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.arrays import group_ids, sorted_unique
from nsys_parsers.cache import joined
from nsys_parsers.gpu_ops import KERNEL, MEMCPY, MEMSET, GpuOps
from nsys_parsers.ids import pid_of
from nsys_parsers.intervals import long_holes, open_at_grouped, open_at_some, span
from nsys_parsers.items import NVTX, names_of_ids
from nsys_parsers.kernels import LaunchThreads, api_base_name
from nsys_parsers.ranges import attributable_rows, is_domain_row
from nsys_parsers.schema import NVTX_TABLE
from reports.gpu_time import recorded_ops, require_gpu_ops
from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.report import Report, rows_of
from reports.pipeline.session import Session
from reports.render import View, human_ns

GAPS_COLUMNS = [
    "pid", "device", "start_ns", "end_ns", "duration_ns", "cause", "api", "range",
    "before_kernel", "after_kernel",
]
GAPS_VIEW = View(
    columns=["duration_ns", "pid", "device", "start_ns", "cause", "api", "range",
             "before_kernel", "after_kernel"],
    drop=("after_kernel", "before_kernel", "start_ns"), noun="gaps", rank_by=(),
    hide_if_zero=("api", "range"),
    hide_if_constant=("pid", "device"),
    headers={"before_kernel": "before", "after_kernel": "after"})
CAUSES = ("sync", "api", "cpu", "unknown")
# Calls that wait for the device: synchronizations, blocking copies and sets, frees.
WAITS = re.compile(r"Synchroniz|^cu(da)?Memcpy(?!.*Async)|^cu(da)?Memset(?!.*Async)|"
                   r"^cu(da)?(Mem)?Free")
OVERHEAD = "CUDA profiling overhead"
DEFAULT_MIN_GAP_MS = 1.0
# What the gaps look at in every API call and NVTX range, once, as a stream (the resolver's
# ``chunks``): memory holds a few chunks and what is open at a gap start, never the tables.
API_STREAM = ("api.start", "api.end", "api.tid", "api.correlation", "api.name_id")
NVTX_STREAM = tuple(f"nvtx.{k}" for k in NVTX)
FOREVER = np.iinfo(np.int64).max


def cause_of(api: str | None, covered: bool) -> str:
    if not covered:
        return "unknown"
    if api is None:
        return "cpu"
    return "sync" if WAITS.search(api) else "api"


def _causes(api: list[str | None], covered: np.ndarray) -> list[str]:
    """``cause_of`` of every gap (each API name judged once)."""
    seen: dict[tuple[str | None, bool], str] = {}
    return [seen.setdefault((a, c), cause_of(a, c)) if (a, c) not in seen else seen[(a, c)]
            for a, c in zip(api, covered.tolist())]


def _overhead(s: Session, pids: np.ndarray, first: np.ndarray, last: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(group, start, end) of the CUDA profiling overhead strictly inside each group's span
    (a process's overhead counts on each of its devices), as gpu-starv adds it."""
    empty = np.zeros(0, dtype=np.int64)
    if not s.export.has_table("PROFILER_OVERHEAD"):
        return empty, empty, empty
    rows = np.array(s.export.db.execute(Q.CUDA_PROFILER_OVERHEAD.sql(s.export)).fetchall(),
                    dtype=np.int64).reshape(-1, 3)
    if rows.size == 0:
        return empty, empty, empty
    o_pid = pid_of(rows[:, 2])
    groups, starts, ends = [], [], []
    for g, p in enumerate(pids.tolist()):
        inside = (o_pid == p) & (rows[:, 0] > first[g]) & (rows[:, 1] < last[g])
        groups.append(np.full(int(inside.sum()), g, dtype=np.int64))
        starts.append(rows[inside, 0])
        ends.append(rows[inside, 1])
    return np.concatenate(groups), np.concatenate(starts), np.concatenate(ends)


def op_labels(s: Session, ops: GpuOps, which: np.ndarray) -> list[str]:
    """The labels of the operations ``which`` (``len(ops)``: the profiling overhead): kernel
    names, ``memcpy Host-to-Device``..., ``memset``."""
    k, m = s.trace.kernels, s.trace.memops
    out = [OVERHEAD] * which.size
    real = np.flatnonzero(which < len(ops))
    op = which[real]
    for i, kind, row, code in zip(real.tolist(), ops.kind[op].tolist(), ops.row[op].tolist(),
                                  ops.name_code[op].tolist()):
        if kind == KERNEL and k is not None and code >= 0:
            out[i] = k.names[code]
        elif kind == MEMCPY and m is not None:
            c = int(m.kind[row])
            out[i] = f"memcpy {m.kind_labels.get(c, f'kind {c}')}"
        elif kind == MEMSET:
            out[i] = "memset"
    return out


def gaps_report(s: Session, min_gap_ms: float = DEFAULT_MIN_GAP_MS) -> Report:
    """The gaps of every (process, device) longer than ``min_gap_ms``, with what the host was
    doing when each started."""
    has_api = s.trace.has_api
    ops = require_gpu_ops(s, "GPU gaps", keep=False)
    notes: list[str] = []
    sub = recorded_ops(ops, notes)
    recorded = None if len(sub) == len(ops) else ops.start > 0
    gaps = _find_gaps(s, sub, min_gap_ms)
    del ops, sub  # the operations go before the passes over the API calls and ranges
    t = gaps.start
    # at each gap's start: the CUDA call in flight and the NVTX range open
    calls = _api_calls(s, gaps.pid, t)
    launched_by = calls.launched_by  # the thread of each operation's launch call
    if launched_by is not None and recorded is not None:
        launched_by = launched_by[recorded]
    launch_tids = (sorted_unique(launched_by[launched_by >= 0]) if launched_by is not None
                   else np.zeros(0, dtype=np.int64))
    unlaunched = (None if launched_by is None
                  else (int((launched_by < 0).sum()), int(launched_by.size)))
    del launched_by
    api = _api_in_flight(s, calls, gaps.pid, t, launch_tids)
    covered = calls.covered
    del calls
    rng = _range_open(s, gaps.pid, t, launch_tids)
    rows = rows_of({
        "pid": gaps.pid.tolist(), "device": gaps.device.tolist(), "start_ns": t.tolist(),
        "end_ns": gaps.end.tolist(), "duration_ns": gaps.duration.tolist(),
        "cause": _causes(api, covered), "api": api, "range": rng,
        "before_kernel": gaps.before, "after_kernel": gaps.after,
    })
    where = (f" that start inside {s.within!r} instances" if s.within is not None else "")
    notes.insert(0, f"{len(rows):,} gaps longer than {min_gap_ms:g} ms{where}: "
                    f"{human_ns(int(gaps.duration.sum()))} in all, of {human_ns(gaps.idle)} "
                    f"idle between the first and last GPU operation of each (process, "
                    f"device).")
    notes += _cause_notes(s, unlaunched, covered, has_api)
    return Report(rows=rows, columns=GAPS_COLUMNS, notes=notes,
                  sentences=[gap_sentence(r) for r in rows])


@dataclass
class _Gaps:
    """The gaps longer than the threshold, longest first (then by start)."""

    pid: np.ndarray
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    duration: np.ndarray
    before: list[str]  # the operation that ends where the gap starts
    after: list[str]  # and the one that starts where it ends
    idle: int  # all idle time, every hole counted


def _find_gaps(s: Session, sub: GpuOps, min_gap_ms: float) -> _Gaps:
    """The holes in each (process, device)'s operations and the profiling overhead, and of
    those the gaps (only these are kept: a hole is found between almost every two
    operations)."""
    gid, (pids, devices) = group_ids(sub.pid, sub.device, dtype=np.int32)
    first, last = span(gid, sub.start, sub.end, pids.size)
    o_group, o_start, o_end = _overhead(s, pids, first, last)
    start, end = sub.start, sub.end
    if o_group.size:  # joined in scratch files when large
        gid, start, end = (joined(list(pair)) for pair in
                           ((gid, o_group.astype(np.int32)), (start, o_start), (end, o_end)))
    h, idle = long_holes(gid, start, end, int(round(min_gap_ms * 1e6)))
    del gid, start, end
    big = np.arange(len(h))
    if s.within is not None:
        big = big[_starts_inside(s, pids[h.group[big]], h.start[big])]
    order = big[np.lexsort((h.start[big], -h.duration[big]))]
    g = h.group[order]
    before = op_labels(s, sub, h.before[order])  # past the operations: the overhead
    after = op_labels(s, sub, h.after[order])
    return _Gaps(pid=pids[g], device=devices[g], start=h.start[order], end=h.end[order],
                 duration=h.duration[order], before=before, after=after, idle=idle)


def _thread_filter(tid: np.ndarray, launch_tids: np.ndarray) -> np.ndarray:
    """Which of ``tid`` are launching threads, or threads of a process none of whose
    launches is known."""
    if tid.size == 0:
        return np.zeros(0, dtype=bool)
    pos = np.minimum(np.searchsorted(launch_tids, tid), max(launch_tids.size - 1, 0))
    launching = (launch_tids[pos] == tid) if launch_tids.size else np.zeros(tid.size, bool)
    known_pids = sorted_unique(pid_of(launch_tids))
    p = pid_of(tid)
    ppos = np.minimum(np.searchsorted(known_pids, p), max(known_pids.size - 1, 0))
    pid_known = (known_pids[ppos] == p) if known_pids.size else np.zeros(tid.size, bool)
    return launching | ~pid_known


@dataclass
class _Calls:
    """What one pass over the CUDA API calls finds (``_api_calls``)."""

    launched_by: np.ndarray | None  # per GPU operation: its launch call's thread (-1: none)
    covered: np.ndarray  # per gap: whether its process's calls span its start
    cols: dict[str, np.ndarray]  # the calls open at one of the gap starts (``API_STREAM``)


def _launch_keys(s: Session) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(globalPid, correlationId) of every GPU operation, in ``gpu_ops`` order (kernels and
    graph launches, then memcpy and memset), in those parts: what their launch calls are
    found by."""
    k, m = s.trace.kernels, s.trace.memops
    pid, corr = [], []
    if k is not None:
        assert k.pid is not None and k.correlation is not None, "load launch_ids"
        pid.append(k.pid)
        corr.append(k.correlation)
    if m is not None:
        pid.append(m.pid)
        corr.append(m.correlation)
    return pid, corr


def _api_calls(s: Session, gap_pid: np.ndarray, t: np.ndarray) -> _Calls:
    """One pass over the CUDA API calls, as a stream: the thread that launched each GPU
    operation (``kernels.LaunchThreads``: the narrowest call with its correlationId in its
    process), whether each gap's process has calls around its start, and the calls open at
    one of the gap starts (the candidates for the call in flight)."""
    empty = {name: np.zeros(0, dtype=np.int64) for name in API_STREAM}
    if not s.trace.has_api:
        return _Calls(None, np.zeros(t.size, dtype=bool), empty)
    launches = LaunchThreads(*_launch_keys(s))
    times = np.sort(t)
    pids = sorted_unique(gap_pid)
    lo = np.full(pids.size, FOREVER, dtype=np.int64)  # each process's first call start
    hi = np.full(pids.size, -1, dtype=np.int64)  # and last call end
    parts = []
    for c in s.trace.resolver.chunks(API_STREAM):
        start, end, tid = c["api.start"], c["api.end"], c["api.tid"]
        launches.add(start, end, tid, c["api.correlation"])
        if pids.size == 0 or start.size == 0:
            continue
        p = pid_of(tid)
        code = np.minimum(np.searchsorted(pids, p), pids.size - 1)
        mine = pids[code] == p
        np.minimum.at(lo, code[mine], start[mine])
        np.maximum.at(hi, code[mine], end[mine])
        keep = np.flatnonzero(open_at_some(start, end, times))
        parts.append({name: values[keep] for name, values in c.items()})
    code = np.searchsorted(pids, gap_pid)
    covered = (lo[code] <= t) & (t < hi[code]) if t.size else np.zeros(0, dtype=bool)
    cols = ({name: np.concatenate([p[name] for p in parts]) for name in API_STREAM}
            if parts else empty)
    return _Calls(launches.found, covered, cols)


def _api_in_flight(s: Session, calls: _Calls, gap_pid: np.ndarray, t: np.ndarray,
                   launch_tids: np.ndarray) -> list[str | None]:
    """The CUDA call in flight at each gap start on the launching threads (None: none):
    of the calls open then, the one that started last."""
    c = calls.cols
    use = np.flatnonzero(_thread_filter(c["api.tid"], launch_tids))
    if use.size == 0 or t.size == 0:
        return [None] * t.size
    c_pid = pid_of(c["api.tid"][use])
    codes = sorted_unique(np.concatenate([c_pid, gap_pid]))
    hit = open_at_grouped(np.searchsorted(codes, c_pid), c["api.start"][use],
                          c["api.end"][use], np.searchsorted(codes, gap_pid), t)
    names, codes_of = names_of_ids(s.export, c["api.name_id"][use[hit[hit >= 0]]])
    found = iter(api_base_name(names[int(i)]) for i in codes_of.tolist())
    return [next(found) if i >= 0 else None for i in hit.tolist()]


def _range_open(s: Session, gap_pid: np.ndarray, t: np.ndarray, launch_tids: np.ndarray
                ) -> list[str | None]:
    """The innermost NVTX range open at each gap start on the launching threads. The NVTX
    rows pass once, as a stream: only the ranges open at one of the gap starts (and the
    domain-create rows, for names) are kept, so that no value of every range is built
    (``--within`` has built it)."""
    if t.size == 0 or not s.has_ranges:
        return [None] * t.size
    if s.within is not None:
        return _range_open_within(s, gap_pid, t, launch_tids)
    times = np.sort(t)
    parts, last = [], 0
    for c in s.trace.resolver.chunks(NVTX_STREAM):
        st, en = c["nvtx.start"], c["nvtx.end"]
        last = max(last, int(st.max(initial=0)), int(en.max(initial=0)))
        keep = np.flatnonzero(open_at_some(st, np.where(en < 0, FOREVER, en), times)
                              | is_domain_row(c["nvtx.flags"]))  # never closed: open on
        parts.append({name[5:]: values[keep] for name, values in c.items()})
    cols = {k: np.concatenate([p[k] for p in parts]) for k in NVTX}
    cand = np.flatnonzero(attributable_rows(cols["flags"])
                          & _thread_filter(cols["tid"], launch_tids))
    c_pid = pid_of(cols["tid"][cand])
    codes = sorted_unique(np.concatenate([c_pid, gap_pid]))
    c_end = cols["end"][cand]
    if bool((c_end < 0).any()):  # never closed: it ends with the capture
        c_end = np.where(c_end < 0, max(last, s.trace.last_gpu_work()), c_end)
    hit = open_at_grouped(np.searchsorted(codes, c_pid), cols["start"][cand], c_end,
                          np.searchsorted(codes, gap_pid), t)
    rows = sorted_unique(cand[hit[hit >= 0]])
    pick = sorted_unique(np.concatenate([rows, np.flatnonzero(is_domain_row(cols["flags"]))]))
    names = s.trace.names_of_nvtx_rows({k: v[pick] for k, v in cols.items()},
                                       np.searchsorted(pick, rows))
    by_row = dict(zip(rows.tolist(), names))
    return [by_row[int(cand[i])] if i >= 0 else None for i in hit.tolist()]


def _range_open_within(s: Session, gap_pid: np.ndarray, t: np.ndarray,
                       launch_tids: np.ndarray) -> list[str | None]:
    """``_range_open`` on the ranges inside ``within`` (the session holds their value)."""
    r = s.ranges
    if r is None or not len(r):
        return [None] * t.size
    use = np.flatnonzero(_thread_filter(r.tid, launch_tids) & ~r.cross_thread)
    r_pid = pid_of(r.tid[use])
    codes = sorted_unique(np.concatenate([r_pid, gap_pid]))
    hit = open_at_grouped(np.searchsorted(codes, r_pid), r.start[use], r.end[use],
                          np.searchsorted(codes, gap_pid), t)
    rows = use[hit[hit >= 0]]
    names = s.names(rows=sorted_unique(rows)) if rows.size else None
    out: list[str | None] = []
    for i in hit.tolist():
        if i < 0 or names is None:
            out.append(None)
            continue
        code = int(names.code[use[i]])
        out.append(names.names[code] if code >= 0 else None)
    return out


def _starts_inside(s: Session, gap_pid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Which gaps start inside an instance of ``within`` in their process."""
    assert s.within is not None
    inst = s.instances_of(s.within)  # a typed error first when there are no NVTX ranges
    r = s.ranges
    assert r is not None
    i_pid = pid_of(r.tid[inst])
    codes = sorted_unique(np.concatenate([i_pid, gap_pid]))
    hit = open_at_grouped(np.searchsorted(codes, i_pid), r.start[inst], r.end[inst],
                          np.searchsorted(codes, gap_pid), t)
    return hit >= 0


def _cause_notes(s: Session, unlaunched: tuple[int, int] | None, covered: np.ndarray,
                 has_api: bool) -> list[str]:
    """``unlaunched``: (operations without a launch record, operations)."""
    notes = []
    if not has_api:
        notes.append("CUDA API calls were not traced (no CUPTI_ACTIVITY_KIND_RUNTIME table): "
                     "no cause or API call; profile with `nsys profile --trace=cuda`.")
    elif unlaunched is not None:
        missing, of = unlaunched
        if missing:
            notes.append(f"{missing:,} of {of:,} GPU operations have no launch "
                         f"record (trimmed export): the launching threads are known from the "
                         f"others.")
        unknown = int((~covered).sum())
        if unknown:
            notes.append(f"{unknown:,} gaps start where no CUDA API call was recorded in "
                         f"their process (trimmed export): cause unknown.")
    if not s.export.has_table(NVTX_TABLE):
        notes.append("NVTX was not traced: no range column; profile with `nsys profile "
                     "--trace=cuda,nvtx` and NVTX ranges to see where each gap starts.")
    notes.append("cause at the gap's start, on the threads that launch GPU work: sync = the "
                 "host waits in a synchronize/blocking copy/free, api = inside another CUDA "
                 "call, cpu = no CUDA call (the CPU is not launching work).")
    return notes


def gap_sentence(row: dict[str, Any]) -> str:
    text = (f"pid {row['pid']}, device {row['device']}: idle {human_ns(row['duration_ns'])} "
            f"from {human_ns(row['start_ns'])}")
    if row["cause"] == "sync" or row["cause"] == "api":
        text += f", the host in {row['api']}"
    elif row["cause"] == "cpu":
        text += ", no CUDA call in flight"
    if row["range"] is not None:
        text += f", in range {row['range']}"
    return text


ANALYSIS = Analysis(
    name="gaps", bytes_per_row=32,
    help="""Idle GPU gaps per process and device (as nsys analyze's gpu-starv), and their cause.

    Holes in each (process, device)'s GPU operations (kernels, memcpy, memset) longer than
    --min-gap-ms, longest first, with what the host was doing when each started: the CUDA
    call in flight (sync: it waits on the device; api: another call; cpu: none, the CPU is not
    launching work) and the innermost NVTX range open. `--within RANGE`: only gaps that start
    inside its instances.

    Examples: `nsys-mine gaps ddp.sqlite` · `nsys-mine gaps run.sqlite --min-gap-ms 500 -f csv`
    """,
    run=gaps_report, needs=("kernels", "kernel_places", "launch_ids", "memops"),
    options=("within", "name_kind", "nsys", "cache"),
    params=(Param("min_gap_ms", ("--min-gap-ms",), "Only gaps longer than this many "
                  "milliseconds (nsys's gpu-starv rule: its gap option, 500 by default "
                  "there).", type=float,
                  default=DEFAULT_MIN_GAP_MS, minimum=0.0, metavar="MS"),),
    columns=GAPS_COLUMNS, view=GAPS_VIEW, title="Idle GPU gaps", order=64,
)
