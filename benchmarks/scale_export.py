#!/usr/bin/env python3
"""Make a bigger Nsight Systems SQLite export by replaying a real one K times.

    python benchmarks/scale_export.py SRC.sqlite DST.sqlite --factor K

or, from Python, ``scale_export(src, dst, factor)``.

SRC is opened read-only and copied to DST with the SQLite backup API; only DST is
modified. For every replica r = 1 .. K-1 the activity rows of

    CUPTI_ACTIVITY_KIND_KERNEL, CUPTI_ACTIVITY_KIND_RUNTIME, CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
    NVTX_EVENTS (range rows only: eventType 59, 60, 70, 71)

(whichever exist) are inserted again, with

* every timestamp column (``start``, ``end``, ``timestamp`` and any column whose
  schema comment calls it a timestamp, e.g. the ``qmd*Done`` kernel columns)
  shifted by ``r * (span + gap)``, where ``span = max(end) - min(start)`` over
  those tables, so replica r follows replica r-1 on the timeline;
* ``correlationId`` made fresh with ``correlationId + r * (max correlationId + 1)``,
  the same in kernel/memcpy/memset and runtime/driver rows, so the kernel -> launch
  join (correlationId AND process) still pairs each replica with its own launch;
* NVTX ``rangeId`` (start/end range correlation) made fresh the same way.

Everything else (StringIds, domain-create rows eventType 75, NVTX marks, processes,
threads, enums, GPU info) is kept once. Columns are copied by name, so any schema
version works (the kernel table has 25 to 40 columns). All copying is done in SQL
(``INSERT INTO t (cols) SELECT ... FROM t WHERE rowid <= n``); no row goes through
Python. No index is created: the result has the layout nsys itself writes, which is
what a benchmark must measure. ``ANALYSIS_DETAILS`` (when present) has its
``stopTime``/``duration`` stretched to cover the replayed timeline.

DST is written as ``DST.partial`` and renamed at the end, so an interrupted run
never leaves a half-scaled file under the final name.
"""
from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
import time
from pathlib import Path
from urllib.parse import quote

# Tables whose rows are replayed; those carrying a CUDA correlationId.
ACTIVITY_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_DRIVER",
    "NVTX_EVENTS",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
)
NVTX_TABLE = "NVTX_EVENTS"
# push/pop, start/end, and their NVTXT variants; domain-create (75) and marks stay once.
NVTX_RANGE_TYPES = (59, 60, 70, 71)
# Column names that are timestamps in every schema seen so far.
KNOWN_TIME_COLUMNS = {"start", "end", "timestamp", "qmdBulkReleaseDone", "qmdPreexitDone",
                      "qmdLastCtaDone"}
DEFAULT_GAP_NS = 1_000_000  # 1 ms of idle time between two replicas


def _q(name: str) -> str:
    """Quote an SQL identifier (``end`` is a keyword)."""
    return '"' + name.replace('"', '""') + '"'


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _column_comments(create_sql: str | None) -> dict[str, str]:
    """Map column name -> its ``-- comment`` in nsys's CREATE TABLE text (may be empty)."""
    out: dict[str, str] = {}
    for line in (create_sql or "").splitlines():
        m = re.match(r'\s*"?([A-Za-z_][A-Za-z0-9_]*)"?\s+[A-Za-z]+.*?--\s*(.*)$', line)
        if m:
            out[m.group(1)] = m.group(2)
    return out


def _columns(conn: sqlite3.Connection, table: str) -> list[tuple[str, str, int]]:
    """(name, declared type, pk) for each column of ``table``, in order."""
    return [(r[1], (r[2] or "").upper(), r[5])
            for r in conn.execute(f"PRAGMA table_info({_q(table)})")]


def _time_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                       (table,)).fetchone()
    comments = _column_comments(sql[0] if sql else None)
    out = []
    for name, ctype, _pk in _columns(conn, table):
        if "INT" not in ctype and ctype:
            continue
        comment = comments.get(name, "").lower()
        if name in KNOWN_TIME_COLUMNS or "timestamp" in comment:
            out.append(name)
    return out


