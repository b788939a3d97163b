"""The timeline picture of the report page: one measured window per device, streams as lanes,
kernels coloured by category, memory operations grey, the NVTX ranges of the process's
threads that launched kernels above, idle gaps shaded.

The window of each (process, device): one measured step, an instance of ``step`` (inside
``--within`` when given; the one of median length: a typical step), else an instance of the
``--within`` range, else the busiest second (the second whose operations start the most GPU
time). Operations come from ``Session.gpu_ops`` (every kind of
GPU work), ranges and names from the session.

The picture costs what its pixels cost, not what the window holds: a lane keeps each
category's time in BINS bins and is drawn as one row of the axes' pixels (``_lane_image``);
NVTX ranges narrower than a bin are merged into runs (``merge_runs``); a range's name is
written only where it fits; the gaps shaded are those over 1/200 of the window. So the figure has
an image per lane, a collection or two per NVTX row, one for the gaps and at most a few
dozen names per row, whatever the number of operations and ranges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from nsys_parsers.arrays import (
    ROWS,
    Rows,
    gather,
    group_ids,
    let_go,
    let_go_fields,
    sorted_unique,
)
from nsys_parsers.gpu_ops import KERNEL, GpuOps
from nsys_parsers.ids import pid_of, tid_of
from nsys_parsers.intervals import holes
from nsys_parsers.nesting import nesting_depth
from nsys_parsers.ranges import Ranges
from reports.render import shorten

MAX_PANELS = 4
MAX_RANGE_ROWS = 5
BINS = 4096  # bins across a window, about 4 per pixel
NAME_CHARS = 150  # characters across a window's width, for the ranges' names
MIN_NAME_CHARS = 4  # a range shows its name when this many characters fit
BUSIEST_NS = 1_000_000_000
MEMORY_COLOR = "#666666"
GAP_COLOR = "#EE6677"
RANGE_FACE, RANGE_EDGE = "#DDDDDD", "#888888"
PACKED_FACE = "#A8A8A8"  # runs of ranges narrower than a bin: as dense as their edges were
STEP = "step"


@dataclass
class RangeRow:
    """One row of NVTX ranges (a thread at one nesting depth) at the picture's resolution:
    the ranges at least a bin wide, one bar each; the narrower ones merged into runs where
    they lie closer than a bin; and the names of the ranges wide enough to show one."""

    label: str
    start: np.ndarray
    end: np.ndarray
    packed_start: np.ndarray
    packed_end: np.ndarray
    names: list[tuple[int, int, str]] = field(default_factory=list)


@dataclass
class Lane:
    """A stream's operations at the picture's resolution: for each category (``memory``:
    memcpy and memset), the time (ns) it ran in each of the window's BINS bins."""

    label: str
    categories: list[str]
    busy: np.ndarray  # categories x BINS


@dataclass
class Panel:
    """One device's window: its title, the window (ns), a lane per stream, NVTX range rows
    and gaps (start, end)."""

    title: str
    start: int
    end: int
    lanes: list[Lane] = field(default_factory=list)
    ranges: list[RangeRow] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    categories: set[str] = field(default_factory=set)

    @property
    def bin_ns(self) -> float:
        """The width of one bin: what is closer than this is one run in the picture."""
        return (self.end - self.start) / BINS


