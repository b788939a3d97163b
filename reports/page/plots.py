"""The report page's plots (``nsys-mine report``), drawn with matplotlib's Agg canvas (no
display, no pyplot state) and returned as PNG bytes. Plain data in (no analysis here): labels
and numbers out of reports. (``profile_cli.model_results.plots`` draws infer's and micro's
plot files.)

Every plot labels its axes with units, gives each kernel category the same colour everywhere
(``category_color``), shortens long names, and sizes itself to its content so that labels do
not overlap (constrained layout).
"""

from __future__ import annotations

import io
from typing import Any, Sequence

from reports.categories import CATEGORIES
from reports.render import human_ns, shorten

# Paul Tol's colour-blind safe "bright"/"muted" colours, one per category, fixed.
CATEGORY_COLORS = {
    "gemm": "#4477AA", "attention": "#EE6677", "softmax": "#CCBB44", "reduction": "#66CCEE",
    "normalization": "#AA3377", "elementwise": "#228833", "optimizer": "#EE7733",
    "copy": "#009988", "communication": "#332288", "other": "#BBBBBB",
    "cuda graph": "#555555",
}
EXTRA_COLORS = ("#882255", "#44AA99", "#999933", "#DDCC77", "#117733", "#88CCEE")
MISSING_COLOR = "#E8E8E8"
LABEL_CHARS = 38  # range names on an axis
DPI = 110


def category_color(category: str) -> str:
    """The colour of a kernel category; user categories get stable extra colours."""
    if category in CATEGORY_COLORS:
        return CATEGORY_COLORS[category]
    return EXTRA_COLORS[sum(map(ord, category)) % len(EXTRA_COLORS)]


def category_order(categories: Sequence[str]) -> list[str]:
    """Categories in the rule table's order, user categories after them (by name)."""
    known = [c for c in CATEGORIES if c in categories]
    return known + sorted(set(categories) - set(known))


def _figure(width: float, height: float) -> Any:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    fig.patch.set_facecolor("white")
    return fig


def _png(fig: Any) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()


def _plain_log(axis: Any) -> None:
    """A log axis with ticks at 1, 2 and 5 per decade, labelled as plain numbers (``20``,
    ``0.5``), not ``2 x 10^1``."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def _title(ax: Any, text: str) -> None:
    """A title left-aligned over the axes, wrapped to the figure's width."""
    import textwrap

    width_in = ax.figure.get_figwidth()
    ax.set_title(textwrap.fill(text, max(30, int(width_in * 9))), loc="left", fontsize=11)


