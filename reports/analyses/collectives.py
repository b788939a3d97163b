"""NCCL collectives: per kind (AllReduce, Broadcast, AllGather, ReduceScatter, Reduce,
Send/Recv, AllToAll), how many calls and kernels, how long the kernels ran, how much of that
nothing hid, and how many bytes the calls moved.

Kernels: those of the ``communication`` category (``--rules`` may add more), their kind read
from their name (``ncclDevKernel_AllReduce_Sum_bf16_RING_LL`` -> AllReduce; non-NCCL
collectives by their words: ``cross_device_reduce`` -> AllReduce); the others are ``other``.
``exposed_ns``: the time a kind's kernels run while no compute kernel (every kernel outside the
``communication`` category) runs on their (process, device): the union of the kind's kernels
less its overlap with compute, per (process, device), summed.

Calls: NCCL's own NVTX ranges (domain ``NCCL``: ``NCCL:ncclAllReduce``...), with the bytes of
their payload (``Message size [bytes]``, NCCL 2.19 on, in ``jsonText``) where the export has
it. With several ranks in one export, every rank's calls and kernels count.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.arrays import group_ids
from nsys_parsers.gpu_ops import KERNEL
from nsys_parsers.intervals import Intervals, intersection
from nsys_parsers.schema import NVTX_TABLE
from reports.collective_kinds import KINDS, collective_kind
from reports.gpu_time import communication_mask, require_gpu_ops
from reports.pipeline.analysis import Analysis
from reports.pipeline.report import Report, r1, rows_of
from reports.pipeline.session import Session
from reports.render import View, human_bytes, human_ns

SIZE_KEY = "Message size [bytes]"
NCCL_DOMAIN = "NCCL:"
COLLECTIVE_COLUMNS = [
    "kind", "calls", "kernels", "total_ns", "avg_ns", "exposed_ns", "exposed_pct", "time_pct",
    "total_bytes", "avg_bytes",
]
COLLECTIVE_VIEW = View(
    columns=["kind", "calls", "kernels", "total_ns", "time_pct", "exposed_ns", "exposed_pct",
             "avg_ns", "total_bytes", "avg_bytes"],
    drop=("avg_bytes", "avg_ns"), rank_by=("total_ns",), noun="kinds",
    hide_if_zero=("calls", "total_bytes", "avg_bytes"),
    headers={"time_pct": "comm %", "exposed_pct": "exposed %", "total_bytes": "bytes moved",
             "avg_bytes": "bytes per call"})


def _calls(s: Session) -> tuple[dict[str, int], dict[str, int], bool]:
    """Per kind: NCCL calls (NCCL-domain NVTX ranges) and the bytes of those with a payload;
    and whether any call had one."""
    calls: dict[str, int] = {}
    nbytes: dict[str, int] = {}
    if not s.has_ranges or not _has_nccl_domain(s):
        return calls, nbytes, False
    s.load("ranges")
    r = s.ranges
    if r is None or not len(r):
        return calls, nbytes, False
    domain_rows = r.in_domains()  # NCCL's ranges are in its own domain
    if domain_rows.size == 0:
        return calls, nbytes, False
    names = s.names(rows=domain_rows)
    nccl = [i for i, n in enumerate(names.names) if n.startswith(NCCL_DOMAIN)]
    kind_of = {i: collective_kind(names.names[i][len(NCCL_DOMAIN):]) for i in nccl}
    kind_of = {i: k for i, k in kind_of.items() if k != "other"}
    if not kind_of:
        return calls, nbytes, False
    code = np.full(len(r), -1, dtype=np.int64)
    code[domain_rows] = names.code[domain_rows]
    rows = np.flatnonzero(np.isin(code, list(kind_of)))
    for i in rows.tolist():
        kind = kind_of[int(code[i])]
        calls[kind] = calls.get(kind, 0) + 1
    sizes = _payload_sizes(s, r.rowid[rows])
    for i, size in zip(rows.tolist(), sizes, strict=True):
        if size is not None:
            kind = kind_of[int(code[i])]
            nbytes[kind] = nbytes.get(kind, 0) + size
    return calls, nbytes, any(v is not None for v in sizes)


def _has_nccl_domain(s: Session) -> bool:
    """Whether NCCL created its NVTX domain (a scan of the NVTX table in SQLite: the ranges
    are read only when it did)."""
    sql = Q.NVTX_DOMAIN_NAMED.sql(s.export, name_key=Q.nvtx_name_key(s.export))
    name = NCCL_DOMAIN.rstrip(":")
    return bool(s.export.db.execute(sql, (name, name)).fetchone()[0])


def _payload_sizes(s: Session, rowids: np.ndarray) -> list[int | None]:
    """The message size of each NVTX row's JSON payload (None: none)."""
    if not s.export.has_column(NVTX_TABLE, "jsonText") or rowids.size == 0:
        return [None] * rowids.size
    found: dict[int, int] = {}
    for rowid, text in s.export.db.execute(Q.NVTX_JSON_PAYLOADS.sql(s.export)):
        try:
            size = json.loads(text).get(SIZE_KEY)
        except (ValueError, AttributeError):
            continue
        if isinstance(size, int):
            found[int(rowid)] = size
    return [found.get(int(r)) for r in rowids.tolist()]