def _open_readonly(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{quote(str(path.resolve()))}?mode=ro", uri=True)


def row_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """The row count of each activity table present (plus ``NVTX_EVENTS_ranges``, the NVTX
    rows that are ranges, when NVTX_EVENTS exists)."""
    present = [t for t in ACTIVITY_TABLES if t in _tables(conn)]
    counts = {t: conn.execute(f"SELECT count(*) FROM {_q(t)}").fetchone()[0] for t in present}
    if NVTX_TABLE in present:
        counts["NVTX_EVENTS_ranges"] = conn.execute(
            f"SELECT count(*) FROM {NVTX_TABLE} WHERE eventType IN "
            f"({', '.join(map(str, NVTX_RANGE_TYPES))})").fetchone()[0]
    return counts


def file_row_counts(path: str | os.PathLike) -> dict[str, int]:
    """``row_counts`` of an export on disk, opened read-only."""
    conn = _open_readonly(Path(path))
    try:
        return row_counts(conn)
    finally:
        conn.close()


def scale_export(src: str | os.PathLike, dst: str | os.PathLike, factor: int, *,
                 gap_ns: int = DEFAULT_GAP_NS, overwrite: bool = False,
                 verbose: bool = False) -> dict[str, int]:
    """Copy ``src`` to ``dst`` and replay its activity ``factor`` times in ``dst``.

    Returns the row count of each replayed table in ``dst`` (plus
    ``NVTX_EVENTS_ranges`` when NVTX_EVENTS exists). ``factor == 1`` is a plain copy.
    """
    src, dst = Path(src), Path(dst)
    factor = int(factor)
    if factor < 1:
        raise ValueError(f"factor must be >= 1, got {factor}")
    if not src.is_file():
        raise FileNotFoundError(src)
    if dst.exists():
        if dst.resolve() == src.resolve() or os.path.samefile(src, dst):
            raise ValueError("DST must differ from SRC (SRC is never modified)")
        if not overwrite:
            raise FileExistsError(f"{dst} exists (use overwrite=True / --force)")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".partial")
    for p in (tmp, Path(str(tmp) + "-journal")):
        if p.exists():
            p.unlink()

    def log(msg: str) -> None:
        if verbose:
            print(msg, file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    s = _open_readonly(src)
    d = sqlite3.connect(tmp, isolation_level=None)
    try:
        s.backup(d)
    finally:
        s.close()
    log(f"copied {src} -> {tmp} in {time.perf_counter() - t0:.2f} s")

    try:
        d.execute("PRAGMA journal_mode = OFF")
        d.execute("PRAGMA synchronous = OFF")
        d.execute("PRAGMA cache_size = -262144")  # 256 MiB page cache
        d.execute("PRAGMA temp_store = MEMORY")
        present = [t for t in ACTIVITY_TABLES if t in _tables(d)]

        # Rows of the original capture: rowid <= max_rowid (taken before any insert).
        max_rowid = {t: d.execute(f"SELECT max(rowid) FROM {_q(t)}").fetchone()[0] or 0
                     for t in present}
        nvtx_filter = f"eventType IN ({', '.join(map(str, NVTX_RANGE_TYPES))})"

        def where(t: str) -> str:
            w = f"rowid <= {max_rowid[t]}"
            return w + (f" AND {nvtx_filter}" if t == NVTX_TABLE else "")

        # span over the replayed rows and the correlationId stride.
        lo = hi = None
        max_corr = -1
        max_range = -1
        plan: dict[str, tuple[list[str], list[str], bool]] = {}
        for t in present:
            cols = [(n, ty, pk) for n, ty, pk in _columns(d, t)]
            # An INTEGER PRIMARY KEY is the rowid: let SQLite assign it.
            copy_cols = [n for n, ty, pk in cols if not (pk and ty == "INTEGER")]
            tcols = [c for c in _time_columns(d, t) if c in copy_cols]
            has_corr = "correlationId" in copy_cols
            plan[t] = (copy_cols, tcols, has_corr)
            if "start" in copy_cols and max_rowid[t]:
                end_expr = "max(max(start), max(\"end\"))" if "end" in copy_cols else "max(start)"
                mn, mx = d.execute(f"SELECT min(start), {end_expr} FROM {_q(t)} WHERE {where(t)}"
                                   ).fetchone()
                if mn is not None:
                    lo = mn if lo is None else min(lo, mn)
                    hi = mx if hi is None else max(hi, mx)
            if has_corr and max_rowid[t]:
                mc = d.execute(f"SELECT max(correlationId) FROM {_q(t)} WHERE {where(t)}"
                               ).fetchone()[0]
                if mc is not None:
                    max_corr = max(max_corr, mc)
            if t == NVTX_TABLE and "rangeId" in copy_cols and max_rowid[t]:
                mr = d.execute(f"SELECT max(rangeId) FROM {_q(t)}").fetchone()[0]
                if mr is not None:
                    max_range = max(max_range, mr)

        span = (hi - lo) if lo is not None else 0
        shift = span + int(gap_ns)
        corr_stride = max_corr + 1
        range_stride = max_range + 1
        log(f"tables: {present}; span {span} ns, shift {shift} ns/replica, "
            f"correlationId stride {corr_stride}")

        d.execute("BEGIN")
        for r in range(1, factor):
            for t in present:
                if not max_rowid[t]:
                    continue
                copy_cols, tcols, has_corr = plan[t]
                exprs = []
                for c in copy_cols:
                    if c in tcols:
                        exprs.append(f"{_q(c)} + {r * shift}")
                    elif c == "correlationId" and has_corr:
                        exprs.append(f"{_q(c)} + {r * corr_stride}")
                    elif c == "rangeId" and t == NVTX_TABLE and max_range >= 0:
                        exprs.append(f"{_q(c)} + {r * range_stride}")
                    else:
                        exprs.append(_q(c))
                d.execute(f"INSERT INTO {_q(t)} ({', '.join(map(_q, copy_cols))}) "
                          f"SELECT {', '.join(exprs)} FROM {_q(t)} WHERE {where(t)}")
            if verbose and (r % 50 == 0 or r == factor - 1):
                log(f"replica {r + 1}/{factor} ({time.perf_counter() - t0:.1f} s)")

        # Keep the analysis window consistent with the longer timeline.
        if factor > 1 and hi is not None and "ANALYSIS_DETAILS" in _tables(d):
            adcols = {c for c, _t, _p in _columns(d, "ANALYSIS_DETAILS")}
            if {"startTime", "stopTime", "duration"} <= adcols:
                new_hi = hi + (factor - 1) * shift
                d.execute("UPDATE ANALYSIS_DETAILS SET stopTime = max(stopTime, ?), "
                          "duration = max(stopTime, ?) - startTime", (new_hi, new_hi))
        d.execute("COMMIT")

        counts = row_counts(d)
    except BaseException:
        d.close()
        tmp.unlink(missing_ok=True)
        raise
    d.close()
    os.replace(tmp, dst)
    log(f"wrote {dst} ({dst.stat().st_size / 2**20:.1f} MiB) in {time.perf_counter() - t0:.1f} s")
    return counts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", help="nsys SQLite export (opened read-only)")
    ap.add_argument("dst", help="scaled copy to write")
    ap.add_argument("--factor", "-k", type=int, required=True, help="replay the activity K times")
    ap.add_argument("--gap-ns", type=int, default=DEFAULT_GAP_NS,
                    help=f"idle time between replicas (default {DEFAULT_GAP_NS} ns)")
    ap.add_argument("--force", action="store_true", help="overwrite DST if it exists")
    ap.add_argument("--quiet", "-q", action="store_true")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    try:
        counts = scale_export(a.src, a.dst, a.factor, gap_ns=a.gap_ns, overwrite=a.force,
                              verbose=not a.quiet)
    except (FileExistsError, FileNotFoundError, ValueError, sqlite3.Error) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    for t, n in counts.items():
        print(f"{t:32s} {n:>12,d}")
    print(f"{'seconds':32s} {time.perf_counter() - t0:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
