"""Memory operations: CUDA memcpy by kind and memset (count, bytes, time statistics)."""

from __future__ import annotations

import numpy as np

from nsys_parsers.arrays import group_ids
from nsys_parsers.errors import MissingData
from nsys_parsers.schema import MEMCPY_TABLE, MEMSET_TABLE
from reports.pipeline.analysis import Analysis
from reports.pipeline.report import Report, group_stats, r1
from reports.pipeline.session import Session
from reports.render import View

MEMOPS_VIEW = View(
    columns=["time_pct", "total_ns", "instances", "total_bytes", "throughput_gbps", "avg_ns",
             "med_ns", "min_ns", "max_ns", "stddev_ns", "operation"],
    rank_by=("total_ns",), noun="operations",
    headers={"throughput_gbps": "GB/s", "total_bytes": "bytes"})

MEMOPS_COLUMNS = [
    "operation", "instances", "total_bytes", "total_ns", "avg_ns", "med_ns", "min_ns",
    "max_ns", "stddev_ns", "time_pct", "throughput_gbps",
]


def memops_summary(s: Session) -> Report:
    """memcpy by kind and memset: count, bytes, time statistics, share and throughput."""
    m = s.memops
    if m is None:
        raise MissingData(f"{s.export.label}: no CUDA memcpy or memset was traced (no "
                          f"{MEMCPY_TABLE}/{MEMSET_TABLE} tables): profile with "
                          f"`nsys profile --trace=cuda`.")
    if not len(m):
        return Report(rows=[], columns=MEMOPS_COLUMNS,
                      notes=["no memory operations recorded."])
    # one group per memcpy kind (ascending), then memset
    gid, (memset, kind) = group_ids(m.memset.astype(np.int64), m.kind)
    ops = ["memset" if ms else f"memcpy {m.kind_labels.get(k, f'kind {k}')}"
           for ms, k in zip(memset.tolist(), kind.tolist())]
    st = group_stats(gid, m.duration, len(ops))
    nbytes = np.bincount(gid, weights=m.bytes, minlength=len(ops))
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


ANALYSIS = Analysis(
    name="memops", bytes_per_row=4,
    help="""Memory operations: memcpy by kind and memset, count, bytes, time and throughput.

    Example: `nsys-mine memops run.sqlite`
    """,
    run=memops_summary, needs=("memops",), columns=MEMOPS_COLUMNS, view=MEMOPS_VIEW,
    title="Memory operations", order=60,
)
