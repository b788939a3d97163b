"""CUDA graph launches as nsys records them with ``--cuda-graph-trace=graph`` (its default):
one row of ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` per launch of a graph, its kernels not in the
kernel table.

Such a launch is counted as a kernel (``kernels_with_graphs``): a row named after its graph
(``CUDA graph 4``), with the GPU start and end of the whole graph and the ``cudaGraphLaunch``
call that launched it (same correlationId, same process), so that every summary, share and
attribution counts it. With ``--cuda-graph-trace=node`` nsys records the graph's kernels
instead, each with its ``graphNodeId`` and the correlationId of the launch, and writes no
graph trace rows; a launch that has both (never seen; several processes traced differently)
counts through its kernels only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_parsers.arrays import Rows
from nsys_parsers.ids import global_pid
from nsys_parsers.kernels import Kernels

GRAPH_NAME_PREFIX = "CUDA graph "


def graph_name(graph_id: int) -> str:
    """The kernel name of a whole-graph launch row: ``CUDA graph 4``."""
    return f"{GRAPH_NAME_PREFIX}{graph_id}"


@dataclass(frozen=True)
class GraphLaunches(Rows):
    """One row per graph launch: its GPU start and end, device, stream, context, process
    (globalPid), the correlationId of its ``cudaGraphLaunch`` call, graphId and graphExecId
    (-1 where the export lacks a column)."""

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    stream: np.ndarray
    context: np.ndarray
    pid: np.ndarray
    correlation: np.ndarray
    graph: np.ndarray
    graph_exec: np.ndarray


def not_recorded_as_nodes(g_pid: np.ndarray, g_corr: np.ndarray, k_pid: np.ndarray | None,
                          k_corr: np.ndarray | None) -> np.ndarray:
    """Mask of the graph launches none of whose kernels is in the kernel table (no kernel
    with the launch's process and correlationId)."""
    keep = np.ones(g_pid.size, dtype=bool)
    if k_pid is None or k_corr is None or k_pid.size == 0 or g_pid.size == 0:
        return keep
    cand = np.flatnonzero(np.isin(k_corr, g_corr[g_corr >= 0]))  # few: the node kernels
    if cand.size == 0:
        return keep
    nodes = set(zip(k_pid[cand].tolist(), k_corr[cand].tolist()))
    for i, key in enumerate(zip(g_pid.tolist(), g_corr.tolist())):
        keep[i] = key not in nodes
    return keep


def kernels_with_graphs(k: Kernels | None, g: dict[str, np.ndarray], name_kind: str
                        ) -> Kernels:
    """``k`` (None: the export has no kernel table) followed by one row per graph launch of
    ``g`` (columns of ``GraphLaunches`` and, when loaded, ``launch_tid``/``launch_start``/
    ``launch_end``). ``graph_launch`` marks the appended rows. Columns ``k`` lacks (not
    loaded) stay None; the graph rows' ``graph_node`` is -1."""
    n_g = int(g["start"].size)
    distinct = np.unique(g["graph"]) if n_g else np.zeros(0, dtype=np.int64)
    base_names = list(k.names) if k is not None else []
    names = base_names + [graph_name(int(i)) for i in distinct.tolist()]
    codes = len(base_names) + np.searchsorted(distinct, g["graph"])
    graph_cols = {"pid": g.get("pid"), "correlation": g.get("correlation"),
                  "device": g.get("device"), "stream": g.get("stream"),
                  "context": g.get("context"), "graph": g.get("graph"),
                  "graph_node": np.full(n_g, -1, dtype=np.int64),
                  "launch_tid": g.get("launch_tid"), "launch_start": g.get("launch_start"),
                  "launch_end": g.get("launch_end")}
    n_k = len(k) if k is not None else 0

    def joined(mine: np.ndarray | None, theirs: np.ndarray | None) -> np.ndarray | None:
        if theirs is None or (k is not None and mine is None):
            return None
        return np.concatenate([mine, theirs]) if mine is not None else theirs

    cols = {name: joined(getattr(k, name) if k is not None else None, values)
            for name, values in graph_cols.items()}
    return Kernels(
        start=np.concatenate([k.start, g["start"]]) if k is not None else g["start"],
        end=np.concatenate([k.end, g["end"]]) if k is not None else g["end"],
        name_code=(np.concatenate([k.name_code, codes]) if k is not None
                   else codes.astype(np.int64)),
        names=names, name_kind=name_kind, notes=list(k.notes) if k is not None else [],
        graph_launch=np.r_[np.zeros(n_k, dtype=bool), np.ones(n_g, dtype=bool)],
        **cols)


def creation_points(pid: np.ndarray, ids: np.ndarray, rec: dict[str, np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each (process, id) of ``pid``/``ids`` (a graph node or a graph; -1: none), the
    creation record of the original it was cloned from, following ``originalGraph(Node)Id``
    back to a record without one: (its thread's globalTid, start, end), -1 where there is
    none. ``rec``: creation records (``tid``, ``start``, ``end``, ``id``, ``original``); of
    several records of one id the earliest counts."""
    n = ids.size
    out = (np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64),
           np.full(n, -1, dtype=np.int64))
    use = np.flatnonzero(ids >= 0)
    if use.size == 0 or rec["id"].size == 0:
        return out
    table: dict[tuple[int, int], tuple[int, int, int, int]] = {}
    order = np.argsort(rec["start"], kind="stable")[::-1]  # the earliest record written last
    r_pid = global_pid(rec["tid"]).tolist()
    for i in order.tolist():
        table[(r_pid[i], int(rec["id"][i]))] = (int(rec["original"][i]), int(rec["tid"][i]),
                                                 int(rec["start"][i]), int(rec["end"][i]))
    keys = np.stack([pid[use], ids[use]], axis=1)
    distinct, inverse = np.unique(keys, axis=0, return_inverse=True)
    found = np.full((distinct.shape[0], 3), -1, dtype=np.int64)
    for j, (p, i) in enumerate(distinct.tolist()):
        key, seen = (p, i), set()
        while key in table and key not in seen:  # a missing original: no point
            seen.add(key)
            original, tid, start, end = table[key]
            if original < 0:
                if tid >= 0:
                    found[j] = (tid, start, end)
                break
            key = (p, original)
    picked = found[inverse.ravel()]
    for col, values in zip(out, picked.T):
        col[use] = values
    return out
