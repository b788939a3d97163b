"""CUDA kernels and the API calls that launched them.

One row per CUPTI kernel record. Its launch is the CUDA runtime or driver API row with the
same ``correlationId`` in the same process (correlationIds repeat across processes; the
kernel's ``globalPid`` equals the launch's ``globalTid`` with the low 24 bits cleared).
nsys 2022.2 writes some launches twice (``cudaLaunchKernel`` and the nested
``cudaLaunchKernel_v7000``, one correlationId): the kernel keeps ONE launch, the narrowest
call, so it counts once; every range that contains either call contains the narrowest.
Kernels without a launch row (trimmed exports) are kept, with ``launch_tid == -1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_parsers.arrays import ROWS, Rows, let_go, sorted_unique
from nsys_parsers.errors import BadOption
from nsys_parsers.ids import global_pid
from nsys_parsers.schema import KERNEL_TABLE, NAME_COLUMN, NAME_KINDS, Schema


@dataclass(frozen=True)
class Kernels(Rows):
    """Kernels as columns (one row per kernel, in table order unless taken). ``name_code``
    indexes ``names``. The id columns (``pid`` = globalPid, ``correlation``, ``device``,
    ``stream``, ``context``, ``graph``, ``graph_node``) and the launch columns (the launching
    thread's globalTid, the call's start and end; -1 without a launch row) are None until
    they are loaded. On exports with whole-graph traces, each graph launch is a row too
    (``graph_launch``: ``nsys_parsers.graphs``)."""

    start: np.ndarray
    end: np.ndarray
    name_code: np.ndarray
    names: list[str]
    name_kind: str
    pid: np.ndarray | None = None
    correlation: np.ndarray | None = None
    device: np.ndarray | None = None
    stream: np.ndarray | None = None
    context: np.ndarray | None = None
    graph: np.ndarray | None = None  # graphId of a kernel recorded as a graph node, else -1
    graph_node: np.ndarray | None = None  # its graphNodeId, else -1
    launch_tid: np.ndarray | None = None
    launch_start: np.ndarray | None = None
    launch_end: np.ndarray | None = None
    notes: list[str] = field(default_factory=list)
    # True for the rows that are whole-graph launches (nsys_parsers.graphs); None: the
    # export has no graph trace
    graph_launch: np.ndarray | None = None


def kernel_name_column(export: Schema, name_kind: str) -> tuple[str, list[str]]:
    """The kernel table column for ``name_kind`` (demangled names where the export lacks it)
    and the note that says so."""
    if name_kind not in NAME_KINDS:
        raise BadOption(f"unknown name kind {name_kind!r}; use one of {', '.join(NAME_KINDS)}")
    col = NAME_COLUMN[name_kind]
    if export.has_column(KERNEL_TABLE, col):
        return col, []
    return "demangledName", [f"this export has no {col} column (older nsys); showing "
                             f"demangled names"]


def launch_rows(k_pid: np.ndarray, k_corr: np.ndarray, r_start: np.ndarray,
                r_end: np.ndarray, r_tid: np.ndarray, r_corr: np.ndarray) -> np.ndarray:
    """For each kernel (or other GPU operation), the row of the narrowest API call with its
    correlationId in its process (the first of equally narrow ones); -1 where there is none.
    The calls pass a block (``ROWS``) at a time (``LaunchThreads``), their mapped pages let go
    after each: what is held is of the kernels' length, not the calls'."""
    found = LaunchThreads([k_pid], [k_corr])
    for a in range(0, r_corr.size, ROWS):
        start, end, tid, corr = (c[a:a + ROWS] for c in (r_start, r_end, r_tid, r_corr))
        found.add(start, end, tid, corr, value=np.arange(a, a + corr.size, dtype=np.int64))
        for c in (start, end, tid, corr):
            let_go(c)
    return found.found


class LaunchThreads:
    """``launch_rows`` for API calls that pass as a stream: for each operation (kernel, graph
    launch, memcpy, memset: ``k_pid`` its globalPid, ``k_corr`` its correlationId), the
    thread (globalTid) of the narrowest API call with its correlationId in its process, the
    first of equally narrow ones in the calls' order (-1: none). ``add`` each chunk of calls
    in order; ``found`` is the answer so far (the calls' ``value`` where one is given)."""

    def __init__(self, k_pid: list[np.ndarray], k_corr: list[np.ndarray]):
        # the operations come in parts (kernels, memory operations), not joined: at 21 M
        # operations a joined column is 170 MB
        n = sum(p.size for p in k_pid)
        self._pids = sorted_unique(np.concatenate([sorted_unique(p) for p in k_pid]))
        self._corr_max = max((int(c.max(initial=0)) for c in k_corr), default=0) + 1
        if self._corr_max * (self._pids.size + 1) >= 2**62:  # pragma: no cover - huge ids
            raise OverflowError("correlation ids too large to pack with process codes")
        key, at = np.empty(n, dtype=np.int64), 0
        for pid, corr in zip(k_pid, k_corr):
            for a in range(0, pid.size, ROWS):
                c = corr[a:a + ROWS]
                part = np.searchsorted(self._pids, pid[a:a + ROWS]) * self._corr_max + c
                key[at + a:at + a + c.size] = np.where(c >= 0, part, -1)  # no id: no launch
                let_go(c)  # the mapped pages, once read
                let_go(pid[a:a + ROWS])
            at += pid.size
        order = np.argsort(key, kind="stable")
        key.sort(kind="stable")  # in place: the same values as key[order]
        self._key = key
        self._order = order.astype(np.int32) if n < 2**31 else order
        del order
        self.found = np.full(n, -1, dtype=np.int64)
        self._width = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)

    def add(self, r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray,
            r_corr: np.ndarray, value: np.ndarray | None = None) -> None:
        """One chunk of calls; ``value``: what to record for each (default: its thread)."""
        if self._key.size == 0 or r_corr.size == 0:
            return
        r_pid = global_pid(r_tid)
        code = np.minimum(np.searchsorted(self._pids, r_pid), self._pids.size - 1)
        ok = np.flatnonzero((self._pids[code] == r_pid) & (r_corr >= 0)
                            & (r_corr < self._corr_max))
        key = code[ok] * self._corr_max + r_corr[ok]
        lo = np.searchsorted(self._key, key, side="left")
        hi = np.searchsorted(self._key, key, side="right")
        count = hi - lo
        calls = np.flatnonzero(count)
        if calls.size == 0:
            return
        # every (operation, call) pair of this chunk; graph kernels share their launch's id
        per = count[calls]
        first = np.repeat(lo[calls] - np.cumsum(per) + per, per)
        ops = self._order[first + np.arange(int(per.sum()), dtype=np.int64)]
        rows = ok[np.repeat(calls, per)]
        width = r_end[rows] - r_start[rows]
        pick = np.lexsort((rows, width, ops))  # per operation: the narrowest, then the first
        ops, rows, width = ops[pick], rows[pick], width[pick]
        lead = np.r_[True, ops[1:] != ops[:-1]]
        ops, rows, width = ops[lead], rows[lead], width[lead]
        better = width < self._width[ops]  # a later chunk wins only when strictly narrower
        self._width[ops[better]] = width[better]
        self.found[ops[better]] = (r_tid if value is None else value)[rows[better]]


