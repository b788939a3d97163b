"""One rank's export mined into a small summary (``RankSummary``): what the ``ranks`` question
needs of each rank, built where the export is (a Dask worker), small enough to send back.

``summarize_export(path, options)`` opens one export and returns one summary per (process,
device) that ran GPU work (an export of one rank has one; a torchrun capture under one ``nsys
profile`` has one per process). Each holds:

* the ``gpus`` row of that process and device (asked through ``reports.pipeline.ask.answer``:
  value for value what ``nsys-mine gpus`` says);
* its collective kernels (the ``communication`` category, point-to-point ``SendRecv`` too), in
  the order they are matched across ranks: per communicator where NCCL's NVTX payload names
  it (the kernel launched inside an ``ncclAllReduce``... call), else per collective kind and
  stream, the streams numbered in the order the process first used them (a stream id is
  the process's own number: two ranks may run NCCL on streams 7 and 15), each with its start
  (the rank's arrival), end, launch and message size;
* the GPU idle time before each collective (from its previous collective's end to its
  arrival) by cause (``gaps``: cpu, sync, api, unknown) and, for ``cpu``, the NVTX range open;
* NVTX range times (CPU and GPU, with the dominant kernel), in all and in the window before
  each collective, and per-kernel median durations, the top ones: what ``ranks`` compares
  between a straggler and the median rank;
* its step instances (``--within`` or a range named ``step``), the session's UTC start and
  whether its timestamps are UTC already (``nsys profile --ts-normalize``), the machine it ran
  on, its rank as the export says it (NCCL payload, file name, environment) and the GPU lanes
  for the page's timeline (unions of compute and communication kernels).

Numbers are nanoseconds on the rank's own clock; ``reports.ranks.matching`` aligns them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nsys_parsers.arrays import ROWS, let_go_all, let_go_rows
from nsys_parsers.capture import (
    capture_environment,
    capture_host,
    on_utc_clock,
    session_start_utc,
)
from nsys_parsers.ids import pid_of
from nsys_parsers.intervals import holes, open_at_grouped
from nsys_parsers.kernels import Kernels
from nsys_parsers.nccl import ITEMS_READ as NCCL_ITEMS
from nsys_parsers.nccl import NcclCalls, nccl_calls
from reports.categories import categorize_many
from reports.collective_kinds import collective_kind
from reports.pipeline.ask import answer
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.session import Session

COMMUNICATION = "communication"
CAUSES = ("cpu", "sync", "api", "unknown")
STEP_RANGE = "step"
MIN_GAP_MS = 0.05  # idle gaps shorter than 50 µs are launch latency, not a cause
TOP_RANGES = 60
TOP_KERNELS = 100
LANE_POINTS = 3000  # a lane keeps at most about this many intervals
MEDIAN_BATCH = 4 * ROWS  # kernel durations held at once for the medians (one name: all its)
# one summary's peak above budget.BASE_BYTES per row of the tables it reads, cold, the most
# of the benchmark's x300, x1200 and x4800 files (as an analysis's ``bytes_per_row``;
# docs/PERFORMANCE.md): a worker checks its export against the budget before reading it
BYTES_PER_ROW = 6

# Where a file name says its rank: rank_3, rank-3, rank3, r3, -3.
_FILE_RANK = (re.compile(r"rank[_-]?(\d+)", re.IGNORECASE),
              re.compile(r"(?:^|[^A-Za-z0-9])r(\d+)(?![0-9])", re.IGNORECASE),
              re.compile(r"-(\d+)\."))
_ENV_RANK = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "LOCAL_RANK")
_ARG_RANK = re.compile(r"^--?(?:local[_-])?rank(?:=(\d+))?$", re.IGNORECASE)


@dataclass
class RankSummary:
    """One (process, device) of one export, summarized (see the module docstring)."""

    export: str  # the path given
    label: str  # its file name
    pid: int
    device: int
    rank_hint: int | None  # the rank the export names (None: it does not)
    rank_source: str  # nccl, file name, environment, command line (or "" when none)
    nranks: int | None
    processes: int  # GPU processes in its export
    utc_start_ns: int | None
    gpus: dict[str, Any]
    # every rank the export names, best source first (rank_hint, rank_source: the first)
    hints: list[tuple[int, str]] = field(default_factory=list)
    utc_clock: bool = False  # its timestamps are UTC nanoseconds (--ts-normalize)
    host: str | None = None  # the machine it ran on: exports of one machine share a clock
    # collectives, in matching order within each key
    keys: list[str] = field(default_factory=list)  # the distinct matching keys
    kinds: list[str] = field(default_factory=list)  # the distinct collective kinds
    coll_key: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # into keys
    coll_kind: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # into kinds
    coll_start: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    coll_end: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    coll_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    coll_launch: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # -1: none
    coll_idle: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int64))
    # the cpu idle before collective i inside each range: rows (i, code into idle_ranges, ns)
    coll_idle_range: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), np.int64))
    idle_ranges: list[str] = field(default_factory=list)
    # the time of each of ``ranges`` in the window before collective i (from the previous
    # collective's end to its arrival): rows (i, index into ranges, cpu ns, gpu ns)
    coll_range: np.ndarray = field(default_factory=lambda: np.zeros((0, 4), np.int64))
    keyed_by: str = "kind and stream order"  # or "communicator"
    steps: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))
    step_range: str | None = None
    ranges: list[dict[str, Any]] = field(default_factory=list)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    lanes: dict[str, np.ndarray] = field(default_factory=dict)  # compute/comm: (n, 2)
    step_lanes: dict[str, np.ndarray] = field(default_factory=dict)  # the middle step's
    notes: list[str] = field(default_factory=list)

    @property
    def collectives(self) -> int:
        return int(self.coll_start.size)

    def key_counts(self) -> dict[str, int]:
        """How many collectives of each matching key."""
        counts = np.bincount(self.coll_key, minlength=len(self.keys))
        return {k: int(c) for k, c in zip(self.keys, counts.tolist()) if c}

    def positions(self, key: str) -> np.ndarray:
        """The positions of the collectives of ``key``, in matching order."""
        if key not in self.keys:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.coll_key == self.keys.index(key))


def rank_list(values: list[int]) -> str:
    """``[0, 1, 2, 3, 5]`` -> ``0-3, 5``."""
    out, vals = [], sorted(values)
    start = prev = vals[0]
    for v in [*vals[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}-{prev}" if prev > start else f"{start}")
        if v is not None:
            start = prev = v
    return ", ".join(out)


def rank_from_name(name: str) -> int | None:
    """The rank a file name gives (``rank_3.sqlite``, ``job-r3.nsys-rep``, ``trace-3.sqlite``)."""
    for pattern in _FILE_RANK:
        m = pattern.search(name)
        if m:
            return int(m.group(1))
    return None


def rank_from_capture(env: dict[str, str], args: list[str]) -> tuple[int | None, str]:
    """The rank the launched program's environment or arguments give, and which."""
    for key in _ENV_RANK:
        value = env.get(key, "")
        if value.isdigit():
            return int(value), "environment"
    for i, arg in enumerate(args):
        m = _ARG_RANK.match(arg)
        if m:
            value = m.group(1) or (args[i + 1] if i + 1 < len(args) else "")
            if value.isdigit():
                return int(value), "command line"
        key, eq, value = arg.partition("=")
        if eq and key in _ENV_RANK and value.isdigit():
            return int(value), "command line"
    return None, ""


