"""The timeline picture of the report page: one measured window per device, streams as lanes,
kernels coloured by category, memory operations grey, the NVTX ranges of the process's
launching threads above, idle gaps shaded.

The window of each (process, device): one measured step, an instance of ``step`` (inside
``--within`` when given; the one of median length: a typical step), else an instance of the
``--within`` range, else the busiest second (the second whose operations start the most GPU
time). Operations come from ``Session.gpu_ops`` (every kind of
GPU work), ranges and names from the session.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nsys_parsers.arrays import group_ids, sorted_unique
from nsys_parsers.gpu_ops import KERNEL, GpuOps
from nsys_parsers.ids import pid_of, tid_of
from nsys_parsers.intervals import holes
from nsys_parsers.nesting import nesting_depth
from reports.render import shorten

MAX_PANELS = 4
MAX_RANGE_ROWS = 5
BUSIEST_NS = 1_000_000_000
MEMORY_COLOR = "#666666"
GAP_COLOR = "#EE6677"
STEP = "step"


@dataclass
class Panel:
    """One device's window: its title, the window (ns), lanes of bars (label, starts,
    widths, colours), NVTX range rows (label, [(start, end, name)]) and gaps (start, end)."""

    title: str
    start: int
    end: int
    lanes: list[tuple[str, np.ndarray, np.ndarray, list[str]]] = field(default_factory=list)
    ranges: list[tuple[str, list[tuple[int, int, str]]]] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    categories: set[str] = field(default_factory=set)


def timeline_figures(s: Any) -> list[Any]:
    """The page's timeline figure (none without GPU operations)."""
    from reports.page.model import Figure, Text

    panels, left_out = timeline_panels(s)
    if not panels:
        return []
    blocks: list[Any] = [Figure(
        "timeline", timeline_png(panels),
        alt="Timeline of one measured window per device: a lane per CUDA stream with its "
            "kernels coloured by category, memory operations in grey, the NVTX ranges of "
            "the process above and idle gaps shaded red.")]
    if left_out:
        blocks.append(Text(f"The timeline shows {len(panels)} of {len(panels) + left_out} "
                           f"(process, device) pairs, the busiest."))
    return blocks


def _window_range(s: Any) -> str | None:
    """The range whose instance is each device's window: ``step``, else ``within``'s."""
    if s.ranges is not None and len(s.ranges) and s.names().index(STEP) is not None:
        return STEP
    return str(s.within) if s.within is not None else None


