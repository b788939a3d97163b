"""Keep only what ran inside instances of one NVTX range (e.g. ``measure``, leaving warmup
steps out): ranges nested in it on the same thread (itself included) and the kernels whose
launch call lies in it."""

from __future__ import annotations

import numpy as np

from nsys_parsers.errors import RangeNotFound, closest_hint
from nsys_parsers.kernels import Kernels
from nsys_parsers.names import RangeNames
from nsys_parsers.ranges import Ranges


def inside_range(kernels: Kernels | None, ranges: Ranges | None, names: RangeNames | None,
                 window: str) -> tuple[np.ndarray | None, np.ndarray, int]:
    """(indices of the kernels inside, or None without kernels; indices of the ranges
    inside; how many instances ``window`` has). ``names`` must be complete."""
    if ranges is None or names is None:
        raise RangeNotFound(f"cannot restrict to range {window!r}: the export has no NVTX "
                            f"ranges (profile with `nsys profile --trace=nvtx`).")
    code = names.index(window)
    if code is None:
        raise RangeNotFound(f"no NVTX range named {window!r} to restrict to"
                            f"{closest_hint(window, names.names)}.")
    wins = np.flatnonzero(names.code == code)
    keep_r = np.zeros(len(ranges), dtype=bool)
    keep_k = np.zeros(len(kernels), dtype=bool) if kernels is not None else None
    for w in wins:
        tid, ws, we = ranges.tid[w], ranges.start[w], ranges.end[w]
        keep_r |= (ranges.tid == tid) & (ranges.start >= ws) & (ranges.end <= we)
        if kernels is not None and keep_k is not None:
            assert kernels.launch_tid is not None and kernels.launch_start is not None \
                and kernels.launch_end is not None
            keep_k |= ((kernels.launch_tid == tid) & (kernels.launch_start >= ws)
                       & (kernels.launch_end <= we))
    return (np.flatnonzero(keep_k) if keep_k is not None else None), np.flatnonzero(keep_r), \
        int(wins.size)
