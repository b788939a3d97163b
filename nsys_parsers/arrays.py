"""Small numpy helpers used on arrays of millions of rows."""

from __future__ import annotations

import numpy as np


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """Sorted distinct values, by sorting.

    ``np.unique`` without flags switched to a hash table in numpy 2.3; on millions of distinct
    integers it is ~100x slower than a sort (2.2 s vs 0.02 s for 3 M values with numpy 2.4).
    """
    values = np.asarray(values)
    if values.size == 0:
        return values.copy()
    s = np.sort(values, kind="stable")
    keep = np.empty(s.size, dtype=bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]