def timeline_panels(s: Any) -> tuple[list[Panel], int]:
    """The panels of the busiest (process, device) pairs, and how many pairs are left out."""
    from reports.categories import categorize_many

    ops = s.gpu_ops(launches=bool(s.trace.has_api))
    if ops is None or not len(ops):
        return [], 0
    ops = ops.recorded()
    gid, (pids, devices) = group_ids(ops.pid, ops.device)
    busy = np.bincount(gid, weights=ops.end - ops.start, minlength=pids.size)
    chosen = sorted(np.argsort(-busy, kind="stable")[:MAX_PANELS].tolist())
    k = s.trace.kernels
    cats = categorize_many(k.names, s.rules) if k is not None else []
    window_range = _window_range(s)
    h = holes(gid, ops.start, ops.end)
    panels = []
    for g in chosen:
        mine = np.flatnonzero(gid == g)
        pid, device = int(pids[g]), int(devices[g])
        window = _instance(s, window_range, pid) if window_range else None
        if window is None:
            w0, w1 = _busiest(ops.start[mine], ops.end[mine])
            what = "the busiest second" if w1 - w0 >= BUSIEST_NS else "the whole span"
        else:
            w0, w1, what = window
        panel = Panel(title=f"pid {pid}, device {device}: {what}", start=w0, end=w1)
        _lanes(panel, ops, mine, cats)
        sel = (h.group == g) & (h.start < w1) & (h.end > w0)
        big = max(1, (w1 - w0) // 200)  # gaps narrower than half a pixel are not drawn
        panel.gaps = [(max(a, w0), min(b, w1)) for a, b in
                      zip(h.start[sel].tolist(), h.end[sel].tolist()) if b - a >= big]
        _range_rows(s, panel, ops, pid)
        panels.append(panel)
    return panels, pids.size - len(chosen)


def _instance(s: Any, name: str, pid: int) -> tuple[int, int, str] | None:
    """The instance of ``name`` in process ``pid`` of median length (None: it has none)."""
    r = s.ranges
    inst = s.instances_of(name)
    inst = inst[pid_of(r.tid[inst]) == pid]
    if inst.size == 0:
        return None
    dur = (r.end - r.start)[inst]
    order = np.lexsort((r.start[inst], dur))
    pick = inst[order[(inst.size - 1) // 2]]
    number = int(np.searchsorted(np.sort(r.start[inst]), r.start[pick])) + 1
    return int(r.start[pick]), int(r.end[pick]), f"{name!r} instance {number} of {inst.size}"


def _busiest(start: np.ndarray, end: np.ndarray) -> tuple[int, int]:
    """The second (or the whole span, if shorter) whose operations start the most time."""
    first, last = int(start.min()), int(end.max())
    if last - first <= BUSIEST_NS:
        return first, last
    order = np.argsort(start, kind="stable")
    st, dur = start[order], (end - start)[order]
    total = np.concatenate([[0], np.cumsum(dur)])
    upto = np.searchsorted(st, st + BUSIEST_NS, side="left")
    best = int(np.argmax(total[upto] - total[np.arange(st.size)]))
    w0 = min(int(st[best]), last - BUSIEST_NS)
    return w0, w0 + BUSIEST_NS


def _lanes(panel: Panel, ops: GpuOps, mine: np.ndarray, cats: list[str]) -> None:
    from reports.page.plots import category_color

    w0, w1 = panel.start, panel.end
    inside = mine[(ops.start[mine] < w1) & (ops.end[mine] > w0)]
    for stream in sorted_unique(ops.stream[inside]).tolist():
        lane = inside[ops.stream[inside] == stream]
        a = np.maximum(ops.start[lane], w0)
        b = np.minimum(ops.end[lane], w1)
        colors = []
        for kind, code in zip(ops.kind[lane].tolist(), ops.name_code[lane].tolist()):
            if kind == KERNEL and code >= 0 and cats:
                panel.categories.add(cats[code])
                colors.append(category_color(cats[code]))
            else:
                panel.categories.add("memory")
                colors.append(MEMORY_COLOR)
        panel.lanes.append((f"stream {stream}", a, b - a, colors))


def _range_rows(s: Any, panel: Panel, ops: GpuOps, pid: int) -> None:
    """NVTX ranges of the process's launching threads (all its threads when none is known)
    that overlap the window, a row per thread and nesting depth."""
    r = s.ranges
    if r is None or not len(r):
        return
    w0, w1 = panel.start, panel.end
    tids = np.zeros(0, dtype=np.int64)
    if ops.launch_tid is not None:
        launched = ops.launch_tid[(ops.pid == pid) & (ops.launch_tid >= 0)]
        tids = sorted_unique(launched)
    use = (pid_of(r.tid) == pid) & ~r.cross_thread & (r.start < w1) & (r.end > w0)
    if tids.size:
        use &= np.isin(r.tid, tids)
    rows = np.flatnonzero(use)
    if rows.size == 0:
        return
    sub = r.take(rows)
    depth = nesting_depth(sub)
    names = s.names(rows=rows)
    threads = sorted_unique(sub.tid)
    count = np.bincount(np.searchsorted(threads, sub.tid), minlength=threads.size)
    # the main thread first, then the threads with the most ranges
    order = sorted(range(threads.size), key=lambda i: (tid_of(threads[i]) != pid, -count[i]))
    rank = {int(threads[i]): n for n, i in enumerate(order)}
    keys = sorted({(rank[int(t)], int(d)) for t, d in zip(sub.tid, depth)})
    shown_threads: set[int] = set()
    for thread, d in keys[:MAX_RANGE_ROWS]:
        sel = np.flatnonzero((np.array([rank[int(t)] for t in sub.tid]) == thread)
                             & (depth == d))
        bars = []
        for i in sel.tolist():
            code = int(names.code[rows[i]])
            name = names.names[code] if code >= 0 else "?"
            bars.append((max(int(sub.start[i]), w0), min(int(sub.end[i]), w1), name))
        label = ""
        if thread not in shown_threads:
            tid = int(tid_of(threads[order[thread]]))
            label = "NVTX, main thread" if tid == pid else f"NVTX, thread {tid}"
            shown_threads.add(thread)
        panel.ranges.append((label, bars))


def timeline_png(panels: list[Panel]) -> bytes:
    """The panels stacked, one axes each, with one legend."""
    from matplotlib.patches import Patch

    from reports.page.plots import _figure, _png, category_color, category_order, compact_ns

    heights = [1.1 + 0.32 * (len(p.lanes) + len(p.ranges)) for p in panels]
    fig = _figure(11.0, sum(heights) + 0.9)
    axes = fig.subplots(len(panels), 1, height_ratios=heights, squeeze=False)[:, 0]
    for ax, p in zip(axes, panels, strict=True):
        scale = 1e6  # ms
        labels = [label for label, _ in p.ranges] + [label for label, *_ in p.lanes]
        ys = [len(labels) - 1 - i for i in range(len(labels))]
        for row, (_, bars) in enumerate(p.ranges):
            for a, b, name in bars:
                x0, w = (a - p.start) / scale, (b - a) / scale
                ax.broken_barh([(x0, w)], (ys[row] - 0.4, 0.8), facecolors="#DDDDDD",
                               edgecolors="#888888", linewidth=0.5)
                chars = int(w / ((p.end - p.start) / scale) * 150)
                if chars >= 4:  # names are text, never mathtext: "$" stays a dollar
                    ax.text(x0 + w / 2, ys[row], shorten(name, chars).replace("$", r"\$"),
                            ha="center", va="center", fontsize=7, clip_on=True)
        for lane, (_, starts, widths, colors) in enumerate(p.lanes):
            ax.broken_barh(list(zip(((starts - p.start) / scale).tolist(),
                                    (widths / scale).tolist())),
                           (ys[len(p.ranges) + lane] - 0.4, 0.8), facecolors=colors,
                           linewidth=0)
        for a, b in p.gaps:
            ax.axvspan((a - p.start) / scale, (b - p.start) / scale, color=GAP_COLOR,
                       alpha=0.12, linewidth=0)
        if p.gaps:  # the longest gap's length under it, kept inside the axes
            a, b = max(p.gaps, key=lambda g: g[1] - g[0])
            width = p.end - p.start
            x = min(max((a + b) / 2 - p.start, 0.06 * width), 0.94 * width) / scale
            ax.text(x, -0.9, f"idle {compact_ns(b - a)}", ha="center", va="center",
                    fontsize=7, color="#AA3344")
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_ylim(-1.3, len(labels) - 0.4)
        ax.set_xlim(0, (p.end - p.start) / scale)
        ax.set_xlabel(f"ms from the window's start ({compact_ns(p.end - p.start)} window)",
                      fontsize=8)
        ax.set_title(p.title, loc="left", fontsize=10)
        ax.grid(axis="x", color="#eeeeee", linewidth=0.6)
        ax.set_axisbelow(True)
    present = set().union(*(p.categories for p in panels))
    cats = category_order([c for c in present if c != "memory"])
    handles = [Patch(color=category_color(c), label=c) for c in cats]
    if "memory" in present:
        handles.append(Patch(color=MEMORY_COLOR, label="memcpy / memset"))
    handles.append(Patch(color=GAP_COLOR, alpha=0.25, label="idle gap"))
    handles.append(Patch(facecolor="#DDDDDD", edgecolor="#888888", label="NVTX range"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(6, len(handles)),
               frameon=False, fontsize=8)
    return _png(fig)