def merge_runs(key: np.ndarray, start: np.ndarray, end: np.ndarray, gap: float
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Intervals of each key merged where they overlap or lie less than ``gap`` apart: the
    runs' keys, starts and ends, by key then start. Each key's runs are at least ``gap``
    apart, so a window ``W`` wide holds at most ``W / gap + 1`` of them per key."""
    if key.size == 0:
        return key, start, end
    order = np.lexsort((start, key))
    k, a, b = key[order], start[order], end[order]
    lo = int(min(a.min(), b.min()))
    width = int(max(a.max(), b.max())) - lo + 2 * int(np.ceil(gap)) + 2
    base = (k - k.min()) * width - lo  # keys apart by more than the span and the gap
    reach = np.maximum.accumulate(b + base)  # the furthest end so far, within each key
    first = np.ones(k.size, dtype=bool)
    first[1:] = (a[1:] + base[1:]) - reach[:-1] >= gap
    starts = np.flatnonzero(first)
    lasts = np.append(starts[1:], k.size) - 1
    return k[starts], a[starts], reach[lasts] - base[lasts]


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

    ops = s.gpu_ops()
    if ops is None or not len(ops):
        return [], 0
    ops = ops.recorded()
    gid, (pids, devices) = group_ids(ops.pid, ops.device, dtype=np.int32)
    busy = np.zeros(pids.size)
    for rows, dur in ops.durations():  # a block at a time: sums of integer nanoseconds
        busy += np.bincount(gid[rows], weights=dur, minlength=pids.size)
    chosen = sorted(np.argsort(-busy, kind="stable")[:MAX_PANELS].tolist())
    k = s.trace.kernels
    cats = categorize_many(k.names, s.rules) if k is not None else []
    window_range = _window_range(s)
    launching = _launching_threads(s)
    panels = []
    let_go_fields(ops)  # each step below lets the operations' mapped pages go
    for g in chosen:
        mine = np.flatnonzero(gid == g)
        if mine.size < 2**31:
            mine = mine.astype(np.int32)
        pid, device = int(pids[g]), int(devices[g])
        window = _instance(s, window_range, pid) if window_range else None
        if window is None:
            w0, w1 = _busiest(gather(ops.start, mine), gather(ops.end, mine))  # windowed
            what = "the busiest second" if w1 - w0 >= BUSIEST_NS else "the whole span"
        else:
            w0, w1, what = window
        let_go_fields(ops)
        panel = Panel(title=f"pid {pid}, device {device}: {what}", start=w0, end=w1)
        _lanes(panel, ops, mine, cats)
        let_go_fields(ops)
        big = max(1, (w1 - w0) // 200)  # gaps narrower than half a pixel are not drawn
        panel.gaps = [(max(a, w0), min(b, w1)) for a, b in _holes_near(ops, mine, w0, w1)
                      if b - a >= big]
        let_go_fields(ops)
        del mine
        tids = (launching[pid_of(launching) == pid] if launching is not None
                else np.zeros(0, dtype=np.int64))
        _range_rows(s, panel, tids, pid)
        panels.append(panel)
    return panels, pids.size - len(chosen)


def _launching_threads(s: Any) -> np.ndarray | None:
    """The threads (globalTid) that launched kernels (None: the launches are not known)."""
    if not s.has_kernels or not s.trace.has_api:
        return None
    s.trace.load("kernels", "launches")  # the page's other sections have read them
    k = s.trace.kernels
    if k is None or k.launch_tid is None:
        return None
    return sorted_unique(k.launch_tid[k.launch_tid >= 0])


def _holes_near(ops: GpuOps, mine: np.ndarray, w0: int, w1: int) -> list[tuple[int, int]]:
    """The holes of the union of the operations ``mine`` that meet the window [w0, w1), whole
    (not clipped). Only the operations that meet the window, and the last one before it and
    the first one after it, decide them: a hole that meets the window lies between two of
    those."""
    start, end = gather(ops.start, mine), gather(ops.end, mine)
    near = (start < w1) & (end > w0)
    before, after = np.flatnonzero(end <= w0), np.flatnonzero(start >= w1)
    if before.size:
        near[before[np.argmax(end[before])]] = True
    if after.size:
        near[after[np.argmin(start[after])]] = True
    a, b = start[near], end[near]
    h = holes(np.zeros(a.size, dtype=np.int64), a, b)
    sel = (h.start < w1) & (h.end > w0)
    return list(zip(h.start[sel].tolist(), h.end[sel].tolist()))


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
    # by start: the durations' running total, then per start the time of the operations
    # that start within the second from it, a block (``ROWS``) of starts at a time
    order = np.argsort(start, kind="stable")
    st = start[order]
    total = np.zeros(st.size + 1, dtype=np.int64)
    total[1:] = end[order]
    del order
    total[1:] -= st
    np.cumsum(total, out=total)
    best, most = 0, None
    for a in range(0, st.size, ROWS):
        upto = np.searchsorted(st, st[a:a + ROWS] + BUSIEST_NS, side="left")
        gain = total[upto] - total[a:a + upto.size]
        at = int(np.argmax(gain))
        if most is None or gain[at] > most:  # the first of the largest
            best, most = a + at, int(gain[at])
    w0 = min(int(st[best]), last - BUSIEST_NS)
    return w0, w0 + BUSIEST_NS


def _lanes(panel: Panel, ops: GpuOps, mine: np.ndarray, cats: list[str]) -> None:
    """A lane per stream, at the picture's resolution: how long each category (kernels by
    category, memory operations as ``memory``) ran in each of the window's BINS bins."""
    w0, w1 = panel.start, panel.end
    inside = mine[(gather(ops.start, mine) < w1) & (gather(ops.end, mine) > w0)]
    if inside.size == 0:
        return
    names = sorted(set(cats)) + ["memory"]
    code = ops.name_code[inside]
    cat = np.full(inside.size, len(names) - 1, dtype=np.int64)
    if cats:
        index = {c: i for i, c in enumerate(names)}
        of_code = np.array([index[c] for c in cats], dtype=np.int64)
        kernel = (ops.kind[inside] == KERNEL) & (code >= 0)
        cat[kernel] = of_code[code[kernel]]
    a = np.maximum(ops.start[inside], w0) - w0
    b = np.minimum(ops.end[inside], w1) - w0
    edges = np.arange(BINS + 1) * ((w1 - w0) / BINS)
    stream = ops.stream[inside]
    for lane in sorted_unique(stream).tolist():
        on = stream == lane
        present = sorted_unique(cat[on]).tolist()
        busy = np.stack([_bin_time(a[on & (cat == c)], b[on & (cat == c)], edges)
                         for c in present])
        panel.lanes.append(Lane(f"stream {lane}", [names[c] for c in present], busy))
        panel.categories.update(names[c] for c in present)


