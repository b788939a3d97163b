"""The one path of a question: every hook of an analysis's declaration runs here, in this
order, for every caller (the command line, the Python API, the several-exports tables, the
report page, the MCP server, rank workers):

    ask(analysis, sources, options, params)
      1. the parameters: the second export's argument taken out, defaults filled in, unknown
         ones refused, then ``validate`` (before any export is read)
      2. inputs ``paths``: ``run(paths, options, **params)`` opens what it needs itself
         several exports (or a sweep folder) of an ``exports`` analysis: each one answered
         as in 3 (``multi.ask_each``), one table with a ``config`` column
      3. one export (or two): ``prepare`` (options from what lies beside it), the session(s)
         opened, ``answer``
      4. ``outputs`` (the files a gate writes) and ``exit_code``: ``Report.exit_code``

    answer(session, analysis, **params): an open session (one load for several questions, as
      the report page asks them): ``needs`` loaded, ``run``, the declared title, columns and
      view (``Analysis.finish``)

For Python users:

    from reports.ask import answer, ask
    report = ask("dominant", ["run.sqlite"], within="measure", range_names=["forward"])
    report.to_pandas()
    with Session("run.sqlite") as s:           # several questions of one export, one load
        answer(s, "ranges"), answer(s, "kernels", range_name="forward")

    held = HeldSessions(keep=2)                # a process that answers question after
    ask("dominant", [path], opener=held.opener)   # question (the MCP server): the last
                                                  # exports asked about stay loaded
"""

from __future__ import annotations

import contextlib
import os
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, ContextManager, Sequence

from nsys_parsers.errors import NsysMineError
from nsys_parsers.export import open_export
from nsys_parsers.trace import Trace
from reports.analysis import Analysis
from reports.multi import ExportTarget, ask_each, combine, file_targets
from reports.options import AnalysisOptions
from reports.report import Report
from reports.session import Session

Opener = Callable[[Path, AnalysisOptions], ContextManager[Any]]
Targets = Callable[[list[Path]], list[ExportTarget]]


def ask(analysis: Analysis | str, sources: Sequence[str | os.PathLike[str]] = (),
        options: AnalysisOptions | None = None, params: dict[str, Any] | None = None, *,
        opener: Opener | None = None, targets: Targets | None = None,
        top_each: int | None = None, **kwargs: Any) -> Report:
    """The answer of ``analysis`` (or its name) for ``sources``: none, one export, two for
    the analyses that compare two, several (or sweep folders) for those that answer each.
    ``kwargs``: analysis options (``within``...) and the analysis's parameters, by name.
    ``opener(path, options)`` opens a session (default ``Session``; the command line adds a
    spinner); ``targets(paths)`` finds the exports of several paths and labels them (default
    ``multi.file_targets``: files, labelled by name); ``top_each``: rows kept of each export
    of several (None: all)."""
    a = _analysis(analysis)
    # a keyword is the analysis's parameter when it declares one of that name (check's
    # --rules), else an option
    fields = set(AnalysisOptions.__dataclass_fields__) - {p.name for p in a.params}
    options = replace(options or AnalysisOptions(**a.defaults),
                      **{k: v for k, v in kwargs.items() if k in fields})
    given = {**(params or {}), **{k: v for k, v in kwargs.items() if k not in fields}}
    paths, given = split_params(a, [Path(s) for s in sources], given)
    params = a.fill(given)
    if a.validate is not None:
        params = a.validate(params, paths)
    if a.inputs == "paths":
        report = a.finish(a.run(paths, options, **params), params)
    elif a.inputs == "exports" and (len(paths) > 1 or (paths and paths[0].is_dir())):
        report = _ask_several(a, (targets or file_targets)(paths), options, params,
                              opener or Session, top_each)
    else:
        report = _ask_one(a, paths, options, params, opener or Session)
    if a.outputs is not None and paths:
        a.outputs(report, params, paths[0])
    report.exit_code = a.exit_code(report, params) if a.exit_code is not None else 0
    return report


def answer(session: Session, analysis: Analysis | str, **params: Any) -> Report:
    """The answer of ``analysis`` (or its name) for an open session (an analysis that reads no
    export, such as ``categories``, ignores it): its ``needs`` loaded, ``run``, the declared
    title, columns and view."""
    return _answer(_analysis(analysis), [session], params)


def split_params(a: Analysis, paths: list[Path], params: dict[str, Any]
                 ) -> tuple[list[Path], dict[str, Any]]:
    """(the exports to open: ``paths`` and the export arguments among ``params``, the other
    parameters)."""
    sources = list(paths)
    rest = dict(params)
    for p in a.params:
        if p.argument:
            value = rest.pop(p.name, None)
            if value is not None:
                sources.append(Path(value))
    return sources, rest


