"""What the loader can give: every item declared once, a raw column of the export or a value
derived from other items (``ITEMS``), and which items each column group is
(``Trace.items_of``).

    Column(source, key)      read from the export: every column of every table the loader
                             reads (``queries.SOURCES``: a ``RowSource`` per table, with the
                             SQL expression of each column, checked against the schema) is
                             the item ``<source>.<key>``; ``text``: a text column, read as
                             codes and distinct values
    Derived(inputs, make)    ``make(trace)`` computes it (and the items made with it) from
                             its ``inputs``, which the resolver gets first, all at once
    Put()                    a value the trace computes itself and hands to the resolver

An item's ``store`` says what goes to the cache: ``always``; ``asked`` (only when a question
asks for it, not when it is read just to derive another: the API calls of the launch join);
``never`` (name ids, raw name keys). Items are named ``<source>.<what>``; the resolver
(``nsys_parsers.resolver``) serves them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Protocol, Union

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.arrays import few_distinct
from nsys_parsers.kernels import join_launches
from nsys_parsers.names import kernel_names
from nsys_parsers.reads import rowid_span, strings_by_id
from nsys_parsers.schema import NAME_COLUMN

if TYPE_CHECKING:
    from nsys_parsers.attribution import Pairs
    from nsys_parsers.export import Export
    from nsys_parsers.names import RangeNames

class Trace(Protocol):
    """What derived items are made with: the loaded export (``nsys_parsers.trace.Trace``,
    which imports this module)."""

    export: Export
    resolver: Any
    has_graphs: bool

    def items_of(self, *groups: str) -> tuple[str, ...]: ...
    def attribute(self, mode: str, graphs: str) -> Pairs: ...
    def graph_node_sources(self) -> list[Q.RowSource]: ...
    def last_timestamp(self) -> int: ...
    def names_from_scan(self) -> RangeNames: ...


ALWAYS, ASKED, NEVER = "always", "asked", "never"
# Tables in the order their reads are submitted: NVTX first (the largest, on most exports).
READ_ORDER = tuple(Q.SOURCES)

KERNEL_IDS = ("pid", "correlation", "device", "stream", "context", "graph", "graph_node")
KERNEL_PLACES = ("pid", "device", "stream")
LAUNCH = ("launch_tid", "launch_start", "launch_end")
NVTX = ("start", "end", "tid", "flags", "rowid")
MEMOPS = ("start", "end", "bytes", "kind", "device", "stream", "pid", "correlation")
API = ("start", "end", "tid", "correlation")
GRAPHS = ("start", "end", "device", "stream", "context", "pid", "correlation", "graph",
          "graph_exec")
GRAPH_NODES = ("start", "end", "tid", "node", "original")
GRAPH_EVENTS = ("start", "end", "tid", "graph", "original", "exec")
# How kernels are attributed (nsys_parsers.attribution) and, for kernels of CUDA graphs,
# where they count: PAIRS names the pairs item of each (mode, graph attribution).
PAIRS = {("all", "launch"): "pairs.all", ("innermost", "launch"): "pairs.innermost",
         ("all", "capture"): "pairs.capture.all",
         ("innermost", "capture"): "pairs.capture.innermost"}

# What a Derived.make returns per item: an array, or (codes, the strings they index).
Made = Union[np.ndarray, tuple[np.ndarray, list[str]]]


@dataclass(frozen=True)
class Column:
    source: str
    key: str
    text: bool = False
    store: str = ALWAYS


@dataclass(frozen=True, eq=False)
class Derived:
    inputs: tuple[str, ...] | Callable[[Trace], tuple[str, ...]]
    make: Callable[[Trace], dict[str, Made]]
    store: str = ALWAYS

    def inputs_for(self, t: Trace) -> tuple[str, ...]:
        """The items it is made of, for this trace (some depend on what the export holds)."""
        return self.inputs(t) if callable(self.inputs) else self.inputs


@dataclass(frozen=True)
class Put:
    """A value its owner computes and hands to ``Resolver.put`` (the names of the ranges
    that launch kernels, sought by rowid): held and stored like the others, never made by
    the resolver."""

    store: str = ALWAYS


# The API calls are read for the launch join (their names for api.name_code), and kept only
# when a question asks for them.
ASKED_COLUMNS = {f"api.{k}" for k in (*API, "name_id")}


def _column(prefix: str, key: str) -> Column:
    source = Q.TEMPLATES[prefix]
    name = f"{prefix}.{key}"
    store = (NEVER if key in source.unstored else ASKED if name in ASKED_COLUMNS else ALWAYS)
    return Column(prefix, key, text=key in source.text, store=store)


# -- how derived items are made --------------------------------------------------------------
def names_of_ids(export: Any, ids: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Names of StringIds ids (kernel names, API call names) of an open export: the distinct
    names and the code of each id."""
    distinct = few_distinct(ids)
    strings = strings_by_id(export.db, Q.STRINGS_BY_ID.sql(export), distinct)
    return kernel_names(strings, ids, distinct)


