#!/usr/bin/env python3
"""Build one export per rank from a real multi-process capture, with a known straggler.

    python benchmarks/rank_exports.py SRC.sqlite OUT_DIR --ranks 8 --slow-rank 5 --delay-ms 2

or, from Python, ``build_rank_exports(src, out_dir, ranks=8, slow_rank=5, delay_ns=2e6)``.

1. **Split**: the capture's first GPU process (NCCL rank 0 where the payload says) becomes an
   export of its own: every activity row of the other processes is deleted (SRC is opened
   read-only and copied with SQLite's backup API).
2. **Clone**: rank r is a copy of it whose NCCL payloads say ``"Rank": r`` and ``"No. of
   ranks": R`` (and ``comm_id`` as the communicator, when given: another run).
3. **Inject** (``slow_rank``, ``delay_ns`` = D): in synchronous training every rank waits at
   each collective for the last one. Before each collective k of the slow rank, D of host
   time is inserted where its GPU goes idle before the collective (the start of the last idle
   gap after collective k-1, or the collective's start): every later row moves by D, NVTX
   ranges open there grow by D, CUDA calls in flight there end there (the host leaves them for
   its loader: the gap's cause is ``cpu``), and an NVTX range ``data_loader`` covers the D on
   the launching thread. On every other rank, collective k's kernel runs D longer (it waits) and
   every later row moves by D. So each collective ends at the same time on every rank, and
   the slow rank arrives exactly D after the others at each of them.
4. **Clocks**: rank r's timestamps are shifted by ``r * clock_step_ns`` (another machine's
   clock: nsys counts from each session's start) and its session start
   (``TARGET_INFO_SESSION_START_TIME``) moves back by as much, plus ``utc_error_ns * r``
   (the clocks' disagreement).
5. ``replay`` > 1 replays each rank's activity that many times (``scale_export``), for
   benchmark sizes; ``truncate_export`` cuts an export short (a crashed rank).

Options that are off by default (each leaves the files exactly as above when off):

* ``stream_shift`` = S (``--stream-shift``): rank r's CUDA stream ids become ``streamId +
  r * S`` in every table with a ``streamId`` column (kernels, memcpy, memset, CUDA events,
  synchronization, ``TARGET_INFO_CUDA_STREAM``) and in ``TARGET_INFO_CUDA_CONTEXT_INFO.
  nullStreamId``; 4294967295 (a synchronization on no stream) stays. Real processes number
  their streams themselves: two ranks of one job can run NCCL on stream 7 and stream 15.
* ``utc_normalized`` (``--utc-normalized``): timestamps as ``nsys export --ts-normalize``
  writes them, UTC nanoseconds (about 1.7e18). After step 4, the rank's session start (its
  ``TARGET_INFO_SESSION_START_TIME.utcEpochNs``, as the file then says it) is added to
  ``start`` and ``end`` of every activity table (NULL ends stay NULL); the other timestamp
  columns of activity tables (CUDA event ``timestamp``, the kernels' ``qmd*Done``) get the
  clock shift and the session start where they are set (not NULL, not 0: not collected).
  ``META_DATA_EXPORT`` says ``EXPORT_PARAM_TIME_NORMALIZE`` = ``true``. A rank's times are
  then on its host's UTC clock, and ranks disagree by their ``utc_error_ns``. The values are
  Python and SQLite integers throughout (they exceed float64's exact range).
* ``tp`` = T (``--tp``): tensor-parallel groups of T consecutive ranks (``[0..T-1]``,
  ``[T..2T-1]``, ...) crossed with data-parallel groups (``{j, j+T, j+2T, ...}``); the job's
  rank count (``first_rank + ranks``) must be a multiple of T. The collectives on the NCCL
  stream with the most AllReduce kernels (ties: the most NCCL kernels, then the lower id;
  stream 17 of the DDP capture: 111 AllReduces against 8 on stream 7, which has 111
  Broadcasts too) are the TP group's; those on every other NCCL stream are the DP group's.
  Each communicator instance has its own ``NCCL communicator ID``: ``1000 + g`` for TP group
  g (``r // T``), ``2000 + j`` for DP group j (``r % T``), plus ``comm_id`` when given (another
  run). Each NCCL NVTX payload is matched to the NCCL kernel launched inside its range (a CUDA
  runtime call on the range's thread that starts within it and has the kernel's
  ``correlationId``) and names that kernel's communicator. A payload whose range launches no
  NCCL kernel is a set-up or tear-down call (``ncclCommInitRankConfig``,
  ``ncclCommFinalize``, ``ncclCommDestroy``): its range is split in two at its middle, one
  call per communicator of the rank, TP first then DP (an instant with no end is duplicated),
  each with its communicator's ID and, where the payload has them, ``"Rank"`` = the rank's
  index in that communicator (``r % T`` in TP, ``r // T`` in DP) and ``"No. of ranks"`` = its
  size (T, or ``(first_rank + ranks) // T``).
  With ``slow_rank`` too, step 3 simulates synchronous collectives per communicator instance
  instead: the source's NCCL kernels are walked in time order with a shift ``s_r`` per rank
  (0 at first: how much later than the source rank r runs). Before each TP collective the
  slow rank's shift grows by D (inserted host time and ``data_loader`` range, as in step 3).
  At each collective every member of the communicator instance (the TP group, or the DP
  group, that holds it) ends at the same moment: a member's kernel runs ``max(s over the
  members) - s_r`` longer (it waits, as in step 3) and its shift becomes that max. So in the
  slow rank's TP group it arrives exactly D after the others at each TP collective, and at DP
  collectives the delay reaches the other TP groups through their waits. (In the DDP capture
  every DP collective comes before the first TP one: there the other TP groups never wait,
  and the slow rank's group ends its last TP collective 111 D after the others.)
* ``unreadable`` = r (``--unreadable``): rank r's file is ``rank_<r>.nsys-rep`` (the name's
  suffix replaced), an nsys report recorded by nsys 2026.1 (a copy of the fixture
  ``vecadd2_rtx4060ti_nsys2026.1.nsys-rep`` found beside SRC, in ``$NSYS_MINE_FIXTURES`` or in
  ``../shared/fixtures/nsys``; else just its header ``NVIDIA Tegra Profiler Report
  2026@1@1@...``): a rank whose export an older nsys cannot read. No ``.sqlite`` is written
  for it (a stale one of the same name is deleted).

Files: ``OUT_DIR/rank_<r>.sqlite``, written under a hidden name and renamed.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import shutil
import sqlite3
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_export import scale_export  # noqa: E402

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"
GPU_TABLES = (KERNEL, "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET")
BY_PID = GPU_TABLES + ("CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
                       "CUPTI_ACTIVITY_KIND_GRAPH_TRACE")
BY_TID = (RUNTIME, "CUPTI_ACTIVITY_KIND_DRIVER", NVTX, "OSRT_API", "CUDNN_EVENTS",
          "CUBLAS_EVENTS")
API_TABLES = (RUNTIME, "CUPTI_ACTIVITY_KIND_DRIVER")
SESSION = "TARGET_INFO_SESSION_START_TIME"
LOADER = "data_loader"
TP_COMM_BASE, DP_COMM_BASE = 1000, 2000  # NCCL communicator IDs with ``tp``: base + group
NO_STREAM = 4294967295  # the streamId of a synchronization that waits on no stream
STREAM_COLUMNS = ("streamId", "nullStreamId")
TIME_COLUMNS = ("timestamp", "qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone")
WAIT, HOST = 0, 1  # schedule events: a kernel that waits at its end; host time inserted
NEWER_REPORT = "vecadd2_rtx4060ti_nsys2026.1.nsys-rep"
NEWER_HEADER = b"NVIDIA Tegra Profiler Report 2026@1@1@204-261137176666v0.\n"


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _columns(db: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in db.execute(f"PRAGMA table_info({_q(table)})")]


def _copy(src: Path, dst: Path) -> sqlite3.Connection:
    dst.parent.mkdir(parents=True, exist_ok=True)
    dst.unlink(missing_ok=True)
    s = sqlite3.connect(f"file:{quote(str(src.resolve()))}?mode=ro", uri=True)
    d = sqlite3.connect(dst, isolation_level=None)
    try:
        s.backup(d)
    finally:
        s.close()
    d.execute("PRAGMA journal_mode = OFF")
    d.execute("PRAGMA synchronous = OFF")
    return d


def gpu_pids(db: sqlite3.Connection) -> list[int]:
    """The processes that ran kernels, NCCL rank 0 first where the payload says."""
    pids = [r[0] for r in db.execute(
        f"SELECT DISTINCT (globalPid >> 24) & 16777215 FROM {KERNEL} ORDER BY 1")]
    first = None
    if "jsonText" in _columns(db, NVTX):
        row = db.execute(f"SELECT (globalTid >> 24) & 16777215 FROM {NVTX} WHERE jsonText "
                         f"LIKE '%\"Rank\":0,%' LIMIT 1").fetchone()
        first = row[0] if row else None
    return sorted(pids, key=lambda p: (p != first, p))


def _keep_process(db: sqlite3.Connection, pid: int) -> None:
    tables = _tables(db)
    for t in BY_PID:
        if t in tables and "globalPid" in _columns(db, t):
            db.execute(f"DELETE FROM {_q(t)} WHERE (globalPid >> 24) & 16777215 != ?", (pid,))
    for t in BY_TID:
        if t in tables and "globalTid" in _columns(db, t):
            db.execute(f"DELETE FROM {_q(t)} WHERE (globalTid >> 24) & 16777215 != ?", (pid,))


def _timed_tables(db: sqlite3.Connection) -> list[str]:
    """Tables with start and end columns that are activity (not the capture's own)."""
    out = []
    for t in sorted(_tables(db)):
        cols = _columns(db, t)
        if "start" in cols and "end" in cols and not t.startswith(("TARGET_", "ANALYSIS")):
            out.append(t)
    return out


def _collectives(db: sqlite3.Connection) -> list[tuple[int, int, int, int]]:
    """(start, end, correlationId, deviceId) of the NCCL kernels, by start."""
    name = "shortName" if "shortName" in _columns(db, KERNEL) else "demangledName"
    return [tuple(r) for r in db.execute(
        f"SELECT k.start, k.\"end\", k.correlationId, k.deviceId FROM {KERNEL} AS k "
        f"JOIN StringIds AS s ON s.id = k.{name} WHERE s.value LIKE 'nccl%' "
        f"ORDER BY k.start")]


def _union_ends(db: sqlite3.Connection, device: int) -> list[int]:
    """The ends of the components of the device's busy union (where idle gaps start)."""
    ops = []
    for t in GPU_TABLES:
        if t in _tables(db):
            ops += db.execute(f"SELECT start, \"end\" FROM {_q(t)} WHERE deviceId = ? AND "
                              f"start > 0", (device,)).fetchall()
    ops.sort()
    ends, cur = [], None
    for s, e in ops:
        if cur is not None and s > cur:
            ends.append(cur)
        cur = e if cur is None else max(cur, e)
    if cur is not None:
        ends.append(cur)
    return ends


def _warp(db: sqlite3.Connection, points: list[int], delay: int, *, slow: bool) -> None:
    """Move every row past each point by ``delay`` (see the module docstring, step 3)."""
    pts = sorted(points)
    db.create_function("n_le", 1, lambda t: None if t is None else bisect.bisect_right(pts, t),
                       deterministic=True)
    db.create_function("n_lt", 1, lambda t: None if t is None else bisect.bisect_left(pts, t),
                       deterministic=True)
    def api_end(start: int | None, end: int | None) -> int | None:
        """A call in flight at a point ends there (the host leaves it for the loader)."""
        if start is None or end is None:
            return end
        i = bisect.bisect_right(pts, start)
        if i < len(pts) and pts[i] < end:
            return pts[i] + delay * i
        return end + delay * bisect.bisect_left(pts, end)

    db.create_function("api_end", 2, api_end, deterministic=True)
    for t in _timed_tables(db):
        if slow and t in API_TABLES:
            db.execute(f"UPDATE {_q(t)} SET \"end\" = api_end(start, \"end\"), "
                       f"start = start + {delay} * n_le(start)")
        elif slow:  # rows ending exactly at a point stay: the gap starts there
            db.execute(f"UPDATE {_q(t)} SET start = start + {delay} * n_le(start), "
                       f"\"end\" = \"end\" + {delay} * n_lt(\"end\")")
        else:  # the collective ending at a point runs longer
            db.execute(f"UPDATE {_q(t)} SET start = start + {delay} * n_le(start), "
                       f"\"end\" = \"end\" + {delay} * n_le(\"end\")")


def _arrival_points(db: sqlite3.Connection, colls: Sequence[tuple[Any, ...]]) -> list[int]:
    """Where the GPU goes idle before each collective (``(start, end, _, deviceId, ...)`` by
    start): the start of the last idle gap after the previous collective, or its start."""
    if not colls:
        return []
    ends = _union_ends(db, colls[0][3])
    points = []
    prev_end = None
    for start, end, *_rest in colls:
        i = bisect.bisect_left(ends, start) - 1  # the last gap start before the arrival
        point = start
        if i >= 0 and (prev_end is None or ends[i] >= prev_end):
            point = ends[i]
        points.append(point)
        prev_end = end
    return points


def _inject_slow(db: sqlite3.Connection, delay: int) -> int:
    """Insert ``delay`` of host time before each collective of the rank; returns how many."""
    colls = _collectives(db)
    if not colls:
        return 0
    points = _arrival_points(db, colls)
    tid_of = {}
    for corr, tid in db.execute(f"SELECT correlationId, globalTid FROM {RUNTIME}"):
        tid_of[corr] = tid
    _warp(db, points, delay, slow=True)
    text_id = _string(db, LOADER)
    rows = [(p + delay * k, p + delay * (k + 1), 59, tid_of.get(c[2]), text_id)
            for k, (p, c) in enumerate(zip(points, colls))]
    db.executemany(f"INSERT INTO {NVTX} (start, \"end\", eventType, globalTid, textId) "
                   f"VALUES (?, ?, ?, ?, ?)", rows)
    return len(points)


def _inject_waits(db: sqlite3.Connection, delay: int) -> int:
    colls = _collectives(db)
    _warp(db, [e for _s, e, _c, _d in colls], delay, slow=False)
    return len(colls)


def _string(db: sqlite3.Connection, value: str) -> int:
    row = db.execute("SELECT id FROM StringIds WHERE value = ?", (value,)).fetchone()
    if row:
        return int(row[0])
    new = int(db.execute("SELECT coalesce(max(id), 0) + 1 FROM StringIds").fetchone()[0])
    db.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)", (new, value))
    return new