def summarize_export(path: str | Path, options: AnalysisOptions | None = None,
                     step_range: str | None = None) -> list[RankSummary]:
    """The summaries of one export (see the module docstring), opened here (on a worker);
    ``step_range``: the range whose instances are steps (default: ``options.within``, else
    ``step`` if present)."""
    with Session(path, options or AnalysisOptions()) as s:
        s.expect("`ranks`", BYTES_PER_ROW)  # OverBudget: this rank's error, said by the client
        return summarize_session(s, step_range)


def summarize_session(s: Session, step_range: str | None = None) -> list[RankSummary]:
    """The summaries of an open export (``summarize_export``)."""
    # one read of all, what the gpus and gaps answers need too: the first load is checked
    # against the budget at the summary's bytes per row, and theirs load nothing more
    s.load("kernels", "kernel_ids", "kernel_places", "launches", "launch_ids", "memops",
           "ranges", *NCCL_ITEMS)
    gpus = answer(s, "gpus")
    gaps = _Gaps.of(answer(s, "gaps", min_gap_ms=MIN_GAP_MS).rows)  # the rows go here
    calls = nccl_calls(s.trace) if s.has_ranges else None
    utc = session_start_utc(s.export)
    env, args = capture_environment(s.export)
    host = capture_host(s.export, env)
    first = int(s.kernels.start.min()) if s.kernels is not None and len(s.kernels) else 0
    utc_clock = on_utc_clock(first, utc)
    path = s.export.source
    label = path.name
    rows = [r for r in gpus.rows if r["pid"] is not None and r["pid"] >= 0]
    pids = sorted({int(r["pid"]) for r in rows})
    steps_name = step_range or s.within or (STEP_RANGE if _has_range(s, STEP_RANGE) else None)
    out = []
    for row in rows:
        pid, device = int(row["pid"]), int(row["device"])
        hints, nranks = _rank_hints(calls, pid, label, env, args, len(pids))
        hint, source = hints[0] if hints else (None, "")
        summary = RankSummary(
            export=str(path), label=label, pid=pid, device=device, rank_hint=hint,
            rank_source=source, nranks=nranks, processes=len(pids), utc_start_ns=utc,
            gpus=dict(row), hints=hints, utc_clock=utc_clock, host=host,
            notes=list(gpus.notes))
        _collectives(s, summary, calls)
        _idle_before(summary, gaps.of_rank(pid, device))
        if steps_name is not None:
            summary.step_range = steps_name
            summary.steps = _steps(s, steps_name, pid)
        summary.ranges = _range_times(s, pid)
        _range_windows(s, summary)
        summary.kernels = _kernel_times(s, pid, device)
        _lanes(s, summary)
        out.append(summary)
    return out