def _bin_time(start: np.ndarray, end: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """How long the intervals [start, end) cover each bin between ``edges``: the difference
    of the covered time up to each edge, sum(min(t, end) - start) over the starts before t."""
    s, e = np.sort(start), np.sort(end)
    sum_s = np.concatenate([[0], np.cumsum(s)]).astype(np.float64)
    sum_e = np.concatenate([[0], np.cumsum(e)]).astype(np.float64)
    ks, ke = np.searchsorted(s, edges), np.searchsorted(e, edges)
    covered = (ks * edges - sum_s[ks]) - (ke * edges - sum_e[ke])
    return np.diff(covered)


@dataclass(frozen=True)
class _Spans(Rows):
    """What the picture needs of the ranges it draws (not every column of ``Ranges``)."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray


def _overlapping(r: Ranges, pid: int, tids: np.ndarray, w0: int, w1: int) -> np.ndarray:
    """The ranges of process ``pid`` (of its threads ``tids``, when any) that overlap
    [w0, w1), but those that ended on another thread: a block of rows at a time, the mapped
    pages passed let go."""
    found = []
    for a in range(0, len(r), ROWS):
        b = min(a + ROWS, len(r))
        tid = r.tid[a:b]
        use = (pid_of(tid) == pid) & ~r.cross_thread[a:b] & (r.start[a:b] < w1) \
            & (r.end[a:b] > w0)
        if tids.size:
            use &= np.isin(tid, tids)
        found.append(np.flatnonzero(use) + a)
        for column in (r.tid, r.start, r.end):
            let_go(column[a:b])
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)


def _range_rows(s: Any, panel: Panel, tids: np.ndarray, pid: int) -> None:
    """NVTX ranges of the process's threads that launched kernels (``tids``; all its
    threads when none is known) that overlap the window, a row per thread and nesting depth,
    at the picture's resolution."""
    r = s.ranges
    if r is None or not len(r):
        return
    w0, w1 = panel.start, panel.end
    rows = _overlapping(r, pid, tids, w0, w1)
    if rows.size == 0:
        return
    sub = _Spans(start=r.start[rows], end=r.end[rows], tid=r.tid[rows])
    depth = nesting_depth(sub)
    threads = sorted_unique(sub.tid)
    thread = np.searchsorted(threads, sub.tid)
    count = np.bincount(thread, minlength=threads.size)
    # the main thread first, then the threads with the most ranges
    order = sorted(range(threads.size), key=lambda i: (tid_of(threads[i]) != pid, -count[i]))
    rank = np.empty(threads.size, dtype=np.int64)
    rank[order] = np.arange(threads.size)
    row_rank = rank[thread]
    levels = int(depth.max()) + 1
    keys = [divmod(int(k), levels) for k in
            sorted_unique(row_rank * levels + depth)[:MAX_RANGE_ROWS].tolist()]
    a, b = np.maximum(sub.start, w0), np.minimum(sub.end, w1)
    wide = (b - a) >= panel.bin_ns
    named = (b - a) * NAME_CHARS // (w1 - w0) >= MIN_NAME_CHARS
    chosen = np.zeros(rows.size, dtype=bool)
    for t, d in keys:
        chosen |= (row_rank == t) & (depth == d)
    want = np.flatnonzero(chosen & named)
    names = s.names(rows=rows[want]) if want.size else None
    shown_threads: set[int] = set()
    for t, d in keys:
        row = (row_rank == t) & (depth == d)
        _, pa, pb = merge_runs(np.zeros(int((row & ~wide).sum()), dtype=np.int64),
                               a[row & ~wide], b[row & ~wide], panel.bin_ns)
        label = ""
        if t not in shown_threads:
            tid = int(tid_of(threads[order[t]]))
            label = "NVTX, main thread" if tid == pid else f"NVTX, thread {tid}"
            shown_threads.add(t)
        bars = RangeRow(label, a[row & wide], b[row & wide], pa, pb)
        if names is not None:
            for i in np.flatnonzero(row & named).tolist():
                code = int(names.code[rows[i]])
                bars.names.append((int(a[i]), int(b[i]),
                                   names.names[code] if code >= 0 else "?"))
        panel.ranges.append(bars)


