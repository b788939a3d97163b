"""numpy helpers for columns of millions of rows: distinct values, codes, groups."""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterable, Iterator
from dataclasses import fields, is_dataclass, replace
from typing import Any, ClassVar, TypeVar

import numpy as np

T = TypeVar("T")

ROWS = 1 << 20  # rows per block of what goes a block of rows at a time


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values, by sorting (``np.unique`` hashes since numpy 2.3, which is
    much slower on millions of distinct integers). Values already in order are not sorted
    again."""
    values = np.asarray(values)
    return distinct_sorted(values if is_sorted(values) else np.sort(values))


def few_distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of a column that has few (names' ids), a block (``ROWS``)
    at a time: no copy of the column is sorted, its mapped pages let go as they pass."""
    parts = []
    for a in range(0, values.size, ROWS):
        parts.append(np.unique(values[a:a + ROWS]))
        let_go(values[a:a + ROWS])
    return sorted_unique(np.concatenate(parts)) if parts else np.asarray(values)[:0].copy()


def distinct_sorted(s: np.ndarray) -> np.ndarray:
    """The distinct values of ``s``, which is sorted (a new array)."""
    if s.size == 0:
        return s.copy()
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def take_rows(value: T, keep: np.ndarray, whole: tuple[str, ...] = ()) -> T:
    """A dataclass of per-row columns with only the rows at indices (or where the mask is
    true) ``keep``: every numpy field is taken, but those named in ``whole``; other fields
    (names, labels, None) are kept as they are. A new value. A mapped column's pages are let
    go once taken (a few rows spread over a column map pages around each, 64 KB)."""
    obj: Any = value
    taken = {}
    for f in fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, np.ndarray) and f.name not in whole:
            taken[f.name] = v[keep]
            let_go(v)
    return replace(obj, **taken)


R = TypeVar("R", bound="Rows")


class Rows:
    """The base of the row tables (``Kernels``, ``Ranges``, ``GpuOps``, ...): frozen
    dataclasses of per-row numpy columns with ``start`` and ``end`` (ns). ``len()`` counts
    the rows, ``duration`` is ``end - start`` per row, and ``take(keep)`` is a new value with
    the rows at indices (or where the mask is true) ``keep``: every numpy field is taken,
    but those named in ``WHOLE`` (tables of their own, such as the ranges' domains)."""

    WHOLE: ClassVar[tuple[str, ...]] = ()
    start: np.ndarray
    end: np.ndarray

    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def duration(self) -> np.ndarray:
        """``end - start`` of every row (made from ``durations``)."""
        out = np.empty(len(self), dtype=np.result_type(self.end, self.start))
        for rows, values in self.durations():
            out[rows] = values
        return out

    def durations(self) -> Iterator[tuple[slice, np.ndarray]]:
        """``end - start`` a block of rows (``ROWS``) at a time: (the block's rows, their
        durations), the mapped pages passed let go (``let_go``)."""
        n = len(self)
        for a in range(0, n, ROWS):
            rows = slice(a, min(a + ROWS, n))
            yield rows, self.end[rows] - self.start[rows]
            let_go(self.end[rows])
            let_go(self.start[rows])

    def take(self: R, keep: np.ndarray) -> R:
        return take_rows(self, keep, whole=self.WHOLE)


def is_sorted(values: np.ndarray) -> bool:
    """Whether ``values`` (1-d) never decrease."""
    return values.size < 2 or bool(np.all(values[1:] >= values[:-1]))


def factorize(items: list) -> tuple[np.ndarray, list]:
    """(code per item, distinct items in order of first appearance)."""
    index: dict = {}
    return codes_in(index, items), list(index)


def codes_in(index: dict, items: list) -> np.ndarray:
    """The code of each item in ``index`` (item -> code), the items not in it yet added
    with the next codes: the chunks of one column factorized apart are merged by passing
    each chunk's distinct items, in order, to one ``index``."""
    return np.fromiter((index.setdefault(x, len(index)) for x in items), dtype=np.int64,
                       count=len(items))