def _names_of_ids(ids_item: str, out: str) -> Derived:
    """Names of StringIds ids as an item: codes and distinct names."""
    def make(t: Trace) -> dict[str, Made]:
        names, codes = names_of_ids(t.export, t.resolver.array(ids_item))
        return {out: (codes, names)}
    return Derived((ids_item,), make)


def _launches(prefix: str) -> Derived:
    """The API call that launched each kernel (or graph): its thread, start and end, by
    correlationId within the process (``kernels.join_launches``)."""
    def make(t: Trace) -> dict[str, Made]:
        a = {k: t.resolver.array(f"api.{k}") for k in API}
        launch = join_launches(t.resolver.array(f"{prefix}.pid"),
                               t.resolver.array(f"{prefix}.correlation"),
                               a["start"], a["end"], a["tid"], a["correlation"])
        return {f"{prefix}.{k}": v for k, v in zip(LAUNCH, launch)}
    return Derived((f"{prefix}.pid", f"{prefix}.correlation", *(f"api.{k}" for k in API)), make)


def _rows(table_of: Callable[[Trace], list[Q.RowSource]], out: str) -> Derived:
    """How many rows a table has (0: none, or no table), for what the export holds."""
    def make(t: Trace) -> dict[str, Made]:
        n = 0
        for source in table_of(t):
            span = rowid_span(t.export.db, source.table)
            n += 0 if span is None else span[1] - span[0]
        return {out: np.array([n], dtype=np.int64)}
    return Derived((), make, store=NEVER)


def _range_names(t: Trace) -> dict[str, Made]:
    names = t.names_from_scan()
    return {"nvtx.names": (names.code, names.names)}


def _capture_end(t: Trace) -> dict[str, Made]:
    return {"capture_end": np.array([t.last_timestamp()], dtype=np.int64)}


def _pairs(mode: str, graphs: str) -> Derived:
    """The (range, kernel) attribution pairs (``Trace.attribute``): ``all`` from the kernels,
    their launches (or, for ``capture``, where their graphs were captured) and the ranges;
    ``innermost`` from those of ``all``."""
    name = PAIRS[(mode, graphs)]

    def inputs(t: Trace) -> tuple[str, ...]:
        if mode == "innermost":
            return tuple(f"{PAIRS[('all', graphs)]}.{x}" for x in ("range", "kernel"))
        groups: tuple[str, ...] = ("kernels", "launches", "ranges")
        if graphs == "capture":
            groups += ("kernel_ids", "graph_capture")
        return t.items_of(*groups)

    def make(t: Trace) -> dict[str, Made]:
        p = t.attribute(mode, graphs)
        return {f"{name}.range": p.range_idx, f"{name}.kernel": p.kernel_idx}
    return Derived(inputs, make)


ITEMS: dict[str, Column | Derived | Put] = {
    f"{prefix}.{key}": _column(prefix, key)
    for prefix, keys in Q.COLUMN_KEYS.items() for key in keys}
for _c in NAME_COLUMN.values():
    ITEMS[f"kernel.name_code.{_c}"] = _names_of_ids(f"kernel.name_id.{_c}",
                                                    f"kernel.name_code.{_c}")
ITEMS["api.name_code"] = _names_of_ids("api.name_id", "api.name_code")
for _prefix in ("kernel", "graph"):
    _join = _launches(_prefix)
    ITEMS.update({f"{_prefix}.{k}": _join for k in LAUNCH})
ITEMS["nvtx.names"] = Derived(("nvtx.key", *(f"nvtx.{k}" for k in NVTX)), _range_names)
# the names of the ranges that launch kernels, sought by rowid (Trace.range_names): a value
# the trace puts, not one the resolver makes
ITEMS["nvtx.names.sought"] = Put()
ITEMS["capture_end"] = Derived(("nvtx.start", "nvtx.end"), _capture_end)
ITEMS["graph.rows"] = _rows(lambda t: [Q.GRAPH_ROWS] if t.has_graphs else [], "graph.rows")
ITEMS["gnode.rows"] = _rows(lambda t: t.graph_node_sources(), "gnode.rows")
for (_mode, _graphs), _name in PAIRS.items():
    _made = _pairs(_mode, _graphs)
    ITEMS[f"{_name}.range"] = ITEMS[f"{_name}.kernel"] = _made
# The raw columns, for the reads.
COLUMNS = {name: spec for name, spec in ITEMS.items() if isinstance(spec, Column)}
