"""Fast, memory-bounded bulk reads of integer and text columns from SQLite into numpy.

Python's sqlite3 builds one tuple per row, about 1 µs each: 7 s for the 7 M rows of a
1 M-kernel export. Here each column of a chunk of rows (a rowid range) comes back as ONE string
built by SQLite's ``group_concat`` and is parsed by numpy in C. Chunks keep the strings small
(peak memory stays near the size of the final arrays), and run in a pool of threads, each with
its own read-only connection: SQLite releases the GIL while it scans, so two cores work.

Queries are named constants in ``nsys_parsers.queries`` with ``:lo``/``:hi`` rowid bounds; this
module only runs them. NULLs must be mapped to a sentinel by the query (``ifnull(col, -1)``),
otherwise ``group_concat`` would skip them and misalign the columns.
"""

from __future__ import annotations

import sqlite3
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

TEXT_SEP = "\x1f"  # ASCII unit separator: never part of a kernel or range name
CHUNK_ROWS = 1 << 19


def parse_ints(text: str | None) -> np.ndarray:
    if not text:
        return np.zeros(0, dtype=np.int64)
    return np.fromstring(text, dtype=np.int64, sep=",")


def int_columns(conn: sqlite3.Connection, source_sql: str, columns: Sequence[str],
                params: Sequence | dict = ()) -> list[np.ndarray]:
    """``SELECT group_concat(col), ... FROM (source_sql)``, each column parsed to int64."""
    select = ", ".join(f"group_concat({c}, ',')" for c in columns)
    row = conn.execute(f"SELECT {select} FROM ({source_sql})", params).fetchone()
    return [parse_ints(v) for v in row]


def text_column(conn: sqlite3.Connection, source_sql: str, column: str,
                params: Sequence | dict = ()) -> list[str]:
    """One text column as a list of str (NULL becomes '')."""
    text, count = conn.execute(
        f"SELECT group_concat(ifnull({column}, ''), char(31)), count(*) FROM ({source_sql})",
        params).fetchone()
    if not count:
        return []
    parts = text.split(TEXT_SEP)
    if len(parts) != count:  # a name contained the separator: fall back to row by row
        parts = [r[0] or "" for r in conn.execute(
            f"SELECT ifnull({column}, '') FROM ({source_sql})", params)]
    return parts


def rowid_chunks(conn: sqlite3.Connection, table: str, chunk_rows: int = CHUNK_ROWS
                 ) -> list[dict[str, int]]:
    """``{"lo", "hi"}`` rowid bounds covering the table in chunks of at most chunk_rows rows."""
    lo_hi = conn.execute(f'SELECT min(rowid), max(rowid) FROM "{table}"').fetchone()
    if lo_hi[0] is None:
        return []
    lo, hi = int(lo_hi[0]), int(lo_hi[1]) + 1
    return [{"lo": a, "hi": min(a + chunk_rows, hi)} for a in range(lo, hi, chunk_rows)]


class Reader:
    """A small pool of threads, each with its own read-only connection to one export."""

    def __init__(self, path: Path, workers: int = 2):
        self.path = path
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, workers))

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            from nsys_parsers.export import connect_readonly

            conn = connect_readonly(self.path)
            self._local.conn = conn
            with self._lock:
                self._conns.append(conn)
        return conn

    def submit(self, job: Callable[[sqlite3.Connection], object]) -> Future:
        return self._pool.submit(lambda: job(self._conn()))

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        for conn in self._conns:
            conn.close()

    def __enter__(self) -> "Reader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