def _payloads(db: sqlite3.Connection, rank: int, ranks: int, comm_id: int | None) -> None:
    if "jsonText" not in _columns(db, NVTX):
        return
    rows = db.execute(f"SELECT rowid, jsonText FROM {NVTX} WHERE jsonText IS NOT NULL")
    for rowid, text in rows.fetchall():
        new = re.sub(r'"Rank":\d+', f'"Rank":{rank}', text)
        new = re.sub(r'"No\. of ranks":\d+', f'"No. of ranks":{ranks}', new)
        if comm_id is not None:
            new = re.sub(r'"NCCL communicator ID":\d+', f'"NCCL communicator ID":{comm_id}',
                         new)
        if new != text:
            db.execute(f"UPDATE {NVTX} SET jsonText = ? WHERE rowid = ?", (new, rowid))


def _shift_clock(db: sqlite3.Connection, shift: int, utc_error: int) -> None:
    for t in _timed_tables(db):
        db.execute(f"UPDATE {_q(t)} SET start = start + {shift}, "
                   f"\"end\" = \"end\" + {shift}")
    if SESSION in _tables(db):
        db.execute(f"UPDATE {SESSION} SET utcEpochNs = utcEpochNs - ?", (shift - utc_error,))


def _nccl_kernels(db: sqlite3.Connection) -> list[tuple[int, int, int, int, int, str]]:
    """(start, end, correlationId, deviceId, streamId, name) of the NCCL kernels, by start."""
    name = "shortName" if "shortName" in _columns(db, KERNEL) else "demangledName"
    return [(int(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), str(r[5]))
            for r in db.execute(
                f"SELECT k.start, k.\"end\", k.correlationId, k.deviceId, k.streamId, s.value "
                f"FROM {KERNEL} AS k JOIN StringIds AS s ON s.id = k.{name} "
                f"WHERE s.value LIKE 'nccl%' ORDER BY k.start")]


