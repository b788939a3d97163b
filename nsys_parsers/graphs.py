"""CUDA graph launches as nsys records them with ``--cuda-graph-trace=graph`` (its default):
one row of ``CUPTI_ACTIVITY_KIND_GRAPH_TRACE`` per launch of a graph, its kernels not in the
kernel table."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np


@dataclass(frozen=True)
class GraphLaunches:
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

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def __len__(self) -> int:
        return int(self.start.size)

    def take(self, keep: np.ndarray) -> GraphLaunches:
        return replace(self, **{f.name: getattr(self, f.name)[keep] for f in fields(self)})
