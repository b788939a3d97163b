"""One export, loaded: the values questions are answered from (``Kernels``, ``Ranges``,
``RangeNames``, ``Pairs``, ...), built from items (``nsys_parsers.items``: raw columns and
values derived from them) that one resolver (``nsys_parsers.resolver``) takes from memory,
the export's cache entry, one batched read, or derives.

Questions ask for *groups* of items (``GROUPS``); ``Trace.load(*groups)`` resolves all of
them at once, and every value here resolves what it is built from the same way:

    kernels     start, end and name of every kernel (the name kind of the trace)
    kernel_ids  process (globalPid), correlationId, device, stream, context, graph and
                graph node ids of every kernel
    kernel_places  process, device and stream of every kernel (of kernel_ids: where it ran)
    launches    the API call that launched each kernel: its thread, start and end
    ranges      NVTX ranges (and the domain-create rows that name their domains)
    names       the name of every NVTX range (``range_names(rows)`` resolves fewer)
    memops      memcpy and memset rows
    api         CUDA runtime and driver API calls (with a correlationId), named
    graphs      CUDA graph launches (whole-graph trace rows)
    graph_capture  graph and graph node creation records (where graph kernels were captured)

On an export with whole-graph traces (nsys's default ``--cuda-graph-trace=graph``) the
``kernels``, ``kernel_ids``, ``kernel_places`` and ``launches`` groups hold the graph launches
too: each launch is a row of ``kernels`` named after its graph (``nsys_parsers.graphs``), so
that every question counts the GPU time its kernels (not recorded) took.

The values are built once for the items held (``kernels`` again when more of its id or launch
columns are loaded), and views of them (``take``) are new values: nothing loaded is changed
in place.
"""

from __future__ import annotations

import json
import weakref
from dataclasses import replace
from typing import Any, Callable

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.arrays import (
    codes_in,
    factorize,
    gather,
    let_go,
    let_go_all,
    sorted_unique,
    value_range,
)
from nsys_parsers.attribution import (
    ATTRIBUTIONS,
    Pairs,
    attribute,
    innermost,
    launching_share,
)
from nsys_parsers.budget import check_need
from nsys_parsers.cache import ColumnCache, held, joined
from nsys_parsers.completeness import Extents
from nsys_parsers.errors import BadOption
from nsys_parsers.export import Export
from nsys_parsers.graphs import (
    GraphLaunches,
    creation_points,
    kernels_with_graphs,
    not_recorded_as_nodes,
)
from nsys_parsers.items import (
    API,
    GRAPH_EVENTS,
    GRAPH_NODES,
    GRAPHS,
    ITEMS,
    KERNEL_IDS,
    KERNEL_PLACES,
    LAUNCH,
    MEMOPS,
    NVTX,
    PAIRS,
)
from nsys_parsers.kernels import ApiCalls, Kernels, kernel_name_column
from nsys_parsers.memops import MEMCPY_KINDS, MemOps
from nsys_parsers.names import RangeNames, range_names, resolve_keys, text_ids, union
from nsys_parsers.ranges import Ranges, build_ranges, is_domain_row
from nsys_parsers.reads import Reader, ints_from_json, strings_by_id
from nsys_parsers.resolver import Resolver
from nsys_parsers.schema import (
    GRAPH_ATTRIBUTIONS,
    KERNEL_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    NVTX_TABLE,
)

GROUPS = ("kernels", "kernel_ids", "kernel_places", "launch_ids", "launches", "ranges", "names",
          "memops", "api", "graphs", "graph_capture")
# Names of more than this share of the ranges are read by one scan of the NVTX table, which
# costs less per row than seeking each one by its rowid.
FULL_SCAN_SHARE = 0.35
ROWID_CHUNK = 200_000