def _tp_stream(kernels: list[tuple[int, int, int, int, int, str]]) -> int | None:
    """The NCCL stream of the tensor-parallel collectives: the most AllReduce kernels, then
    the most NCCL kernels, then the lower id."""
    every = Counter(k[4] for k in kernels)
    reduce = Counter(k[4] for k in kernels if "allreduce" in k[5].lower())
    return max(every, key=lambda s: (reduce[s], every[s], -s)) if every else None


def _schedule(kernels: list[tuple[int, int, int, int, int, str]], points: list[int],
              tp_stream: int | None, world: int, tp: int, slow: int, delay: int
              ) -> tuple[dict[int, list[tuple[int, int, int]]], list[tuple[int, int]]]:
    """Synchronous collectives per communicator instance (module docstring, ``tp``): each
    rank's events ``(time, WAIT or HOST, ns)`` on the source timeline, and the slow rank's
    inserts ``(point, correlationId)``."""
    shift = [0] * world
    events: dict[int, list[tuple[int, int, int]]] = {r: [] for r in range(world)}
    loaders = []
    tp_groups = [range(g * tp, (g + 1) * tp) for g in range(world // tp)]
    dp_groups = [range(j, world, tp) for j in range(tp)]
    for (_start, end, corr, _dev, stream, _name), point in zip(kernels, points):
        on_tp = stream == tp_stream
        if on_tp:
            shift[slow] += delay
            events[slow].append((point, HOST, delay))
            loaders.append((point, corr))
        for group in tp_groups if on_tp else dp_groups:
            last = max(shift[r] for r in group)
            for r in group:
                if shift[r] < last:
                    events[r].append((end, WAIT, last - shift[r]))
                    shift[r] = last
    return events, loaders


def _inject_schedule(db: sqlite3.Connection, events: list[tuple[int, int, int]],
                     loaders: list[tuple[int, int]], delay: int) -> int:
    """Apply one rank's schedule: ``_warp`` with events of both kinds and their own sizes.
    A HOST event at t moves the rows from t on (rows ending at t stay; CUDA calls in flight
    at t end there); a WAIT event at t moves the rows from t on and the rows ending at t (the
    collective ending there runs longer). At one time a WAIT comes before a HOST."""
    if not events:
        return 0
    ev = sorted(events)
    keys = [(t, m) for t, m, _d in ev]
    cum = [0]
    for _t, _m, d in ev:
        cum.append(cum[-1] + d)
    host = [t for t, m, _d in ev if m == HOST]

    def new_start(t: int | None) -> int | None:
        return None if t is None else t + cum[bisect.bisect_right(keys, (t, HOST))]

    def new_end(t: int | None) -> int | None:
        return None if t is None else t + cum[bisect.bisect_left(keys, (t, HOST))]

    def new_api_end(start: int | None, end: int | None) -> int | None:
        """A call in flight at a HOST event ends there (the host leaves it for the loader)."""
        if start is None or end is None:
            return new_end(end)
        i = bisect.bisect_right(host, start)
        if i < len(host) and host[i] < end:
            return host[i] + cum[bisect.bisect_left(keys, (host[i], HOST))]
        return new_end(end)

    db.create_function("w_start", 1, new_start, deterministic=True)
    db.create_function("w_end", 1, new_end, deterministic=True)
    db.create_function("w_api_end", 2, new_api_end, deterministic=True)
    tid_of = {}
    for corr, tid in db.execute(f"SELECT correlationId, globalTid FROM {RUNTIME}"):
        tid_of[corr] = tid
    for t in _timed_tables(db):
        if t in API_TABLES:
            db.execute(f"UPDATE {_q(t)} SET \"end\" = w_api_end(start, \"end\"), "
                       f"start = w_start(start)")
        else:
            db.execute(f"UPDATE {_q(t)} SET start = w_start(start), \"end\" = w_end(\"end\")")
    if loaders:
        text_id = _string(db, LOADER)
        rows = []
        for point, corr in loaders:
            at = point + cum[bisect.bisect_left(keys, (point, HOST))]
            rows.append((at, at + delay, 59, tid_of.get(corr), text_id))
        db.executemany(f"INSERT INTO {NVTX} (start, \"end\", eventType, globalTid, textId) "
                       f"VALUES (?, ?, ?, ?, ?)", rows)
    return len(ev)


def _set_comm(text: str, comm: int, index: int, size: int) -> str:
    new = re.sub(r'"NCCL communicator ID":\d+', f'"NCCL communicator ID":{comm}', text)
    new = re.sub(r'"Rank":\d+', f'"Rank":{index}', new)
    return re.sub(r'"No\. of ranks":\d+', f'"No. of ranks":{size}', new)


def _tp_payloads(db: sqlite3.Connection, rank: int, world: int, tp: int,
                 tp_stream: int | None, comm_id: int | None) -> None:
    """Each NCCL payload names its communicator instance (module docstring, ``tp``)."""
    cols = _columns(db, NVTX)
    if "jsonText" not in cols:
        return
    base = comm_id or 0
    tp_comm = (base + TP_COMM_BASE + rank // tp, rank % tp, tp)
    dp_comm = (base + DP_COMM_BASE + rank % tp, rank // tp, world // tp)
    stream_of = {k[2]: k[4] for k in _nccl_kernels(db)}
    launches: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for corr, tid, start in db.execute(f"SELECT correlationId, globalTid, start FROM {RUNTIME}"):
        if corr in stream_of:
            launches[tid].append((start, corr))
    for lst in launches.values():
        lst.sort()
    names = ", ".join(_q(c) for c in cols)
    rows = db.execute(f"SELECT rowid, start, \"end\", globalTid, jsonText FROM {NVTX} "
                      f"WHERE jsonText LIKE '%\"NCCL communicator ID\"%'").fetchall()
    for rowid, start, end, tid, text in rows:
        lst = launches.get(tid, [])
        i = bisect.bisect_left(lst, (start, -1))
        if i < len(lst) and end is not None and lst[i][0] <= end:
            comm = tp_comm if stream_of[lst[i][1]] == tp_stream else dp_comm
            db.execute(f"UPDATE {NVTX} SET jsonText = ? WHERE rowid = ?",
                       (_set_comm(text, *comm), rowid))
            continue
        # set-up or tear-down: one call per communicator of the rank, TP then DP
        mid = start if end is None else start + (end - start) // 2
        db.execute(f"UPDATE {NVTX} SET jsonText = ?, \"end\" = ? WHERE rowid = ?",
                   (_set_comm(text, *tp_comm), None if end is None else mid, rowid))
        cur = db.execute(f"INSERT INTO {NVTX} ({names}) SELECT {names} FROM {NVTX} "
                         f"WHERE rowid = ?", (rowid,))
        db.execute(f"UPDATE {NVTX} SET jsonText = ?, start = ?, \"end\" = ? WHERE rowid = ?",
                   (_set_comm(text, *dp_comm), mid, end, cur.lastrowid))


def _shift_streams(db: sqlite3.Connection, by: int) -> None:
    for t in sorted(_tables(db)):
        cols = _columns(db, t)
        for c in STREAM_COLUMNS:
            if c in cols:
                db.execute(f"UPDATE {_q(t)} SET {_q(c)} = {_q(c)} + ? WHERE {_q(c)} >= 0 "
                           f"AND {_q(c)} != ?", (by, NO_STREAM))


def _utc_normalize(db: sqlite3.Connection, shift: int) -> None:
    """Add the session start (as the file says it) to the activity tables' timestamps."""
    if SESSION not in _tables(db):
        return
    row = db.execute(f"SELECT utcEpochNs FROM {SESSION}").fetchone()
    if row is None or row[0] is None:
        return
    epoch = int(row[0])
    timed = _timed_tables(db)
    for t in timed:
        db.execute(f"UPDATE {_q(t)} SET start = start + ?, \"end\" = \"end\" + ?",
                   (epoch, epoch))
    activity = sorted(set(timed) | {t for t in _tables(db)
                                    if t.startswith("CUPTI_ACTIVITY_KIND_")})
    for t in activity:
        for c in TIME_COLUMNS:
            if c in _columns(db, t):
                db.execute(f"UPDATE {_q(t)} SET {_q(c)} = {_q(c)} + ? WHERE {_q(c)} != 0",
                           (shift + epoch,))
    if "META_DATA_EXPORT" in _tables(db):
        db.execute("UPDATE META_DATA_EXPORT SET value = 'true' "
                   "WHERE name = 'EXPORT_PARAM_TIME_NORMALIZE'")


def _write_unreadable(dst: Path, src: Path) -> None:
    """An nsys 2026.1 report (see the module docstring, ``unreadable``)."""
    fixtures = os.environ.get("NSYS_MINE_FIXTURES")
    candidates = [src.parent / NEWER_REPORT]
    if fixtures:
        candidates.append(Path(fixtures) / NEWER_REPORT)
    candidates.append(Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "nsys"
                      / NEWER_REPORT)
    tmp = dst.with_name(f".{dst.stem}.build{dst.suffix}")
    for cand in candidates:
        if cand.is_file():
            shutil.copyfile(cand, tmp)
            break
    else:
        tmp.write_bytes(NEWER_HEADER)
    os.replace(tmp, dst)


def build_rank_exports(src: str | os.PathLike, out_dir: str | os.PathLike, *, ranks: int = 8,
                       slow_rank: int | None = None, delay_ns: int = 2_000_000,
                       clock_step_ns: int = 7_000_000_000, utc_error_ns: int = 3_000_000,
                       comm_id: int | None = None, replay: int = 1, first_rank: int = 0,
                       name: str = "rank_{rank}.sqlite", stream_shift: int = 0,
                       utc_normalized: bool = False, tp: int | None = None,
                       unreadable: int | None = None) -> list[Path]:
    """Write ``ranks`` rank exports (see the module docstring); returns their paths."""
    src, out = Path(src), Path(out_dir)
    world = first_rank + ranks
    if tp is not None and (tp < 1 or world % tp):
        raise ValueError(f"tp={tp} does not divide the job's {world} ranks")
    if tp is not None and slow_rank is not None and not 0 <= slow_rank < world:
        raise ValueError(f"slow_rank={slow_rank} is not one of the job's {world} ranks")
    if unreadable is not None and not first_rank <= unreadable < world:
        raise ValueError(f"unreadable={unreadable} is not one of ranks {first_rank}..{world - 1}")
    out.mkdir(parents=True, exist_ok=True)
    base = out / ".base.sqlite"
    db = _copy(src, base)
    try:
        pid = gpu_pids(db)[0]
        _keep_process(db, pid)
        db.execute("VACUUM")
        tp_stream = None
        events: dict[int, list[tuple[int, int, int]]] = {}
        loaders: list[tuple[int, int]] = []
        if tp is not None:
            kernels = _nccl_kernels(db)
            tp_stream = _tp_stream(kernels)
            if slow_rank is not None and delay_ns:
                events, loaders = _schedule(kernels, _arrival_points(db, kernels), tp_stream,
                                            world, tp, slow_rank, int(delay_ns))
    finally:
        db.close()
    paths = []
    for rank in range(first_rank, first_rank + ranks):
        dst = out / name.format(rank=rank)
        if rank == unreadable:
            rep = dst.with_suffix(".nsys-rep")
            _write_unreadable(rep, src)
            if dst != rep:
                dst.unlink(missing_ok=True)
            paths.append(rep)
            continue
        tmp = dst.with_name(f".{dst.stem}.build.sqlite")
        db = _copy(base, tmp)
        try:
            db.execute("BEGIN")
            if tp is None:
                _payloads(db, rank, first_rank + ranks, comm_id)
                if slow_rank is not None and delay_ns:
                    if rank == slow_rank:
                        _inject_slow(db, int(delay_ns))
                    else:
                        _inject_waits(db, int(delay_ns))
            else:
                _tp_payloads(db, rank, world, tp, tp_stream, comm_id)
                _inject_schedule(db, events.get(rank, []),
                                 loaders if rank == slow_rank else [], int(delay_ns))
            _shift_clock(db, rank * clock_step_ns, rank * utc_error_ns)
            if stream_shift:
                _shift_streams(db, rank * stream_shift)
            if utc_normalized:
                _utc_normalize(db, rank * clock_step_ns)
            db.execute("COMMIT")
        finally:
            db.close()
        if replay > 1:
            scale_export(tmp, dst, replay, overwrite=True)
            tmp.unlink()
        else:
            os.replace(tmp, dst)
        paths.append(dst)
    base.unlink()
    return paths


def truncate_export(path: str | os.PathLike, keep_collectives: int) -> int:
    """Cut an export short after its first ``keep_collectives`` NCCL kernels (a rank that
    crashed); returns the time it ends at."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        colls = _collectives(db)
        cut = colls[keep_collectives - 1][1] + 1
        for t in _timed_tables(db):
            db.execute(f"DELETE FROM {_q(t)} WHERE start > ?", (cut,))
    finally:
        db.close()
    return cut


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="a multi-process nsys export (read-only)")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--slow-rank", type=int, default=None)
    ap.add_argument("--delay-ms", type=float, default=2.0)
    ap.add_argument("--replay", type=int, default=1, help="replay each rank's activity K times")
    ap.add_argument("--stream-shift", type=int, default=0, metavar="S",
                    help="rank r's CUDA stream ids become streamId + r * S")
    ap.add_argument("--utc-normalized", action="store_true",
                    help="UTC nanosecond timestamps, as nsys export --ts-normalize writes")
    ap.add_argument("--tp", type=int, default=None, metavar="T",
                    help="tensor-parallel groups of T consecutive ranks, crossed with "
                         "data-parallel groups (own communicators; per-group straggler)")
    ap.add_argument("--unreadable", type=int, default=None, metavar="R",
                    help="rank R's file is an nsys 2026.1 .nsys-rep report, not an export")
    a = ap.parse_args(argv)
    paths = build_rank_exports(a.src, a.out_dir, ranks=a.ranks, slow_rank=a.slow_rank,
                               delay_ns=int(a.delay_ms * 1e6), replay=a.replay,
                               stream_shift=a.stream_shift, utc_normalized=a.utc_normalized,
                               tp=a.tp, unreadable=a.unreadable)
    for p in paths:
        print(f"{p}  {p.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
