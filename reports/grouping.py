"""Vectorized group-by helpers on integer code columns (no Python loop over rows)."""

from __future__ import annotations

import numpy as np

from nsys_parsers.arrays import sorted_unique

_DENSE_LIMIT = 1 << 25  # pack keys below this into a bincount table instead of sorting


def group_ids(*cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group rows by several integer code columns (values >= -1, ideally small and dense).

    Returns ``(gid, first)``: a group id per row (groups ordered by the key columns), and for
    each group the index of one of its rows (to read the key values back).
    """
    n = cols[0].size
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    shifted = []
    radix_total = 1
    for c in cols:
        c = np.asarray(c, dtype=np.int64) + 1
        radix = int(c.max()) + 1
        if radix_total * radix >= 2**62:  # pragma: no cover - only with huge raw ids
            _, c = np.unique(c, return_inverse=True)
            c = c.ravel().astype(np.int64)
            radix = int(c.max()) + 1
        shifted.append((c, radix))
        radix_total *= radix
    packed = np.zeros(n, dtype=np.int64)
    for c, radix in shifted:
        packed *= radix
        packed += c
    if radix_total <= max(_DENSE_LIMIT, 4 * n):
        present = np.zeros(radix_total, dtype=bool)
        present[packed] = True
        dense = np.cumsum(present) - 1
        gid = dense[packed]
        ngroups = int(present.sum())
        first = np.full(ngroups, -1, dtype=np.int64)
        first[gid[::-1]] = np.arange(n - 1, -1, -1, dtype=np.int64)
        return gid, first
    _, first, gid = np.unique(packed, return_index=True, return_inverse=True)
    return gid.ravel(), first


def distinct_count(gid: np.ndarray, member: np.ndarray, ngroups: int) -> np.ndarray:
    """Number of distinct ``member`` values (>= 0) per group."""
    if gid.size == 0:
        return np.zeros(ngroups, dtype=np.int64)
    radix = int(member.max()) + 1
    if ngroups * radix < 2**62:
        pairs = sorted_unique(gid.astype(np.int64) * radix + member)
        return np.bincount(pairs // radix, minlength=ngroups).astype(np.int64)
    _, first = group_ids(gid, member)  # pragma: no cover - astronomically many groups
    return np.bincount(gid[first], minlength=ngroups).astype(np.int64)