class Trace:
    """The loaded values of one export (``name_kind``: which kernel names; ``cache``: read
    and fill the export's cache entry). ``close()`` ends its reader threads and waits for
    the cache writes."""

    def __init__(self, export: Export, *, name_kind: str = "demangled", cache: bool = True,
                 workers: int = 2):
        self.export = export
        self.name_kind = name_kind
        self.name_column, self.notes = kernel_name_column(export, name_kind)
        self.workers = workers
        self._reader: Reader | None = None
        self.resolver = Resolver(export, ColumnCache.for_export(export) if cache else None,
                                 self.reader, self.sources, self)
        self._values: dict[Any, Any] = {}
        self.loaded: set[str] = set()  # the column groups loaded
        # the question being answered and its bytes per row of the tables it reads: its
        # first load of tables not read yet is checked against the memory budget first
        self.expected: tuple[str, int] | None = None
        if not export.has_table(KERNEL_TABLE):  # graph launches only: no name columns
            self.notes = []
        # where the CUDA trace ends, read beside the first answer (nsys_parsers.completeness)
        self.extents = Extents(export, self.cache, self.reader())

    @property
    def cache(self) -> ColumnCache | None:
        return self.resolver.cache

    # -- what the export holds -------------------------------------------------------------
    @property
    def has_kernels(self) -> bool:
        """Whether the export has kernels: a kernel table, or graph launches (a whole-graph
        trace of graphs only)."""
        return self.has_kernel_table or self._count("graph.rows") > 0

    @property
    def has_kernel_table(self) -> bool:
        return self.export.has_table(KERNEL_TABLE)

    @property
    def has_ranges(self) -> bool:
        return self.export.has_table(NVTX_TABLE)

    @property
    def has_memops(self) -> bool:
        return self.export.has_table(MEMCPY_TABLE) or self.export.has_table(MEMSET_TABLE)

    @property
    def has_api(self) -> bool:
        return bool(self.sources("api"))

    @property
    def has_graphs(self) -> bool:
        return self.export.has_table(Q.GRAPH_TRACE_TABLE)

    @property
    def has_graph_records(self) -> bool:
        """Whether the export says anything about CUDA graphs: launches of whole graphs, or
        graph and graph node creation records."""
        return self.has_graphs or bool(self.sources("gnode")) or bool(self.sources("gevent"))

    @property
    def has_graph_nodes(self) -> bool:
        """Whether graph nodes were created under tracing (a non-empty table of node creation
        records): only then can kernels have been recorded as graph nodes."""
        return self._count("gnode.rows") > 0

    def _count(self, name: str) -> int:
        self.resolver.get(name)
        return int(self.resolver.array(name)[0])

    def sources(self, prefix: str) -> list[Q.RowSource]:
        """The row sources (tables) of this export that the raw columns ``<prefix>.*`` are
        read from ([]: the export lacks them)."""
        return Q.SOURCES[prefix](self.export)

    def graph_node_sources(self) -> list[Q.RowSource]:
        return self.sources("gnode")

    # -- loading ---------------------------------------------------------------------------
    def items_of(self, *groups: str) -> tuple[str, ...]:
        """The items of column groups (``GROUPS``), for the tables this export has; an item
        name (``nsys_parsers.items.ITEMS``) stands for itself."""
        unknown = set(groups) - set(GROUPS) - set(ITEMS)
        if unknown:
            raise ValueError(f"unknown column groups or items: {', '.join(sorted(unknown))}")
        want = set(groups)
        out: list[str] = [g for g in groups if g not in GROUPS]

        def add(prefix: str, keys: tuple[str, ...] | list[str]) -> None:
            out.extend(f"{prefix}.{k}" for k in keys)

        table = self.has_kernel_table
        graphs = self.has_graphs and bool(want & {"kernels", "kernel_ids", "kernel_places",
                                                  "launches", "graphs"})
        if "kernels" in want and table:
            add("kernel", ("start", "end", f"name_code.{self.name_column}"))
            if self.has_graphs:  # which graph launches were recorded as nodes
                add("kernel", ("pid", "correlation"))
        if "kernel_ids" in want and table:
            add("kernel", KERNEL_IDS)
        elif "kernel_places" in want and table:
            add("kernel", KERNEL_PLACES)
        if "launch_ids" in want and table:  # what their launch calls are found by
            add("kernel", ("pid", "correlation"))
        if "launches" in want:
            if table:
                add("kernel", LAUNCH)
            if self.has_graphs:
                add("graph", LAUNCH)
        if graphs:
            add("graph", GRAPHS)
        if want & {"ranges", "names"} and self.has_ranges:
            add("nvtx", NVTX)
            if "names" in want:
                out.append("nvtx.names")
        if "memops" in want:
            for prefix in ("memcpy", "memset"):
                if self.sources(prefix):
                    add(prefix, MEMOPS)
        if "api" in want and self.has_api:
            add("api", API)
            out.append("api.name_code")
        if "graph_capture" in want:
            if self.sources("gnode"):
                add("gnode", GRAPH_NODES)
            if self.sources("gevent"):
                add("gevent", GRAPH_EVENTS)
        return tuple(dict.fromkeys(out))

    def load(self, *groups: str) -> None:
        """Resolve the items of ``groups`` (of tables the export has), all at once."""
        names = self.items_of(*groups)
        asked = {g for g in groups if g in GROUPS}
        more = asked - self.loaded
        if self.expected is not None and more:
            what, per_row = self.expected
            self.expected = None  # once a question: its bytes per row are of its first load
            tables = self.resolver.tables_of(self.items_of(*(self.loaded | more)))
            check_need(self.export, tables, per_row, what, in_memory=self.cache is None)
        if "nvtx.names" in names and self._complete_names():
            names = tuple(n for n in names if n != "nvtx.names")
        self.resolver.get(*names)
        self.loaded |= asked

    def reader(self) -> Reader:
        if self._reader is None:
            self._reader = Reader(self.export.path, self.workers)
        return self._reader

    def let_go(self) -> None:
        """Let the pages of every mapped item and every value built from them go
        (``arrays.let_go_all``; scratch arrays too): between the questions of an answer
        that asks many, what one read is not resident through the next."""
        self.resolver.let_go()
        let_go_all(list(self._values.values()))

    def _value(self, key: Any, make: Callable[[], Any]) -> Any:
        """A value built once per ``key`` (the items it was built from)."""
        if key not in self._values:
            self._values[key] = make()
            self.resolver.let_go()  # what building it read of the mapped items
        return self._values[key]

    # -- the loaded values -----------------------------------------------------------------
    @property
    def kernels(self) -> Kernels | None:
        """The kernels (None: not traced), with the id and launch columns loaded so far; on
        exports with whole-graph traces, each graph launch is a row too
        (``nsys_parsers.graphs``)."""
        if not self.has_kernels:
            return None
        self.load("kernels")
        r = self.resolver
        held = tuple(f"{prefix}.{n}" for prefix in ("kernel", "graph")
                     for n in (*KERNEL_IDS, *LAUNCH) if r.optional(f"{prefix}.{n}") is not None)
        return self._value(("kernels", held), self._make_kernels)

    def _make_kernels(self) -> Kernels:
        r = self.resolver
        k = None
        if self.has_kernel_table:
            name_item = f"kernel.name_code.{self.name_column}"
            extra = {key: r.optional(f"kernel.{key}") for key in KERNEL_IDS + LAUNCH}
            k = Kernels(start=r.array("kernel.start"), end=r.array("kernel.end"),
                        name_code=r.array(name_item), names=r.strings(name_item),
                        name_kind=self.name_kind, notes=list(self.notes), **extra)
        if not self.has_graphs:
            assert k is not None
            return k
        g = {key: r.array(f"graph.{key}") for key in GRAPHS}
        g.update({key: r.array(f"graph.{key}") for key in LAUNCH
                  if r.optional(f"graph.{key}") is not None})
        keep = not_recorded_as_nodes(g["pid"], g["correlation"], r.optional("kernel.pid"),
                                     r.optional("kernel.correlation"))
        if not keep.all():
            g = {key: values[keep] for key, values in g.items()}
        return kernels_with_graphs(k, g, self.name_kind)

    @property
    def ranges(self) -> Ranges | None:
        """The NVTX ranges (None: not traced)."""
        if not self.has_ranges:
            return None
        self.load("ranges")
        return self._value("ranges", self._make_ranges)

    def _make_ranges(self) -> Ranges:
        c = {k: self.resolver.array(f"nvtx.{k}") for k in NVTX}

        def capture_end() -> int:  # asked only when some range was never closed
            self.resolver.get("capture_end")
            return int(self.resolver.array("capture_end")[0])
        return build_ranges(c["start"], c["end"], c["tid"], c["flags"], c["rowid"],
                            capture_end)

    def last_timestamp(self) -> int:
        """The last timestamp of any kernel, graph launch, launch call or NVTX event: where a
        range that was never closed ends (the item ``capture_end``)."""
        return max(int(self.resolver.array("nvtx.start").max(initial=0)),
                   int(self.resolver.array("nvtx.end").max(initial=0)), self.last_gpu_work())

    def last_gpu_work(self) -> int:
        """The last end of any kernel, graph launch or launch call (0: none), from SQLite."""
        db, ex = self.export.db, self.export
        ends = [0]
        if self.has_graphs:
            ends.append(int(db.execute(Q.LAST_GRAPH_END.sql(ex)).fetchone()[0] or 0))
        if self.has_kernels:  # and then their launch calls
            if self.has_kernel_table:
                ends.append(int(db.execute(Q.LAST_KERNEL_END.sql(ex)).fetchone()[0] or 0))
            for source in self.sources("api"):
                ends.append(int(db.execute(Q.LAST_API_END.sql(ex, table=source.table)
                                           ).fetchone()[0] or 0))
        return max(ends)

    @property
    def memops(self) -> MemOps | None:
        """memcpy and memset rows (None: neither was traced)."""
        if not self.has_memops:
            return None
        self.load("memops")
        return self._value("memops", self._make_memops)

    def _make_memops(self) -> MemOps:
        labels = dict(MEMCPY_KINDS)
        if self.export.has_column("ENUM_CUDA_MEMCPY_OPER", "label"):
            labels.update({int(i): str(lbl) for i, lbl in self.export.db.execute(
                Q.MEMCPY_KIND_NAMES.sql(self.export))})
        r = self.resolver
        parts = [(prefix, {k: r.array(f"{prefix}.{k}") for k in MEMOPS})
                 for prefix in ("memcpy", "memset") if self.sources(prefix)]
        cols = {k: joined([p[k] for _, p in parts]) for k in MEMOPS}  # in scratch when large
        memset = np.concatenate([np.full(p["start"].size, prefix == "memset")
                                 for prefix, p in parts])
        return MemOps(memset=memset, kind_labels=labels, **cols)

    @property
    def api(self) -> ApiCalls | None:
        """CUDA runtime and driver API calls (None: not traced)."""
        if not self.has_api:
            return None
        self.load("api")
        r = self.resolver
        return self._value("api", lambda: ApiCalls(
            name_code=r.array("api.name_code"), names=r.strings("api.name_code"),
            **{k: r.array(f"api.{k}") for k in API}))

    @property
    def graphs(self) -> GraphLaunches | None:
        """CUDA graph launches of a whole-graph trace (None: no graph was traced)."""
        if not self.has_graphs:
            return None
        self.load("graphs")
        return self._value("graphs", lambda: GraphLaunches(
            **{k: self.resolver.array(f"graph.{k}") for k in GRAPHS}))

    # -- range names -----------------------------------------------------------------------
    def _complete_names(self) -> bool:
        return self.resolver.held("nvtx.names") and self._valid_names("nvtx.names")

    def _valid_names(self, item: str) -> bool:
        """Whether a names item held is of these ranges (one code per range, codes that
        index its names)."""
        code, names = self.resolver.array(item), self.resolver.strings(item)
        rows = self.resolver.array("nvtx.start").size if self.resolver.held("nvtx.start") \
            else code.size
        return code.size == rows - self._domain_rows() and (
            not code.size or self._of_array(("max code", item), code,
                                             lambda: value_range(code)[1]) < len(names))

    def _domain_rows(self) -> int:
        if not self.resolver.held("nvtx.flags"):
            return 0
        flags = self.resolver.array("nvtx.flags")
        return self._of_array("domain rows", flags, lambda: int(is_domain_row(flags).sum()))

    def _of_array(self, key: Any, array: np.ndarray, make: Callable[[], Any]) -> Any:
        """A value of ``array`` built once while that array lives (questions ask for the
        names again and again: a scan of every range each time was 14 s of `diff`'s 28 at
        x300 of the benchmark)."""
        held = self._values.get(key)
        if held is None or held[0]() is not array:
            held = (weakref.ref(array), make())
            self._values[key] = held
        return held[1]

    def _names(self, item: str) -> RangeNames:
        return self._value(("names", item, id(self.resolver.array(item))), lambda: RangeNames(
            code=self.resolver.array(item), names=self.resolver.strings(item)))

    def range_names(self, rows: np.ndarray | None = None) -> RangeNames:
        """The names of ``ranges``: of all of them, or at least of those at ``rows`` (code -1
        for others not resolved yet: on exports with millions of ranges, the names of the
        few that launch kernels are sought by rowid, a speed device)."""
        ranges = self.ranges
        assert ranges is not None, "range_names() needs NVTX ranges"
        if self._complete_names():
            return self._names("nvtx.names")
        have = (self._names("nvtx.names.sought")
                if self.resolver.held("nvtx.names.sought")
                and self._valid_names("nvtx.names.sought") else None)
        if have is not None and (have.complete or (
                rows is not None and bool((have.code[rows] >= 0).all()))):
            return have
        if rows is not None and have is not None:
            rows = rows[have.code[rows] < 0]
        if rows is None or rows.size > FULL_SCAN_SHARE * len(ranges):
            self.load("names")
            return self._names("nvtx.names")
        names = self._names_of_rows(ranges, rows)
        names = union(have, names) if have is not None else names
        self.resolver.put("nvtx.names.sought", (names.code, names.names))
        return self._names("nvtx.names.sought")

    def names_from_scan(self) -> RangeNames:
        """Names of every range from the name key of every NVTX row read (the item
        ``nvtx.names``)."""
        ranges = self.ranges
        assert ranges is not None
        codes, keys = self.resolver.array("nvtx.key"), self.resolver.strings("nvtx.key")
        dom = is_domain_row(self.resolver.array("nvtx.flags"))
        self.resolver.let_go()  # what the steps before mapped: the flags just read through
        range_codes = codes[~dom] if dom.any() else codes
        return range_names(ranges, range_codes, codes[dom], self._resolve(keys))

    def _scan_names_ahead(self, kernels: Kernels, ranges: Ranges) -> None:
        """Start reading every range's name on the reader threads while the pairs are
        computed, when the names of the ranges that launch kernels, asked next, will come
        from one scan anyway (more than FULL_SCAN_SHARE of a sample of ranges launch one):
        a speed device."""
        scanned_later = (self._complete_names() or self.resolver.held("nvtx.names.sought")
                         or launching_share(kernels, ranges) <= FULL_SCAN_SHARE)
        self.resolver.let_go()  # what deciding read: the names' checks, the sample's rows
        if not scanned_later:
            self.resolver.start("nvtx.key")

    def names_of_nvtx_rows(self, cols: dict[str, np.ndarray], rows: np.ndarray) -> list[str]:
        """The names of a few NVTX rows, sought by rowid: ``cols``, the raw ``nvtx.*`` columns
        of some rows in table order (every domain-create row among them), and ``rows``, the
        range rows among those whose names are wanted. What a question that needs the names
        of a handful of ranges asks without building the ``Ranges`` of every one."""
        if rows.size == 0:
            return []
        few = build_ranges(cols["start"], cols["end"], cols["tid"], cols["flags"],
                           cols["rowid"], lambda: 0)
        at = np.searchsorted(cols["rowid"][~is_domain_row(cols["flags"])], cols["rowid"][rows])
        names = self._names_of_rows(few, np.arange(len(few)))
        return [names.names[int(c)] for c in names.code[at].tolist()]

    def _names_of_rows(self, ranges: Ranges, rows: np.ndarray) -> RangeNames:
        """Names of the ranges at ``rows`` (and of the domains), by rowid seeks: each chunk's
        key codes written to a code per range (scratch when large) as it comes."""
        want = sorted_unique(np.concatenate([gather(ranges.rowid, rows),  # windowed
                                             ranges.domains[:, 0]]))
        range_codes = held(len(ranges), np.int32)
        range_codes.fill(-1)
        let_go(range_codes)
        dom_rowid = ranges.domains[:, 0]
        dom_codes = np.zeros(dom_rowid.size, dtype=np.int64)

        def found(rid: np.ndarray, codes: np.ndarray) -> None:
            order = np.argsort(rid, kind="stable")  # the chunk's rows in rowid order
            rid, codes = rid[order], codes[order]
            if len(ranges):
                pos = np.minimum(np.searchsorted(ranges.rowid, rid), len(ranges) - 1)
                ok = gather(ranges.rowid, pos) == rid
                range_codes[pos[ok]] = codes[ok]
                let_go(ranges.rowid)
                let_go(range_codes)
            at = np.minimum(np.searchsorted(rid, dom_rowid), max(rid.size - 1, 0))
            hit = rid[at] == dom_rowid if rid.size else np.zeros(dom_rowid.size, dtype=bool)
            dom_codes[hit] = codes[at[hit]]
        keys = self._keys_by_rowid(want, found)
        del want
        return range_names(ranges, range_codes, dom_codes, self._resolve(keys), owned=True)

    def _keys_by_rowid(self, rowids: np.ndarray,
                       found: Callable[[np.ndarray, np.ndarray], None]) -> list[str]:
        """The distinct keys of NVTX rows, sought in chunks on the reader threads; each
        chunk's (rowids, key code of each) given to ``found`` as it comes."""
        sql = Q.NVTX_KEYS_BY_ROWID.sql(self.export, name_key=Q.nvtx_name_key(self.export))

        def job(ids: np.ndarray) -> Any:
            def run(conn: Any) -> tuple[np.ndarray, np.ndarray, list[str]]:
                rid_json, keys_json = conn.execute(sql, (json.dumps(ids.tolist()),)).fetchone()
                codes, distinct = factorize(json.loads(keys_json))  # a chunk's keys: few
                return ints_from_json(rid_json), codes, distinct
            return run

        step = max(1, min(ROWID_CHUNK, -(-rowids.size // max(1, self.workers))))
        futures = [self.reader().submit(job(rowids[a:a + step]))  # its text made there
                   for a in range(0, rowids.size, step)]
        # each chunk's codes mapped to the codes of all its keys, in order of first sight
        # (what one factorize of every key gives), not every row's key string held at once
        index: dict[str, int] = {}
        futures.reverse()
        while futures:  # a chunk let go once given
            rid, part, distinct = futures.pop().result()
            found(rid, codes_in(index, distinct)[part])
        return list(index)

    def _resolve(self, keys: list[str]) -> list[str]:
        strings = strings_by_id(self.export.db, Q.STRINGS_BY_ID.sql(self.export),
                                text_ids(keys)) if self.export.has_table("StringIds") else {}
        return resolve_keys(keys, strings)

    # -- attribution -----------------------------------------------------------------------
    def pairs(self, mode: str = "all", graphs: str = "launch") -> Pairs:
        """(range, kernel) attribution pairs of every range and kernel (``all`` or
        ``innermost``: ``nsys_parsers.attribution``). ``graphs``: kernels of CUDA graphs count
        where their graph was launched (``launch``, as nsys) or where it was captured
        (``capture``: ``capture_kernels``)."""
        if mode not in ATTRIBUTIONS:
            raise BadOption(f"unknown attribution {mode!r}; use one of "
                            f"{', '.join(ATTRIBUTIONS)}")
        if graphs not in GRAPH_ATTRIBUTIONS:
            raise BadOption(f"unknown graph attribution {graphs!r}; use one of "
                            f"{', '.join(GRAPH_ATTRIBUTIONS)}")
        name = PAIRS[(mode, graphs)]
        self.resolver.get(f"{name}.range", f"{name}.kernel")
        r, k = self.resolver.array(f"{name}.range"), self.resolver.array(f"{name}.kernel")
        return self._value(("pairs", name, id(r)), lambda: Pairs(range_idx=r, kernel_idx=k))

    def attribute(self, mode: str, graphs: str) -> Pairs:
        """The pairs computed (the ``pairs.*`` items are made of this)."""
        ranges = self.ranges
        if mode == "innermost":
            assert ranges is not None
            return innermost(self.pairs("all", graphs), ranges)
        kernels = self.kernels if graphs == "launch" else self.capture_kernels()
        assert kernels is not None and ranges is not None
        self._scan_names_ahead(kernels, ranges)
        return attribute(kernels, ranges, mode)

    def capture_kernels(self, kernels: Kernels | None = None) -> Kernels:
        """``kernels`` (default: all) as capture-time attribution sees them: the "launch" of a
        kernel recorded as a graph node is the creation of the node it was cloned from (the
        call that captured or added it: its thread and time), that of a whole-graph launch
        the creation of its graph; -1 (no range) where the export has no such record. Other
        kernels keep their launch."""
        self.load("kernels", "kernel_ids", "launches", "graph_capture")
        k = self.kernels if kernels is None else kernels
        assert k is not None and k.launch_tid is not None and k.launch_start is not None \
            and k.launch_end is not None and k.pid is not None and k.graph_node is not None
        tid, start, end = k.launch_tid.copy(), k.launch_start.copy(), k.launch_end.copy()
        for rows, ids, prefix, keys in self._capture_rows(k):
            if rows.size == 0:
                continue
            rec = self._creation_records(prefix, keys[0])
            t, s0, e0 = creation_points(k.pid[rows], ids, rec)
            tid[rows], start[rows], end[rows] = t, s0, e0
        return replace(k, launch_tid=tid, launch_start=start, launch_end=end)

    def _creation_records(self, prefix: str, id_key: str) -> dict[str, np.ndarray]:
        """The creation records of graph nodes (``gnode``) or graphs (``gevent``: those
        created or cloned, not instantiated) as id, thread, start, end and original id."""
        r = self.resolver
        if r.optional(f"{prefix}.start") is None:
            return {c: np.zeros(0, dtype=np.int64)
                    for c in ("id", "tid", "start", "end", "original")}
        rec = {"id": r.array(f"{prefix}.{id_key}"),
               **{c: r.array(f"{prefix}.{c}") for c in ("tid", "start", "end", "original")}}
        if prefix == "gevent" and rec["id"].size:
            made = r.array("gevent.exec") < 0
            rec = {c: v[made] for c, v in rec.items()}
        return rec

    def _capture_rows(self, k: Kernels) -> list[tuple[np.ndarray, np.ndarray, str, tuple]]:
        """(rows of ``k``, their graph node or graph ids, record prefix, id key) of the
        kernels recorded as graph nodes and of the whole-graph launches."""
        assert k.graph_node is not None and k.graph is not None
        nodes = np.flatnonzero(k.graph_node >= 0)
        graphs = (np.flatnonzero(k.graph_launch) if k.graph_launch is not None
                  else np.zeros(0, dtype=np.int64))
        return [(nodes, k.graph_node[nodes], "gnode", ("node",)),
                (graphs, k.graph[graphs], "gevent", ("graph",))]

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
        if self.cache is not None:
            self.cache.flush()
