"""GPU time per (process, device): busy, idle, communication and compute, over each group's
span or inside range instances. What ``gpus``, ``gaps``, ``collectives`` and ``diff`` share.

The GPU operations are ``nsys_parsers.gpu_ops`` (kernels, graph launches, memcpy, memset);
those never recorded (timestamp 0 or less) are left out, as nsys's ``gpu-starv`` does.
Communication kernels are those of the ``communication`` category (NCCL and other
collectives; ``--rules`` may add more); every other kernel is compute; memory operations are
neither. Lengths are exact integers (``nsys_parsers.intervals``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from nsys_parsers.arrays import group_ids
from nsys_parsers.errors import MissingData
from nsys_parsers.gpu_ops import KERNEL, GpuOps
from nsys_parsers.ids import pid_of
from nsys_parsers.intervals import Intervals, intersection, intersection3, span
from nsys_parsers.schema import MEMCPY_TABLE, MEMSET_TABLE
from reports.categories import categorize_many
from reports.pipeline.session import Session

COMMUNICATION = "communication"


@dataclass(frozen=True)
class Utilization:
    """Per (process, device) group: its key, window count and lengths (ns)."""

    pid: np.ndarray
    device: np.ndarray
    windows: np.ndarray | None  # range instances per group (None: the whole span)
    span: np.ndarray
    busy: np.ndarray
    comm: np.ndarray
    compute: np.ndarray
    overlap: np.ndarray
    kernels: np.ndarray
    memops: np.ndarray
    streams: np.ndarray
    notes: list[str]

    def __len__(self) -> int:
        return int(self.pid.size)


def require_gpu_ops(s: Session, purpose: str, keep: bool = True) -> GpuOps:
    """The session's GPU operations (MissingData naming the trace option when the export has
    neither kernels nor memory operations); ``keep``: as ``Session.gpu_ops``."""
    ops = s.gpu_ops(keep=keep)
    if ops is None:
        if not (s.export.has_table(MEMCPY_TABLE) or s.export.has_table(MEMSET_TABLE)):
            s.require_kernels(purpose)
        raise MissingData(f"{s.export.label}: no GPU operations for {purpose}.")
    return ops


def recorded_ops(ops: GpuOps, notes: list[str]) -> GpuOps:
    """``ops`` with a timestamp (``GpuOps.recorded``); ``notes`` gets how many were left out."""
    kept = ops.recorded()
    if len(kept) < len(ops):
        notes.append(f"{len(ops) - len(kept)} GPU operations without a timestamp are left "
                     f"out (as nsys's gpu-starv does).")
    return kept


def communication_mask(s: Session, ops: GpuOps) -> np.ndarray:
    """Which operations are communication kernels (the ``communication`` category)."""
    k = s.trace.kernels
    if k is None or not len(k.names):
        return np.zeros(len(ops), dtype=bool)
    is_comm = np.array([c == COMMUNICATION for c in categorize_many(k.names, s.rules)])
    return (ops.kind == KERNEL) & is_comm[np.maximum(ops.name_code, 0)]


def windows_of(s: Session, range_name: str, pids: np.ndarray) -> tuple[Intervals, np.ndarray]:
    """The instances of ``range_name`` as windows of each group (the groups' processes:
    ``pids``), and how many instances each group has."""
    inst = s.instances_of(range_name)  # a typed error first when there are no NVTX ranges
    r = s.ranges
    assert r is not None
    w_pid = pid_of(r.tid[inst])
    groups, starts, ends = [], [], []
    counts = np.zeros(pids.size, dtype=np.int64)
    for g, p in enumerate(pids.tolist()):
        mine = inst[w_pid == p]
        counts[g] = mine.size
        groups.append(np.full(mine.size, g, dtype=np.int64))
        starts.append(r.start[mine])
        ends.append(r.end[mine])
    empty = np.zeros(0, dtype=np.int64)
    return Intervals(np.concatenate(groups) if groups else empty,
                     np.concatenate(starts) if starts else empty,
                     np.concatenate(ends) if ends else empty), counts


def utilization(s: Session, window_range: str | None = None) -> Utilization:
    """Busy, idle, communication and overlap per (process, device), over each group's span or
    inside the instances of ``window_range``."""
    notes: list[str] = []
    ops = recorded_ops(require_gpu_ops(s, "per-device GPU time"), notes)
    comm_mask = communication_mask(s, ops)
    gid, (pid, device) = group_ids(ops.pid, ops.device, dtype=np.int32)
    n = pid.size
    every = Intervals(gid, ops.start, ops.end)
    comm = every.take(comm_mask)
    compute = every.take((ops.kind == KERNEL) & ~comm_mask)
    windows = None
    if window_range is None:
        first, last = span(gid, ops.start, ops.end, n)
        length = last - first
        busy, c_len, k_len = every.length(n), comm.length(n), compute.length(n)
        # |comm ∩ compute| from the lengths just taken; none without communication kernels
        overlap = (c_len + k_len - (comm | compute).length(n) if comm.start.size
                   else np.zeros(n, dtype=np.int64))
        inside = np.ones(len(ops), dtype=bool)
    else:
        w, windows = windows_of(s, window_range, pid)
        # |A ∩ W| = |A| + |W| - |A ∪ W| and inclusion-exclusion for |C ∩ K ∩ W|, each
        # union measured once
        length = w.length(n)
        c_all, k_all = comm.length(n), compute.length(n)
        c_out, k_out = (comm | w).length(n), (compute | w).length(n)
        busy = every.length(n) + length - (every | w).length(n)
        c_len, k_len = c_all + length - c_out, k_all + length - k_out
        overlap = (c_all + k_all + length - (comm | compute).length(n) - c_out - k_out
                   + (comm | compute | w).length(n))
        inside = _overlaps(every, w)
    kinds = np.bincount(gid[inside] * 2 + (ops.kind[inside] != KERNEL), minlength=2 * n)
    streams = np.bincount(group_ids(gid, ops.stream)[1][0], minlength=n) if n else \
        np.zeros(0, dtype=np.int64)
    u = Utilization(pid=pid, device=device, windows=windows, span=length, busy=busy,
                    comm=c_len, compute=k_len, overlap=overlap, kernels=kinds[0::2],
                    memops=kinds[1::2], streams=streams, notes=notes)
    if windows is not None:
        keep = windows > 0
        if not keep.all():
            notes.append(f"{int((~keep).sum())} (process, device) pairs have no "
                         f"{window_range!r} instance in their process: left out.")
            u = Utilization(**{f: (getattr(u, f)[keep] if isinstance(getattr(u, f), np.ndarray)
                                   else getattr(u, f)) for f in u.__dataclass_fields__})
    return u


def _overlaps(ops: Intervals, windows: Intervals) -> np.ndarray:
    """Which intervals of ``ops`` overlap one of their group's ``windows``."""
    out = np.zeros(ops.start.size, dtype=bool)
    for g in np.unique(windows.group).tolist():
        w = windows.group == g
        ws, we = np.sort(windows.start[w]), np.sort(windows.end[w])
        mine = np.flatnonzero(ops.group == g)
        # an op [s, e) overlaps a window [ws, we) when some window starts before e and ends
        # after s: fewer windows end by s than start before e
        out[mine] = (np.searchsorted(ws, ops.end[mine], side="left")
                     > np.searchsorted(we, ops.start[mine], side="right"))
    return out