def _analysis(analysis: Analysis | str) -> Analysis:
    from reports.analyses import get

    return get(analysis) if isinstance(analysis, str) else analysis


def _answer(a: Analysis, sessions: list[Session | None], params: dict[str, Any]) -> Report:
    if a.inputs == "none":
        sessions = []
    params = a.fill(params)
    first = sessions[0] if sessions else None
    held: HeldSessions | None = first.held if first is not None else None
    key = held.answer_key(a, sessions, params) if held is not None else None
    if held is not None and first is not None:
        held.asked(a, first)
    if held is not None and key is not None and (kept := held.recall(key)) is not None:
        return kept
    for s in sessions:
        if s is not None and a.needs:
            s.load(*a.needs)
    report = a.finish(a.run(*sessions, **params), params)
    if held is not None and key is not None:
        held.remember(key, report)
    return report


def _ask_one(a: Analysis, paths: list[Path], options: AnalysisOptions,
             params: dict[str, Any], opener: Opener) -> Report:
    """The answer for one export (two for ``two``, the second maybe missing; none for
    ``none``), opened with the options ``prepare`` makes from what lies beside it."""
    notes: list[str] = []
    if a.prepare is not None and paths:
        options, notes = a.prepare(options, paths[0])
    with contextlib.ExitStack() as stack:
        sessions: list[Session | None] = [stack.enter_context(opener(p, options))
                                          for p in paths]
        if a.inputs == "two" and len(sessions) == 1:
            sessions.append(None)
        report = _answer(a, sessions, params)
    report.notes = notes + report.notes
    return report


def _ask_several(a: Analysis, targets: list[ExportTarget], options: AnalysisOptions,
                 params: dict[str, Any], opener: Opener, top_each: int | None) -> Report:
    """One question of several exports: each export's rows with a ``config`` column, the
    top ``top_each`` of each (None: all), in one report whose rows are already cut."""
    columns, view = a.shaped(params)
    assert view is not None
    answers, skipped = ask_each(
        targets, lambda t: _ask_one(a, [t.path], options, params, opener))
    columns = list(dict.fromkeys([*columns, *(c for x in answers for c in x.report.columns)]))
    report, people = combine(answers, columns, view, skipped=skipped, top_each=top_each)
    if options.within is None and all(t.config for t in targets):
        report.notes.append("these are `nsys-mine profile` exports: --within measure leaves "
                            "their warmup steps out (as profile and sweep do).")
    report.title = f"{answers[0].report.title or a.title}, {len(answers)} exports"
    report.view, report.cut = people, True
    return report


