"""Plots for the benchmark commands: annotated heatmaps, scaling lines with fits, stacked bars.

matplotlib (Agg backend, no display needed) is imported on first use. The functions know
nothing about inference or micro-benchmarks: they take labelled numbers and write one PNG.
Colours are fixed here so that every plot of a run uses the same ones: ``PHASE_COLORS`` for
prefill/decode, ``MEMORY_COLORS`` for the memory parts, ``ordinal_colors`` for ordered values
(batch sizes, input lengths: the same value gets the same colour in every plot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

PHASE_COLORS = {"prefill": "#4c72b0", "decode": "#dd8452"}
MEMORY_COLORS = {"weights": "#8172b3", "KV cache": "#55a868", "activations": "#ccb974",
                 "measured": "#c44e52"}
FIT_COLOR = "#555555"
SERIES_COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860",
                 "#da8bc3", "#8c8c8c")
HEATMAP_CMAP = "viridis"
MISSING_COLOR = "#e0e0e0"
DPI = 120

TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
BYTE_UNITS = ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB"), (1, "B"))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def time_unit(values: Sequence[float | None]) -> tuple[float, str]:
    """(seconds per unit, unit name) so that the largest value reads 1..1000."""
    top = max((abs(v) for v in values if v is not None and math.isfinite(v)), default=0.0)
    for scale, name in TIME_UNITS:
        if top >= scale:
            return scale, name
    return TIME_UNITS[-1]


def byte_unit(values: Sequence[float | None]) -> tuple[float, str]:
    top = max((abs(v) for v in values if v is not None), default=0.0)
    for scale, name in BYTE_UNITS:
        if top >= scale:
            return scale, name
    return BYTE_UNITS[-1]


def short_number(value: float) -> str:
    """3 significant digits, thousands as k/M (cell labels must stay short)."""
    a = abs(value)
    if a >= 1e6:
        return f"{value / 1e6:.3g}M"
    if a >= 1e4:
        return f"{value / 1e3:.3g}k"
    if a >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def ordinal_colors(values: Sequence[Any], cmap: str = "viridis") -> dict[Any, str]:
    """One colour per ordered value from a sequential colour map (yellow end left out, it
    is hard to see on white)."""
    plt = _pyplot()
    import matplotlib.colors as mcolors

    ordered = sorted(set(values))
    cm = plt.get_cmap(cmap)
    n = max(len(ordered) - 1, 1)
    return {v: mcolors.to_hex(cm(0.85 * i / n)) for i, v in enumerate(ordered)}


# ---- heatmaps -------------------------------------------------------------------------------
@dataclass
class HeatPanel:
    """values[i][j]: row i (y label i), column j (x label j); None cells show ``missing[i][j]``
    (e.g. 'skipped') on grey."""

    title: str
    values: list[list[float | None]]
    x_labels: list[str]
    y_labels: list[str]
    x_title: str
    y_title: str
    colorbar_label: str
    missing: list[list[str]] = field(default_factory=list)
    fmt: Callable[[float], str] = short_number


def heatmap(path: Path, panels: list[HeatPanel], title: str) -> Path:
    plt = _pyplot()
    import numpy as np

    cols = max(len(p.x_labels) for p in panels)
    rows = max(len(p.y_labels) for p in panels)
    panel_w = max(3.6, 0.75 * cols + 2.2)
    fig_h = max(3.2, 0.5 * rows + 2.0)
    fig, axes = plt.subplots(1, len(panels), figsize=(panel_w * len(panels), fig_h),
                             squeeze=False, constrained_layout=True)
    cmap = plt.get_cmap(HEATMAP_CMAP).with_extremes(bad=MISSING_COLOR)
    font = 9 if cols <= 6 else 7
    for ax, panel in zip(axes[0], panels):
        data = np.array([[np.nan if v is None else v for v in row] for row in panel.values],
                        dtype=float)
        masked = np.ma.masked_invalid(data)
        image = ax.imshow(masked, cmap=cmap, aspect="auto", origin="lower")
        ax.set_xticks(range(len(panel.x_labels)), panel.x_labels)
        ax.set_yticks(range(len(panel.y_labels)), panel.y_labels)
        ax.set_xlabel(panel.x_title)
        ax.set_ylabel(panel.y_title)
        ax.set_title(panel.title, fontsize=10)
        finite = data[np.isfinite(data)]
        lo, hi = (finite.min(), finite.max()) if finite.size else (0.0, 1.0)
        for i in range(data.shape[0]):
            for j in range(data.shape[1]):
                if np.isfinite(data[i, j]):
                    shade = (data[i, j] - lo) / (hi - lo) if hi > lo else 0.5
                    ax.text(j, i, panel.fmt(float(data[i, j])), ha="center", va="center",
                            fontsize=font, color="black" if shade > 0.55 else "white")
                else:
                    text = panel.missing[i][j] if panel.missing else ""
                    ax.text(j, i, text, ha="center", va="center", fontsize=font - 1,
                            color="#555555")
        bar = fig.colorbar(image, ax=ax, shrink=0.9)
        bar.set_label(panel.colorbar_label)
    fig.suptitle(title, fontsize=11)
    return _save(fig, path)


# ---- lines ----------------------------------------------------------------------------------
@dataclass
class Series:
    label: str
    xs: list[float]
    ys: list[float]
    errors: list[float | None] | None = None
    color: str | None = None
    fit: tuple[float, float] | None = None  # (exponent, coefficient): y = c x^exponent


@dataclass
class LinePanel:
    title: str
    series: list[Series]
    x_title: str
    y_title: str
    log_x: bool = True
    log_y: bool = True
    x_ticks: list[float] | None = None
    y_scale: float = 1.0  # values are divided by this (a unit) before plotting


def line_plot(path: Path, panels: list[LinePanel], title: str, *,
              legend_title: str | None = None) -> Path:
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, ScalarFormatter

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels) + 0.6, 4.0),
                             squeeze=False, constrained_layout=True)
    for ax, panel in zip(axes[0], panels):
        for k, s in enumerate(panel.series):
            color = s.color or SERIES_COLORS[k % len(SERIES_COLORS)]
            ys = [y / panel.y_scale for y in s.ys]
            errs = None
            if s.errors:
                upper = [0.0 if e is None else e / panel.y_scale for e in s.errors]
                # on a log axis a bar cannot reach 0 or below: clip the lower half at y/10
                lower = [min(e, 0.9 * y) if panel.log_y else e for e, y in zip(upper, ys)]
                errs = [lower, upper]
            ax.errorbar(s.xs, ys, yerr=errs, marker="o", markersize=4, capsize=3,
                        color=color, label=s.label, linewidth=1.5)
            if s.fit is not None and len(s.xs) > 1:
                exponent, coeff = s.fit
                lo, hi = min(s.xs), max(s.xs)
                grid = [lo * (hi / lo) ** (t / 40) for t in range(41)] if lo > 0 else [lo, hi]
                ax.plot(grid, [coeff * x**exponent / panel.y_scale for x in grid],
                        linestyle="--", color=color if len(panel.series) > 1 else FIT_COLOR,
                        linewidth=1, alpha=0.8)
        if panel.log_x:
            ax.set_xscale("log", base=2)
        if panel.log_y:
            ax.set_yscale("log")
            # 1-2-5 ticks as plain numbers (the default 2x10^0 labels are hard to read)
            ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(NullFormatter())
        if panel.x_ticks:
            ax.set_xticks(panel.x_ticks)
            ax.xaxis.set_major_formatter(ScalarFormatter())
            ax.xaxis.set_minor_formatter(NullFormatter())
            if len(panel.x_ticks) > 7:
                ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel(panel.x_title)
        ax.set_ylabel(panel.y_title)
        ax.set_title(panel.title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    if labels:
        if len(panels) == 1:
            axes[0][0].legend(fontsize=8, title=legend_title, title_fontsize=8)
        else:
            fig.legend(handles, labels, loc="outside right center", fontsize=8,
                       title=legend_title, title_fontsize=8)
    fig.suptitle(title, fontsize=11)
    return _save(fig, path)


# ---- stacked bars ---------------------------------------------------------------------------
def stacked_bars(path: Path, labels: list[str], stacks: dict[str, list[float]],
                 colors: dict[str, str], *, value_title: str, title: str, scale: float = 1.0,
                 markers: dict[str, list[float | None]] | None = None,
                 marker_colors: dict[str, str] | None = None,
                 annotations: list[str] | None = None, label_title: str = "") -> Path:
    """Horizontal bars, one per label, stacked from ``stacks`` (name -> value per label);
    ``markers`` adds points (e.g. a measured value) on the same axis; ``annotations`` is a
    short text at the end of each bar."""
    plt = _pyplot()

    n = len(labels)
    fig_h = max(2.6, 0.32 * n + 1.6)
    fig, ax = plt.subplots(figsize=(8.0, fig_h), constrained_layout=True)
    ys = list(range(n))
    left = [0.0] * n
    for name, values in stacks.items():
        widths = [(v or 0.0) / scale for v in values]
        ax.barh(ys, widths, left=left, color=colors[name], label=name, height=0.7)
        left = [a + b for a, b in zip(left, widths)]
    for name, points in (markers or {}).items():
        pts = [(v / scale, y) for v, y in zip(points, ys) if v is not None]
        if pts:
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker="D", s=28, zorder=3,
                       color=(marker_colors or {}).get(name, "black"), label=name)
    right = max([*left, *[v / scale for vals in (markers or {}).values() for v in vals
                          if v is not None]], default=1.0) or 1.0
    if annotations:
        for y, end, text in zip(ys, left, annotations):
            ax.text(end + right * 0.01, y, text, va="center", fontsize=7, color="#333333")
        ax.set_xlim(0, right * 1.25)
    ax.set_yticks(ys, labels, fontsize=8 if n <= 24 else 6)
    ax.invert_yaxis()
    ax.set_xlabel(value_title)
    if label_title:
        ax.set_ylabel(label_title)
    ax.set_title(title, fontsize=11)
    ax.grid(True, axis="x", alpha=0.3)
    handles, names = ax.get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncols=min(len(names), 4), fontsize=8)
    return _save(fig, path)


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