def _has_range(s: Session, name: str) -> bool:
    if s.trace.ranges is None:
        return False
    return s.trace.range_names().index(name) is not None


def _rank_hints(calls: NcclCalls | None, pid: int, label: str, env: dict[str, str],
                args: list[str], processes: int) -> tuple[list[tuple[int, str]], int | None]:
    """Every (rank, source) the export names for one process, best first (NCCL's payload,
    then, for an export of one process, its file name, environment, command line), and the
    number of ranks NCCL says."""
    out: list[tuple[int, str]] = []
    nranks = None
    if calls is not None:
        mine = np.flatnonzero((pid_of(calls.tid) == pid) & (calls.rank >= 0))
        if mine.size:
            best = mine[np.argmax(calls.nranks[mine])]  # its largest communicator
            out.append((int(calls.rank[best]), "nccl"))
            nranks = int(calls.nranks[best])
    if processes == 1:
        by_name = rank_from_name(label)
        if by_name is not None:
            out.append((by_name, "file name"))
        rank, source = rank_from_capture(env, args)
        if rank is not None:
            out.append((rank, source))
    return out, nranks


def _collectives(s: Session, out: RankSummary, calls: NcclCalls | None) -> None:
    """The collective kernels of ``out``'s process and device, keyed for matching."""
    k = s.kernels
    if k is None or not len(k) or k.pid is None or k.device is None or k.stream is None:
        return
    comm = _comm_names(s)
    mine = _rows_where(len(k), lambda b: comm[np.maximum(k.name_code[b], 0)]
                       & _on(k, b, out.pid, out.device))
    if mine.size == 0:
        return
    kind = [collective_kind(k.names[c]) for c in k.name_code[mine].tolist()]
    # the NCCL call each kernel was launched from (its launch inside the call, same thread)
    call = np.full(mine.size, -1, dtype=np.int64)
    if calls is not None and k.launch_tid is not None and k.launch_start is not None:
        tids = np.unique(np.concatenate([calls.tid, k.launch_tid[mine]]))
        launched = k.launch_tid[mine] >= 0
        hit = open_at_grouped(np.searchsorted(tids, calls.tid), calls.start, calls.end + 1,
                              np.searchsorted(tids, k.launch_tid[mine][launched]),
                              k.launch_start[mine][launched])
        call[launched] = hit
    has_call = call >= 0
    nbytes = np.full(mine.size, -1, dtype=np.int64)
    streams = _stream_order(k.stream[mine], k.start[mine])
    by_stream = [f"{kd} stream #{st}" for kd, st in zip(kind, streams.tolist())]
    if calls is not None and has_call.any():
        out.keyed_by = "communicator"
        comm_id = calls.comm[np.maximum(call, 0)]
        keys = [f"comm {c & 0xFFFFFFFFFFFFFFFF:016x}" if h else own
                for c, h, own in zip(comm_id.tolist(), has_call.tolist(), by_stream)]
        nbytes[has_call] = calls.nbytes[call[has_call]]
        # the n-th collective of a communicator: in the order of the calls
        order_time = np.where(has_call, calls.start[np.maximum(call, 0)], k.start[mine])
    else:
        keys = by_stream
        order_time = k.start[mine]
    order = np.lexsort((k.start[mine], order_time))
    out.keys = sorted(set(keys))
    out.kinds = sorted(set(kind))
    out.coll_key = np.array([out.keys.index(keys[i]) for i in order.tolist()], dtype=np.int64)
    out.coll_kind = np.array([out.kinds.index(kind[i]) for i in order.tolist()],
                             dtype=np.int64)
    rows = mine[order]
    out.coll_start = k.start[rows].astype(np.int64)
    out.coll_end = k.end[rows].astype(np.int64)
    out.coll_bytes = nbytes[order]
    out.coll_launch = np.full(rows.size, -1, dtype=np.int64)
    if k.launch_start is not None and k.launch_tid is not None:
        out.coll_launch = np.where(k.launch_tid[rows] >= 0, k.launch_start[rows], -1)


