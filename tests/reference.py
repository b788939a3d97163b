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
