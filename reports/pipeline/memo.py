"""``Memo``: what a resident caller keeps between questions (the MCP server; a notebook or a
script that asks one question after another): the last exports asked about, opened and
loaded (one ``Trace`` each, a ``Session`` per question over it), and the last answers.

    from reports import Memo
    memo = Memo()
    memo.ask("dominant", ["run.sqlite"], within="measure")   # opened, loaded, answered
    memo.ask("ranges", ["run.sqlite"])                       # from what is loaded
    memo.ask("dominant", ["run.sqlite"], within="measure")   # the kept answer

Bounded: ``exports`` loaded exports (the least recently asked about is closed), ``answers``
answers (answers of more than ``ANSWER_ROWS`` row dicts are not kept; rows kept as columns
are). An export whose file changed (size, modification time, inode) is loaded afresh, and its
answers are no longer found: a key holds the state of every file the question reads (its
exports, and files among its options and parameters, such as a rules file). A question whose
analysis reads what a key cannot name (a folder, a glob, ``job`` exports, no export) is
answered afresh each time, its exports still opened through the memo. A question that fails
closes the exports it opened.

Questions may come from several threads at once (the MCP server answers them side by side):
one export's load serves one question at a time (a lock per file); a question about another
export does not wait. A question that holds one export and asks for another that is busy
(``diff A B`` while another thread asks ``diff B A``) reads its own copy of that one rather
than wait (no deadlock); waiting for a busy export gives way to a cancelled question
(``nsys_parsers.cancel``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from nsys_parsers import cancel
from nsys_parsers.export import open_export
from nsys_parsers.trace import Trace
from reports.pipeline.analysis import Analysis
from reports.pipeline.ask import Question, Targets, ask_question, one_export, question
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.report import Report
from reports.pipeline.session import Session
from reports.render.rows import ColumnRows


class Memo:
    """Exports kept loaded and answers kept (see the module docstring)."""

    ANSWER_ROWS = 100_000

    def __init__(self, exports: int = 2, answers: int = 32) -> None:
        self.exports = exports
        self.answers = answers
        self.opened = 0  # exports opened (and loaded) so far
        self.recalled = 0  # answers given again
        self._traces: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()
        self._answers: OrderedDict[tuple[Any, ...], Report] = OrderedDict()
        self._lock = threading.Lock()  # the two dicts, the counters and the gates
        self._gates: dict[str, threading.Lock] = {}  # one per file: its load, one user
        self._held = threading.local()  # the gates a thread holds

    def ask(self, analysis: Analysis | str, sources: Sequence[str | os.PathLike[str]] = (),
            options: AnalysisOptions | None = None, params: dict[str, Any] | None = None, *,
            targets: Targets | None = None, top_each: int | None = None,
            **kwargs: Any) -> Report:
        """``reports.pipeline.ask.ask``, its exports opened with ``opener``, its answer kept."""
        q = question(analysis, sources, options, params, **kwargs)
        key = self.key(q, top_each)
        with self._lock:
            kept = self._answers.get(key) if key is not None else None
            if kept is not None and key is not None:
                self._answers.move_to_end(key)
                self.recalled += 1
                return replace(kept, notes=list(kept.notes), sentences=list(kept.sentences))
        report = ask_question(q, opener=self.opener, targets=targets, top_each=top_each)
        if key is not None and self.answers > 0 and (
                isinstance(report.rows, ColumnRows) or len(report.rows) <= self.ANSWER_ROWS):
            with self._lock:
                self._answers[key] = replace(report, notes=list(report.notes),
                                             sentences=list(report.sentences))
                while len(self._answers) > self.answers:
                    self._answers.popitem(last=False)
        return report

    def key(self, q: Question, top_each: int | None = None) -> tuple[Any, ...] | None:
        """The key of ``q``'s answer: the analysis, the state of every file it reads, the
        options and parameters; None where the answer is not kept."""
        if q.analysis.inputs not in ("export", "exports") or not one_export(list(q.paths)):
            return None
        try:
            rules = q.options.rules
            options = replace(q.options, rules=Path(rules) if rules is not None else None)
            frozen = _frozen({"paths": list(q.paths), "options": options.__dict__,
                              "params": q.params, "top_each": top_each})
        except _NotAKey:
            return None
        return q.analysis.name, frozen

    @contextlib.contextmanager
    def opener(self, path: Path, options: AnalysisOptions) -> Iterator[Session]:
        """A session of ``path`` over its kept load (loaded first when it is not kept)."""
        if self.exports <= 0:
            yield from self._own(path, options)
            return
        key = _load_key(path, options)
        with self._lock:
            gate = self._gates.setdefault(key[0], threading.Lock())
        held: set[int] = self._held.__dict__.setdefault("gates", set())
        if held and not gate.acquire(blocking=False):
            yield from self._own(path, options)  # busy, and waiting could deadlock
            return
        if not held:
            while not gate.acquire(timeout=0.25):  # another question is reading it
                cancel.stop_if_cancelled()
        held.add(id(gate))
        try:
            with self._lock:
                for old in [k for k in self._traces if k[0] == key[0] and k[1] != key[1]]:
                    _close(self._traces.pop(old))  # that file changed: what was loaded is stale
                trace = self._traces.pop(key, None)
            if trace is None:
                trace = self._load(path, options)
            try:
                with Session(trace.export, options, trace=trace) as session:
                    yield session
            except BaseException:
                _close(trace)
                raise
            self._keep(key, trace)
        finally:
            held.discard(id(gate))
            gate.release()

    def _own(self, path: Path, options: AnalysisOptions) -> Iterator[Session]:
        """A session of its own (nothing kept)."""
        with self._lock:
            self.opened += 1
        with Session(path, options) as own:
            yield own

    def _load(self, path: Path, options: AnalysisOptions) -> Trace:
        export = open_export(path, nsys=options.nsys)
        try:
            trace = Trace(export, name_kind=options.name_kind, cache=options.cache)
        except BaseException:
            export.close()
            raise
        with self._lock:
            self.opened += 1
        return trace

    def _keep(self, key: tuple[Any, ...], trace: Trace) -> None:
        """Keep ``trace`` under ``key``, the most recent; the oldest closed past ``exports``
        (those in use are not kept meanwhile: never closed under a question)."""
        with self._lock:
            twin = self._traces.pop(key, None)
            if twin is not None and twin is not trace:  # one export twice in a question
                _close(twin)
            self._traces[key] = trace
            while len(self._traces) > self.exports:
                _close(self._traces.popitem(last=False)[1])

    def close(self) -> None:
        """Close every kept export and forget the answers."""
        with self._lock:
            while self._traces:
                _close(self._traces.popitem()[1])
            self._answers.clear()

    def __enter__(self) -> Memo:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(trace: Trace) -> None:
    trace.close()
    trace.export.close()


def _load_key(path: Path, options: AnalysisOptions) -> tuple[Any, ...]:
    """(the file, its state, what a load depends on): one loaded trace per key."""
    real = path.resolve()
    return str(real), _file_state(real), options.name_kind, options.cache, options.nsys


def _file_state(path: str | os.PathLike[str]) -> tuple[int, ...]:
    """(size, modification time, inode) of a file; () where it cannot be read."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # missing: opening it says so
        return ()
    return st.st_size, st.st_mtime_ns, st.st_ino


class _NotAKey(Exception):
    """A value that is not plain (an answer cannot be keyed by it)."""


def _frozen(value: Any) -> Any:
    """``value`` as a key (files by their path and state); _NotAKey where it cannot be one."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, os.PathLike):
        return ("file", str(Path(value).resolve()), _file_state(value))
    if isinstance(value, (list, tuple)):
        return ("seq", tuple(_frozen(v) for v in value))
    if isinstance(value, dict):
        return ("map", tuple((k, _frozen(v)) for k, v in sorted(value.items())))
    raise _NotAKey(type(value).__name__)
