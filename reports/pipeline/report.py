"""What an analysis returns (``Report``), and the statistics every analysis computes the same
way (``group_stats``, ``r1``: as nsys does)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from nsys_parsers.arrays import ROWS
from nsys_parsers.errors import RangeNotFound, closest_names

if TYPE_CHECKING:
    import pandas as pd


MULTI_COLUMN = "config"  # the label column of several exports' rows (reports.pipeline.multi)


@dataclass
class Report:
    """An answer, as data: row dicts (keys = ``columns``, in that order; units in the names:
    ``_ns``, ``_pct``, ``_bytes``), notes that explain the numbers, optional one-line answers
    (``sentences``, one per row where an analysis has them), ``warnings`` (what the command
    line says on stderr: a job's export that could not be read), a title, and the exit status
    of its command (0 but for gates: ``check``, ``diff --fail-on``). An answer that is one object
    rather than rows (``info``) is ``obj``; ``detail`` holds what a page draws beyond the rows
    (``ranks``: the matched collectives). How people see it is the renderer's business
    (``Analysis.view_of``, ``reports.render``). The rows of several exports carry their
    export's label in ``config`` (``MULTI_COLUMN``), first."""

    rows: Sequence[dict[str, Any]]
    columns: list[str]
    notes: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)
    title: str | None = None
    obj: dict[str, Any] | None = None
    exit_code: int = 0
    detail: Any = None
    warnings: list[str] = field(default_factory=list)

    def to_pandas(self) -> pd.DataFrame:
        """The rows as a DataFrame (``columns`` in order; the notes in ``df.attrs``). pandas is
        imported here, not before."""
        import pandas as pd

        if self.obj is not None:
            df = pd.DataFrame([self.obj])
        else:
            df = pd.DataFrame.from_records(list(self.rows), columns=self.columns)
        df.attrs["notes"] = list(self.notes)
        df.attrs["warnings"] = list(self.warnings)
        if self.title:
            df.attrs["title"] = self.title
        return df

    def _repr_html_(self) -> str:
        """A notebook shows a report as its table."""
        return self.to_pandas()._repr_html_()


