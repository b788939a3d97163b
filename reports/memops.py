"""Memory operations: CUDA memcpy by kind and memset (count, bytes, time statistics)."""

from __future__ import annotations

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.errors import MissingData
from nsys_parsers.export import Export
from nsys_parsers.schema import MEMCPY_TABLE, MEMSET_TABLE
from reports.common import Report, group_stats, r1
from reports.render import View

MEMOPS_VIEW = View(
    columns=["time_pct", "total_ns", "instances", "total_bytes", "throughput_gbps", "avg_ns",
             "med_ns", "min_ns", "max_ns", "stddev_ns", "operation"],
    rank_by=("total_ns",), noun="operations")

MEMOPS_COLUMNS = [
    "operation", "instances", "total_bytes", "total_ns", "avg_ns", "med_ns", "min_ns",
    "max_ns", "stddev_ns", "time_pct", "throughput_gbps",
]

# CUPTI memcpy kinds, for exports without ENUM_CUDA_MEMCPY_OPER (older nsys).
MEMCPY_KINDS = {
    0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array",
    4: "Array-to-Host", 5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array",
    8: "Device-to-Device", 9: "Host-to-Host", 10: "Peer-to-Peer",
    11: "Unified Host-to-Device", 12: "Unified Device-to-Host", 13: "Unified Device-to-Device",
}

Q_MEMCPY_ROWS = Q.Query(
    "memcpy_rows",
    "SELECT m.copyKind, m.bytes, m.end - m.start FROM CUPTI_ACTIVITY_KIND_MEMCPY AS m",
    needs={MEMCPY_TABLE: ("start", "end", "copyKind", "bytes")},
    purpose="the memory-operation summary")
Q_MEMSET_ROWS = Q.Query(
    "memset_rows",
    "SELECT 0, m.bytes, m.end - m.start FROM CUPTI_ACTIVITY_KIND_MEMSET AS m",
    needs={MEMSET_TABLE: ("start", "end", "bytes")},
    purpose="the memory-operation summary")


def memops_summary(ex: Export) -> Report:
    """memcpy by kind and memset: count, bytes, time statistics, share and throughput."""
    if not ex.has_table(MEMCPY_TABLE) and not ex.has_table(MEMSET_TABLE):
        raise MissingData(f"{ex.label}: no CUDA memcpy or memset was traced (no "
                          f"{MEMCPY_TABLE}/{MEMSET_TABLE} tables): profile with "
                          f"`nsys profile --trace=cuda`.")
    labels = dict(MEMCPY_KINDS)
    if ex.has_column("ENUM_CUDA_MEMCPY_OPER", "label"):
        labels.update({int(i): str(lbl) for i, lbl in ex.db.execute(
            Q.MEMCPY_KIND_NAMES.sql(ex))})
    ops: list[str] = []
    kinds, sizes, durs = [], [], []
    for query, prefix in ((Q_MEMCPY_ROWS, "memcpy"), (Q_MEMSET_ROWS, "memset")):
        table = next(iter(query.needs))
        if not ex.has_table(table):
            continue
        data = np.array(ex.db.execute(query.sql(ex)).fetchall(), dtype=np.int64)
        if data.size == 0:
            continue
        data = data.reshape(-1, 3)
        for kind in np.unique(data[:, 0]):
            sel = data[data[:, 0] == kind]
            ops.append(f"memcpy {labels.get(int(kind), f'kind {kind}')}"
                       if prefix == "memcpy" else "memset")
            kinds.append(np.full(len(sel), len(ops) - 1))
            sizes.append(sel[:, 1])
            durs.append(sel[:, 2])
    if not ops:
        return Report(rows=[], columns=MEMOPS_COLUMNS, notes=["no memory operations recorded."])
    gid = np.concatenate(kinds)
    dur = np.concatenate(durs)
    size = np.concatenate(sizes)
    st = group_stats(gid, dur, len(ops))
    nbytes = np.bincount(gid, weights=size, minlength=len(ops))
    grand = float(st.total.sum())
    rows = []
    for g, op in enumerate(ops):
        rows.append({
            "operation": op, "instances": int(st.count[g]), "total_bytes": int(nbytes[g]),
            **st.row(g),
            "time_pct": r1(100.0 * st.total[g] / grand) if grand else 0.0,
            "throughput_gbps": (round(float(nbytes[g]) / float(st.total[g]), 3)
                                if st.total[g] else None),
        })
    rows.sort(key=lambda x: -x["total_ns"])
    return Report(rows=rows, columns=MEMOPS_COLUMNS)
