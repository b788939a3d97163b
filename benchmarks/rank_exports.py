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

Files: ``OUT_DIR/rank_<r>.sqlite``, written under a hidden name and renamed.
"""

from __future__ import annotations

import argparse
import bisect
import os
import re
import sqlite3
import sys
from pathlib import Path
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


def _inject_slow(db: sqlite3.Connection, delay: int) -> int:
    """Insert ``delay`` of host time before each collective of the rank; returns how many."""
    colls = _collectives(db)
    if not colls:
        return 0
    ends = _union_ends(db, colls[0][3])
    points = []
    prev_end = None
    for start, end, _corr, _dev in colls:
        i = bisect.bisect_left(ends, start) - 1  # the last gap start before the arrival
        point = start
        if i >= 0 and (prev_end is None or ends[i] >= prev_end):
            point = ends[i]
        points.append(point)
        prev_end = end
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


def build_rank_exports(src: str | os.PathLike, out_dir: str | os.PathLike, *, ranks: int = 8,
                       slow_rank: int | None = None, delay_ns: int = 2_000_000,
                       clock_step_ns: int = 7_000_000_000, utc_error_ns: int = 3_000_000,
                       comm_id: int | None = None, replay: int = 1, first_rank: int = 0,
                       name: str = "rank_{rank}.sqlite") -> list[Path]:
    """Write ``ranks`` rank exports (see the module docstring); returns their paths."""
    src, out = Path(src), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = out / ".base.sqlite"
    db = _copy(src, base)
    try:
        pid = gpu_pids(db)[0]
        _keep_process(db, pid)
        db.execute("VACUUM")
    finally:
        db.close()
    paths = []
    for rank in range(first_rank, first_rank + ranks):
        dst = out / name.format(rank=rank)
        tmp = dst.with_name(f".{dst.stem}.build.sqlite")
        db = _copy(base, tmp)
        try:
            db.execute("BEGIN")
            _payloads(db, rank, first_rank + ranks, comm_id)
            if slow_rank is not None and delay_ns:
                if rank == slow_rank:
                    _inject_slow(db, int(delay_ns))
                else:
                    _inject_waits(db, int(delay_ns))
            _shift_clock(db, rank * clock_step_ns, rank * utc_error_ns)
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
    a = ap.parse_args(argv)
    paths = build_rank_exports(a.src, a.out_dir, ranks=a.ranks, slow_rank=a.slow_rank,
                               delay_ns=int(a.delay_ms * 1e6), replay=a.replay)
    for p in paths:
        print(f"{p}  {p.stat().st_size / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
