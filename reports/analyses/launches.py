"""Kernel launch and execution times: nsys ``kernexecsum`` (2024 on: ``cuda_kern_exec_sum``).

One row per (process, launching thread, device, launch API, kernel). For each kernel and the
API call that launched it (its narrowest call with the same correlationId in the process,
``nsys_parsers.kernels``):

    api     the launch call's duration on the CPU
    queue   the kernel's start minus the call's end, when it is 0 or more (a kernel may start
            before its launch call returns: it has no queue time then); ``queue_count`` says
            how many launches have one, and the queue statistics are over those
    kernel  the kernel's duration on the GPU
    launch  from the call's start to the later of its end and the kernel's end (nsys's
            "total time": the phases overlap, so it is not their sum)

with the count, average, median, minimum, maximum, sample standard deviation and total of
each. API names lose their version suffix (``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``),
as nsys's. Rows by average launch time, longest first (nsys's order). Kernels without a launch
record (trimmed exports) cannot be placed: they are left out, and counted in a note.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from nsys_parsers.arrays import ROWS, factorize, gather, group_ids, let_go, let_go_fields
from nsys_parsers.ids import pid_of, tid_of
from nsys_parsers.kernels import api_base_name, launch_rows
from nsys_parsers.schema import RUNTIME_TABLE
from reports.pipeline.analysis import Analysis
from reports.pipeline.report import GroupStats, Report, group_stats_of, r1_array
from reports.pipeline.session import Session
from reports.render import View, human_ns, shorten

PHASES = ("launch", "api", "queue", "kernel")
STATS = ("avg", "med", "min", "max", "stddev", "total")
LAUNCH_COLUMNS = ["pid", "tid", "device", "api", "kernel", "count", "queue_count"] + [
    f"{phase}_{stat}_ns" for phase in PHASES for stat in STATS]
LAUNCH_VIEW = View(
    columns=["count", "api_avg_ns", "queue_avg_ns", "kernel_avg_ns", "launch_avg_ns",
             "queue_count", "pid", "tid", "device", "api", "kernel"],
    drop=("queue_count", "launch_avg_ns", "tid"), noun="launch groups",
    hide_if_constant=("pid", "tid", "device", "api"),
    headers={"api_avg_ns": "api avg", "queue_avg_ns": "queue avg",
             "kernel_avg_ns": "kernel avg", "launch_avg_ns": "launch avg",
             "queue_count": "queued"})


def _stats(prefix: str, st: GroupStats) -> dict[str, list[Any]]:
    """The statistics columns of one phase (None for groups without values)."""
    empty = st.count == 0
    cols = {"avg": r1_array(st.avg), "med": r1_array(st.med), "min": st.min, "max": st.max,
            "stddev": r1_array(st.stddev), "total": st.total}
    out = {}
    for stat in STATS:
        values_list = cols[stat].tolist()
        out[f"{prefix}_{stat}_ns"] = [None if e else v for v, e in zip(values_list,
                                                                        empty.tolist())]
    return out


def _phase_blocks(phase: str, gid: np.ndarray, a_start: np.ndarray, a_end: np.ndarray,
                  k_start: np.ndarray, k_end: np.ndarray
                  ) -> Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]]:
    """(group, value) of one phase, a block (``ROWS``) of launches at a time (queue: only the
    launches with one), the kernels' mapped pages let go after each."""
    def blocks() -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for a in range(0, gid.size, ROWS):
            part = slice(a, a + ROWS)
            if phase == "launch":
                values = np.maximum(a_end[part], k_end[part]) - a_start[part]
            elif phase == "api":
                values = a_end[part] - a_start[part]
            elif phase == "kernel":
                values = k_end[part] - k_start[part]
            else:  # queue: a kernel that started before its call returned has none
                values = k_start[part] - a_end[part]
            let_go(k_start[part])
            let_go(k_end[part])
            if phase == "queue":
                queued = values >= 0
                yield gid[part][queued], values[queued]
            else:
                yield gid[part], values
    return blocks


