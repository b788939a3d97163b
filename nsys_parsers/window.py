"""Keep only what ran inside instances of one NVTX range (e.g. ``measure``, leaving warmup
steps out): ranges nested in it on the same thread (itself included) and the kernels whose
launch call lies in it."""

from __future__ import annotations

import numpy as np

from nsys_parsers.activity import Activity
from nsys_parsers.errors import RangeNotFound, closest_hint
from nsys_parsers.names import RangeNames


def restrict_to_range(act: Activity, names: RangeNames | None, window: str
                      ) -> tuple[Activity, RangeNames, np.ndarray]:
    """``act`` and its range ``names`` (complete; None when ``act`` has no ranges) restricted
    to the range ``window``, and the indices of the ranges kept."""
    r = act.ranges
    if r is None or names is None:
        raise RangeNotFound(f"cannot restrict to range {window!r}: the export has no NVTX "
                            f"ranges (profile with `nsys profile --trace=nvtx`).")
    code = names.index(window)
    if code is None:
        raise RangeNotFound(f"no NVTX range named {window!r} to restrict to"
                            f"{closest_hint(window, names.names)}.")
    wins = np.flatnonzero(names.code == code)
    keep_r = np.zeros(len(r), dtype=bool)
    k = act.kernels
    keep_k = np.zeros(len(k), dtype=bool) if k is not None else None
    for w in wins:
        tid, ws, we = r.tid[w], r.start[w], r.end[w]
        keep_r |= (r.tid == tid) & (r.start >= ws) & (r.end <= we)
        if k is not None and keep_k is not None:
            keep_k |= (k.launch_tid == tid) & (k.launch_start >= ws) & (k.launch_end <= we)
    notes = act.notes + [f"only what ran inside the {window!r} range(s): {wins.size} "
                         f"instance(s); everything outside (e.g. warmup) is left out."]
    rows = np.flatnonzero(keep_r)
    kept = Activity(kernels=k.take(np.flatnonzero(keep_k)) if k is not None and
                    keep_k is not None else None,
                    ranges=r.take(rows), capture_end=act.capture_end, notes=notes)
    return kept, names.take(rows), rows
