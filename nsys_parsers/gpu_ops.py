"""GPU operations: everything a GPU runs that nsys records as one interval, in one value.

Kernels, memcpy and memset rows (what nsys's ``gpu-starv`` rule and ``nvtxgpuproj`` report
count as GPU operations), and the launches of whole CUDA graphs, which the trace counts as
kernels (``nsys_parsers.graphs``; nsys's rules leave them out). Every question about GPU time
(``gpus``, ``gaps``, ``ranges --instances``, the timeline) takes its operations from here.

Each operation keeps its process (pid, not globalPid), device, stream, kind, its row in its
source (``Kernels`` or ``MemOps``), the kernel's name code (-1 for others), its correlationId
and, when asked for, the API call that launched it (thread, start, end; -1 without one).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_parsers.arrays import ROWS, Rows, let_go
from nsys_parsers.cache import held, joined
from nsys_parsers.ids import pid_of
from nsys_parsers.kernels import Kernels, join_launches
from nsys_parsers.trace import Trace

KERNEL, MEMCPY, MEMSET = 0, 1, 2
KIND_NAMES = ("kernel", "memcpy", "memset")


@dataclass(frozen=True)
class GpuOps(Rows):
    """GPU operations as columns (kernels first, then memcpy, then memset, each in table
    order). ``launch_*`` are None unless the launches were loaded."""

    start: np.ndarray
    end: np.ndarray
    pid: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    kind: np.ndarray
    row: np.ndarray  # the row in its source (Kernels or MemOps)
    name_code: np.ndarray  # a kernel's name code (Kernels.names); -1 for other kinds
    correlation: np.ndarray  # -1 for kernels unless their launches (or ids) were loaded
    launch_tid: np.ndarray | None = None
    launch_start: np.ndarray | None = None
    launch_end: np.ndarray | None = None

    def recorded(self) -> GpuOps:
        """The operations with a timestamp: nsys's gpu-starv leaves out those at 0 (itself
        when every one has one)."""
        keep = self.start > 0
        return self if bool(keep.all()) else self.take(np.flatnonzero(keep))

    def as_launched(self) -> Kernels:
        """The operations shaped as ``Kernels`` (no names), for the attribution of
        ``nsys_parsers.attribution``, which looks only at the launches."""
        assert self.launch_tid is not None, "load the operations with launches=True"
        return Kernels(start=self.start, end=self.end, name_code=self.name_code, names=[],
                       name_kind="", launch_tid=self.launch_tid,
                       launch_start=self.launch_start, launch_end=self.launch_end)


# an operation's kind, and its row in its own table, held for every operation: in the
# fewest bytes that hold them (int32 rows: up to 2**31 operations of a kind)
_ROW = np.int32


def gpu_ops(trace: Trace, *, launches: bool = False) -> GpuOps | None:
    """Every GPU operation of the export (None: neither kernels nor memory operations were
    traced); ``launches``: with the API call that launched each."""
    # where each kernel ran; with its launch, its correlationId too (kernel_ids)
    groups = ["kernels", "kernel_ids" if launches else "kernel_places", "memops"]
    if launches:
        groups += ["launches", "api"]
    trace.load(*groups)
    k, m = trace.kernels, trace.memops
    if k is None and m is None:
        return None
    parts: list[dict[str, np.ndarray]] = []
    if k is not None:
        assert k.pid is not None and k.device is not None and k.stream is not None
        part = {"start": k.start, "end": k.end, "pid": k.pid, "device": k.device,
                "stream": k.stream, "kind": np.full(len(k), KERNEL, dtype=np.int8),
                "row": np.arange(len(k), dtype=_ROW), "name_code": k.name_code,
                "correlation": (k.correlation if k.correlation is not None
                                else np.full(len(k), -1, dtype=np.int64))}
        if launches:
            assert k.launch_tid is not None and k.launch_start is not None \
                and k.launch_end is not None
            part.update(launch_tid=k.launch_tid, launch_start=k.launch_start,
                        launch_end=k.launch_end)
        parts.append(part)
    if m is not None:
        part = {"start": m.start, "end": m.end, "pid": m.pid, "device": m.device,
                "stream": m.stream,
                "kind": np.where(m.memset, MEMSET, MEMCPY).astype(np.int8),
                "row": np.arange(len(m), dtype=_ROW),
                "name_code": np.full(len(m), -1, dtype=np.int64), "correlation": m.correlation}
        if launches:
            api = trace.api
            if api is None:
                none = np.full(len(m), -1, dtype=np.int64)
                tid, ls, le = none, none, none
            else:
                tid, ls, le = join_launches(m.pid, m.correlation, api.start, api.end, api.tid,
                                            api.correlation)
            part.update(launch_tid=tid, launch_start=ls, launch_end=le)
        parts.append(part)
    cols = (parts[0] if len(parts) == 1 else  # joined in scratch files when large
            {key: joined([p[key] for p in parts]) for key in parts[0]})
    gpid, pid = cols["pid"], held(cols["pid"].size, cols["pid"].dtype)
    for a in range(0, pid.size, ROWS):  # -1: no globalPid column
        ids = gpid[a:a + ROWS]
        np.copyto(pid[a:a + ROWS], np.where(ids < 0, -1, pid_of(ids)))
        let_go(pid[a:a + ROWS])
        let_go(ids)
    cols["pid"] = pid
    return GpuOps(**cols)
