"""``ColumnRows``: an answer's rows kept as columns, for answers of millions of rows; the
writers stream them a chunk at a time (``reports.render.writers``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, overload


class ColumnRows(Sequence[dict[str, Any]]):
    """Rows kept as columns, each row's dict made only when it is read: for answers of
    millions of rows (one per NVTX range instance), where a dict per row costs about 0.5 KB.
    ``columns`` maps each key, in order, to a function of a slice of the rows that returns
    their values (plain Python values, as the row dicts hold). Read as a sequence of row
    dicts; CSV and JSON are written from the columns, a chunk at a time
    (``reports.render.writers``)."""

    CHUNK = 16_384

    def __init__(self, n: int, columns: dict[str, Callable[[slice], list[Any]]]) -> None:
        self._n = n
        self._columns = columns

    def __len__(self) -> int:
        return self._n

    def values(self, key: str, lo: int, hi: int) -> list[Any]:
        """The values of column ``key`` of rows ``lo`` to ``hi`` (None for a key it lacks)."""
        get = self._columns.get(key)
        return get(slice(lo, hi)) if get is not None else [None] * (hi - lo)

    def _dicts(self, lo: int, hi: int) -> list[dict[str, Any]]:
        keys = list(self._columns)
        return [dict(zip(keys, row)) for row in zip(*(self.values(k, lo, hi) for k in keys))]

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, i: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(i, slice):
            lo, hi, step = i.indices(self._n)
            if step == 1:
                return self._dicts(lo, max(lo, hi))
            return [self[j] for j in range(lo, hi, step)]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("row index out of range")
        return self._dicts(i, i + 1)[0]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for lo in range(0, self._n, self.CHUNK):
            yield from self._dicts(lo, min(self._n, lo + self.CHUNK))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, ColumnRows)):
            return len(self) == len(other) and list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]