def collectives_report(s: Session) -> Report:
    """One row per collective kind with kernels or calls, by kernel time."""
    s.require_kernels("NCCL collectives")
    ops = require_gpu_ops(s, "NCCL collectives").recorded()
    comm = communication_mask(s, ops)
    k = s.trace.kernels
    assert k is not None
    kind_of_name = np.array([KINDS.index(collective_kind(n)) for n in k.names] or [0],
                            dtype=np.int64)
    kind = np.where(comm, kind_of_name[np.maximum(ops.name_code, 0)], -1)
    gid, _ = group_ids(ops.pid, ops.device, dtype=np.int32)
    n = int(gid.max()) + 1 if gid.size else 0
    every = Intervals(gid, ops.start, ops.end)
    compute = every.take((ops.kind == KERNEL) & ~comm)
    calls, nbytes, has_payload = _calls(s)
    rows_kind, kernels, total, exposed = [], [], [], []
    for j, name in enumerate(KINDS):
        mine = np.flatnonzero(kind == j)
        if mine.size == 0 and name not in calls:
            continue
        part = every.take(mine)
        union = part.length(n)
        rows_kind.append(name)
        kernels.append(int(mine.size))
        total.append(int((part.end - part.start).sum()))
        exposed.append(int((union - intersection(part, compute, n)).sum()))
    comm_total = sum(total)
    rows = rows_of({
        "kind": rows_kind,
        "calls": [calls.get(x, 0) for x in rows_kind],
        "kernels": kernels, "total_ns": total,
        "avg_ns": [r1(t / c) if c else None for t, c in zip(total, kernels)],
        "exposed_ns": exposed,
        "exposed_pct": [r1(100.0 * e / t) if t else None for e, t in zip(exposed, total)],
        "time_pct": [r1(100.0 * t / comm_total) if comm_total else None for t in total],
        "total_bytes": [nbytes.get(x) if has_payload else None for x in rows_kind],
        "avg_bytes": [r1(nbytes[x] / calls[x]) if has_payload and x in nbytes and calls.get(x)
                      else None for x in rows_kind],
    })
    rows.sort(key=lambda x: (-x["total_ns"], KINDS.index(x["kind"])))
    notes = list(s.notes)
    if not rows:
        notes.append("no communication kernels (NCCL or other collectives) and no NCCL calls "
                     "in this export.")
    else:
        notes.append("kernels: the `communication` category, by the collective their name "
                     "names; calls: NCCL's own NVTX ranges (domain NCCL); exposed: kernel "
                     "time while no compute kernel runs on the same device.")
        if calls and not has_payload:
            notes.append("the NCCL calls carry no message size (NCCL 2.19 and newer record it "
                         "as an NVTX payload): no bytes.")
        elif not calls:
            notes.append("no NCCL NVTX ranges (NCCL records them from 2.19 on, with "
                         "`nsys profile --trace=nvtx`): no calls or bytes.")
    return Report(rows=rows, columns=COLLECTIVE_COLUMNS, notes=notes,
                  sentences=[collective_sentence(r) for r in rows])


def collective_sentence(row: dict[str, Any]) -> str:
    text = (f"{row['kind']}: {row['kernels']:,} kernels, {human_ns(row['total_ns'])}, "
            f"{row['exposed_pct']}% of it exposed")
    if row["calls"]:
        text += f"; {row['calls']:,} calls"
    if row["total_bytes"] is not None:
        text += f", {human_bytes(row['total_bytes'])} moved"
    return text


ANALYSIS = Analysis(
    name="collectives", bytes_per_row=32,
    help="""NCCL collectives per kind: calls, kernels, time, exposed time and bytes moved.

    AllReduce, Broadcast, AllGather, ReduceScatter, Reduce, Send/Recv, AllToAll: kernels of
    the communication category by the collective in their name, NCCL's NVTX calls with their
    message sizes where the export has them, and the kernel time no compute overlapped.

    Example: `nsys-mine collectives ddp.sqlite`
    """,
    run=collectives_report, needs=("kernels", "kernel_places", "memops"),
    options=("rules", "nsys", "cache"),
    columns=COLLECTIVE_COLUMNS, view=COLLECTIVE_VIEW, title="NCCL collectives", order=68,
)
