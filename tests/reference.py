"""Independent answers to check ours against: plain SQL over an export's tables, written
here without the readers."""

from __future__ import annotations

OPS_SQL = {  # (start, end, pid, device, kernel name or None) of every GPU operation
    "CUPTI_ACTIVITY_KIND_KERNEL":
        "SELECT k.start, k.end, (k.globalPid >> 24) & 16777215, k.deviceId, s.value "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName",
    "CUPTI_ACTIVITY_KIND_MEMCPY":
        "SELECT start, end, (globalPid >> 24) & 16777215, deviceId, NULL "
        "FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET":
        "SELECT start, end, (globalPid >> 24) & 16777215, deviceId, NULL "
        "FROM CUPTI_ACTIVITY_KIND_MEMSET",
    # a launch of a whole CUDA graph is GPU work too: a kernel named after its graph
    "CUPTI_ACTIVITY_KIND_GRAPH_TRACE":
        "SELECT start, end, (globalPid >> 24) & 16777215, deviceId, 'CUDA graph ' || graphId "
        "FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
}


def covered(intervals: list[tuple[int, int]], window: tuple[int, int] | None = None) -> int:
    """How long the union of ``intervals`` lasts (inside ``window``): a sweep over events."""
    events = []
    for a, b in intervals:
        if window is not None:
            a, b = max(a, window[0]), min(b, window[1])
        if a < b:
            events += [(a, 1), (b, -1)]
    events.sort()
    depth, since, total = 0, 0, 0
    for t, step in events:
        if depth == 0 and step == 1:
            since = t
        depth += step
        if depth == 0:
            total += t - since
    return total


def both(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """How long ``a`` and ``b`` both cover."""
    events = sorted([(s, 1, 0) for s, e in a] + [(e, -1, 0) for s, e in a]
                    + [(s, 1, 1) for s, e in b] + [(e, -1, 1) for s, e in b])
    depth, total, last = [0, 0], 0, None
    for t, step, which in events:
        if last is not None and depth[0] > 0 and depth[1] > 0:
            total += t - last
        depth[which] += step
        last = t
    return total
