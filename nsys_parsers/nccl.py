"""NCCL's own NVTX ranges and their payloads (NCCL 2.19 on, ``nsys profile --trace=nvtx``).

NCCL opens a range in its ``NCCL`` domain around each call (``ncclAllReduce``,
``ncclBroadcast``, ``ncclCommInitRankConfig``...) and attaches a payload that nsys exports as
JSON text (``jsonText``): the communicator (``NCCL communicator ID``, the same number on every
rank of one communicator), the message size, and for communicator set-up calls the rank, the
number of ranks and the CUDA device. ``nccl_calls(trace)`` reads those rows as columns,
through the loader.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from nsys_parsers.trace import Trace

COMM_KEY = "NCCL communicator ID"
SIZE_KEY = "Message size [bytes]"
RANK_KEY = "Rank"
NRANKS_KEY = "No. of ranks"
DEVICE_KEY = "CUDA device"
# The items of the NCCL calls (nsys_parsers.queries.NCCL_ROWS).
ITEMS_READ = ("nccl.start", "nccl.end", "nccl.tid", "nccl.name", "nccl.payload")

@dataclass(frozen=True)
class NcclCalls:
    """NCCL calls with a payload, as columns (sorted by start). ``comm`` is the communicator
    (0: none); ``nbytes``, ``rank``, ``nranks``, ``device`` are -1 where the payload has no
    such field."""

    start: np.ndarray
    end: np.ndarray
    tid: np.ndarray  # globalTid
    name: list[str]  # ``ncclAllReduce``... per row
    comm: np.ndarray  # uint64 as int64 bits
    nbytes: np.ndarray
    rank: np.ndarray
    nranks: np.ndarray
    device: np.ndarray

    def __len__(self) -> int:
        return int(self.start.size)


def _int(value: object, default: int = -1) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def nccl_calls(trace: Trace) -> NcclCalls | None:
    """NCCL's calls that carry a payload (None: the export has none: NCCL older than 2.19,
    NVTX not traced, or no NCCL at all), from the loader's ``nccl.*`` items (the row source
    ``queries.NCCL_ROWS``: read once, then cached)."""
    if not trace.sources("nccl"):
        return None
    trace.load(*ITEMS_READ)
    r = trace.resolver
    name_code, names = r.array("nccl.name"), r.strings("nccl.name")
    text_code, texts = r.array("nccl.payload"), r.strings("nccl.payload")
    parsed = [_payload(t) for t in texts]
    rows = []
    for i, (start, end, tid) in enumerate(zip(r.array("nccl.start").tolist(),
                                              r.array("nccl.end").tolist(),
                                              r.array("nccl.tid").tolist())):
        payload = parsed[int(text_code[i])]
        if payload is None:
            continue
        comm = _int(payload.get(COMM_KEY), 0) & 0xFFFFFFFFFFFFFFFF
        rows.append((int(start), int(end), int(tid), names[int(name_code[i])],
                     comm - (1 << 64) if comm >= 1 << 63 else comm,
                     _int(payload.get(SIZE_KEY)), _int(payload.get(RANK_KEY)),
                     _int(payload.get(NRANKS_KEY)), _int(payload.get(DEVICE_KEY))))
    if not rows:
        return None
    rows.sort(key=lambda row: (row[0], row[2]))
    cols = list(zip(*rows))

    def arr(i: int) -> np.ndarray:
        return np.array(cols[i], dtype=np.int64)

    return NcclCalls(start=arr(0), end=arr(1), tid=arr(2), name=list(cols[3]), comm=arr(4),
                     nbytes=arr(5), rank=arr(6), nranks=arr(7), device=arr(8))


def _payload(text: str) -> dict[str, object] | None:
    """A payload's fields (None: not JSON, or no communicator in it)."""
    try:
        payload = json.loads(text)
    except ValueError:
        return None
    return payload if isinstance(payload, dict) and COMM_KEY in payload else None
