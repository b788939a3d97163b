"""Small numpy helpers used on arrays of millions of rows."""

from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values, by sorting.

    ``np.unique`` without flags switched to a hash table in numpy 2.3; on millions of distinct
    integers it is ~100x slower than a sort (2.2 s vs 0.02 s for 3 M values with numpy 2.4).
    Values already in order (the range indices of attribution pairs) are not sorted again:
    the check costs 1 ms per million, a sort 60 ms.
    """
    values = np.asarray(values)
    if values.size == 0:
        return values.copy()
    s = values if is_sorted(values) else np.sort(values)
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def is_sorted(values: np.ndarray) -> bool:
    """Whether ``values`` (1-d) never decrease."""
    return values.size < 2 or bool(np.all(values[1:] >= values[:-1]))


def factorize(items: list) -> tuple[np.ndarray, list]:
    """(code per item, distinct items in order of first appearance), without pandas: one
    dict of the distinct items (Python hashes each string once)."""
    index: dict = dict.fromkeys(items)
    for i, key in enumerate(index):
        index[key] = i
    codes = np.fromiter(map(index.__getitem__, items), dtype=np.int64, count=len(items))
    return codes, list(index)