def dense_rank(key: np.ndarray, bound: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(rank of each value among the distinct values, the distinct values ascending) of a
    non-negative integer key: by a table of the values present when they are few (``bound``,
    the largest value + 1, at most four times the rows), else by sorting."""
    if key.size == 0:
        return key.astype(np.int64), key.astype(np.int64)
    bound = int(key.max()) + 1 if bound is None else bound
    if _tabled(bound, key.size):
        present = np.zeros(bound, dtype=bool)
        present[key] = True
        return (np.cumsum(present, dtype=np.int64) - 1)[key], np.flatnonzero(present)
    values = sorted_unique(key)
    return np.searchsorted(values, key), values


def _radices(cols: tuple[np.ndarray, ...]) -> tuple[list[int], int]:
    """Each code column's radix in a mixed-radix key (values shifted by one: -1 -> 0), and
    the number of keys it can take; the columns' pages, read through, let go."""
    radices = [int(c.max()) + 2 for c in cols]
    for c in cols:
        let_go(c)
    bound = 1
    for r in radices:
        bound *= r
    return radices, bound


def _tabled(bound: int, n: int) -> bool:
    """Whether keys below ``bound`` of ``n`` rows are ranked through a table of those
    present (few enough), not by sorting."""
    return bound <= max(1 << 16, 4 * n)


class Grouping:
    """Rows grouped by integer code columns (values >= -1) of few distinct combinations: a
    table of the keys present, made a block of rows at a time (``ROWS``, mapped pages let go
    as they pass). ``values``: each column's value in each group (groups ordered by the
    columns' values); ``self[rows]`` (indices or a slice) the group of those rows, computed
    when asked, never held for every row. ``Grouping.of`` is None where the combinations
    are too many for a table (``group_ids`` sorts then)."""

    def __init__(self, cols: tuple[np.ndarray, ...], radices: list[int], bound: int):
        self.cols, self.radices = cols, radices
        n = cols[0].size
        present = np.zeros(bound, dtype=bool)
        for a in range(0, n, ROWS):
            present[self._key(slice(a, min(a + ROWS, n)))] = True
        self._rank = np.cumsum(present, dtype=np.int64) - 1
        distinct = np.flatnonzero(present)
        values = []
        for r in reversed(radices):  # the last column is the lowest digit
            distinct, digit = np.divmod(distinct, r)
            values.append(digit - 1)
        self.values = tuple(reversed(values))
        self.ngroups = int(self.values[0].size)

    @classmethod
    def of(cls, *cols: np.ndarray) -> Grouping | None:
        if cols[0].size == 0:
            return None
        radices, bound = _radices(cols)
        return cls(cols, radices, bound) if _tabled(bound, cols[0].size) else None

    def _key(self, rows: slice | np.ndarray) -> np.ndarray:
        """One mixed-radix key of all columns, for ``rows``."""
        key = np.zeros(len(range(*rows.indices(self.cols[0].size))) if isinstance(rows, slice)
                       else rows.size, dtype=np.int64)
        for c, r in zip(self.cols, self.radices):
            key *= r
            key += c[rows]
            key += 1
            let_go(c[rows] if isinstance(rows, slice) else c)
        return key

    def __getitem__(self, rows: slice | np.ndarray) -> np.ndarray:
        if isinstance(rows, slice) or rows.size <= ROWS:
            return self._rank[self._key(rows)]
        out = np.empty(rows.size, dtype=np.int64)  # many rows: a block of them at a time,
        for a in range(0, rows.size, ROWS):  # so the pages a gather maps are let go
            out[a:a + ROWS] = self._rank[self._key(rows[a:a + ROWS])]
        return out

    def ids(self, dtype: Any = np.int64) -> np.ndarray:
        """The group of every row (a block of rows at a time), as ``dtype``."""
        n = self.cols[0].size
        gid = np.empty(n, dtype=dtype)
        for a in range(0, n, ROWS):
            b = min(a + ROWS, n)
            gid[a:b] = self[a:b]
        return gid


def group_ids(*cols: np.ndarray, dtype: Any = np.int64
              ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """Group rows by integer code columns (values >= -1). Returns a group id per row (groups
    ordered by the columns' values; as ``dtype``, one that holds the groups' count) and, for
    each column, its value in each group: by a table of the keys present when they are few
    (``Grouping``), else by sorting."""
    n = cols[0].size
    if n == 0:
        return np.zeros(0, dtype=dtype), tuple(np.zeros(0, dtype=np.int64) for _ in cols)
    radices, bound = _radices(cols)
    if _tabled(bound, n):
        tabled = Grouping(cols, radices, bound)
        return tabled.ids(dtype), tabled.values
    if bound < 2**62:  # one mixed-radix key of all columns, ranked by sorting
        key = np.zeros(n, dtype=np.int64)
        for c, r in zip(cols, radices):
            key = key * r + (c + 1)
        gid, distinct = dense_rank(key, bound)
        values = []
        for r in reversed(radices):  # the last column is the lowest digit
            distinct, digit = np.divmod(distinct, r)
            values.append(digit - 1)
        return gid.astype(dtype, copy=False), tuple(reversed(values))
    gid = np.zeros(n, dtype=np.int64)  # column by column: the groups so far times the next
    ngroups = 1
    for c in cols:
        code, _ = dense_rank(c + 1)
        gid, _ = dense_rank(gid * (int(code.max()) + 1) + code)
        ngroups = int(gid.max()) + 1
    first = np.full(ngroups, -1, dtype=np.int64)
    first[gid[::-1]] = np.arange(n - 1, -1, -1, dtype=np.int64)
    return gid.astype(dtype, copy=False), tuple(np.asarray(c[first], dtype=np.int64)
                                                for c in cols)


def distinct_pairs(gid: np.ndarray, member: np.ndarray, ngroups: int
                   ) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (group, member) pairs (members >= 0), in member order."""
    if gid.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    key = member.astype(np.int64) * ngroups
    key += gid
    key.sort()  # in place: no sorted copy of a key per pair
    key = distinct_sorted(key)  # the key of every pair goes before the division
    member_out, gid_out = np.divmod(key, ngroups)
    return gid_out, member_out


def distinct_count(gid: np.ndarray | Grouping, members: Iterable[np.ndarray], n: int,
                   ngroups: int) -> np.ndarray:
    """How many distinct members each group has, of the first ``n`` items (``members``: a
    block of items' members at a time): one key per item, sorted in place, its distinct
    values counted a block at a time."""
    key = np.empty(n, dtype=np.int64)
    at = 0
    for m in members:
        m = m[:max(n - at, 0)]
        if m.size:
            part = key[at:at + m.size]
            np.multiply(m, ngroups, out=part)
            part += gid[at:at + m.size]
            at += m.size
    key.sort()
    count = np.zeros(ngroups, dtype=np.int64)
    for a in range(0, n, ROWS):
        part = key[a:a + ROWS]
        new = np.empty(part.size, dtype=bool)
        new[1:] = part[1:] != part[:-1]
        new[:1] = a == 0 or part[:1] != key[a - 1]
        count += np.bincount(part[new] % ngroups, minlength=ngroups)
    return count


SAMPLE = 1 << 16  # values sampled for the bounds of ``sample_bounds``' buckets


def sample_bounds(blocks: Iterable[np.ndarray], n: int) -> np.ndarray:
    """Sorted distinct bounds that cut ``n`` values, given a block (``ROWS``) at a time, into
    buckets of about ``ROWS`` each (``np.searchsorted(bounds, v, side="right")`` is the
    bucket of ``v``), from a sample of about ``SAMPLE`` of them: values that are equal share
    a bucket, so a bucket holds more where one value repeats."""
    step = max(1, n // SAMPLE)
    parts = [block[::step].copy() for block in blocks]
    sample = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
    nb = -(-n // ROWS)
    return distinct_sorted(sample[(np.arange(1, nb) * sample.size) // nb]) \
        if sample.size else sample


def sorted_blocks(n: int, block: Callable[[int], np.ndarray], dtype: Any,
                  alloc: Callable[[int, Any], np.ndarray] = np.empty) -> np.ndarray:
    """The ``n`` values that ``block(a)`` gives for rows ``a`` to ``a + ROWS``, sorted, in
    ``alloc(n, dtype)`` (``cache.held``: a scratch file), without sorting them all at once:
    each block's values sorted and placed in their buckets (``sample_bounds``), then each
    bucket sorted on its own, its pages let go. What is resident is a block and a bucket,
    not the ``n`` values (an in-place sort of a mapped array touches every page). ``block``
    is called three times a block."""
    bounds = sample_bounds((block(a) for a in range(0, n, ROWS)), n)
    nb = bounds.size + 1
    counts = np.zeros(nb, dtype=np.int64)
    for a in range(0, n, ROWS):
        counts += np.bincount(np.searchsorted(bounds, block(a), side="right"), minlength=nb)
    at = np.concatenate([[0], np.cumsum(counts)])
    out, nxt = alloc(n, dtype), at[:-1].copy()
    for a in range(0, n, ROWS):
        v = np.sort(block(a))
        b = np.searchsorted(bounds, v, side="right")  # sorted too: runs of one bucket
        per = np.bincount(b, minlength=nb)
        out[nxt[b] + np.arange(v.size) - (np.cumsum(per) - per)[b]] = v
        nxt += per
        let_go(out)
    for k in range(nb):
        run = out[at[k]:at[k + 1]]
        run.sort()
        let_go(run)
    return out


def runs_by_code(code: np.ndarray, ncodes: int, keep: np.ndarray | None = None,
                 alloc: Callable[[int, Any], np.ndarray] = np.empty
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(the positions of each code's run, in order of ``code``, then position; where each
    code's run begins): the positions of code ``c`` are ``order[bounds[c]:bounds[c + 1]]``.
    Codes below 0 or of ``ncodes`` or more, and positions where the mask ``keep`` is unset,
    are in no run and left out. With codes fewer than a block's rows, a counting sort a
    block (``ROWS``) at a time: 32-bit positions and block-sized temporaries (an argsort of
    a copy of the codes held 12 bytes a position, and the copy and its positions more),
    written into ``alloc(size, dtype)`` (``cache.held``: a scratch file, let go as written).
    """
    n = code.size

    def in_run(a: int) -> tuple[np.ndarray, np.ndarray]:
        part = code[a:a + ROWS]
        mine = (part >= 0) & (part < ncodes)
        if keep is not None:
            mine &= keep[a:a + ROWS]
        part = np.array(part)  # read once: the mapped pages are let go
        let_go(code[a:a + ROWS])
        return part, mine

    counts = np.zeros(ncodes, dtype=np.int64)
    for a in range(0, n, ROWS):
        part, mine = in_run(a)
        counts += np.bincount(part[mine], minlength=ncodes)
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    index = np.int32 if n < 2**31 else np.int64
    if ncodes > ROWS:  # many codes: one stable argsort of those in a run
        pos = np.flatnonzero(np.concatenate([in_run(a)[1] for a in range(0, n, ROWS)]))
        return pos[np.argsort(code[pos], kind="stable")].astype(index), bounds
    order = alloc(int(bounds[-1]), index)
    at = bounds[:-1].copy()  # where each code's next position goes
    for a in range(0, n, ROWS):
        part, mine = in_run(a)
        p = np.flatnonzero(mine).astype(index) + a
        c = part[mine]
        by = np.argsort(c, kind="stable")
        c, p = c[by], p[by]
        per = np.bincount(c, minlength=ncodes)
        rank = np.arange(c.size) - (np.cumsum(per) - per)[c]  # its place in its code's run
        order[at[c] + rank] = p
        at += per
        let_go(order)
    return order, bounds


def gather(column: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``column[rows]``, a block (``ROWS``) of rows at a time, the column's mapped pages let
    go after each: rows in order map a window of the column at a time, not all of it."""
    out = np.empty(rows.size, dtype=column.dtype)
    for a in range(0, rows.size, ROWS):
        np.take(column, rows[a:a + ROWS], out=out[a:a + ROWS])
        let_go(column)
    return out


def let_go_fields(*values: Any) -> None:
    """``let_go`` every array field of some dataclass values (None: skipped): after a step
    that read whole mapped columns, their pages are not resident through the next."""
    for value in values:
        if value is not None:
            for f in fields(value):
                column = getattr(value, f.name)
                if isinstance(column, np.ndarray):
                    let_go(column)


def value_range(values: np.ndarray) -> tuple[int, int]:
    """(smallest, largest) of non-empty integer ``values``, a block (``ROWS``) at a time, the
    mapped pages let go as they pass."""
    lo, hi = None, None
    for a in range(0, values.size, ROWS):
        part = values[a:a + ROWS]
        p_lo, p_hi = int(part.min()), int(part.max())
        lo, hi = (p_lo, p_hi) if lo is None or hi is None else (min(lo, p_lo), max(hi, p_hi))
        let_go(part)
    assert lo is not None and hi is not None, "no values"
    return lo, hi


def let_go_rows(rows: slice, *columns: np.ndarray) -> None:
    """Let the mapped pages of a block of rows of each column go once read (``let_go``)."""
    for column in columns:
        let_go(column[rows])


def let_go_all(value: Any) -> None:
    """``let_go`` every array in ``value``: an array, a dataclass of arrays, or a tuple,
    list or dict of those (anything else: nothing)."""
    if isinstance(value, np.ndarray):
        let_go(value)
    elif is_dataclass(value) and not isinstance(value, type):
        let_go_fields(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            let_go_all(item)
    elif isinstance(value, dict):
        for item in value.values():
            let_go_all(item)


def let_go(view: np.ndarray) -> None:
    """Drop the pages of a mapped item's bytes under ``view`` from this process's memory
    (``madvise(MADV_DONTNEED)``): they stay in the page cache, and a later read maps them
    again. An item is mapped read-only and never written in place, so nothing is lost; its
    pages no longer count in the process's resident memory once read past (a checksum, a
    stream's chunk). The same for a scratch array (``cache.held``: a shared writable mapping,
    what was written stays in its file). Arrays in memory and views of less than a page: nothing."""
    mm = getattr(view, "_mmap", None)
    dontneed = getattr(mmap, "MADV_DONTNEED", None)  # not on every platform
    if (not isinstance(view, np.memmap) or view.mode not in ("r", "r+")
            or not isinstance(mm, mmap.mmap) or view.nbytes == 0 or dontneed is None):
        return  # a copy-on-write mapping ("c") would lose what was written to it
    start = view.ctypes.data - np.frombuffer(mm, dtype=np.uint8).ctypes.data
    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, (start + view.nbytes) // page * page
    if hi > lo:
        mm.madvise(dontneed, lo, hi - lo)


def concatenate_into(out: np.ndarray, parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts)`` written into ``out`` a block (``ROWS``) at a time, the
    mapped pages of the parts and of ``out`` let go as they pass (``out`` may be a scratch
    file's mapping: ``cache.held``)."""
    at = 0
    for part in parts:
        for a in range(0, part.size, ROWS):
            src = part[a:a + ROWS]
            dst = out[at + a:at + a + src.size]
            dst[...] = src
            let_go(dst)
            let_go(src)
        at += part.size
    return out