def join_launches(k_pid: np.ndarray, k_corr: np.ndarray, r_start: np.ndarray,
                  r_end: np.ndarray, r_tid: np.ndarray, r_corr: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each kernel, the narrowest API call with its correlationId in its process:
    (the call's globalTid, start, end), -1 where there is none; gathered a block of kernels
    at a time, the calls' mapped pages let go after each."""
    src = launch_rows(k_pid, k_corr, r_start, r_end, r_tid, r_corr)
    out = []
    for col in (r_tid, r_start, r_end):
        values = np.full(k_pid.size, -1, dtype=np.int64)
        for a in range(0, src.size, ROWS):
            rows = src[a:a + ROWS]
            hit = rows >= 0
            values[a:a + ROWS][hit] = col[rows[hit]]
            let_go(col)
        out.append(values)
    return out[0], out[1], out[2]


def api_base_name(name: str) -> str:
    """A CUDA API name without its version suffix (``cudaLaunchKernel_v7000`` ->
    ``cudaLaunchKernel``), as nsys's kernexecsum strips it: the last six characters when they
    start with ``_v``."""
    return name[:-6] if len(name) >= 6 and name[-6:-4] == "_v" else name


@dataclass(frozen=True)
class ApiCalls(Rows):
    """CUDA runtime and driver API calls that carry a correlationId (launches, copies,
    synchronizations...), runtime rows first: their thread's globalTid, start, end,
    correlationId and name (``name_code`` indexes ``names``)."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray
    correlation: np.ndarray
    name_code: np.ndarray
    names: list[str]


