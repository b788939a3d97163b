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

from nsys_parsers.arrays import ROWS, Rows, sorted_unique
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
    correlationId in its process; -1 where there is none."""
    n = k_pid.size
    out = np.full(n, -1, dtype=np.int64)
    if n == 0 or r_corr.size == 0:
        return out
    r_pid = global_pid(r_tid)
    # small codes for processes, so that (process, correlationId) packs in one int64
    pids = sorted_unique(np.concatenate([sorted_unique(r_pid), sorted_unique(k_pid)]))
    r_code, k_code = np.searchsorted(pids, r_pid), np.searchsorted(pids, k_pid)
    del r_pid  # each temporary of the calls' length goes once used (7 M calls: 55 MB each)
    corr_max = int(max(r_corr.max(initial=0), k_corr.max(initial=0))) + 1
    min_corr = min(int(r_corr.min(initial=0)), int(k_corr.min(initial=0)))
    if corr_max * len(pids) < 2**62 and min_corr >= -1:
        r_key = r_code
        r_key *= corr_max
        r_key += r_corr
        k_key = k_code * corr_max + k_corr
    else:  # pragma: no cover - astronomically large ids
        both = np.unique(np.stack([np.concatenate([r_code, k_code]),
                                   np.concatenate([r_corr, k_corr])], axis=1), axis=0,
                         return_inverse=True)[1].ravel()
        r_key, k_key = both[: r_code.size], both[r_code.size:]
    del r_code, k_code
    width = r_end - r_start
    order = np.lexsort((width, r_key))  # by key, the narrowest call first
    del width
    sorted_key = r_key[order]
    del r_key
    pos = np.minimum(np.searchsorted(sorted_key, k_key, side="left"), sorted_key.size - 1)
    hit = (sorted_key[pos] == k_key) & (k_corr >= 0)
    out[hit] = order[pos[hit]]
    return out


class LaunchThreads:
    """``launch_rows`` for API calls that pass as a stream: for each operation (kernel, graph
    launch, memcpy, memset: ``k_pid`` its globalPid, ``k_corr`` its correlationId), the
    thread (globalTid) of the narrowest API call with its correlationId in its process, the
    first of equally narrow ones in the calls' order (-1: none). ``add`` each chunk of calls
    in order; ``tid`` is the answer so far."""

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
            at += pid.size
        order = np.argsort(key, kind="stable")
        key.sort(kind="stable")  # in place: the same values as key[order]
        self._key = key
        self._order = order.astype(np.int32) if n < 2**31 else order
        del order
        self.tid = np.full(n, -1, dtype=np.int64)
        self._width = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)

    def add(self, r_start: np.ndarray, r_end: np.ndarray, r_tid: np.ndarray,
            r_corr: np.ndarray) -> None:
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
        self.tid[ops[better]] = r_tid[rows[better]]


def join_launches(k_pid: np.ndarray, k_corr: np.ndarray, r_start: np.ndarray,
                  r_end: np.ndarray, r_tid: np.ndarray, r_corr: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each kernel, the narrowest API call with its correlationId in its process:
    (the call's globalTid, start, end), -1 where there is none."""
    src = launch_rows(k_pid, k_corr, r_start, r_end, r_tid, r_corr)
    hit = src >= 0
    out = []
    for col in (r_tid, r_start, r_end):
        values = np.full(k_pid.size, -1, dtype=np.int64)
        values[hit] = col[src[hit]]
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


