"""Bulk reads of columns from an export: rowid chunks on a small pool of threads.

Python's sqlite3 builds one tuple per row, about 1 µs each: seconds for the millions of rows
of a large export. Here each column of a chunk of rows (a rowid range) comes back as ONE
string, a JSON array built by SQLite's ``json_group_array``: numpy parses integers in C,
``json.loads`` the text. Chunks keep those strings small, and two threads, each with its own
read-only connection, read chunks at once (SQLite releases the GIL while it scans).

A question that looks at every row once but keeps few of them (``gaps``: the calls and ranges
open at a few moments) takes the rows as a stream instead (``int_chunks``): small chunks, a
few read ahead, so that memory holds a few chunks, never the table.

Integer NULLs must be mapped to a sentinel by the query (``ifnull(col, -1)``): a JSON ``null``
is not a number.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from nsys_parsers import cancel
from nsys_parsers.arrays import codes_in, factorize, let_go
from nsys_parsers.cache import held
from nsys_parsers.sqlite_file import connect_readonly

CHUNK_ROWS = 1 << 19
MIN_CHUNK_ROWS = 1 << 16
# Rows per chunk of a text column: each row's string is a Python object while its chunk is
# factorized (about 75 bytes: 2 threads with 512 K rows each held 190 MiB at 80 M ranges).
TEXT_CHUNK_ROWS = 1 << 17
STREAM_ROWS = 1 << 16  # rows per chunk of a stream (int_chunks)
STREAM_AHEAD = 2  # chunks of a stream read ahead of the one handed out


def rowid_span(conn: sqlite3.Connection, table: str) -> tuple[int, int] | None:
    """The table's rowids as ``(lo, hi)``, hi excluded (None when it is empty)."""
    # two subqueries: SQLite answers a lone min() or max() of the rowid with one b-tree
    # seek, but `SELECT min(rowid), max(rowid)` scans the table
    lo_hi = conn.execute(f'SELECT (SELECT min(rowid) FROM "{table}"), '
                         f'(SELECT max(rowid) FROM "{table}")').fetchone()
    if lo_hi[0] is None:
        return None
    return int(lo_hi[0]), int(lo_hi[1]) + 1