def launch_summary(s: Session) -> Report:
    """The kernexecsum rows of a session (``within``: the kernels launched inside)."""
    s.require_kernels("kernel launch times")
    s.export.require(RUNTIME_TABLE, "kernel launch times")
    k = s.kernels
    calls = s.trace.api
    assert k is not None and k.pid is not None and k.correlation is not None
    assert k.device is not None
    notes = s.notes
    if calls is None or not len(k):
        return Report(rows=[], columns=LAUNCH_COLUMNS, notes=notes + [
            "no kernel launches recorded."])
    src = launch_rows(k.pid, k.correlation, calls.start, calls.end, calls.tid,
                      calls.correlation)
    let_go_fields(k)  # the columns the launch join read through
    placed = np.flatnonzero(src >= 0)
    if placed.size < len(k):
        notes.append(f"{len(k) - placed.size:,} of {len(k):,} kernels have no launch record "
                     f"(trimmed export): left out of these rows.")
    every = placed.size == len(k)  # then the kernels' own columns, not copies
    call = src if every else src[placed]
    del src

    def kernels_(col: np.ndarray) -> np.ndarray:
        return col if every else col[placed]

    names = [api_base_name(n) for n in calls.names]
    base_code, api_names = factorize(names)  # launch APIs by base name, then per call
    # the calls' columns gathered a block at a time, their mapped pages let go after each
    gid, (g_tid, g_dev, g_api, g_kernel) = group_ids(
        gather(calls.tid, call), kernels_(k.device),
        base_code[gather(calls.name_code, call)], kernels_(k.name_code), dtype=np.int32)
    let_go_fields(k)
    ng = g_tid.size
    a_start, a_end = gather(calls.start, call), gather(calls.end, call)
    del call
    k_start, k_end = kernels_(k.start), kernels_(k.end)
    stats = {phase: group_stats_of(_phase_blocks(phase, gid, a_start, a_end, k_start, k_end),
                                   ng) for phase in PHASES}
    cols: dict[str, list[Any]] = {
        "pid": pid_of(g_tid).tolist(), "tid": tid_of(g_tid).tolist(), "device": g_dev.tolist(),
        "api": [api_names[c] for c in g_api.tolist()],
        "kernel": [k.names[c] for c in g_kernel.tolist()],
        "count": np.bincount(gid, minlength=ng).tolist(),
        "queue_count": stats["queue"].count.tolist(),
    }
    for phase in PHASES:
        cols.update(_stats(phase, stats[phase]))
    keys = list(cols)
    rows = [dict(zip(keys, values)) for values in zip(*cols.values())]
    rows.sort(key=lambda r: (-r["launch_avg_ns"], r["pid"], r["tid"], r["device"], r["api"],
                             r["kernel"]))
    notes.append("api: the launch call on the CPU; queue: its end to the kernel's start "
                 "(launches whose kernel started before the call returned have none: "
                 "queued < count); kernel: on the GPU; launch: call start to the later of call "
                 "end and kernel end.")
    return Report(rows=rows, columns=LAUNCH_COLUMNS, notes=notes,
                  sentences=[launch_sentence(r) for r in rows])


def launch_sentence(row: dict[str, Any]) -> str:
    queue = (f"queued {human_ns(row['queue_avg_ns'])} on average ({row['queue_count']} of "
             f"{row['count']})" if row["queue_count"] else "never queued")
    return (f"{shorten(row['kernel'], 60, signature=True)} via {row['api']} (pid {row['pid']}, "
            f"tid {row['tid']}, device {row['device']}): {row['count']:,} launches, "
            f"{human_ns(row['api_avg_ns'])} in the call, {queue}, "
            f"{human_ns(row['kernel_avg_ns'])} on the GPU")


ANALYSIS = Analysis(
    name="launches", bytes_per_row=16,
    help="""Kernel launch and execution times: API, queue and kernel time (as nsys kernexecsum).

    One row per (process, launching thread, device, launch API, kernel): how long the launch
    call took on the CPU, how long the kernel waited in the queue after it returned, how long
    it ran, and the time from the call to the kernel's end. `--within RANGE`: the kernels
    launched inside its instances.

    Examples: `nsys-mine launches run.sqlite` ·
    `nsys-mine launches run.sqlite --within step --name-kind short -f csv`
    """,
    # the launch join is here, on the kernels' process and correlationId (not every id)
    run=launch_summary, needs=("kernels", "kernel.pid", "kernel.correlation", "kernel.device",
                               "api"),
    options=("within", "name_kind", "nsys", "cache"),
    columns=LAUNCH_COLUMNS, view=LAUNCH_VIEW, title="Kernel launches", order=66,
)
