"""The one resolver of the loader: an item (``nsys_parsers.items``) comes from memory, else
from the export's cache entry, else from one batched read of every raw column asked for at
once, else it is derived from other items; what was read or derived is stored for the next
question.

    resolver.get("kernel.start", "kernel.launch_tid")   # resolve; then
    resolver.array("kernel.start"), resolver.strings("kernel.name_code.demangledName")

The speed devices live here and in ``reads``, behind ``get``: the raw columns of every table
asked for are read in one pass of rowid chunks on the reader threads (``reads.Reader``, each
column of a chunk one JSON array), NVTX first; raw columns can be started ahead
(``start``) and are then awaited by the ``get`` that needs them; items are written to the
cache on its writer thread (``cache.ColumnCache.put(background=True)``) while the answer is
computed.

A question that looks at every row of a table once but keeps few (``gaps``) takes its raw
columns as a stream (``chunks``): slices where they are held, else rowid chunks read ahead on
the reader threads and written to the cache as they pass (``cache.Stream``), so that the
next question finds them there, and memory never holds the whole table.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import numpy as np

from nsys_parsers.arrays import let_go
from nsys_parsers.cache import ColumnCache, Item
from nsys_parsers.heap import trim_heap
from nsys_parsers.items import (
    ALWAYS,
    ASKED,
    COLUMNS,
    ITEMS,
    NEVER,
    READ_ORDER,
    Column,
    Derived,
    Made,
)
from nsys_parsers.queries import alias
from nsys_parsers.reads import STREAM_ROWS, IntColumns, Reader, TextColumn, rowid_chunks

if TYPE_CHECKING:
    from nsys_parsers.export import Export
    from nsys_parsers.queries import RowSource


# A derived item to keep this large is written to the cache as soon as it is made, and its
# mapped file held instead (``Resolver._settle``).
MAPPED_BYTES = 8 << 20


class Resolver:
    """Items of one export: held in memory, taken from ``cache`` (None: no cache), read with
    ``reader()`` (the export's reader threads) from the row sources ``sources(prefix)`` gives
    for this export, derived with ``context`` (what a ``Derived.make`` is called with: the
    ``Trace``)."""

    def __init__(self, export: Export, cache: ColumnCache | None,
                 reader: Callable[[], Reader], sources: Callable[[str], list[RowSource]],
                 context: Any):
        self.export = export
        self.cache = cache
        self._reader = reader
        self._sources = sources
        self._context = context
        self._arrays: dict[str, np.ndarray] = {}
        self._strings: dict[str, list[str]] = {}
        self._started: dict[str, _Pending] = {}

    # -- what is held ----------------------------------------------------------------------
    def held(self, name: str) -> bool:
        """Whether ``name`` is in memory or in the cache (taken into memory then); no read."""
        if name in self._arrays:
            return True
        item = self.cache.get(name) if self.cache is not None else None
        if item is None:
            return False
        self._arrays[name] = item.array
        if item.strings is not None:
            self._strings[name] = item.strings
        return True

    def array(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def strings(self, name: str) -> list[str]:
        return self._strings[name]

    def optional(self, name: str) -> np.ndarray | None:
        """The array of ``name`` if it is in memory (None: it was not asked for)."""
        return self._arrays.get(name)

    def let_go(self) -> None:
        """Let the pages of every mapped item held go (``arrays.let_go``): what one step
        read, or mapped around what it read (the kernel maps up to 16 pages around a page
        read), is not resident through the next; a later read maps it again."""
        for array in self._arrays.values():
            let_go(array)

    def drop(self, *names: str) -> None:
        """Forget items held in memory (the cache keeps them)."""
        for name in names:
            self._arrays.pop(name, None)
            self._strings.pop(name, None)

    # -- resolving -------------------------------------------------------------------------
    def get(self, *names: str) -> None:
        """Resolve ``names``: each from memory, the cache, one batched read of every raw
        column missing, or derived from its inputs (resolved the same way, first). Items
        stored ``always``, and those stored ``asked`` that are among ``names``, go to the
        cache; inputs read only to derive others are then dropped from memory."""
        asked = set(names)
        raw: list[str] = []
        derive: list[Derived] = []
        self._plan(names, raw, derive, set())
        made: dict[str, Item] = {}
        filed: dict[str, dict[str, Any]] = {}
        self._start([n for n in raw if n not in self._started])  # those started ahead: awaited
        for name in raw:
            pending = self._started.pop(name)
            self._hold(name, pending.result(), made)
            if pending.entry is not None:
                filed[name] = pending.entry
        trim_heap()
        written = set(filed)
        for i, d in enumerate(derive):
            for name, value in d.make(self._context).items():
                self._hold(name, value, made)
            later = {n for e in derive[i + 1:] for n in e.inputs_for(self._context)}
            self._settle(made, asked, later, written)
            self.let_go()
        self._settle(made, asked, set(), written)
        if self.cache is not None:
            if filed:
                self.cache.name_files(filed, f"{os.getpid()}-{time.monotonic_ns()}")
            self.cache.put({n: item for n, item in made.items()
                            if n not in written and _stored(n, asked)}, background=True)
        self.let_go()
        trim_heap()

    def _settle(self, made: dict[str, Item], asked: set[str], later: set[str],
                written: set[str]) -> None:
        """After a step of ``get``: forget the items made that no later step needs and none
        keeps (inputs read only to derive others), and write the large ones to keep to the
        cache now (added to ``written``), holding their mapped files instead: the process's
        memory is let go. What stays in ``made`` is stored at the end of ``get``."""
        for name in list(made):
            if name not in asked and ITEMS[name].store != ALWAYS and name not in later:
                del made[name]
                self.drop(name)
        if self.cache is None:
            return
        big = {n: item for n, item in made.items() if n not in written and _stored(n, asked)
               and item.array.nbytes >= MAPPED_BYTES}
        if not big:
            return
        mapped = self.cache.keep(big)
        for name in big:
            written.add(name)
            del made[name]
        self._arrays.update(mapped)

    def put(self, name: str, value: Made) -> None:
        """Hold a value computed outside ``get`` (names sought by rowid) and store it."""
        made: dict[str, Item] = {}
        self._hold(name, value, made)
        if self.cache is not None and ITEMS[name].store == ALWAYS:
            self.cache.put(made, background=True)

    def start(self, *names: str) -> None:
        """Start reading raw columns on the reader threads while the caller goes on; the
        ``get`` that needs them waits for them."""
        todo = [n for n in names if n not in self._started and not self.held(n)]
        self._start(todo)

    def chunks(self, names: Sequence[str], rows: int = STREAM_ROWS
               ) -> Iterator[dict[str, np.ndarray]]:
        """Raw integer columns of one table (row source prefix), a chunk of about ``rows``
        rows at a time, in the order their arrays have, never held whole: slices where every
        one is held (in memory or in the cache), else read from the export in rowid chunks
        and written to the cache as they pass (items once the last chunk has passed)."""
        names = list(names)
        specs = [COLUMNS[n] for n in names]
        prefix = specs[0].source
        assert all(c.source == prefix and not c.text for c in specs), names
        if all(self.held(n) for n in names):
            arrays = [self._arrays[n] for n in names]
            for a in range(0, arrays[0].size, rows):
                chunk = {n: values[a:a + rows] for n, values in zip(names, arrays)}
                yield chunk
                for view in chunk.values():
                    let_go(view)  # a mapped item's pages passed: out of the process's RSS
            return
        stored = [n for n in names if ITEMS[n].store != NEVER]
        stream = self.cache.stream(stored) if self.cache is not None and stored else None
        keys = [c.key for c in specs]
        try:
            for source in self._sources(prefix):
                for got in self._reader().int_chunks(
                        source.sql(self.export, keys), [alias(k) for k in keys],
                        rowid_chunks(self.export.db, source.table, rows)):
                    chunk = dict(zip(names, got))
                    if stream is not None:
                        stream.add(chunk)
                    yield chunk
            if stream is not None:
                stream.commit()
        finally:
            if stream is not None:
                stream.abort()  # given up before the end: no item (after commit: nothing)

    def tables_of(self, names: Sequence[str]) -> set[str]:
        """The tables (row source prefixes) the items ``names`` are read or derived from,
        whether held or not: what holding them takes memory for."""
        raw: list[str] = []
        self._plan(names, raw, [], set(), every=True)
        return {COLUMNS[n].source for n in raw}

    def _plan(self, names: Sequence[str], raw: list[str], derive: list[Derived],
              seen: set[str], every: bool = False) -> None:
        """What to read and what to derive (inputs before what is made of them); ``every``:
        as if nothing were held."""
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            if not every and self.held(name):
                continue
            spec = ITEMS[name]
            if isinstance(spec, Column):
                raw.append(name)
                continue
            assert isinstance(spec, Derived), f"{name} is put by its owner, not resolved"
            self._plan(spec.inputs_for(self._context), raw, derive, seen, every)
            if spec not in derive:
                derive.append(spec)

    def _start(self, names: list[str]) -> None:
        """Submit the chunk reads of raw columns: per table (row source) one job for its
        integer columns and one per text column, tables in ``READ_ORDER`` (NVTX first)."""
        by_prefix: dict[str, list[str]] = {}
        for name in names:
            assert name in COLUMNS, f"{name} is not a column of the export"
            by_prefix.setdefault(COLUMNS[name].source, []).append(name)
        for prefix in sorted(by_prefix, key=READ_ORDER.index):
            wanted = sorted(by_prefix[prefix])
            parts: dict[str, list[tuple[IntColumns | TextColumn, int]]] = {n: [] for n in wanted}
            sources = self._sources(prefix)
            for source in sources:
                chunks = rowid_chunks(self.export.db, source.table)
                ints = [n for n in wanted if not COLUMNS[n].text]
                for name in wanted:
                    if COLUMNS[name].text:
                        key = COLUMNS[name].key
                        parts[name].append((self._reader().text_column(
                            source.sql(self.export, [key]), alias(key), chunks), 0))
                if ints:
                    keys = [COLUMNS[n].key for n in ints]
                    # a table of two sources (the API calls) is joined: read into memory
                    files = self._files(ints, chunks) if len(sources) == 1 else None
                    job = self._reader().int_columns(source.sql(self.export, keys),
                                                     [alias(k) for k in keys], chunks, files)
                    for i, name in enumerate(ints):
                        parts[name].append((job, i))
            for name, got in parts.items():
                self._started[name] = _Pending(got, COLUMNS[name].text)

    def _files(self, names: list[str], chunks: list[dict[str, int]]) -> list[Any] | None:
        """Per integer column read, the cache file it is read straight into (columns always
        stored, of a table read from one source), or None; None for all: no cache, none
        stored."""
        if self.cache is None:
            return None
        rows = sum(b["hi"] - b["lo"] for b in chunks)
        files = [self.cache.column_file(n, rows) if ITEMS[n].store == ALWAYS else None
                 for n in names]
        return files if any(f is not None for f in files) else None

    def _hold(self, name: str, value: Made, made: dict[str, Item]) -> None:
        array, strings = value if isinstance(value, tuple) else (value, None)
        self._arrays[name] = array
        if strings is not None:
            self._strings[name] = strings
        made[name] = Item(array, strings)


def _stored(name: str, asked: set[str]) -> bool:
    """Whether ``get`` stores an item it made: those stored ``always``, and those stored
    ``asked`` when asked for."""
    store = ITEMS[name].store
    return store == ALWAYS or (store == ASKED and name in asked)


class _Pending:
    """A raw column being read: its part of one job per row source (the runtime and driver
    API tables both give API calls), joined by ``result()``; no part: the export lacks the
    table, and the column is empty."""

    def __init__(self, parts: list[tuple[IntColumns | TextColumn, int]], text: bool):
        self.parts, self.text = parts, text
        self.entry: dict[str, Any] | None = None  # read into a cache file: its entry

    def result(self) -> Made:
        if self.text:
            assert len(self.parts) <= 1, "a text column is read from one table"
            if not self.parts:
                return np.zeros(0, dtype=np.int64), []
            job = self.parts[0][0]
            assert isinstance(job, TextColumn)
            return job.result()
        arrays = []
        for job, i in self.parts:
            assert isinstance(job, IntColumns)
            arrays.append(job.result()[i])
        if len(self.parts) == 1:
            job, i = self.parts[0]
            assert isinstance(job, IntColumns)
            self.entry = job.filed[i]
        if not arrays:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