def timeline_png(panels: list[Panel]) -> bytes:
    """The panels stacked, one axes each, with one legend."""
    from reports.page.plots import _png

    return _png(timeline_figure(panels))


def _bars(ax: Any, start: np.ndarray, end: np.ndarray, origin: int, y: float, half: float = 0.4,
          **style: Any) -> None:
    """One collection of bars from ``start`` to ``end`` (ns; ms from ``origin`` on the
    axes), ``y`` +- ``half``; no autoscaling (the limits are set)."""
    from matplotlib.collections import PolyCollection

    if start.size == 0:
        return
    x0 = (start - origin) / 1e6
    x1 = (end - origin) / 1e6
    verts = np.empty((start.size, 4, 2))
    verts[:, 0, 0] = verts[:, 1, 0] = x0
    verts[:, 2, 0] = verts[:, 3, 0] = x1
    verts[:, (0, 3), 1] = y - half
    verts[:, (1, 2), 1] = y + half
    ax.add_collection(PolyCollection(cast(Any, verts), **style), autolim=False)


def timeline_figure(panels: list[Panel]) -> Any:
    """The matplotlib figure of the panels: per panel an image per lane (a row of pixels),
    a collection or two per NVTX row, one for the gaps, and the names that fit: as many
    artists whatever the number of operations and ranges in the window."""
    from matplotlib.patches import Patch

    from reports.page.plots import _figure, category_color, category_order, compact_ns

    heights = [1.1 + 0.32 * (len(p.lanes) + len(p.ranges)) for p in panels]
    fig = _figure(11.0, sum(heights) + 0.9)
    axes = fig.subplots(len(panels), 1, height_ratios=heights, squeeze=False)[:, 0]
    for ax, p in zip(axes, panels, strict=True):
        scale = 1e6  # ms
        width = p.end - p.start
        labels = [row.label for row in p.ranges] + [lane.label for lane in p.lanes]
        ys = [len(labels) - 1 - i for i in range(len(labels))]
        for y, row in zip(ys, p.ranges):
            _bars(ax, row.start, row.end, p.start, y, facecolors=RANGE_FACE,
                  edgecolors=RANGE_EDGE, linewidths=0.5)
            _bars(ax, row.packed_start, row.packed_end, p.start, y, facecolors=PACKED_FACE,
                  edgecolors=RANGE_EDGE, linewidths=0.5)
            for a, b, name in row.names:
                chars = int((b - a) / width * NAME_CHARS)
                # names are text, never mathtext: "$" stays a dollar
                ax.text((a + b) / 2 / scale - p.start / scale, y,
                        shorten(name, chars).replace("$", r"\$"), ha="center", va="center",
                        fontsize=7, clip_on=True)
        if p.gaps:
            gaps = np.array(p.gaps, dtype=np.int64)
            bottom, top = -1.3, len(labels) - 0.4
            _bars(ax, gaps[:, 0], gaps[:, 1], p.start, (bottom + top) / 2, (top - bottom) / 2,
                  facecolors=GAP_COLOR, alpha=0.12, linewidths=0)
            # the longest gap's length under it, kept inside the axes
            a, b = max(p.gaps, key=lambda g: g[1] - g[0])
            x = min(max((a + b) / 2 - p.start, 0.06 * width), 0.94 * width) / scale
            ax.text(x, -0.9, f"idle {compact_ns(b - a)}", ha="center", va="center",
                    fontsize=7, color="#AA3344")
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_ylim(-1.3, len(labels) - 0.4)
        ax.set_xlim(0, width / scale)
        ax.set_xlabel(f"ms from the window's start ({compact_ns(width)} window)",
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
    handles.append(Patch(facecolor=RANGE_FACE, edgecolor=RANGE_EDGE, label="NVTX range"))
    if any(row.packed_start.size for p in panels for row in p.ranges):
        handles.append(Patch(facecolor=PACKED_FACE, edgecolor=RANGE_EDGE,
                             label="many short NVTX ranges"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(6, len(handles)),
               frameon=False, fontsize=8)
    # the layout: where each axes' pixels are; kept as it is when saved, so that the lane
    # images, made for these pixels, fall on them
    fig.get_layout_engine().execute(fig)
    fig.set_layout_engine("none")
    for ax, p in zip(axes, panels, strict=True):
        box = ax.get_window_extent()
        ys = [len(p.ranges) + len(p.lanes) - 1 - len(p.ranges) - i for i in range(len(p.lanes))]
        for y, lane in zip(ys, p.lanes):
            _lane_image(ax, p, lane, y, box.x0, box.x1)
    return fig


def _lane_image(ax: Any, p: Panel, lane: Lane, y: float, x0: float, x1: float) -> None:
    """A lane as one row of the figure's pixels (the axes span pixels x0 to x1): each pixel
    takes one category's colour, or none, so that along the lane each category gets pixels in
    proportion to its time (error diffusion: what a pixel cannot show is carried to the
    next) where the lane is busy at least half a pixel; a pixel idle for more than half its
    time shows what ran longest in it, as opaque as it was busy (as antialiasing would), or
    nothing. Categories keep their colours: no blends."""
    from matplotlib.colors import to_rgba

    from reports.page.plots import category_color

    first, last = int(np.floor(x0)), int(np.ceil(x1))
    width = p.end - p.start
    # whole pixels, from the one the axes start in to the one they end in (the image is
    # clipped to the axes): equal columns, each exactly one pixel of the PNG
    edges = (np.arange(first, last + 1) - x0) / (x1 - x0) * width
    bins = np.arange(BINS + 1) * (width / BINS)
    # the time of each category up to each pixel edge (bins are finer than pixels)
    upto = np.concatenate([np.zeros((len(lane.categories), 1)),
                           np.cumsum(lane.busy, axis=1)], axis=1)
    per_pixel = np.diff(np.stack([np.interp(edges, bins, u) for u in upto]), axis=1)
    share = np.minimum(per_pixel / np.diff(edges), 1.0)
    idle = np.clip(1.0 - share.sum(axis=0), 0.0, 1.0)
    shares = np.vstack([share, idle])  # the last row: nothing ran
    none = shares.shape[0] - 1
    pick = np.full(shares.shape[1], none, dtype=np.int64)
    carry = np.zeros(none)
    for i, column in enumerate(shares.T):
        if column[-1] < 0.5:  # mostly busy: the category owed the most time (dithered)
            carry += column[:none]
            pick[i] = int(np.argmax(carry))
            carry[pick[i]] -= 1.0
        else:  # mostly idle: what ran longest in it, faintly; nothing carried over
            carry[:] = 0.0
            if column[-1] < 1.0 - 1e-9:
                pick[i] = int(np.argmax(column[:none]))
    colors = np.array([to_rgba(MEMORY_COLOR if c == "memory" else category_color(c))
                       for c in lane.categories] + [(1.0, 1.0, 1.0, 0.0)])[pick]
    faint = (shares[-1] >= 0.5) & (pick != none)
    colors[faint, 3] = 1.0 - shares[-1][faint]
    ms = 1e6
    ax.imshow(colors[None], extent=(edges[0] / ms, edges[-1] / ms, y - 0.4, y + 0.4),
              aspect="auto", interpolation="nearest", origin="lower", zorder=1)