def compact_ns(ns: float) -> str:
    """A duration in three significant digits for a plot cell: ``453 µs``, ``1.02 ms``."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "µs")):
        if abs(ns) >= scale:
            return f"{ns / scale:.3g} {unit}"
    return f"{ns:.3g} ns"


def _text_color(hex_color: str) -> str:
    """Black or white, whichever reads better on ``hex_color``."""
    r, g, b = (int(hex_color[i:i + 2], 16) / 255 for i in (1, 3, 5))
    return "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.55 else "white"


def label(name: Any, width: int = LABEL_CHARS) -> str:
    """A range or config name for an axis: at most ``width`` characters."""
    return str(shorten("(whole export)" if name is None else str(name), width))


def category_shares_png(bars: Sequence[tuple[str, dict[str, float]]], *, title: str,
                        xlabel: str = "share of the range's GPU kernel time (%)") -> bytes:
    """Horizontal stacked bars, one per range: the share of each kernel category (%)."""
    cats = category_order([c for _, shares in bars for c, v in shares.items() if v > 0])
    n = len(bars)
    fig = _figure(10.0, 1.3 + 0.42 * max(n, 0.6 * len(cats)))
    ax = fig.add_subplot()
    ys = list(range(n))[::-1]  # first bar on top
    left = [0.0] * n
    for cat in cats:
        widths = [float(shares.get(cat, 0.0)) for _, shares in bars]
        color = category_color(cat)
        ax.barh(ys, widths, left=left, color=color, label=cat, height=0.7,
                edgecolor="white", linewidth=0.6)
        for y, x0, w in zip(ys, left, widths, strict=True):
            if w >= 7:
                ax.text(x0 + w / 2, y, f"{w:.0f}", ha="center", va="center", fontsize=8,
                        color=_text_color(color))
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.set_yticks(ys, [label(name) for name, _ in bars], fontsize=9)
    ax.set_xlim(0, 100)
    ax.set_xlabel(xlabel)
    _title(ax, title)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False, fontsize=9,
              title="category", title_fontsize=9, alignment="left")
    return _png(fig)


def range_times_png(rows: Sequence[tuple[str, float]], *, title: str, xlabel: str) -> bytes:
    """Horizontal bars: time per instance of each range (ms), with the value beside each."""
    n = len(rows)
    fig = _figure(9.0, 1.3 + 0.36 * n)
    ax = fig.add_subplot()
    ys = list(range(n))[::-1]
    values = [ns / 1e6 for _, ns in rows]
    ax.barh(ys, values, color="#4477AA", height=0.65)
    top = max(values, default=0.0) or 1.0
    for y, v, (_, ns) in zip(ys, values, rows, strict=True):
        ax.text(v + top * 0.01, y, human_ns(ns), va="center", fontsize=8)
    ax.set_xlim(0, top * 1.18)
    ax.set_yticks(ys, [label(name) for name, _ in rows], fontsize=9)
    ax.set_xlabel(xlabel)
    _title(ax, title)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    return _png(fig)


def attention_png(rows: Sequence[dict[str, Any]], *, title: str) -> bytes:
    """Attention sub-ranges: share of FLOPs next to share of time (left), achieved GFLOP/s
    (right). ``rows``: ``reports.analyses.attention`` rows of the sub-ranges."""
    rows = [r for r in rows if r.get("flop_pct") is not None]
    n = len(rows)
    fig = _figure(10.0, 1.6 + 0.6 * n)
    left, right = fig.subplots(1, 2, width_ratios=(3, 2))
    ys = list(range(n))[::-1]
    flop = [float(r["flop_pct"] or 0) for r in rows]
    time = [float(r["time_pct"] or 0) for r in rows]
    source = rows[0]["time_source"].upper() if rows else ""
    h = 0.38
    left.barh([y + h / 2 for y in ys], flop, height=h, color="#4477AA", label="FLOPs")
    left.barh([y - h / 2 for y in ys], time, height=h, color="#EE7733",
              label=f"runtime ({source} time)")
    for y, f, t in zip(ys, flop, time, strict=True):
        left.text(f + 1, y + h / 2, f"{f:.1f}%", va="center", fontsize=8)
        left.text(t + 1, y - h / 2, f"{t:.1f}%", va="center", fontsize=8)
    left.set_xlim(0, 118)
    left.set_yticks(ys, [label(r["range"], 28) for r in rows], fontsize=9)
    left.set_xlabel("share of the attention sub-ranges (%)")
    left.legend(loc="lower right", fontsize=8, frameon=False)
    _title(left, title)
    rate = [float(r["achieved_gflops"] or 0) for r in rows]
    right.barh(ys, rate, color="#228833", height=0.6)
    top = max(rate, default=0.0) or 1.0
    for y, v in zip(ys, rate, strict=True):
        right.text(v + top * 0.02, y, f"{v:,.3g}", va="center", fontsize=8)
    right.set_xlim(0, top * 1.3)
    right.set_yticks(ys, [""] * n)
    right.set_xlabel(f"achieved GFLOP/s ({source} time)")
    for ax in (left, right):
        ax.grid(axis="x", color="#dddddd", linewidth=0.6)
        ax.set_axisbelow(True)
    return _png(fig)


def heatmap_png(values: Sequence[Sequence[float | None]], texts: Sequence[Sequence[str]],
                row_labels: Sequence[str], col_labels: Sequence[str], *, title: str,
                xlabel: str, ylabel: str, colorbar: str | None = None,
                colors: Sequence[Sequence[str | None]] | None = None,
                legend: Sequence[str] = ()) -> bytes:
    """A grid (rows x columns) with a text in each cell. Cells are coloured by ``values``
    (a colour scale, ``colorbar`` its label) or, when given, by ``colors`` (hex colours,
    faded by ``values`` in 0..100: e.g. the dominant category at its share), with the
    ``legend`` categories. Empty cells (None) are light grey."""
    import numpy as np
    from matplotlib.colors import LogNorm, to_rgb

    nr, nc = len(row_labels), len(col_labels)
    fig = _figure(max(4.8, 1.9 + 1.25 * nc + (1.4 if colorbar else 0)),
                  max(2.6, 1.5 + 0.62 * nr + (0.35 if legend else 0)))
    ax = fig.add_subplot()
    grid = np.full((nr, nc, 3), to_rgb(MISSING_COLOR))
    data = np.array([[np.nan if v is None else float(v) for v in row] for row in values])
    mappable = None
    if colors is not None:
        for i in range(nr):
            for j in range(nc):
                c, v = colors[i][j], data[i, j]
                if c is not None and not np.isnan(v):
                    alpha = 0.25 + 0.75 * min(max(v, 0.0), 100.0) / 100.0
                    grid[i, j] = [1 - alpha * (1 - x) for x in to_rgb(c)]
        ax.imshow(grid, aspect="auto")
    else:
        finite = data[np.isfinite(data)]
        positive = finite[finite > 0]
        ax.imshow(grid, aspect="auto")
        if positive.size:
            lo, hi = float(positive.min()), float(positive.max())
            norm = LogNorm(vmin=lo, vmax=hi if hi > lo else lo * 1.0001)
            masked = np.ma.masked_invalid(np.where(data > 0, data, np.nan))
            mappable = ax.imshow(masked, aspect="auto", cmap="viridis", norm=norm)
    for i in range(nr):
        for j in range(nc):
            text = texts[i][j]
            if not text:
                continue
            if mappable is not None and np.isfinite(data[i, j]) and data[i, j] > 0:
                r, g, b, _ = mappable.cmap(mappable.norm(data[i, j]))
                tc = "black" if 0.299 * r + 0.587 * g + 0.114 * b > 0.5 else "white"
            else:
                tc = "black"
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color=tc)
    ax.set_xticks(range(nc), list(col_labels), fontsize=9)
    ax.set_yticks(range(nr), [label(x, 28) for x in row_labels], fontsize=9)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _title(ax, title)
    if mappable is not None and colorbar:
        bar = fig.colorbar(mappable, ax=ax, shrink=0.9)
        bar.set_label(colorbar)
        _plain_log(bar.ax.yaxis)
    if legend:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=category_color(c), label=c) for c in legend],
                  loc="upper center", bbox_to_anchor=(0.5, -0.16 - 0.25 / max(nr, 1)),
                  ncol=min(5, len(legend)), frameon=False, fontsize=8)
    return _png(fig)


LINE_STYLES = {"forward": "-", "backward": "--", "step": ":", "optimizer": "-."}
LINE_COLORS = ("#4477AA", "#EE6677", "#228833", "#CCBB44", "#66CCEE", "#AA3377", "#BBBBBB")


def lines_png(series: Sequence[tuple[str, str, Sequence[float], Sequence[float]]], *,
              title: str, xlabel: str, ylabel: str) -> bytes:
    """Lines of (x, y) points: ``(group, kind, xs, ys)`` per series; one colour per group
    (e.g. a size), one line style per kind (forward solid, backward dashed). Log-log axes,
    ticks at the x values (e.g. context lengths)."""
    fig = _figure(8.0, 4.6)
    ax = fig.add_subplot()
    groups = list(dict.fromkeys(g for g, _, _, _ in series))
    xs_all = sorted({x for _, _, xs, _ in series for x in xs})
    for group, kind, xs, ys in series:
        color = LINE_COLORS[groups.index(group) % len(LINE_COLORS)]
        ax.plot(xs, ys, LINE_STYLES.get(kind, "-"), marker="o", markersize=4, color=color,
                label=f"{label(group, 24)} {kind}")
    if xs_all:
        ax.set_xscale("log", base=2)
        ax.set_xticks(xs_all, [str(int(x)) if float(x).is_integer() else str(x)
                               for x in xs_all])
        ax.minorticks_off()
    ax.set_yscale("log")
    _plain_log(ax.yaxis)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _title(ax, title)
    ax.grid(color="#dddddd", linewidth=0.6, which="both")
    ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return _png(fig)


def module_tree_png(rows: Sequence[tuple[str, int, float, str | None, str]], *, title: str,
                    xlabel: str) -> bytes:
    """A module tree: one bar per range ``(name, level, value, category, text)`` from the
    top, its name indented by level (0: none) on the left, the bar coloured by its dominant
    kernel's category (None: one neutral colour), ``text`` beside it."""
    n = len(rows)
    names = [label(name, LABEL_CHARS + 8) for name, *_ in rows]
    chars = max((len(s) + 2 * level for s, (_, level, *_) in zip(names, rows)), default=10)
    label_w = 0.4 + 0.068 * chars  # inches: the names' column
    fig = _figure(label_w + 7.4, 1.3 + 0.3 * n)
    names_ax, ax = fig.subplots(1, 2, sharey=True, width_ratios=(label_w, 7.4))
    ys = list(range(n))[::-1]
    values = [float(v or 0.0) for _, _, v, _, _ in rows]
    colors = [category_color(c) if c else "#4477AA" for _, _, _, c, _ in rows]
    ax.barh(ys, values, color=colors, height=0.65)
    top = max(values, default=0.0) or 1.0
    for y, v, (*_, text) in zip(ys, values, rows, strict=True):
        ax.text(v + top * 0.01, y, text, va="center", fontsize=8)
    ax.set_xlim(0, top * 1.75)  # room for the texts
    ax.set_xlabel(xlabel)
    ax.tick_params(axis="y", left=False, labelleft=False)
    ax.grid(axis="x", color="#dddddd", linewidth=0.6)
    ax.set_axisbelow(True)
    names_ax.set_xlim(0, chars)
    names_ax.axis("off")
    for y, name, (_, level, *_) in zip(ys, names, rows, strict=True):
        names_ax.text(2 * level, y, name, va="center", ha="left", fontsize=8.5,
                      family="monospace")
    ax.set_ylim(-0.6, n - 0.4)
    _title(names_ax, title)
    cats = category_order([c for *_, c, _ in rows if c])
    if cats:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=category_color(c), label=c) for c in cats],
                  loc="lower right", frameon=False, fontsize=8, title="dominant kernel",
                  title_fontsize=8)
    return _png(fig)
