"""Shared pieces of the reports: the result type, grouped statistics, range-name checks.

numpy is imported by the functions that use it: ``duration_stats`` and ``r1`` serve the
small-export kernel summary, which answers without loading numpy at all.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from nsys_parsers.errors import RangeNotFound, closest_names

if TYPE_CHECKING:
    import numpy as np


@dataclass
class Report:
    """What every report returns: row dicts (keys = ``columns``, in that order), notes that
    explain the numbers, and optional one-line answers (``sentences``)."""

    rows: list[dict[str, Any]]
    columns: list[str]
    notes: list[str] = field(default_factory=list)
    sentences: list[str] = field(default_factory=list)


def rows_of(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Row dicts from equally long column lists (keys in the order of ``columns``): reports
    compute per-group columns at once, never by a loop over numpy scalars."""
    if not columns:
        return []
    lengths = {len(v) for v in columns.values()}
    if len(lengths) > 1:
        raise ValueError(f"rows_of: columns of different lengths {sorted(lengths)}")
    return list(map(_row_maker(tuple(columns)), *columns.values()))


@functools.lru_cache(maxsize=64)
def _row_maker(keys: tuple[str, ...]) -> Callable[..., dict[str, Any]]:
    """A function of len(keys) values that returns the dict of ``keys`` to them, written as a
    dict display (``lambda v0, v1: {'a': v0, 'b': v1}``): Python builds that dict at its final
    size in one step, where ``dict(zip(keys, values))`` grows it key by key (16,582 range
    rows of 13 columns: 16 ms instead of 40)."""
    if not all(isinstance(k, str) for k in keys):
        raise TypeError("rows_of: column names must be strings")
    params = ", ".join(f"v{i}" for i in range(len(keys)))
    items = ", ".join(f"{k!r}: v{i}" for i, k in enumerate(keys))
    return eval(f"lambda {params}: {{{items}}}")  # noqa: S307 - keys are repr()-quoted


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
    """
    import numpy as np

    groups = np.asarray(groups, dtype=np.int64)
    values = np.asarray(values, dtype=np.int64)
    count = np.bincount(groups, minlength=ngroups).astype(np.int64)
    total = np.zeros(ngroups, dtype=np.int64)
    avg = np.zeros(ngroups)
    med = np.zeros(ngroups)
    vmin = np.zeros(ngroups, dtype=np.int64)
    vmax = np.zeros(ngroups, dtype=np.int64)
    std = np.zeros(ngroups)
    if values.size == 0:
        return GroupStats(count, total, avg, med, vmin, vmax, std)
    vmin_all, vmax_all = int(values.min()), int(values.max())
    span = vmax_all - vmin_all + 1
    if ngroups * span < 2**32:
        # the packed key below in 32 bits: sorted in 18 ms instead of 44 (1.6 M kernel
        # durations of nested x100 in 5,384 groups), then widened for the sums
        key = groups.astype(np.uint32)
        key *= np.uint32(span)
        key += (values - vmin_all).astype(np.uint32)
        key.sort()
        sv = key.astype(np.int64)
        sv -= np.repeat(np.arange(count.size, dtype=np.int64) * span - vmin_all, count)
    elif ngroups * span < 2**62 and -2**61 < vmin_all and vmax_all < 2**61:
        # one sort of a packed (group, value) key instead of a two-key lexsort; the values
        # back by subtracting each row's group offset (4 ms for 1.7 M rows; `%` took 15)
        # (in place: a fresh 13 MB temporary costs this VM 2-4 ms of page faults)
        sv = groups * span
        sv += values
        sv -= vmin_all  # no overflow: the packed key is below 2**62 and the values are sane
        sv.sort()
        sv -= np.repeat(np.arange(count.size, dtype=np.int64) * span - vmin_all, count)
    else:  # pragma: no cover - enormous value ranges
        sv = values[np.lexsort((values, groups))]
    nonempty = np.flatnonzero(count > 0)
    n = count[nonempty]
    starts = np.cumsum(count)[nonempty] - n
    total[nonempty] = np.add.reduceat(sv, starts)
    avg[nonempty] = total[nonempty] / n
    med[nonempty] = (sv[starts + (n - 1) // 2] + sv[starts + n // 2]) / 2.0
    vmin[nonempty] = sv[starts]
    vmax[nonempty] = sv[starts + n - 1]
    dev = np.repeat(avg[nonempty], n)  # each value's group mean, then its squared deviation
    np.subtract(sv, dev, out=dev)
    np.multiply(dev, dev, out=dev)
    sq = np.add.reduceat(dev, starts)
    with np.errstate(invalid="ignore", divide="ignore"):
        std[nonempty] = np.where(n > 1, np.sqrt(sq / np.maximum(n - 1, 1)), 0.0)
    return GroupStats(count, total, avg, med, vmin, vmax, std)


def duration_stats(values: list[int]) -> dict[str, Any]:
    """The duration columns (as ``GroupStats.row``) of one group given as an ascending list
    of integers, in plain Python: the same float operations as ``group_stats`` for the total,
    mean, median, min and max. The variance is exact, then rounded once: the integer
    n * sum(v^2) - sum(v)^2 over n * (n - 1) (Python's integers do not overflow), where numpy
    sums rounded squared deviations; they differ far below the 0.1 ns that is shown."""
    n = len(values)
    total = sum(values)
    avg = float(total) / n
    med = (values[(n - 1) // 2] + values[n // 2]) / 2.0
    if n > 1:
        squares = sum(map(operator.mul, values, values))
        std = math.sqrt((n * squares - total * total) / (n * (n - 1)))
    else:
        std = 0.0
    return dict(zip(DURATION_COLUMNS, (total, r1(avg), r1(med), values[0], values[-1],
                                       r1(std))))


def r1_array(x: np.ndarray) -> np.ndarray:
    """``r1`` of every element (the same float operations, so the same results)."""
    import numpy as np

    x = np.asarray(x, dtype=np.float64)
    return np.sign(x) * np.floor(np.abs(x) * 10 + 0.5) / 10


def r1(x: float) -> float:
    """Round to 0.1 like nsys's report columns (half away from zero, as SQLite's round).
    The float operations of ``r1_array``, in plain Python."""
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
