"""Fast, memory-bounded bulk reads of integer and text columns from SQLite into numpy.

Python's sqlite3 builds one tuple per row, about 1 µs each: 7 s for the 7 M rows of a
1 M-kernel export. Here each column of a chunk of rows (a rowid range) comes back as ONE
string, a JSON array built by SQLite's ``json_group_array``: integers are parsed by numpy in
C, text by ``json.loads``. (``json_group_array`` takes 10-15% less SQLite time than
``group_concat`` for integers and 25% less for text, measured on the NVTX and kernel columns
of 0.1-0.5 M rows with SQLite 3.40.) Chunks keep the strings small (peak memory stays near
the size of the final arrays), and run in a pool of threads, each with its own read-only
connection: SQLite releases the GIL while it scans, so two cores work.

Queries are named constants in ``nsys_parsers.queries`` with ``:lo``/``:hi`` rowid bounds; this
module only runs them. Integer NULLs must be mapped to a sentinel by the query
(``ifnull(col, -1)``): a JSON ``null`` is not a number.
"""

from __future__ import annotations

import json
import sqlite3
from typing import TYPE_CHECKING, Sequence

import numpy as np

from nsys_parsers.activity_reads import chunk_value, json_columns_sql, register_parser
from nsys_parsers.arrays import factorize

if TYPE_CHECKING:
    from nsys_parsers.reader import Pending


def ints_from_json(text: str) -> np.ndarray:
    """A JSON array of integers (``json_group_array``) as int64, parsed between its
    brackets by numpy in C."""
    if len(text) <= 2:  # "[]": no rows
        return np.zeros(0, dtype=np.int64)
    return np.fromstring(text[1:-1], dtype=np.int64, sep=",")


def int_columns(conn: sqlite3.Connection, source_sql: str, columns: Sequence[str],
                params: Sequence | dict = ()) -> list[np.ndarray]:
    """``SELECT json_group_array(col), ... FROM (source_sql)``, each column parsed to int64."""
    row = conn.execute(json_columns_sql(source_sql, list(columns)), params).fetchone()
    return [ints_from_json(v) for v in row]


# ---------------------------------------------------------------------------------------------
# chunk jobs (``nsys_parsers.activity_reads``): their parsers, and how their results are joined

def parse_int_columns(texts: tuple[str, ...], conn: sqlite3.Connection | None = None
               ) -> list[np.ndarray]:
    """The integer columns of a chunk (``activity_reads.ints_job``)."""
    return [ints_from_json(v) for v in texts]


def parse_keys(texts: tuple[str, ...], conn: sqlite3.Connection | None = None
               ) -> tuple[np.ndarray, list[str]]:
    """A chunk's text keys (``activity_reads.keys_job``), factorized: (code per row,
    distinct values)."""
    keys = json.loads(texts[0])
    if not keys:
        return np.zeros(0, dtype=np.int64), []
    return factorize(keys)


register_parser("ints", parse_int_columns)
register_parser("keys", parse_keys)


def gather_ints(futures: list[Pending], ncols: int, conn: sqlite3.Connection | None = None
                ) -> list[np.ndarray]:
    """Concatenate chunk results column by column, freeing each chunk column once copied
    (peak memory: the chunks plus one final column, not twice the data). ``conn``: where a
    chunk read before its parser was loaded may be read again (NVTX chunks with gaps)."""
    parts = [chunk_value(f, conn) for f in futures]  # type: ignore[arg-type]
    futures.clear()
    if not parts:
        return [np.zeros(0, dtype=np.int64) for _ in range(ncols)]
    out = []
    for i in range(ncols):
        out.append(np.concatenate([p[i] for p in parts]) if len(parts) > 1 else parts[0][i])
        for p in parts:
            p[i] = None
    return out


def gather_names(futures: list[Pending]) -> tuple[np.ndarray, list[str]]:
    """Merge per-chunk factorizations into one code space."""
    index: dict[str, int] = {}
    codes = []
    for f in futures:
        c, uniques = chunk_value(f, None)  # type: ignore[arg-type]
        remap = np.array([index.setdefault(u, len(index)) for u in uniques], dtype=np.int64)
        codes.append(remap[c] if c.size else c)
    allc = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)
    return allc, list(index)
