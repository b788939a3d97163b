"""Stopping a question nobody waits for any more (a resident server's client cancelled it or
went away), within a fraction of a second, at no cost to a question that is not stopped.

A caller runs the question inside ``scope(stop)``; ``stop.cancel()``, from any thread, sets
its flag and interrupts the SQLite statements its connections are running
(``sqlite3.Connection.interrupt``, made for this). Every connection ``connect_readonly`` opens
is a ``Connection``: a statement started inside a scope registers its connection with the
scope's ``Stop`` (and, when the stop is set already, is not started: ``Cancelled``). The
reader threads run their chunk jobs in the scope of the question that submitted them
(``in_scope``). Outside a scope (the command line, a script) nothing is registered and nothing
is checked but one context variable per statement.
"""

from __future__ import annotations

import contextlib
import contextvars
import sqlite3
import threading
from collections.abc import Iterator
from typing import Any, Callable, TypeVar

from nsys_parsers.errors import NsysMineError

T = TypeVar("T")


CANCELLED = ("the question was cancelled (its client cancelled it or went away); ask again "
             "for its answer.")


class Cancelled(NsysMineError):
    """The question was cancelled before it was answered."""


class Stop:
    """The stop flag of one question and the connections its statements ran on."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._lock = threading.Lock()
        self._conns: list[sqlite3.Connection] = []

    def is_set(self) -> bool:
        return self.event.is_set()

    def cancel(self) -> None:
        """Set the flag and interrupt every statement the question's connections run (a
        connection with none running is left as it is)."""
        self.event.set()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):
                conn.interrupt()

    def check(self) -> None:
        if self.event.is_set():
            raise Cancelled(CANCELLED)

    def register(self, conn: sqlite3.Connection) -> None:
        with self._lock:
            if not any(c is conn for c in self._conns):
                self._conns.append(conn)

    def release(self) -> None:
        """Forget the connections: the question is over, and they may serve another one
        (which a late ``cancel`` must not interrupt)."""
        with self._lock:
            self._conns.clear()


_current: contextvars.ContextVar[Stop | None] = contextvars.ContextVar("nsys_mine_stop",
                                                                       default=None)


@contextlib.contextmanager
def scope(stop: Stop) -> Iterator[Stop]:
    """Run what follows (in this thread, and the jobs it submits with ``in_scope``) as the
    question ``stop`` stops."""
    token = _current.set(stop)
    try:
        yield stop
    finally:
        _current.reset(token)
        stop.release()


def current_stop() -> Stop | None:
    """The current question's ``Stop`` (None outside a scope)."""
    return _current.get()


def stop_if_cancelled() -> None:
    """Cancelled when the current question was cancelled (a no-op outside a scope)."""
    stop = _current.get()
    if stop is not None:
        stop.check()


def in_scope(fn: Callable[..., T]) -> Callable[..., T]:
    """``fn`` bound to the caller's scope: for a job another thread runs."""
    context = contextvars.copy_context()
    return lambda *args, **kwargs: context.run(fn, *args, **kwargs)


class Connection(sqlite3.Connection):
    """A connection whose statements the current question's ``Stop`` can interrupt."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        stop = _current.get()
        if stop is None:
            return super().execute(sql, parameters)
        stop.check()
        stop.register(self)
        try:
            return super().execute(sql, parameters)
        except sqlite3.OperationalError as exc:
            stop.check()  # "interrupted": say that the question was cancelled
            if "interrupted" not in str(exc):
                raise
        # interrupted for a question that used this connection before, cancelled as this
        # one started: this one goes on
        return super().execute(sql, parameters)
