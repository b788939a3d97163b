"""``longest``: the longest kernel runs, one row per kernel instance, with where it ran and the
NVTX range that launched it (its innermost one): the outliers a summary by name averages away.
"""

from __future__ import annotations

import numpy as np

from nsys_parsers.ids import pid_of
from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.report import Report, r1
from reports.pipeline.session import Session
from reports.render import View

COLUMNS = ["kernel", "duration_ns", "start_ns", "device", "stream", "pid", "range",
           "share_pct"]
VIEW = View(columns=["share_pct", "duration_ns", "device", "stream", "range", "kernel"],
            drop=("stream", "device"), noun="kernel runs", null_labels={"range": "(no range)"})


def longest(s: Session, count: int = 100) -> Report:
    s.require_kernels("the longest kernel runs")
    k = s.kernels
    assert k is not None and k.device is not None and k.stream is not None and k.pid is not None
    order = np.argsort(-k.duration, kind="stable")[:count]
    where = np.full(len(k), -1, dtype=np.int64)  # each kernel's innermost range, if any
    names = None
    if s.ranges is not None:
        inner = s.pairs("innermost")
        where[inner.kernel_idx] = inner.range_idx
        names = s.names(rows=where[order][where[order] >= 0])
    total = int(k.duration.sum())
    rows = []
    for i in order.tolist():
        r = int(where[i])
        rows.append({"kernel": k.names[k.name_code[i]], "duration_ns": int(k.duration[i]),
                     "start_ns": int(k.start[i]), "device": int(k.device[i]),
                     "stream": int(k.stream[i]), "pid": int(pid_of(k.pid[i])),
                     "range": names.names[names.code[r]] if names and r >= 0 else None,
                     "share_pct": r1(100.0 * k.duration[i] / total) if total else 0.0})
    return Report(rows=rows, columns=COLUMNS, notes=s.notes)


ANALYSIS = Analysis(
    name="longest", bytes_per_row=6,
    help="""The longest kernel runs: each instance with its device, stream and launching range.

    A kernel summary averages its runs; this lists the single runs that took longest (the
    first `--count`), with the innermost NVTX range of their launch and their share of all
    kernel time.

    Example: `nsys-mine longest run.sqlite --count 10`
    """,
    run=longest, needs=("kernels", "kernel_ids", "launches", "ranges"),
    options=("within", "name_kind", "nsys", "cache"),
    params=(Param("count", ("--count",), "How many of the longest runs to list.", type=int,
                  default=100, minimum=1, metavar="N"),),
    columns=COLUMNS, view=VIEW, title="Longest kernel runs", order=65,
)