def rows_of(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Row dicts from equally long column lists (keys in the order of ``columns``): reports
    compute per-group columns at once, never by a loop over numpy scalars."""
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"rows_of: columns of different lengths {sorted(lengths)}")
    keys = list(columns)
    return [dict(zip(keys, values)) for values in zip(*columns.values())]


DURATION_COLUMNS = ("total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns")


@dataclass
class GroupStats:
    count: np.ndarray
    total: np.ndarray
    avg: np.ndarray
    med: np.ndarray
    min: np.ndarray
    max: np.ndarray
    stddev: np.ndarray

    _plain: dict[str, list[Any]] | None = None

    def columns(self) -> dict[str, list[Any]]:
        """The duration columns of every group, as every report names them (plain Python
        numbers: numpy rounds, ``tolist()`` unwraps)."""
        if self._plain is None:
            self._plain = dict(zip(DURATION_COLUMNS, [
                self.total.tolist(), r1_array(self.avg).tolist(), r1_array(self.med).tolist(),
                self.min.tolist(), self.max.tolist(), r1_array(self.stddev).tolist()]))
        return self._plain

    def row(self, g: int) -> dict[str, Any]:
        """The duration columns of group g."""
        return {name: values[g] for name, values in self.columns().items()}


def group_stats(groups: np.ndarray, values: np.ndarray, ngroups: int) -> GroupStats:
    """Count, sum, mean, median, min, max and sample standard deviation per group code.

    Matches nsys: the median of an even count is the mean of the two middle values; the
    standard deviation is the sample one (n - 1), 0 for a single value. Empty groups give 0.
    Beside its inputs it holds one array of their length (``group_stats_of``).
    """
    values = np.asarray(values, dtype=np.int64)

    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:  # groups of any integer dtype
        for a in range(0, values.size, ROWS):
            yield groups[a:a + ROWS], values[a:a + ROWS]
    return group_stats_of(blocks, ngroups)


def group_stats_of(blocks: Callable[[], Iterable[tuple[np.ndarray, np.ndarray]]],
                   ngroups: int) -> GroupStats:
    """``group_stats`` of (group, value) pairs that ``blocks()`` gives a block at a time
    (called twice: their count and range of values, then their packed key), holding one
    array of their length (the values sorted by group); the rest goes a block of whole
    groups at a time (``group_blocks``). What gives the pairs need not hold them."""
    count = np.zeros(ngroups, dtype=np.int64)
    total = np.zeros(ngroups, dtype=np.int64)
    avg = np.zeros(ngroups)
    med = np.zeros(ngroups)
    vmin = np.zeros(ngroups, dtype=np.int64)
    vmax = np.zeros(ngroups, dtype=np.int64)
    std = np.zeros(ngroups)
    n, lows, highs = 0, [], []
    for g, v in blocks():
        count += np.bincount(np.asarray(g, dtype=np.int64), minlength=ngroups)
        if v.size:
            n += v.size
            lows.append(int(v.min()))
            highs.append(int(v.max()))
    if n == 0:
        return GroupStats(count, total, avg, med, vmin, vmax, std)
    vmin_all, vmax_all = min(lows), max(highs)
    span = vmax_all - vmin_all + 1
    ends = np.cumsum(count)
    if ngroups * span < 2**62 and -2**61 < vmin_all and vmax_all < 2**61:
        # one sort of a packed (group, value) key rather than a two-key lexsort
        sv = np.empty(n, dtype=np.int64)
        at = 0
        for g, v in blocks():
            part = sv[at:at + v.size]
            np.multiply(np.asarray(g, dtype=np.int64), span, out=part)
            part += v
            part -= vmin_all
            at += v.size
        sv.sort()
        for g0, g1 in group_blocks(ends):
            a, b = int(ends[g0] - count[g0]), int(ends[g1 - 1])
            sv[a:b] -= np.repeat(np.arange(g0, g1, dtype=np.int64) * span - vmin_all,
                                 count[g0:g1])
    else:  # pragma: no cover - enormous value ranges
        parts = list(blocks())
        groups = np.concatenate([np.asarray(g, dtype=np.int64) for g, _ in parts])
        values = np.concatenate([np.asarray(v, dtype=np.int64) for _, v in parts])
        sv = values[np.lexsort((values, groups))]
    nonempty = np.flatnonzero(count > 0)
    n_g = count[nonempty]
    starts = ends[nonempty] - n_g
    total[nonempty] = np.add.reduceat(sv, starts)
    avg[nonempty] = total[nonempty] / n_g
    med[nonempty] = (sv[starts + (n_g - 1) // 2] + sv[starts + n_g // 2]) / 2.0
    vmin[nonempty] = sv[starts]
    vmax[nonempty] = sv[starts + n_g - 1]
    sq = np.zeros(nonempty.size)
    for j0, j1 in group_blocks(ends[nonempty]):
        a, b = int(starts[j0]), int(starts[j1 - 1] + n_g[j1 - 1])
        dev = np.repeat(avg[nonempty[j0:j1]], n_g[j0:j1])  # each value's group mean, then
        np.subtract(sv[a:b], dev, out=dev)  # its squared deviation
        np.multiply(dev, dev, out=dev)
        sq[j0:j1] = np.add.reduceat(dev, starts[j0:j1] - a)
    with np.errstate(invalid="ignore", divide="ignore"):
        std[nonempty] = np.where(n_g > 1, np.sqrt(sq / np.maximum(n_g - 1, 1)), 0.0)
    return GroupStats(count, total, avg, med, vmin, vmax, std)


def group_blocks(ends: np.ndarray, rows: int | None = None) -> list[tuple[int, int]]:
    """Consecutive groups (``ends``: where each group's rows end, ascending) in blocks
    ``[g0, g1)`` of about ``rows`` (default ``arrays.ROWS``) rows, never splitting a group (a
    larger group is a block of its own): what goes a block at a time gives each group the
    same operations on the same values as at once."""
    rows = rows or ROWS
    blocks, g0 = [], 0
    while g0 < ends.size:
        base = int(ends[g0 - 1]) if g0 else 0
        g1 = max(int(np.searchsorted(ends, base + rows, side="right")), g0 + 1)
        blocks.append((g0, g1))
        g0 = g1
    return blocks


def r1_array(x: np.ndarray) -> np.ndarray:
    """``r1`` of every element (the same float operations, so the same results)."""
    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.floor(np.abs(x) * 10 + 0.5) / 10


def r1(x: float) -> float:
    """Round to 0.1 like nsys's report columns (half away from zero, as SQLite's round):
    the float operations of ``r1_array``, in plain Python."""
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return x
    sign = 1.0 if x > 0 else (-1.0 if x < 0 else 0.0)
    return sign * float(math.floor(abs(x) * 10 + 0.5)) / 10


def check_range_names(requested: list[str], available: list[str]) -> list[str]:
    """Check user-given range names; unknown ones raise RangeNotFound with the closest names."""
    known = set(available)
    for name in requested:
        if name not in known:
            close = closest_names(name, available)
            hint = ("closest: " + ", ".join(repr(c) for c in close)) if close else (
                "run `nsys-mine ranges EXPORT` to list the ranges")
            raise RangeNotFound(f"no NVTX range named {name!r} in this export; {hint}.")
    return requested
