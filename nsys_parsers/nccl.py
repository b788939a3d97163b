"""NCCL's own NVTX ranges and their payloads (NCCL 2.19 on, ``nsys profile --trace=nvtx``).

NCCL opens a range in its ``NCCL`` domain around each call (``ncclAllReduce``,
``ncclBroadcast``, ``ncclCommInitRankConfig``...) and attaches a payload that nsys exports as
JSON text (``jsonText``): the communicator (``NCCL communicator ID``, the same number on every
rank of one communicator), the message size, and for communicator set-up calls the rank, the
number of ranks and the CUDA device. ``nccl_calls(export)`` reads those rows as columns.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from nsys_parsers.export import Export
from nsys_parsers.queries import Query
from nsys_parsers.schema import NVTX_TABLE

COMM_KEY = "NCCL communicator ID"
SIZE_KEY = "Message size [bytes]"
RANK_KEY = "Rank"
NRANKS_KEY = "No. of ranks"
DEVICE_KEY = "CUDA device"

# NVTX rows whose JSON payload names an NCCL communicator, with the range's name.
NCCL_PAYLOAD_ROWS = Query(
    "nccl_payload_rows",
    """SELECT t.start, t."end", t.globalTid, {name}, t.jsonText FROM NVTX_EVENTS AS t
       WHERE t.jsonText IS NOT NULL AND instr(t.jsonText, ?) > 0""",
    needs={NVTX_TABLE: ("start", "end", "globalTid", "jsonText")},
    purpose="NCCL's NVTX payloads")


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


def _name_expr(export: Export) -> str:
    has_text = export.has_column(NVTX_TABLE, "text")
    if export.has_column(NVTX_TABLE, "textId"):
        by_id = "(SELECT s.value FROM StringIds AS s WHERE s.id = t.textId)"
        return f"coalesce(t.text, {by_id})" if has_text else by_id
    return "t.text" if has_text else "''"


def _int(value: object, default: int = -1) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else default


def nccl_calls(export: Export) -> NcclCalls | None:
    """NCCL's calls that carry a payload (None: the export has none: NCCL older than 2.19,
    NVTX not traced, or no NCCL at all)."""
    if not export.has_column(NVTX_TABLE, "jsonText"):
        return None
    sql = NCCL_PAYLOAD_ROWS.sql(export, name=_name_expr(export))
    rows = []
    for start, end, tid, name, text in export.db.execute(sql, (COMM_KEY,)):
        try:
            payload = json.loads(text)
        except ValueError:
            continue
        if not isinstance(payload, dict) or COMM_KEY not in payload:
            continue
        comm = _int(payload.get(COMM_KEY), 0) & 0xFFFFFFFFFFFFFFFF
        rows.append((int(start), int(end if end is not None else start), int(tid or 0),
                     str(name or ""), comm - (1 << 64) if comm >= 1 << 63 else comm,
                     _int(payload.get(SIZE_KEY)), _int(payload.get(RANK_KEY)),
                     _int(payload.get(NRANKS_KEY)), _int(payload.get(DEVICE_KEY))))
    if not rows:
        return None
    rows.sort(key=lambda r: (r[0], r[2]))
    cols = list(zip(*rows))

    def arr(i: int) -> np.ndarray:
        return np.array(cols[i], dtype=np.int64)

    return NcclCalls(start=arr(0), end=arr(1), tid=arr(2), name=list(cols[3]), comm=arr(4),
                     nbytes=arr(5), rank=arr(6), nranks=arr(7), device=arr(8))
