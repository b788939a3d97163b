"""What an answer says about the CUDA graphs of an export: whole-graph launches counted as
kernels, kernels recorded as graph nodes, and where the graph attribution puts them
(``Session.notes`` adds these on exports that hold graph records)."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from nsys_parsers.arrays import sorted_unique
from nsys_parsers.attribution import Pairs
from nsys_parsers.kernels import Kernels
from nsys_parsers.ranges import Ranges
from nsys_parsers.trace import Trace
from reports.pipeline.options import AnalysisOptions
from reports.render import human_ns


class SessionView(Protocol):
    """What these notes use of a ``reports.pipeline.session.Session`` (which calls them)."""

    options: AnalysisOptions
    trace: Trace

    @property
    def has_kernels(self) -> bool: ...
    @property
    def has_ranges(self) -> bool: ...
    @property
    def within(self) -> str | None: ...
    @property
    def kernels(self) -> Kernels | None: ...
    @property
    def ranges(self) -> Ranges | None: ...
    def load(self, *groups: str) -> None: ...
    def pairs(self, attribution: str = "all") -> Pairs: ...


def _n(count: int, noun: str, plural: str | None = None) -> str:
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"


def graph_notes(s: SessionView) -> list[str]:
    """Notes on the graph launches and graph kernels of the session's kernels."""
    if not s.has_kernels:
        return []
    if s.has_ranges and s.options.graph_attribution == "capture":
        s.load("kernels", "kernel_ids", "launches", "graph_capture")
    elif s.has_ranges and s.trace.has_graph_nodes:  # kernels may be graph nodes
        s.load("kernels", "kernel_ids")
    k = s.kernels
    if k is None:
        return []
    notes = []
    launches = (np.flatnonzero(k.graph_launch) if k.graph_launch is not None
                else np.zeros(0, dtype=np.int64))
    if launches.size:
        graphs = int(sorted_unique(k.name_code[launches]).size)
        notes.append(
            f"{_n(int(launches.size), 'CUDA graph launch', 'CUDA graph launches')} "
            f"({_n(graphs, 'graph')}, {human_ns(float(k.duration[launches].sum()))} of GPU "
            f"time) count as kernels named `CUDA graph <id>` (category cuda graph): nsys traced "
            f"each launch as a whole (--cuda-graph-trace=graph, its default) and did not record "
            f"the kernels inside; `nsys profile --cuda-graph-trace=node` records them.")
    nodes = (np.flatnonzero(k.graph_node >= 0) if k.graph_node is not None
             else np.zeros(0, dtype=np.int64))
    if not s.has_ranges:
        return notes
    if s.options.graph_attribution == "capture":
        notes.append(_capture_note(s, launches, nodes))
        return notes
    if nodes.size:
        notes.append(f"{_n(int(nodes.size), 'kernel')} ran as nodes of CUDA graphs: they count "
                     f"in the NVTX ranges around their graph's launch (as nsys); "
                     f"--graph-attribution capture counts them in the ranges open when they "
                     f"were captured.")
    outside = _outside_ranges(s, np.concatenate([launches, nodes]))
    if outside:
        one, many = (("CUDA graph launch", "CUDA graph launches") if not nodes.size else
                     ("kernel of a CUDA graph", "kernels of CUDA graphs") if not launches.size
                     else ("graph launch or graph kernel", "graph launches and graph kernels"))
        notes.append(f"{_n(outside, one, many)} {'was' if outside == 1 else 'were'} launched "
                     f"outside every NVTX range (from a thread without ranges?): counted in the "
                     f"whole export only.")
    return notes


def _outside_ranges(s: SessionView, rows: np.ndarray) -> int:
    """How many of the kernels at ``rows`` that have a launch record lie in no range."""
    k = s.kernels
    if rows.size == 0 or k is None or k.launch_tid is None or s.ranges is None:
        return 0
    inside = np.zeros(len(k), dtype=bool)
    inside[s.pairs("all").kernel_idx] = True
    return int(((k.launch_tid[rows] >= 0) & ~inside[rows]).sum())


def _capture_note(s: SessionView, launches: np.ndarray, nodes: np.ndarray) -> str:
    """What capture-time attribution did with the graph kernels of the session."""
    if launches.size == 0 and nodes.size == 0:
        return ("--graph-attribution capture: this export has no kernels of CUDA graphs; "
                "every kernel counts where it was launched.")
    k = s.kernels
    assert k is not None
    view = s.trace.capture_kernels(k)
    assert view.launch_tid is not None and view.launch_start is not None
    what = " and ".join(x for x in (
        _n(int(nodes.size), "kernel") + " recorded as graph nodes" if nodes.size else "",
        _n(int(launches.size), "whole-graph launch", "whole-graph launches")
        if launches.size else "") if x)
    made = ("node was captured" if not launches.size else "graph was created (captured)"
            if not nodes.size else "node (graph) was captured")
    text = (f"--graph-attribution capture: {what} count in the NVTX ranges that were open "
            f"when their {made}, not where the graph was launched")
    rows = np.concatenate([nodes, launches])
    missing = int((view.launch_tid[rows] < 0).sum())
    early = int(((view.launch_tid[rows] >= 0) & (view.launch_start[rows] < 0)).sum())
    parts = []
    if missing:
        parts.append(f"{missing:,} have no creation record in the export and count in no range")
    if early:
        parts.append(f"{early:,} were captured before the profiling session started (negative "
                     f"timestamps), when no NVTX range was recorded")
    if s.within is not None:
        outside = _outside_window(s, view, rows)
        if outside:
            parts.append(f"{outside:,} were captured outside the {s.within!r} range(s) and "
                         f"count in no range (leave --within out to see where)")
    return text + (": " + "; ".join(parts) if parts else "") + "."


def _outside_window(s: SessionView, view: Kernels, rows: np.ndarray) -> int:
    """How many of ``rows`` (capture points of ``view``) lie outside every instance of the
    session's ``within`` range."""
    from nsys_parsers.window import inside_range

    ranges = s.trace.ranges
    assert ranges is not None and s.within is not None
    inside, _, _ = inside_range(view, ranges, s.trace.range_names(), s.within)
    assert inside is not None and view.launch_tid is not None
    ok = np.zeros(len(view), dtype=bool)
    ok[inside] = True
    return int(((view.launch_tid[rows] >= 0) & ~ok[rows]).sum())
