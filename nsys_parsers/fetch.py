"""Fast bulk reads of integer and text columns from SQLite into numpy arrays.

Python's sqlite3 builds one tuple per row, about 1 µs each: 7 s for the 7 M rows of a
1 M-kernel export. Here every column comes back as ONE string built by SQLite's
``group_concat`` and is parsed by numpy in C, which is several times faster and lets SQLite
work without the GIL, so that independent reads run in parallel threads.

Queries are named module-level constants in the modules that use them; this module only runs
them. NULLs must be mapped to a sentinel by the query (``ifnull(col, -1)``), otherwise
``group_concat`` would skip them and misalign the columns.
"""

from __future__ import annotations

import sqlite3
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

TEXT_SEP = "\x1f"  # ASCII unit separator: never part of a kernel or range name


def _parse_ints(text: str | None) -> np.ndarray:
    if not text:
        return np.zeros(0, dtype=np.int64)
    return np.array(text.split(","), dtype=np.int64) if len(text) < 64 else np.fromstring(
        text, dtype=np.int64, sep=",")


def int_columns(conn: sqlite3.Connection, source_sql: str, columns: Sequence[str],
                params: Sequence | dict = ()) -> list[np.ndarray]:
    """Run ``SELECT group_concat(col), ... FROM (source_sql)`` and parse each column.

    ``columns`` are SQL expressions over the source query's output; each must be non-NULL.
    """
    select = ", ".join(f"group_concat({c}, ',')" for c in columns)
    row = conn.execute(f"SELECT {select} FROM ({source_sql})", params).fetchone()
    return [_parse_ints(v) for v in row]


def text_column(conn: sqlite3.Connection, source_sql: str, column: str,
                params: Sequence | dict = ()) -> list[str]:
    """One text column as a list of str (NULL becomes '')."""
    row = conn.execute(
        f"SELECT group_concat(ifnull({column}, ''), char(31)), count(*) FROM ({source_sql})",
        params).fetchone()
    text, count = row
    if not count:
        return []
    parts = text.split(TEXT_SEP)
    if len(parts) != count:  # a name contained the separator: fall back to row by row
        parts = [r[0] or "" for r in conn.execute(
            f"SELECT ifnull({column}, '') FROM ({source_sql})", params)]
    return parts


def run_parallel(path: Path, jobs: dict[str, Callable[[sqlite3.Connection], object]],
                 workers: int = 2) -> dict[str, object]:
    """Run independent read jobs, each on its own read-only connection, in threads.

    SQLite releases the GIL while it computes, so two jobs use both cores of a small runner.
    """
    from nsys_parsers.export import connect_readonly

    def run(job: Callable[[sqlite3.Connection], object]) -> object:
        conn = connect_readonly(path)
        try:
            return job(conn)
        finally:
            conn.close()

    if len(jobs) <= 1 or workers <= 1:
        return {name: run(job) for name, job in jobs.items()}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {name: pool.submit(run, job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}