@dataclass(frozen=True)
class InstanceUtilization:
    """Idle and exposed-communication shares of each (range instance, device) window, and
    over all of them."""

    idle_pct: np.ndarray  # per window
    exposed_comm_pct: np.ndarray  # per window with communication
    idle_total_pct: float | None
    exposed_total_pct: float | None


def instance_utilization(s: Session, range_name: str | None) -> InstanceUtilization:
    """Per instance of ``range_name`` (None: the whole span) and device of its process: how
    much of it the device is idle and how much of its communication is exposed."""
    ops = require_gpu_ops(s, "GPU utilization").recorded()
    comm = communication_mask(s, ops)
    gid, (pids, _) = group_ids(ops.pid, ops.device)
    if range_name is None:
        first, last = span(gid, ops.start, ops.end, pids.size)
        w_group, w_start, w_end = np.arange(pids.size), first, last
        op_idx, op_win = np.arange(len(ops)), gid
    else:
        r = s.ranges
        assert r is not None
        inst = s.instances_of(range_name)
        i_pid = pid_of(r.tid[inst])
        w_group_l: list[int] = []
        w_start_l: list[int] = []
        w_end_l: list[int] = []
        idx_l: list[np.ndarray] = []
        win_l: list[np.ndarray] = []
        order = np.argsort(ops.start, kind="stable")
        longest = int((ops.end - ops.start).max(initial=0))
        for g, p in enumerate(pids.tolist()):
            mine = order[gid[order] == g]
            starts = ops.start[mine]
            for i in inst[i_pid == p].tolist():
                a, b = int(r.start[i]), int(r.end[i])
                lo, hi = np.searchsorted(starts, [a - longest, b])
                cand = mine[lo:hi]
                cand = cand[ops.end[cand] > a]
                w = len(w_group_l)
                w_group_l.append(g)
                w_start_l.append(a)
                w_end_l.append(b)
                idx_l.append(cand)
                win_l.append(np.full(cand.size, w, dtype=np.int64))
        w_group = np.array(w_group_l, dtype=np.int64)
        w_start = np.array(w_start_l, dtype=np.int64)
        w_end = np.array(w_end_l, dtype=np.int64)
        empty = np.zeros(0, dtype=np.int64)
        op_idx = np.concatenate(idx_l) if idx_l else empty
        op_win = np.concatenate(win_l) if win_l else empty
    nw = w_group.size
    windows = Intervals(np.arange(nw), w_start, w_end)
    every = Intervals(op_win, ops.start[op_idx], ops.end[op_idx])
    is_comm = comm[op_idx]
    c = every.take(is_comm)
    k = every.take((ops.kind[op_idx] == KERNEL) & ~is_comm)
    length = w_end - w_start
    busy = intersection(every, windows, nw)
    c_len = intersection(c, windows, nw)
    exposed = c_len - intersection3(c, k, windows, nw)
    ok = length > 0
    with_comm = c_len > 0
    total = float(length.sum())
    comm_total = float(c_len.sum())
    return InstanceUtilization(
        idle_pct=100.0 * (length - busy)[ok] / length[ok],
        exposed_comm_pct=100.0 * exposed[with_comm] / c_len[with_comm],
        idle_total_pct=100.0 * float((length - busy).sum()) / total if total else None,
        exposed_total_pct=100.0 * float(exposed.sum()) / comm_total if comm_total else None)
