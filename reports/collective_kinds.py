"""The collective a kernel or NCCL call performs, read from its name (shared by the
``collectives`` and ``ranks`` analyses).

``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` -> AllReduce; non-NCCL collectives by their words
(``cross_device_reduce`` -> AllReduce); ``other`` when none is named.
"""

from __future__ import annotations

import re

KINDS = ("AllReduce", "Broadcast", "AllGather", "ReduceScatter", "Reduce", "Send/Recv",
         "AllToAll", "other")
_KIND_WORDS = [  # (kind, pattern on the name without "_" and in lower case), first match wins
    ("AllReduce", r"allreduce|crossdevicereduce"),
    ("AllGather", r"allgather"),
    ("ReduceScatter", r"reducescatter"),
    ("AllToAll", r"alltoall"),
    ("Broadcast", r"broadcast|bcast"),
    ("Send/Recv", r"sendrecv|send|recv"),
    ("Reduce", r"reduce"),
]


def collective_kind(name: str) -> str:
    """The collective a kernel or NCCL call name performs (``other`` when none is named)."""
    flat = name.replace("_", "").lower()
    for kind, pattern in _KIND_WORDS:
        if re.search(pattern, flat):
            return kind
    return "other"