def rowid_chunks(conn: sqlite3.Connection, table: str, size: int | None = None
                 ) -> list[dict[str, int]]:
    """``{"lo", "hi"}`` rowid bounds covering the table: at least 8 chunks, so that two
    threads share the work evenly, of 64 K to 512 K rows, so that each chunk's strings stay
    small; or chunks of ``size`` rowids."""
    span = rowid_span(conn, table)
    if span is None:
        return []
    lo, hi = span
    if size is None:
        size = max(MIN_CHUNK_ROWS, min(CHUNK_ROWS, -(-(hi - lo) // 8)))
    return [{"lo": a, "hi": min(a + size, hi)} for a in range(lo, hi, size)]


def json_columns_sql(source_sql: str, columns: Sequence[str]) -> str:
    """``SELECT json_group_array(col), ... FROM (source_sql)``: one row, an array per column."""
    return f"SELECT {', '.join(f'json_group_array({c})' for c in columns)} FROM ({source_sql})"


def ints_from_json(text: str) -> np.ndarray:
    """A JSON array of integers as int64, parsed between its brackets by numpy in C."""
    if len(text) <= 2:  # "[]"
        return np.zeros(0, dtype=np.int64)
    return np.fromstring(text[1:-1], dtype=np.int64, sep=",")


def _ints_job(query: str, bounds: dict[str, int]
              ) -> Callable[[sqlite3.Connection], list[np.ndarray]]:
    """A reader thread's job: the integer columns of one chunk (``json_columns_sql``)."""
    return lambda conn: [ints_from_json(t) for t in conn.execute(query, bounds).fetchone()]


class Reader:
    """A small pool of threads reading one export, each on its own read-only connection.
    ``close()`` drops what no thread has started and closes the connections."""

    def __init__(self, path: Path, workers: int = 2):
        self.path = path
        self._local = threading.local()
        self._conns: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max(1, workers), thread_name_prefix="nsys-mine-read")

    def _conn(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect_readonly(self.path)
            with self._lock:
                self._conns.append(conn)
        return conn

    def submit(self, job: Callable[[sqlite3.Connection], Any]) -> Future:
        """Run ``job(connection)`` on a reader thread, in the caller's question's scope (a
        cancelled question's jobs stop: ``nsys_parsers.cancel``)."""
        return self._pool.submit(cancel.in_scope(lambda: job(self._conn())))

    def int_columns(self, sql: str, columns: Sequence[str], chunks: list[dict[str, int]],
                    files: Sequence[Any] | None = None) -> IntColumns:
        """Start reading integer ``columns`` of ``sql`` (with ``:lo``/``:hi`` rowid bounds)
        chunk by chunk; ``files``: per column, the cache file (``cache.ColumnFile``) it is
        read straight into, or None (into memory)."""
        query = json_columns_sql(sql, columns)
        return IntColumns(self, query, chunks, len(columns), files)

    def int_chunks(self, sql: str, columns: Sequence[str], chunks: list[dict[str, int]],
                   ahead: int = STREAM_AHEAD) -> Iterator[list[np.ndarray]]:
        """Integer ``columns`` of ``sql`` one chunk at a time, in the order of ``chunks``, with
        at most ``ahead`` chunks read ahead of the one handed out."""
        query = json_columns_sql(sql, columns)
        todo = iter(chunks)
        pending: deque[Future] = deque(self.submit(_ints_job(query, b))
                                       for _, b in zip(range(ahead + 1), todo))
        try:
            while pending:
                got = _result(pending.popleft())
                yield got
                del got
                following = next(todo, None)
                if following is not None:
                    pending.append(self.submit(_ints_job(query, following)))
        finally:
            for future in pending:
                future.cancel()

    def text_column(self, sql: str, column: str, chunks: list[dict[str, int]]) -> TextColumn:
        """Start reading one text column (NULL read as '') chunk by chunk."""
        query = json_columns_sql(sql, [f"ifnull({column}, '')"])
        return TextColumn(self, query, chunks)

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()


def _result(future: Future) -> Any:
    """A chunk's result, waited for a little at a time: a cancelled question stops waiting
    (its jobs not started are dropped as the reader closes)."""
    while True:
        cancel.stop_if_cancelled()
        try:
            return future.result(timeout=0.25)
        except TimeoutError:
            continue


class IntColumns:
    """Integer columns being read in chunks, each chunk copied by its reader thread into its
    place in the columns and let go there: the columns are held once, never beside their
    chunks (chunks read ahead of a busy caller pile up otherwise: 0.77 GB of them at the
    peak of a cold ``nvtx-kernels`` on 20 M NVTX ranges). A chunk's place is its rowid
    bounds; ``result()`` closes the gaps that rows the query left out leave.

    A column given a cache file (``cache.ColumnFile``) is written there instead and comes
    back mapped: it never takes the process's memory. A file that fails (a full disk) is
    read again into scratch (``cache.held``: memory where no scratch file can be made)."""

    def __init__(self, reader: Reader, query: str, chunks: list[dict[str, int]], ncols: int,
                 files: Sequence[Any] | None = None):
        starts = np.cumsum([0] + [b["hi"] - b["lo"] for b in chunks])
        self._reader, self._query, self._chunks = reader, query, chunks
        self._starts = starts.tolist()
        self._files = list(files) if files is not None else [None] * ncols
        self._cols: list[np.ndarray | None] = [
            held(int(starts[-1]), np.int64) if f is None else None for f in self._files]
        self._futures = self._submit()
        self._joined: list[np.ndarray] | None = None
        self.filed: list[dict[str, Any] | None] = [None] * ncols  # manifest entries

    def _submit(self) -> list[Future]:
        return [self._reader.submit(self._fill_job(b, int(at), int(end)))
                for b, at, end in zip(self._chunks, self._starts, self._starts[1:])]

    def _fill_job(self, bounds: dict[str, int], at: int, end: int
                  ) -> Callable[[sqlite3.Connection], int]:
        def fill(conn: sqlite3.Connection) -> int:
            n = 0
            for i, text in enumerate(conn.execute(self._query, bounds).fetchone()):
                part = ints_from_json(text)
                n = part.size
                assert at + n <= end, "a rowid chunk gave more rows than its rowids"
                col, file = self._cols[i], self._files[i]
                if col is not None:
                    col[at:at + n] = part
                    let_go(col[at:at + n])  # a scratch file's pages, once written
                elif file is not None:
                    file.write(at, part)
            return n
        return fill

    def result(self) -> list[np.ndarray]:
        """The columns (several columns' readers may ask: read once)."""
        if self._joined is None:
            counts = [_result(f) for f in self._futures]
            if any(f is not None and f.failed for f in self._files):
                self._read_into_memory()
                counts = [_result(f) for f in self._futures]
            pos = 0
            for at, n in zip(self._starts, counts):
                if at != pos:  # rows left out before: move this chunk down (overlap-safe)
                    for col, file in zip(self._cols, self._files):
                        if col is not None:
                            col[pos:pos + n] = col[at:at + n]
                            let_go(col[pos:at + n])
                        elif file is not None:
                            file.write(pos, file.read(at, n), moved=True)
                pos += n
            joined = []
            for i, (col, file) in enumerate(zip(self._cols, self._files)):
                done = file.finish(pos) if file is not None and col is None else None
                if done is not None:
                    joined.append(done[0])
                    self.filed[i] = done[1]
                    continue
                if col is None:  # the file failed at its end: read again, into memory
                    self._read_into_memory()
                    return self.result()
                # the end left untouched is never resident
                joined.append(col[:pos] if pos < self._starts[-1] else col)
            self._joined = joined
        return self._joined

    def _read_into_memory(self) -> None:
        """Read every column again, into memory (a cache file failed)."""
        for file in self._files:
            if file is not None:
                file.discard()
        self._files = [None] * len(self._files)
        self._cols = [held(int(self._starts[-1]), np.int64) for _ in self._files]
        self.filed = [None] * len(self._files)
        self._futures = self._submit()


class TextColumn:
    """A text column being read in chunks; ``result()`` is (code per row, distinct values).
    Each reader thread writes its chunk's codes (of the chunk's own distinct values) into
    their place in one array, as ``IntColumns`` does; ``result()`` maps them to the codes of
    the whole column in place: the column's codes are held once (not per chunk, then
    remapped, then joined: three times). A chunk's distinct values join the column's as
    soon as every chunk before it has (``_merge``): only those of chunks read out of order
    wait (each chunk's held until the end took 750 MiB at 80 M ranges of 16 K names)."""

    def __init__(self, reader: Reader, query: str, chunks: list[dict[str, int]]):
        chunks = [{"lo": a, "hi": min(a + TEXT_CHUNK_ROWS, b["hi"])}  # a chunk's strings:
                  for b in chunks for a in range(b["lo"], b["hi"], TEXT_CHUNK_ROWS)]  # ~10 MB
        starts = np.cumsum([0] + [b["hi"] - b["lo"] for b in chunks])
        self._starts = starts.tolist()
        self._codes = held(int(starts[-1]), np.int64)
        self._index: dict[str, int] = {}  # the column's distinct values, in order of sight
        self._remaps: list[np.ndarray | None] = [None] * len(chunks)
        self._waiting: dict[int, list[str]] = {}
        self._merged = 0  # chunks [0, _merged) have joined the index
        self._lock = threading.Lock()
        self._futures = [reader.submit(self._fill_job(query, i, b, int(at), int(end)))
                         for i, (b, at, end) in enumerate(zip(chunks, starts, starts[1:]))]

    def _fill_job(self, query: str, i: int, bounds: dict[str, int], at: int, end: int
                  ) -> Callable[[sqlite3.Connection], int]:
        def fill(conn: sqlite3.Connection) -> int:
            values = json.loads(conn.execute(query, bounds).fetchone()[0])
            codes, distinct = factorize(values) if values else (None, [])
            del values
            if codes is not None:
                assert at + codes.size <= end, "a rowid chunk gave more rows than its rowids"
                self._codes[at:at + codes.size] = codes
                let_go(self._codes[at:at + codes.size])
            self._merge(i, distinct)
            return 0 if codes is None else codes.size
        return fill

    def _merge(self, i: int, distinct: list[str]) -> None:
        """Chunk ``i``'s distinct values, in; every chunk whose predecessors are all in
        joins the index (in chunk order: the codes one factorize of the column gives)."""
        with self._lock:
            self._waiting[i] = distinct
            while self._merged in self._waiting:
                self._remaps[self._merged] = codes_in(self._index,
                                                      self._waiting.pop(self._merged))
                self._merged += 1

    def result(self) -> tuple[np.ndarray, list[str]]:
        pos = 0
        for i, (f, at) in enumerate(zip(self._futures, self._starts)):
            n = _result(f)
            if n:
                remap = self._remaps[i]
                assert remap is not None, "a chunk done before its predecessors merged"
                self._codes[pos:pos + n] = remap[self._codes[at:at + n]]
                let_go(self._codes[pos:at + n])
            pos += n
        return self._codes[:pos], list(self._index)


def strings_by_id(conn: sqlite3.Connection, sql: str, ids: Sequence[int] | np.ndarray,
                  chunk: int = 100_000) -> dict[int, str]:
    """``StringIds`` values of the given ids (``sql``: the STRINGS_BY_ID query of the export;
    ids without a string are absent from the result)."""
    wanted = [int(i) for i in ids if int(i) >= 0]
    out: dict[int, str] = {}
    for start in range(0, len(wanted), chunk):
        batch = json.dumps(wanted[start:start + chunk])
        for k, v in conn.execute(sql, (batch,)):
            out[int(k)] = v if isinstance(v, str) else str(v)
    return out
