"""The plots of the ranks page (``reports.ranks.page``), drawn as ``reports.page.plots``
draws: matplotlib's Agg canvas, PNG bytes out, plain numbers in."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from reports.page.plots import _figure, _png, _title, category_color

PART_COLORS = {"compute": "#4477AA", "exposed comm": category_color("communication"),
               "wait for others": "#EE6677", "idle": "#DDDDDD"}


def lateness_heatmap_png(late_ms: np.ndarray, ranks: Sequence[int], *, title: str) -> bytes:
    """Ranks (rows) x matched collectives (columns): each arrival minus the median arrival of
    that collective (ms), blue early, red late, white on time."""
    import matplotlib
    from matplotlib.colors import TwoSlopeNorm

    r, k = late_ms.shape
    fig = _figure(10.0, 1.6 + 0.32 * max(r, 3))
    ax = fig.add_subplot()
    hi = _extent(late_ms)
    cmap = matplotlib.colormaps["RdBu_r"].with_extremes(bad="#b8b8b8")  # not in the group
    im = ax.imshow(np.ma.masked_invalid(late_ms), aspect="auto", cmap=cmap,
                   interpolation="nearest", norm=TwoSlopeNorm(vmin=-hi, vcenter=0.0, vmax=hi))
    ax.set_yticks(range(r), [f"rank {x}" for x in ranks], fontsize=8)
    ax.set_xlabel(f"matched collective (1 to {k}, in order)")
    _title(ax, title)
    bar = fig.colorbar(im, ax=ax, shrink=0.9)
    bar.set_label("arrival - median arrival (ms)")
    return _png(fig)


def _extent(late_ms: np.ndarray) -> float:
    """The colour scale's half range: the largest lateness (1 where there is none)."""
    finite = late_ms[np.isfinite(late_ms)]
    hi = float(np.abs(finite).max()) if finite.size else 0.0
    return hi if hi > 0 else 1.0


def lateness_bars_png(late_ms: np.ndarray, ranks: Sequence[int], *, title: str) -> bytes:
    """One collective: a horizontal bar per rank, its arrival minus the median (ms), red
    late, blue early."""
    n = len(ranks)
    fig = _figure(9.0, 1.4 + 0.3 * max(n, 3))
    ax = fig.add_subplot()
    ys = list(range(n))[::-1]
    v = np.nan_to_num(np.asarray(late_ms, dtype=np.float64))
    ax.barh(ys, v, color=["#CC3311" if x > 0 else "#0077BB" for x in v.tolist()], height=0.7)
    ax.axvline(0.0, color="#555555", linewidth=0.8)
    ax.set_yticks(ys, [f"rank {x}" for x in ranks], fontsize=8)
    ax.set_xlabel("arrival - median arrival (ms)")
    _title(ax, title)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    return _png(fig)


def rank_time_bars_png(ranks: Sequence[int], parts: dict[str, list[float]], *,
                       title: str) -> bytes:
    """One horizontal stacked bar per rank: compute, exposed communication, waiting for
    others and idle time (ms)."""
    n = len(ranks)
    fig = _figure(9.0, 1.4 + 0.3 * max(n, 3))
    ax = fig.add_subplot()
    ys = list(range(n))[::-1]
    left = np.zeros(n)
    for name, values in parts.items():
        v = np.asarray(values, dtype=np.float64)
        ax.barh(ys, v, left=left, color=PART_COLORS.get(name, "#999999"), label=name,
                height=0.7, edgecolor="white", linewidth=0.5)
        left += v
    ax.set_yticks(ys, [f"rank {x}" for x in ranks], fontsize=8)
    ax.set_xlabel("time on the GPU's span (ms)")
    _title(ax, title)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    return _png(fig)


def rank_lanes_png(lanes: Sequence[tuple[int, dict[str, np.ndarray]]], window: tuple[int, int],
                   arrivals: Sequence[np.ndarray] = (), *, title: str) -> bytes:
    """Aligned timeline lanes, one per rank: its compute and communication kernels (ms from
    the window's start), and its arrivals at the collectives (ticks)."""
    n = len(lanes)
    fig = _figure(10.0, 1.4 + 0.34 * max(n, 3))
    ax = fig.add_subplot()
    t0 = window[0]
    for row, (_rank, lane) in enumerate(lanes):
        y = n - 1 - row
        for name, color, h in (("compute", PART_COLORS["compute"], 0.7),
                               ("comm", PART_COLORS["exposed comm"], 0.35)):
            iv = lane.get(name)
            if iv is None or not len(iv):
                continue
            keep = (iv[:, 1] > window[0]) & (iv[:, 0] < window[1])
            bars = [((a - t0) / 1e6, (b - a) / 1e6) for a, b in iv[keep].tolist()]
            ax.broken_barh(bars, (y - h / 2, h), facecolors=color, linewidth=0)
        if row < len(arrivals) and len(arrivals[row]):
            at = arrivals[row]
            at = at[(at >= window[0]) & (at <= window[1])]
            ax.vlines((at - t0) / 1e6, y - 0.45, y + 0.45, colors="#EE6677", linewidth=0.8)
    ax.set_yticks(list(range(n))[::-1], [f"rank {r}" for r, _ in lanes], fontsize=8)
    ax.set_xlim(0, (window[1] - window[0]) / 1e6)
    ax.set_ylim(-0.6, n - 0.4)
    ax.set_xlabel("time on the first rank's clock (ms from the window's start)")
    _title(ax, title)
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=PART_COLORS["compute"], label="compute kernels"),
                       Patch(color=PART_COLORS["exposed comm"], label="communication kernels"),
                       Patch(color="#EE6677", label="arrival at a collective")],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=8)
    return _png(fig)