def _stream_order(stream: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Each kernel's stream numbered by the order of the streams' first use (0: the first
    stream to run a collective): a number that means the same on every rank, where the
    stream ids are each process's own."""
    firsts: dict[int, int] = {}
    for st, t in zip(stream.tolist(), start.tolist()):
        firsts[st] = min(t, firsts.get(st, t))
    rank = {st: i for i, st in enumerate(sorted(firsts, key=lambda x: (firsts[x], x)))}
    return np.array([rank[st] for st in stream.tolist()], dtype=np.int64)


@dataclass
class _Gaps:
    """The gaps' columns the summary reads (``gaps``' rows as arrays: a row dict and a
    sentence per gap were held to the end, 107 MiB of 168 K gaps): the cause as an index
    into ``CAUSES`` (3, unknown, for any other), the range open as a code into ``ranges``
    (-1: none)."""

    pid: np.ndarray
    device: np.ndarray
    start: np.ndarray
    end: np.ndarray
    cause: np.ndarray
    range: np.ndarray
    ranges: list[str]

    @classmethod
    def of(cls, rows: Sequence[dict[str, Any]]) -> _Gaps:
        names: dict[str, int] = {}
        return cls(
            pid=np.array([g["pid"] for g in rows], dtype=np.int64),
            device=np.array([g["device"] for g in rows], dtype=np.int64),
            start=np.array([g["start_ns"] for g in rows], dtype=np.int64),
            end=np.array([g["end_ns"] for g in rows], dtype=np.int64),
            cause=np.array([CAUSES.index(g["cause"]) if g["cause"] in CAUSES else 3
                            for g in rows], dtype=np.int64),
            range=np.array([-1 if g["range"] is None else names.setdefault(g["range"],
                                                                           len(names))
                            for g in rows], dtype=np.int64),
            ranges=list(names))

    def of_rank(self, pid: int, device: int) -> _Gaps:
        """The gaps of one process and device, in the same order."""
        mine = (self.pid == pid) & (self.device == device)
        return _Gaps(self.pid[mine], self.device[mine], self.start[mine], self.end[mine],
                     self.cause[mine], self.range[mine], self.ranges)


def _idle_before(out: RankSummary, gaps: _Gaps) -> None:
    """GPU idle time before each collective (after the previous one's end), by cause, and the
    NVTX range open during the ``cpu`` part."""
    n = out.collectives
    out.coll_idle = np.zeros((n, len(CAUSES)), dtype=np.int64)
    if n == 0 or not gaps.start.size:
        return
    by_time, prev_end, arrive = _windows(out)
    jj, length = _clipped(gaps.start, gaps.end, prev_end, arrive)  # the next arrival's window
    cause = gaps.cause
    target = by_time[jj]
    np.add.at(out.coll_idle, (target[length > 0], cause[length > 0]), length[length > 0])
    per: dict[tuple[int, str], int] = {}
    for i in np.flatnonzero((length > 0) & (cause == 0)).tolist():
        at = int(gaps.range[i])
        name = gaps.ranges[at] if at >= 0 and gaps.ranges[at] else "(no range)"
        key = (int(target[i]), name)
        per[key] = per.get(key, 0) + int(length[i])
    out.idle_ranges = sorted({name for _, name in per})
    code = {name: c for c, name in enumerate(out.idle_ranges)}
    out.coll_idle_range = np.array([(i, code[name], ns) for (i, name), ns in sorted(per.items())],
                                   dtype=np.int64).reshape(-1, 3)


def _steps(s: Session, name: str, pid: int) -> np.ndarray:
    """(start, end) of each instance of ``name`` in ``pid``, by start."""
    r = s.trace.ranges
    if r is None:
        return np.zeros((0, 2), dtype=np.int64)
    names = s.trace.range_names()
    code = names.index(name)
    if code is None:
        return np.zeros((0, 2), dtype=np.int64)
    rows = _rows_where(len(r), lambda b: (names.code[b] == code) & (pid_of(r.tid[b]) == pid))
    rows = rows[np.argsort(r.start[rows], kind="stable")]
    return np.stack([r.start[rows], r.end[rows]], axis=1).astype(np.int64)


def _range_times(s: Session, pid: int) -> list[dict[str, Any]]:
    """Per NVTX range name of ``pid``: instances, CPU time, GPU time of the kernels launched
    inside, and the dominant one of those kernels (the top ones by CPU and by GPU time)."""
    r, k = s.ranges, s.kernels
    if r is None or not len(r):
        return []
    names = s.names()
    nn = len(names.names)
    count = np.zeros(nn, dtype=np.int64)
    cpu: np.ndarray = np.zeros(nn)
    for b in _blocks(len(r)):  # every sum is of integers below 2**53: exact in any order
        code = names.code[b]
        mine = (pid_of(r.tid[b]) == pid) & (code >= 0)
        count += np.bincount(code[mine], minlength=nn)
        cpu += np.bincount(code[mine], weights=(r.end[b][mine] - r.start[b][mine])
                           .astype(np.float64), minlength=nn)
        let_go_rows(b, r.tid, r.start, r.end, names.code)
    if not count.any():
        return []
    gpu: np.ndarray = np.zeros(nn)
    dominant: dict[int, tuple[str, int]] = {}
    if k is not None and len(k):
        nk = max(len(k.names), 1)
        joints, totals = [], []
        for rc, kc in _pairs_of(s, pid, names.code):
            dur = (k.end[kc] - k.start[kc]).astype(np.float64)
            gpu += np.bincount(rc, weights=dur, minlength=nn)
            joint, inv = np.unique(rc * nk + k.name_code[kc], return_inverse=True)
            joints.append(joint)
            totals.append(np.bincount(inv, weights=dur))
            let_go_all((k.end, k.start, k.name_code))  # read at random rows
        if joints:
            joint, inv = np.unique(np.concatenate(joints), return_inverse=True)
            total = np.bincount(inv, weights=np.concatenate(totals))
            order = np.lexsort((-total, joint // nk))
            for i in order.tolist():
                dominant.setdefault(int(joint[i] // nk),
                                    (k.names[int(joint[i] % nk)], int(total[i])))
    top = set(np.argsort(-cpu)[:TOP_RANGES].tolist()) | set(np.argsort(-gpu)[:TOP_RANGES].tolist())
    out = []
    for c in sorted(top):
        if count[c] == 0:
            continue
        kernel, kernel_ns = dominant.get(c, (None, 0))
        out.append({"range": names.names[c], "instances": int(count[c]),
                    "cpu_ns": int(cpu[c]), "gpu_ns": int(gpu[c]), "kernel": kernel,
                    "kernel_ns": kernel_ns})
    return out


def _blocks(n: int) -> list[slice]:
    """Rows ``0 .. n`` a block (``ROWS``) at a time: what is read of a column per step."""
    return [slice(a, a + ROWS) for a in range(0, n, ROWS)]


def _rows_where(n: int, hit: Callable[[slice], np.ndarray]) -> np.ndarray:
    """The rows ``0 .. n`` where the mask ``hit`` (of a block of rows) is set, found a block
    at a time: no mask or temporary of every row is held."""
    parts = [np.flatnonzero(hit(b)) + b.start for b in _blocks(n)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _on(k: Kernels, b: slice, pid: int, device: int) -> np.ndarray:
    """Which kernels of block ``b`` ran for ``pid`` on ``device`` (with a start)."""
    assert k.pid is not None and k.device is not None
    mine: np.ndarray = (pid_of(k.pid[b]) == pid) & (k.device[b] == device) & (k.start[b] > 0)
    let_go_rows(b, k.pid, k.device, k.start)
    return mine


def _comm_names(s: Session) -> np.ndarray:
    """Which kernel name codes are communication kernels (one entry at least)."""
    k = s.kernels
    assert k is not None
    return np.array([c == COMMUNICATION for c in categorize_many(k.names, s.rules)] or [False])


def _pairs_of(s: Session, pid: int, code: np.ndarray, table: np.ndarray | None = None
              ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The (range code, kernel index) of every attribution pair of ``pid``'s ranges whose
    code (``code`` of the range, through ``table`` where given) is not negative, a block of
    pairs at a time."""
    r, p = s.ranges, s.pairs("all")
    assert r is not None
    for b in _blocks(len(p)):
        ri, ki = p.range_idx[b], p.kernel_idx[b]
        c = code[ri]
        if table is not None:
            c = np.where(c >= 0, table[c], -1)
        keep = (pid_of(r.tid[ri]) == pid) & (c >= 0)
        rows = (c[keep], ki[keep])
        let_go_all((r.tid, code))  # read at random rows
        let_go_rows(b, p.range_idx, p.kernel_idx)
        yield rows


def _windows(out: RankSummary) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The window before each collective, by time: (matching positions, its start: the end of
    the collectives before it, its end: the arrival)."""
    by_time = np.argsort(out.coll_start, kind="stable")
    arrive = out.coll_start[by_time]
    ends = np.maximum.accumulate(out.coll_end[by_time])
    return by_time, np.concatenate([[np.iinfo(np.int64).min], ends[:-1]]), arrive


def _clipped(start: np.ndarray, end: np.ndarray, lo: np.ndarray, arrive: np.ndarray
             ) -> tuple[np.ndarray, np.ndarray]:
    """(window, ns) of each interval: the window its start falls in (that of the next
    arrival after it), and its time there (0 past the last arrival)."""
    j = np.searchsorted(arrive, start, side="right")
    jj = np.minimum(j, arrive.size - 1)
    ns = np.minimum(end, arrive[jj]) - np.maximum(start, lo[jj])
    return jj, np.where((j < arrive.size) & (ns > 0), ns, 0)


def _range_windows(s: Session, out: RankSummary) -> None:
    """The CPU and GPU time of each of ``out.ranges`` in the window before each collective:
    a range instance counts in the window its start falls in (clipped to it), a kernel
    launched inside one in the window its GPU start falls in."""
    r = s.ranges
    if out.collectives == 0 or not out.ranges or r is None or not len(r):
        return
    names = s.names()
    code_of = {name: c for c, name in enumerate(names.names)}
    index = np.full(len(names.names), -1, dtype=np.int64)
    for i, row in enumerate(out.ranges):
        index[code_of[row["range"]]] = i
    by_time, lo, arrive = _windows(out)
    n = len(out.ranges)
    cells: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # (cell, cpu ns, gpu ns)

    def add(win: np.ndarray, which: np.ndarray, cpu: np.ndarray, gpu: np.ndarray) -> None:
        hit = (cpu > 0) | (gpu > 0)
        if hit.any():
            cell, inv = np.unique(win[hit] * n + which[hit], return_inverse=True)
            cells.append((cell, np.bincount(inv, weights=cpu[hit].astype(np.float64)),
                          np.bincount(inv, weights=gpu[hit].astype(np.float64))))

    for b in _blocks(len(r)):
        code = names.code[b]
        which = np.where(code >= 0, index[code], -1)
        mine = np.flatnonzero((pid_of(r.tid[b]) == out.pid) & (which >= 0))
        win, cpu = _clipped(r.start[b][mine].astype(np.int64),
                            r.end[b][mine].astype(np.int64), lo, arrive)
        add(win, which[mine], cpu, np.zeros_like(cpu))
        let_go_rows(b, r.tid, r.start, r.end, names.code)
    k = s.kernels
    if k is not None and len(k):
        for rc, kc in _pairs_of(s, out.pid, names.code, index):
            kwin, gpu = _clipped(k.start[kc].astype(np.int64), k.end[kc].astype(np.int64),
                                 lo, arrive)
            add(kwin, rc, np.zeros_like(gpu), gpu)
            let_go_all((k.start, k.end))  # read at random rows
    if not cells:
        return
    cell, inv = np.unique(np.concatenate([c[0] for c in cells]), return_inverse=True)
    out.coll_range = np.stack([
        by_time[cell // n], cell % n,
        np.bincount(inv, weights=np.concatenate([c[1] for c in cells])).astype(np.int64),
        np.bincount(inv, weights=np.concatenate([c[2] for c in cells])).astype(np.int64)],
        axis=1)


def _kernel_times(s: Session, pid: int, device: int) -> list[dict[str, Any]]:
    """Per compute kernel name of (``pid``, ``device``): count, median and total duration
    (the top ones by total)."""
    k = s.kernels
    if k is None or not len(k) or k.pid is None or k.device is None:
        return []
    comm = _comm_names(s)
    nk = len(k.names)

    def durations(b: slice, names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(name code, duration) of the rank's compute kernels of block ``b`` whose name is
        set in ``names``."""
        code = k.name_code[b]
        mine = _on(k, b, pid, device) & names[np.maximum(code, 0)]
        dur = (k.end[b][mine] - k.start[b][mine]).astype(np.int64)
        let_go_rows(b, k.name_code, k.start, k.end)
        return code[mine], dur

    count = np.zeros(nk, dtype=np.int64)
    total: np.ndarray = np.zeros(nk)
    for b in _blocks(len(k)):
        code, dur = durations(b, ~comm)
        count += np.bincount(code, minlength=nk)
        total += np.bincount(code, weights=dur.astype(np.float64), minlength=nk)
    top = [c for c in np.argsort(-total)[:TOP_KERNELS].tolist() if count[c]]
    med: dict[int, float] = {}
    for batch in _batches(top, count, MEDIAN_BATCH):  # the durations of a few names at once
        names = np.zeros(nk, dtype=bool)
        names[batch] = True
        parts = [durations(b, names) for b in _blocks(len(k))]
        code = np.concatenate([p[0] for p in parts])
        dur = np.concatenate([p[1] for p in parts])
        del parts
        order = np.argsort(code, kind="stable")
        bounds = np.searchsorted(code[order], np.arange(nk + 1))
        for c in batch:
            med[c] = _median(dur[order[bounds[c]:bounds[c + 1]]])
    return [{"kernel": k.names[c], "count": int(count[c]), "med_ns": med[c],
             "total_ns": int(total[c])} for c in top]


def _batches(codes: list[int], count: np.ndarray, most: int) -> list[list[int]]:
    """``codes`` in batches of at most ``most`` rows in all (``count`` per code), in order; a
    code of more rows alone."""
    out: list[list[int]] = []
    rows = most
    for c in codes:
        if rows + int(count[c]) > most:
            out.append([])
            rows = 0
        out[-1].append(c)
        rows += int(count[c])
    return out


def _median(values: np.ndarray) -> float:
    """The median of some integers (the mean of the two middle ones for an even count)."""
    n = values.size
    if n % 2:
        return float(np.partition(values, n // 2)[n // 2])
    low, high = np.partition(values, [n // 2 - 1, n // 2])[n // 2 - 1:n // 2 + 1]
    return (float(low) + float(high)) / 2


def _union(start: np.ndarray, end: np.ndarray, min_hole: int) -> np.ndarray:
    """The union of intervals as (n, 2), holes shorter than ``min_hole`` closed."""
    if start.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    h = holes(np.zeros(start.size, dtype=np.int64), start, end)
    big = h.duration >= max(min_hole, 1)
    lo = np.concatenate([[start.min()], h.end[big]])
    hi = np.concatenate([h.start[big], [end.max()]])
    return np.stack([lo, hi], axis=1).astype(np.int64)


def _union_of_blocks(parts: Iterator[tuple[np.ndarray, np.ndarray]], min_hole: int
                     ) -> np.ndarray:
    """``_union`` of the intervals of every (start, end) part, each part's union taken first:
    the same, as closing a hole shorter than ``min_hole`` in one part's union closes no hole
    of the whole union but short ones (a hole of the whole lies inside a hole of each part's
    union), and a union with its holes closed has at most its span / ``min_hole`` holes."""
    pieces = [_union(start, end, min_hole) for start, end in parts]
    whole = np.concatenate(pieces) if pieces else np.zeros((0, 2), dtype=np.int64)
    return _union(whole[:, 0], whole[:, 1], min_hole)


def _lanes(s: Session, out: RankSummary) -> None:
    """Compute and communication kernels of the rank as unions: over its whole span (holes
    under span / LANE_POINTS closed) and, with steps, over its middle step in detail."""
    k = s.kernels
    if k is None or not len(k) or k.pid is None or k.device is None:
        return
    comm = _comm_names(s)
    span = int(out.gpus.get("span_ns") or 0)
    for lane, names in (("compute", ~comm), ("comm", comm)):
        out.lanes[lane] = _union_of_blocks(_lane_parts(k, out, names), span // LANE_POINTS)
        if out.steps.shape[0]:
            a, z = (int(t) for t in out.steps[out.steps.shape[0] // 2])
            out.step_lanes[lane] = _union_of_blocks(_lane_parts(k, out, names, (a, z)),
                                                    (z - a) // LANE_POINTS)


def _lane_parts(k: Kernels, out: RankSummary, names: np.ndarray,
                window: tuple[int, int] | None = None
                ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(start, end) of the rank's kernels whose name is set in ``names``, a block at a time;
    with a ``window`` (start, end), those that overlap it, clipped to it."""
    for b in _blocks(len(k)):
        mine = _on(k, b, out.pid, out.device) & names[np.maximum(k.name_code[b], 0)]
        start, end = np.asarray(k.start[b][mine]), np.asarray(k.end[b][mine])
        let_go_rows(b, k.name_code, k.start, k.end)
        if window is not None:
            a, z = window
            inside = (end > a) & (start < z)
            start, end = np.maximum(start[inside], a), np.minimum(end[inside], z)
        yield start, end