class HeldSessions:
    """An ``opener`` for ``ask`` that keeps the last ``keep`` exports asked about loaded
    between questions, for a process that answers one question after another (the MCP
    server, ``nsys-mine serve``): the next question about the same export, whatever its
    options, answers from what was loaded (columns, names, pairs: the ``Trace``, shared by a
    session per question) instead of opening the export and reading its cache again. An
    export whose file changed (size, modification time, inode) since it was loaded is loaded
    afresh; a question that fails drops the loads it used. ``keep`` 0: every question opens
    its own session. One question at a time (the MCP server asks them so).

    ``answers``: the last answers kept too (at most that many, none over ``ANSWER_ROWS``
    rows): the same question again (in another format, with another --top) is its kept
    answer, while its exports are held. The key is the analysis, every export's file state,
    the options (and the state of their rules file) and the parameters (files among them
    by their state too); an analysis that reads anything else (``inputs`` ``paths`` or
    ``none``) or a parameter that is not a plain value is answered afresh.

    Warming ahead (``nsys-mine serve``, the MCP server): ``warm_target`` names the export
    asked about last, once per load; a process of its own answers ``AHEAD`` of it
    (``ahead``, ``profile_cli.ahead``); ``adopt`` keeps those answers here."""

    ANSWER_ROWS = 100_000
    # The questions people ask most, in the order ``ahead`` answers them: the cheap ones
    # first, then those that load the attribution pairs, the names, the API calls.
    AHEAD = ("kernels", "gpus", "nvtx-kernels", "dominant", "ranges", "gaps")
    # ... of exports up to this size: the server warms ahead in a process of its own, which
    # loads the export a second time while it runs (x100 benchmark files, 98-196 MB: a peak
    # of 336 MB on shallow, for 2.4-4.7 s); a bigger export's second load is not measured
    AHEAD_MAX_BYTES = 512 << 20
    # the options a person keeps while exploring (``--within forward`` asked of one question
    # is asked of the next): ``ahead`` also answers with those the last question set
    CARRIED = ("within", "merge_op_ids", "depth", "match", "graph_attribution")

    def __init__(self, keep: int = 2, answers: int = 0) -> None:
        self.keep = keep
        self.answers = answers if keep > 0 else 0
        self.opened = 0  # exports opened (and loaded) so far
        self.recalled = 0  # answers given again
        self._held: OrderedDict[tuple[Any, ...], Trace] = OrderedDict()
        self._answers: OrderedDict[tuple[Any, ...], Report] = OrderedDict()
        self._warming = False  # asking ahead: a question that fails keeps its load
        self._asked_ahead: set[tuple[tuple[Any, ...], str]] = set()  # (held key, question)
        self._warm_started: set[tuple[Any, ...]] = set()  # held keys warmed by a worker
        self._set: dict[tuple[Any, ...], dict[str, Any]] = {}  # held key -> CARRIED set last

    def answer_key(self, a: Analysis, sessions: list[Session | None],
                   params: dict[str, Any]) -> tuple[Any, ...] | None:
        """The key of this question's answer, None where it is not kept."""
        if not self.answers or a.inputs not in ("export", "exports", "two"):
            return None
        held = tuple(getattr(s, "held_key", None) if s is not None else "-" for s in sessions)
        if None in held:
            return None
        # a repeatable parameter given no value is the one left out (the MCP server passes
        # [], the command line None): one key
        empty = {p.name for p in a.params if p.multiple and p.default is None}
        try:
            frozen = _frozen({k: None if k in empty and isinstance(v, (list, tuple))
                              and not v else v for k, v in params.items()})
        except _NotAKey:
            return None
        first = sessions[0]
        assert first is not None  # its `held` is this object
        options = first.options
        rules = _file_state(options.rules) if options.rules else ()
        return a.name, held, options, rules, frozen

    def recall(self, key: tuple[Any, ...]) -> Report | None:
        kept = self._answers.get(key)
        if kept is None:
            return None
        self._answers.move_to_end(key)
        self.recalled += 1
        return replace(kept, notes=list(kept.notes), sentences=list(kept.sentences))

    def remember(self, key: tuple[Any, ...], report: Report) -> None:
        if len(report.rows) > self.ANSWER_ROWS:
            return
        self._answers[key] = replace(report, notes=list(report.notes),
                                     sentences=list(report.sentences))
        while len(self._answers) > self.answers:
            self._answers.popitem(last=False)

    def _forget(self, key: tuple[Any, ...]) -> None:
        """Drop the answers that used the export held under ``key``."""
        for k in [k for k in self._answers if key in k[1]]:
            del self._answers[k]
        self._asked_ahead = {done for done in self._asked_ahead if done[0] != key}
        self._warm_started.discard(key)
        self._set.pop(key, None)

    def asked(self, a: Analysis, session: Session) -> None:
        """Note the options a question about a held export set (``CARRIED`` that ``a``
        honours and the user changed from its defaults): ``warm_options``."""
        key = session.held_key
        if key is None:
            return
        base = AnalysisOptions(**a.defaults)
        self._set[key] = {k: getattr(session.options, k) for k in self.CARRIED
                          if k in a.options and getattr(session.options, k) != getattr(base, k)}

    def warm_options(self, key: tuple[Any, ...]) -> dict[str, Any]:
        """The ``CARRIED`` options the last question about the export held under ``key``
        set, as plain values (for ``ahead(options)`` in another process: tuples as lists,
        which ``ahead`` turns back)."""
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in self._set.get(key, {}).items()}

    @contextlib.contextmanager
    def opener(self, path: Path, options: AnalysisOptions) -> Iterator[Session]:
        if self.keep <= 0:
            self.opened += 1
            with Session(path, options) as own:
                yield own
            return
        key = _held_key(path, options)
        for old in [k for k in self._held if k[0] == key[0] and k[1] != key[1]]:
            _close(self._held.pop(old))  # that file changed: what was loaded is stale
            self._forget(old)
        if key in self._held:
            trace = self._held.pop(key)
        else:
            export = open_export(path, nsys=options.nsys)
            try:
                trace = Trace(export, name_kind=options.name_kind, cache=options.cache)
            except BaseException:
                export.close()
                raise
            self.opened += 1
        try:
            with Session(trace.export, options, trace=trace) as session:
                session.held, session.held_key = self, key
                yield session
        except BaseException as exc:
            if self._warming and isinstance(exc, NsysMineError):
                self._hold(key, trace)  # a question this export cannot answer, asked ahead
            else:
                _close(trace)
                self._forget(key)
            raise
        self._hold(key, trace)

    def _hold(self, key: tuple[Any, ...], trace: Trace) -> None:
        """Keep ``trace`` loaded under ``key``, the most recent; the oldest dropped past
        ``keep``."""
        twin = self._held.pop(key) if key in self._held else None
        if twin is not None and twin is not trace:  # one export twice in a question
            _close(twin)
        self._held[key] = trace  # the most recent last
        while len(self._held) > self.keep:
            old, dropped = self._held.popitem(last=False)
            _close(dropped)
            self._forget(old)

    def ahead(self, carried: dict[str, Any] | None = None
              ) -> Iterator[tuple[str, float, str | None]]:
        """Answer the questions people ask most (``AHEAD``) of the export asked about last,
        one per step, as the command line asks them without options (the analysis's
        defaults, the held load's name kind, cache and nsys), and keep their answers: what
        a server has done while its user reads an answer, so that the next question is a
        kept answer. Yields (question, seconds, None) or,
        for a question this export cannot answer, (question, seconds, the error's
        message). ``carried``: options the last question set (``warm_options``): each
        question that honours one is asked with them first ("kernels, as asked"), then
        without. Each once per load; none when there is nothing held, answers are not
        kept, or the export is over ``AHEAD_MAX_BYTES``; stops when its file changed.
        ``nsys-mine serve`` runs it in a process of its own (``warm_target``, ``adopt``): a
        question asked meanwhile never waits for a step."""
        key = self._last_to_warm()
        if key is None:
            return
        path, name_kind, cache, nsys = Path(key[0]), key[2], key[3], key[4]
        from time import perf_counter

        for name in self.AHEAD:
            a = _analysis(name)
            own: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                                   for k, v in (carried or {}).items() if k in a.options}
            for variant in ([own] if own else []) + [{}]:
                step = f"{name}, as asked" if variant else name
                if (key, step) in self._asked_ahead:
                    continue
                self._asked_ahead.add((key, step))
                options = replace(AnalysisOptions(**a.defaults), name_kind=name_kind,
                                  cache=cache, nsys=nsys, **variant)
                if _held_key(path, options) != key or key not in self._held:
                    return  # changed on disk, or no longer held: nothing to warm
                began = perf_counter()
                self._warming = True
                try:
                    ask(a, [path], options, opener=self.opener)
                except NsysMineError as exc:
                    error: str | None = str(exc)
                else:
                    error = None
                finally:
                    self._warming = False
                yield step, perf_counter() - began, error

    def warm_target(self) -> tuple[Any, ...] | None:
        """The held key (path, file state, name kind, cache, nsys) of the export asked about
        last, for a process of its own to answer ``ahead`` (``profile_cli.ahead``): None
        when answers are not kept, nothing is held, it is over ``AHEAD_MAX_BYTES`` or it was
        handed out already for this load."""
        key = self._last_to_warm()
        if key is None or key in self._warm_started:
            return None
        self._warm_started.add(key)
        return key

    def _last_to_warm(self) -> tuple[Any, ...] | None:
        """The held key of the export asked about last, where answers are kept and its file
        is at most ``AHEAD_MAX_BYTES``; else None."""
        if not self._held or not self.answers:
            return None
        key = next(reversed(self._held))
        return key if key[1] and key[1][0] <= self.AHEAD_MAX_BYTES else None

    def adopt(self, answers: dict[tuple[Any, ...], Report]) -> int:
        """Keep the answers another ``HeldSessions`` made (a warming worker's, keyed as
        ``answer_key`` keys them) whose exports, in the same state, are held here; how many.
        An answer already kept stays as it is."""
        taken = 0
        for key, report in answers.items():
            if key in self._answers or not all(h == "-" or h in self._held for h in key[1]):
                continue
            self._answers[key] = report
            taken += 1
        while len(self._answers) > self.answers:
            self._answers.popitem(last=False)
        return taken

    def close(self) -> None:
        while self._held:
            _close(self._held.popitem()[1])
        self._answers.clear()
        self._asked_ahead.clear()
        self._warm_started.clear()
        self._set.clear()


def _close(trace: Trace) -> None:
    trace.close()
    trace.export.close()


def _held_key(path: Path, options: AnalysisOptions) -> tuple[Any, ...]:
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
    """A parameter that is not a plain value (a kept answer cannot be keyed by it)."""


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
