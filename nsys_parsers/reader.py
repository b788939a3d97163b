"""Threads that read one export in parallel, and the rowid chunks they share (no numpy).

A ``Reader`` is a small pool of threads, each with its own read-only connection: SQLite
releases the GIL while it scans, so two cores work. ``rowid_chunks`` cuts a table into rowid
ranges for the named queries' ``:lo``/``:hi`` bounds. ``nsys_parsers.fetch`` parses what the
chunks return into numpy; ``nsys_parsers.kernel_groups`` (the small-export kernel summary)
keeps to plain Python.
"""

from __future__ import annotations

import sqlite3
import threading
from collections import deque
from pathlib import Path
from typing import Any, Callable

from nsys_parsers.sqlite_file import connect_readonly

CHUNK_ROWS = 1 << 19
MIN_CHUNK_ROWS = 1 << 16


def rowid_span(conn: sqlite3.Connection, table: str) -> tuple[int, int] | None:
    """The table's rowids as ``(lo, hi)``, hi excluded (None when it is empty): an upper
    bound of its rows from two b-tree seeks, where ``count(*)`` would scan the table."""
    # Two subqueries: SQLite answers a lone min() or max() of the rowid with one b-tree seek,
    # but `SELECT min(rowid), max(rowid)` scans the whole table.
    lo_hi = conn.execute(f'SELECT (SELECT min(rowid) FROM "{table}"), '
                         f'(SELECT max(rowid) FROM "{table}")').fetchone()
    if lo_hi[0] is None:
        return None
    return int(lo_hi[0]), int(lo_hi[1]) + 1


def rowid_chunks(conn: sqlite3.Connection, table: str, chunk_rows: int | None = None, *,
                 parts: int | None = None) -> list[dict[str, int]]:
    """``{"lo", "hi"}`` rowid bounds covering the table in chunks of at most chunk_rows rows,
    or in ``parts`` equal chunks (default: at least 8 chunks, so that two threads share the
    work evenly, of 64 K to 512 K rows: each chunk's strings stay small)."""
    span = rowid_span(conn, table)
    if span is None:
        return []
    lo, hi = span
    if parts is not None:
        chunk_rows = max(1, -(-(hi - lo) // parts))
    elif chunk_rows is None:
        chunk_rows = max(MIN_CHUNK_ROWS, min(CHUNK_ROWS, -(-(hi - lo) // 8)))
    return [{"lo": a, "hi": min(a + chunk_rows, hi)} for a in range(lo, hi, chunk_rows)]


class Pending:
    """A job given to a ``Reader``: ``result()`` waits for its value (or raises its error);
    ``cancel()`` drops it if no thread has started it (what ``concurrent.futures`` offers
    here, without its import: 8 ms, a twentieth of a small export's answer)."""

    __slots__ = ("job", "state", "value", "error", "_finished", "_lock")

    def __init__(self, job: Callable[[sqlite3.Connection], object], lock: threading.Condition):
        self.job = job
        self._lock = lock  # the reader's: a thread takes a job under it
        self.state = "queued"  # queued, running, done or cancelled
        self.value: object = None
        self.error: BaseException | None = None
        self._finished = threading.Event()

    def result(self) -> Any:
        self._finished.wait()
        if self.error is not None:
            raise self.error
        if self.state == "cancelled":
            raise RuntimeError("the read was cancelled")
        return self.value

    def take(self) -> Any:
        """``result()``, which the job then no longer holds (its memory goes with the
        caller's last reference)."""
        value = self.result()
        self.value = None
        return value

    def settle(self, value: object, error: BaseException | None = None) -> None:
        """The job's outcome (by the thread that ran it)."""
        self.value, self.error, self.state = value, error, "done"
        self._finished.set()

    def done(self) -> bool:
        """Whether the job has ended (read, failed or cancelled)."""
        return self._finished.is_set()

    def cancel(self) -> bool:
        """Drop the job unless a thread has taken it; whether it was dropped."""
        with self._lock:
            if self.state != "queued":
                return False
            self.state = "cancelled"
        self._finished.set()
        return True


class Reader:
    """A small pool of threads, each with its own read-only connection to one export; jobs
    run in the order given, on the first free thread."""

    def __init__(self, path: Path, workers: int = 2):
        self.path = path
        self._workers = max(1, workers)
        self._threads: list[threading.Thread] = []
        self._queue: deque[Pending] = deque()
        self._ready = threading.Condition()
        self._closing = False

    def submit(self, job: Callable[[sqlite3.Connection], object]) -> Pending:
        pending = Pending(job, self._ready)
        with self._ready:
            if self._closing:
                raise RuntimeError("submit to a closed Reader")
            self._queue.append(pending)
            if len(self._threads) < self._workers:
                thread = threading.Thread(target=self._work, daemon=True)
                self._threads.append(thread)
                thread.start()
            self._ready.notify()
        return pending

    def _work(self) -> None:
        conn = None
        try:
            while True:
                with self._ready:
                    while not self._queue and not self._closing:
                        self._ready.wait()
                    if not self._queue:  # closing, and nothing left to read
                        return
                    pending = self._queue.popleft()
                    if pending.state != "queued":  # cancelled
                        continue
                    pending.state = "running"
                try:
                    if conn is None:
                        conn = connect_readonly(self.path)
                    pending.settle(pending.job(conn))
                except BaseException as exc:  # handed to whoever asks for the result
                    pending.settle(None, exc)
        finally:
            if conn is not None:
                conn.close()

    def stop(self) -> None:
        """Drop the jobs no thread has started (they end cancelled), then end the threads:
        for reads that are no longer wanted."""
        with self._ready:  # an RLock: cancel() takes it again
            while self._queue:
                self._queue.popleft().cancel()
        self.close()

    def close(self) -> None:
        """Read what is queued (jobs not cancelled), then end the threads."""
        with self._ready:
            self._closing = True
            self._ready.notify_all()
        for thread in self._threads:
            thread.join()

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
