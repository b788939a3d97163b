"""Per-device GPU time: how long each (process, device) was busy and idle, and how much of its
communication (NCCL) ran while compute ran too.

One row per (process, device) of the GPU operations (``nsys_parsers.gpu_ops``: kernels,
memcpy, memset; those with a timestamp of 0 or less, never recorded, are left out, as nsys's
``gpu-starv`` does):

    span_ns          first operation start to last operation end (as gpu-starv's window)
    busy_ns          the union of all operations; idle_ns = span - busy
    comm_ns          the union of the communication kernels (category ``communication``:
                     NCCL and other collectives; ``--rules`` may add more)
    compute_ns       the union of every other kernel (memcpy and memset are neither)
    overlap_ns       communication time during which compute runs too
    exposed_comm_ns  comm - overlap: the communication nothing hides

With ``--within RANGE`` the window is no longer the span: it is the instances of RANGE in the
process (their CPU-side start to end, the union of them), and every length is measured inside
it: per training step, how much of ``step`` the GPU is idle. Lengths are exact integers
(``nsys_parsers.intervals``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from reports.gpu_time import utilization
from reports.pipeline.analysis import Analysis
from reports.pipeline.report import Report, r1, rows_of
from reports.pipeline.rules import CheckKey, CheckRule, RuleOutcome
from reports.pipeline.session import Session
from reports.render import View, human_ns

GPUS_COLUMNS = [
    "pid", "device", "windows", "span_ns", "busy_ns", "idle_ns", "comm_ns", "compute_ns",
    "overlap_ns", "exposed_comm_ns", "busy_pct", "idle_pct", "exposed_comm_pct", "kernels",
    "memops", "streams",
]
GPUS_VIEW = View(
    columns=["pid", "device", "windows", "span_ns", "busy_pct", "idle_pct", "busy_ns",
             "comm_ns", "compute_ns", "overlap_ns", "exposed_comm_ns", "exposed_comm_pct",
             "streams"],
    drop=("streams", "overlap_ns", "busy_ns", "compute_ns"), noun="devices",
    hide_if_zero=("windows", "comm_ns", "overlap_ns", "exposed_comm_ns", "exposed_comm_pct"),
    headers={"exposed_comm_ns": "exposed comm", "exposed_comm_pct": "exposed comm %",
             "comm_ns": "comm"})


def _pct(part: np.ndarray, whole: np.ndarray) -> list[float | None]:
    return [r1(100.0 * p / w) if w else None for p, w in zip(part.tolist(), whole.tolist())]


def gpus_report(s: Session) -> Report:
    """The rows of GPUS_COLUMNS for a session (``within``: inside its instances)."""
    u = utilization(s, s.within)
    idle = u.span - u.busy
    exposed = u.comm - u.overlap
    rows = rows_of({
        "pid": u.pid.tolist(), "device": u.device.tolist(),
        "windows": u.windows.tolist() if u.windows is not None else [None] * len(u),
        "span_ns": u.span.tolist(), "busy_ns": u.busy.tolist(), "idle_ns": idle.tolist(),
        "comm_ns": u.comm.tolist(), "compute_ns": u.compute.tolist(),
        "overlap_ns": u.overlap.tolist(), "exposed_comm_ns": exposed.tolist(),
        "busy_pct": _pct(u.busy, u.span), "idle_pct": _pct(idle, u.span),
        "exposed_comm_pct": _pct(exposed, u.comm),
        "kernels": u.kernels.tolist(), "memops": u.memops.tolist(),
        "streams": u.streams.tolist(),
    })
    notes = list(u.notes)  # `within` means windows here: said below
    where = (f"inside the {s.within!r} instances of each process (their CPU-side start to "
             f"end)" if s.within else "first GPU operation start to last end")
    notes.append(f"span: {where}; busy: the union of kernels, memcpy and memset; comm: "
                 f"communication kernels (NCCL); compute: every other kernel; exposed comm: "
                 f"comm while no compute runs.")
    if not u.comm.any():
        notes.append("no communication kernels (category `communication`: NCCL and other "
                     "collectives) ran: comm columns are 0.")
    if not s.has_kernels:
        notes.append("no CUDA kernels were traced: busy time is memcpy and memset only.")
    return Report(rows=rows, columns=GPUS_COLUMNS, notes=notes,
                  sentences=[gpu_sentence(r, s.within) for r in rows])


def gpu_sentence(row: dict[str, Any], within: str | None = None) -> str:
    """``pid 13096, device 0: busy 14.6% of 1.623 s; communication 209.017 ms, 94.3% of it
    exposed``."""
    where = f"of {row['windows']} {within!r} instance(s), " if within else "of "
    text = (f"pid {row['pid']}, device {row['device']}: busy {row['busy_pct']}% "
            f"{where}{human_ns(row['span_ns'])} (idle {human_ns(row['idle_ns'])})")
    if row["comm_ns"]:
        text += (f"; communication {human_ns(row['comm_ns'])}, {row['exposed_comm_pct']}% "
                 f"of it exposed")
    return text


# -- check rules -------------------------------------------------------------------------


def _worst(s: Session, rule: CheckRule, column: str) -> tuple[dict[str, Any] | None, int]:
    """The row with the largest ``column`` (of the rule's range, or the whole export) and
    how many rows there are."""
    u = utilization(s, rule.range)
    idle, exposed = u.span - u.busy, u.comm - u.overlap
    values = _pct(idle, u.span) if column == "idle_pct" else _pct(exposed, u.comm)
    best: dict[str, Any] | None = None
    for i, v in enumerate(values):
        if v is not None and (best is None or v > best["value"]):
            best = {"value": v, "pid": int(u.pid[i]), "device": int(u.device[i])}
    return best, len(u)


def _limit_check(column: str, what: str) -> Any:
    def evaluate(s: Session, rule: CheckRule,
                 baseline: Session | None, alpha: float) -> RuleOutcome:
        limit = rule.values["limit"]
        where = f"of {rule.range!r}" if rule.range else "of the span"
        worst, n = _worst(s, rule, column)
        if worst is None:
            return RuleOutcome(True, 0.0, f"<= {limit:g}%", f"no {what} on any of {n} device(s)")
        v = worst["value"]
        return RuleOutcome(v <= limit, v, f"<= {limit:g}%",
                       f"{what} {v:g}% {where} on device {worst['device']} (pid "
                       f"{worst['pid']}), the most of {n} device(s)")
    return evaluate


ANALYSIS = Analysis(
    name="gpus", bytes_per_row=31,
    help="""Per-device GPU time: busy, idle, communication (NCCL) and how much of it is exposed.

    One row per (process, device): span (first GPU operation to last), busy (the union of
    kernels, memcpy and memset), idle, communication kernels, compute kernels, their overlap
    and the exposed communication (no compute runs meanwhile). `--within RANGE`: inside the
    instances of RANGE only (per training step). Several exports: one table with a `config`
    column.

    Examples: `nsys-mine gpus ddp.sqlite` · `nsys-mine gpus run.sqlite --within step`
    """,
    run=gpus_report, inputs="exports", needs=("kernels", "kernel_places", "memops"),
    options=("within", "rules", "nsys", "cache"),
    columns=GPUS_COLUMNS, view=GPUS_VIEW, title="GPU time per device", order=62,
    checks=(
        CheckKey("max_idle_pct", "limit", _limit_check("idle_pct", "idle"), order=8,
                 describe=lambda where, v: f"{where}: GPU idle <= {v['limit']:g}%"),
        CheckKey("max_exposed_comm_pct", "limit",
                 _limit_check("exposed_comm_pct", "exposed communication"), order=9,
                 describe=lambda where, v: f"{where}: exposed communication <= "
                                           f"{v['limit']:g}%"),
    ),
)


