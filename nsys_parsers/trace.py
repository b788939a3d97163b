"""One export, loaded: each column a question needs is read once, from the export or from its
cache entry, and kept (``Trace``).

Questions ask for *groups* of columns (``GROUPS``); ``Trace.load(*groups)`` reads what is
missing of all of them at once: the chunks of every table go to one pool of reader threads
(``nsys_parsers.reads``), the largest table first, and every column read is stored in the
export's cache entry (``nsys_parsers.cache``), as are the values derived from them (kernel
names, the launch of each kernel, range names, attribution pairs). A column that the cache
holds is not read, and neither are the columns it was derived from.

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
``kernels``, ``kernel_ids``, ``kernel_places`` and ``launches`` groups read the graph launches
too: each launch is a row of ``kernels`` named after its graph (``nsys_parsers.graphs``), so
that every question counts the GPU time its kernels (not recorded) took.

The loaded data are values (``Kernels``, ``Ranges``, ``RangeNames``, ``Pairs``): views of
them (``take``) are new values, and nothing loaded is changed in place.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.arrays import factorize, sorted_unique
from nsys_parsers.attribution import (
    ATTRIBUTIONS,
    Pairs,
    attribute,
    innermost,
    launching_share,
)
from nsys_parsers.cache import ColumnCache, Item
from nsys_parsers.errors import BadOption
from nsys_parsers.export import Export
from nsys_parsers.graphs import (
    GraphLaunches,
    creation_points,
    kernels_with_graphs,
    not_recorded_as_nodes,
)
from nsys_parsers.kernels import ApiCalls, Kernels, join_launches, kernel_name_column
from nsys_parsers.memops import MEMCPY_KINDS, MemOps
from nsys_parsers.names import (
    RangeNames,
    kernel_names,
    range_names,
    resolve_keys,
    text_ids,
    union,
)
from nsys_parsers.ranges import Ranges, build_ranges, is_domain_row
from nsys_parsers.reads import (
    IntColumns,
    Reader,
    TextColumn,
    ints_from_json,
    rowid_chunks,
    rowid_span,
    strings_by_id,
)
from nsys_parsers.schema import (
    GRAPH_ATTRIBUTIONS,
    KERNEL_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    NVTX_TABLE,
)

GROUPS = ("kernels", "kernel_ids", "kernel_places", "launches", "ranges", "names", "memops",
          "api", "graphs", "graph_capture")
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
# Names of more than this share of the ranges are read by one scan of the NVTX table, which
# costs less per row than seeking each one by its rowid.
FULL_SCAN_SHARE = 0.35
ROWID_CHUNK = 200_000


class Trace:
    """The loaded columns of one export (``name_kind``: which kernel names; ``cache``: read
    and fill the export's cache entry). ``close()`` ends its reader threads."""

    def __init__(self, export: Export, *, name_kind: str = "demangled", cache: bool = True,
                 workers: int = 2):
        self.export = export
        self.name_kind = name_kind
        self.name_column, self.notes = kernel_name_column(export, name_kind)
        if not export.has_table(KERNEL_TABLE):  # graph launches only: no name columns
            self.notes = []
        self.cache = ColumnCache.for_export(export) if cache else None
        self.workers = workers
        self._cols: dict[str, np.ndarray] = {}
        self._strings: dict[str, list[str]] = {}
        self._names: RangeNames | None = None  # of the ranges, resolved so far
        self._ranges: Ranges | None = None
        self._pairs: dict[str, Pairs] = {}
        self._reader: Reader | None = None
        self._names_scan: TextColumn | None = None  # every range's name key, being read

    # -- what the export holds -------------------------------------------------------------
    @property
    def has_kernels(self) -> bool:
        """Whether the export has kernels: a kernel table, or graph launches (a whole-graph
        trace of graphs only)."""
        return self.has_kernel_table or self._graph_rows() > 0

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
        return bool(self._api_sources())

    @property
    def has_graphs(self) -> bool:
        return self.export.has_table(Q.GRAPH_TRACE_TABLE)

    @property
    def has_graph_records(self) -> bool:
        """Whether the export says anything about CUDA graphs: launches of whole graphs, or
        graph and graph node creation records."""
        return (self.has_graphs or bool(self._graph_node_sources())
                or bool(self._graph_event_sources()))

    @property
    def has_graph_nodes(self) -> bool:
        """Whether graph nodes were created under tracing (a non-empty table of node creation
        records): only then can kernels have been recorded as graph nodes."""
        return any(rowid_span(self.export.db, source.table) is not None
                   for source in self._graph_node_sources())

    def _graph_rows(self) -> int:
        """Rows of the graph trace table (0: none, or no table)."""
        if not self.has_graphs:
            return 0
        span = rowid_span(self.export.db, Q.GRAPH_TRACE_TABLE)
        return 0 if span is None else span[1] - span[0]

    def _graph_node_sources(self) -> list[Q.RowSource]:
        """The table of graph node creation records: CUDA_GRAPH_NODE_EVENTS, or (before nsys
        2023) CUDA_GRAPH_EVENTS."""
        for table in (Q.GRAPH_NODE_TABLE, Q.GRAPH_EVENTS_TABLE):
            if self.export.has_column(table, "graphNodeId"):
                return [Q.graph_node_rows(table)]
        return []

    def _graph_event_sources(self) -> list[Q.RowSource]:
        return ([Q.GRAPH_EVENT_ROWS] if self.export.has_column(Q.GRAPH_EVENTS_TABLE, "graphId")
                else [])

    def _api_sources(self) -> list[Q.RowSource]:
        return [s for s in Q.API_ROWS
                if all(self.export.has_column(s.table, c) for c in s.needs)]

    # -- loading ---------------------------------------------------------------------------
    def load(self, *groups: str) -> None:
        """Read what is missing of ``groups`` (of tables the export has), all at once."""
        unknown = set(groups) - set(GROUPS)
        if unknown:
            raise ValueError(f"unknown column groups: {', '.join(sorted(unknown))}")
        want = set(groups)
        kernel_groups = {"kernels", "kernel_ids", "kernel_places", "launches"}
        graph_kernels = self.has_graphs and bool(want & kernel_groups)
        if graph_kernels:  # graph launches are kernel rows
            want.add("graphs")
        if not self.has_kernel_table:
            want -= kernel_groups
        if not self.has_ranges:
            want -= {"ranges", "names"}
        if not self.has_memops:
            want.discard("memops")
        if not self.has_api:
            want.discard("api")
        if not self.has_graphs:
            want.discard("graphs")
        if "names" in want:
            want.add("ranges")
        reads: dict[str, set[str]] = {}  # prefix -> raw columns to read
        stored: dict[str, Item] = {}  # what goes to the cache
        transient: set[str] = set()  # columns read only to derive others: not stored

        def need(prefix: str, *keys: str) -> None:
            for key in keys:
                if self._item(f"{prefix}.{key}") is None:
                    reads.setdefault(prefix, set()).add(key)

        name_item = f"kernel.name_code.{self.name_column}"
        if "kernels" in want:
            need("kernel", "start", "end")
            if self._item(name_item) is None:
                reads.setdefault("kernel", set()).add(f"name_id.{self.name_column}")
        if "kernel_ids" in want:
            need("kernel", *KERNEL_IDS)
        elif "kernel_places" in want:
            need("kernel", *KERNEL_PLACES)
        if graph_kernels and "kernels" in want:  # which launches were recorded as nodes
            need("kernel", "pid", "correlation")
        join = "launches" in want and any(self._item(f"kernel.{k}") is None for k in LAUNCH)
        graph_join = (graph_kernels and "launches" in groups
                      and any(self._item(f"graph.{k}") is None for k in LAUNCH))
        if join:
            need("kernel", "pid", "correlation")
        if graph_join:
            need("graph", "pid", "correlation")
        if join or graph_join:
            if "api" in want:
                need("api", *API)
            else:  # read for the join alone
                for key in API:
                    if self._item(f"api.{key}") is None:
                        reads.setdefault("api", set()).add(key)
                        transient.add(f"api.{key}")
        api_names = "api" in want and self._item("api.name_code") is None
        if "api" in want:
            need("api", *API)
            if api_names:
                reads.setdefault("api", set()).add("name_id")
                transient.add("api.name_id")
        if "graphs" in want:
            need("graph", *GRAPHS)
        if "graph_capture" in want:
            if self._graph_node_sources():
                need("gnode", *GRAPH_NODES)
            if self._graph_event_sources():
                need("gevent", *GRAPH_EVENTS)
        if "ranges" in want:
            need("nvtx", *NVTX)
        scan_names = "names" in want and not self._complete_names()
        if scan_names and self._names_scan is None:
            reads.setdefault("nvtx", set()).add("key")
        if "memops" in want:
            for prefix, table in (("memcpy", MEMCPY_TABLE), ("memset", MEMSET_TABLE)):
                if self.export.has_table(table):
                    need(prefix, *MEMOPS)
        if reads:
            transient.add(f"kernel.name_id.{self.name_column}")
            self._read(reads, stored, transient)
        if "kernels" in want and name_item not in self._cols:
            ids = self._cols.pop(f"kernel.name_id.{self.name_column}")
            strings = strings_by_id(self.export.db, Q.STRINGS_BY_ID.sql(self.export),
                                    sorted_unique(ids))
            names, codes = kernel_names(strings, ids)
            self._keep(name_item, codes, names, stored)
        if join or graph_join:
            a = {k: self._cols[f"api.{k}"] for k in API}
            for prefix, joined in (("kernel", join), ("graph", graph_join)):
                if joined:
                    launch = join_launches(self._cols[f"{prefix}.pid"],
                                           self._cols[f"{prefix}.correlation"], a["start"],
                                           a["end"], a["tid"], a["correlation"])
                    for key, values in zip(LAUNCH, launch):
                        self._keep(f"{prefix}.{key}", values, None, stored)
            for name in transient & {f"api.{k}" for k in API}:
                del self._cols[name]
        if api_names:
            ids = self._cols.pop("api.name_id")
            strings = strings_by_id(self.export.db, Q.STRINGS_BY_ID.sql(self.export),
                                    sorted_unique(ids))
            names, codes = kernel_names(strings, ids)
            self._keep("api.name_code", codes, names, stored)
        if scan_names:
            if self._names_scan is not None:  # started by pairs(): read meanwhile
                (codes, keys), self._names_scan = self._names_scan.result(), None
            else:
                codes, keys = self._cols.pop("nvtx.key"), self._strings.pop("nvtx.key")
            self._set_names(self._names_from_keys(codes, keys), stored)
        if self.cache is not None:
            self.cache.put(stored, background=True)

    def _item(self, name: str) -> np.ndarray | None:
        """A column held, or taken from the cache (None: neither)."""
        if name in self._cols:
            return self._cols[name]
        item = self.cache.get(name) if self.cache is not None else None
        if item is None:
            return None
        self._cols[name] = item.array
        if item.strings is not None:
            self._strings[name] = item.strings
        return item.array

    def _keep(self, name: str, array: np.ndarray, strings: list[str] | None,
              stored: dict[str, Item]) -> None:
        self._cols[name] = array
        if strings is not None:
            self._strings[name] = strings
        stored[name] = Item(array, strings)

    def _read(self, reads: dict[str, set[str]], stored: dict[str, Item],
              transient: set[str]) -> None:
        """Read raw columns (``prefix -> keys``) of every table at once, NVTX first; those of
        ``transient`` are held but not stored."""
        sources = {"nvtx": [Q.NVTX_ROWS], "kernel": [Q.KERNEL_ROWS], "memcpy": [Q.MEMCPY_ROWS],
                   "memset": [Q.MEMSET_ROWS], "api": self._api_sources(),
                   "graph": [Q.GRAPH_ROWS], "gnode": self._graph_node_sources(),
                   "gevent": self._graph_event_sources()}
        reader = self.reader()
        texts: list[tuple[str, TextColumn]] = []
        pending: list[tuple[str, list[str], IntColumns]] = []
        for prefix in ("nvtx", "kernel", "memcpy", "memset", "api", "graph", "gnode", "gevent"):
            keys = sorted(reads.get(prefix, ()))
            if not keys:
                continue
            ints = [k for k in keys if k != "key"]
            for source in sources[prefix]:
                chunks = rowid_chunks(self.export.db, source.table)
                if "key" in keys:
                    texts.append((f"{prefix}.key", reader.text_column(
                        source.sql(self.export, ["key"]), Q.alias("key"), chunks)))
                if ints:
                    pending.append((prefix, ints, reader.int_columns(
                        source.sql(self.export, ints), [Q.alias(k) for k in ints], chunks)))
        for name, text in texts:
            self._cols[name], self._strings[name] = text.result()
        got: dict[str, list[np.ndarray]] = {}
        for prefix, keys, job in pending:
            for key, values in zip(keys, job.result()):
                got.setdefault(f"{prefix}.{key}", []).append(values)
        for name, parts in got.items():
            values = np.concatenate(parts) if len(parts) > 1 else parts[0]
            if name in transient:
                self._cols[name] = values
            else:
                self._keep(name, values, None, stored)

    def reader(self) -> Reader:
        if self._reader is None:
            self._reader = Reader(self.export.path, self.workers)
        return self._reader

    # -- the loaded values -----------------------------------------------------------------
    @property
    def kernels(self) -> Kernels | None:
        """The kernels (None: not traced), with the groups loaded so far; on exports with
        whole-graph traces, each graph launch is a row too (``nsys_parsers.graphs``)."""
        if not self.has_kernels:
            return None
        self.load("kernels")
        col = self._cols
        k = None
        if self.has_kernel_table:
            name_item = f"kernel.name_code.{self.name_column}"
            extra = {key: col.get(f"kernel.{key}") for key in KERNEL_IDS + LAUNCH}
            k = Kernels(start=col["kernel.start"], end=col["kernel.end"],
                        name_code=col[name_item], names=self._strings[name_item],
                        name_kind=self.name_kind, notes=list(self.notes), **extra)
        if not self.has_graphs:
            assert k is not None
            return k
        g = {key: col[f"graph.{key}"] for key in GRAPHS}
        g.update({key: col[f"graph.{key}"] for key in LAUNCH if f"graph.{key}" in col})
        keep = not_recorded_as_nodes(g["pid"], g["correlation"], col.get("kernel.pid"),
                                     col.get("kernel.correlation"))
        if not keep.all():
            g = {key: values[keep] for key, values in g.items()}
        return kernels_with_graphs(k, g, self.name_kind)

    @property
    def ranges(self) -> Ranges | None:
        """The NVTX ranges (None: not traced)."""
        if not self.has_ranges:
            return None
        if self._ranges is None:
            self.load("ranges")
            c = {k: self._cols[f"nvtx.{k}"] for k in NVTX}
            capture_end = self.capture_end() if bool((c["end"] < 0).any()) else 0
            self._ranges = build_ranges(c["start"], c["end"], c["tid"], c["flags"], c["rowid"],
                                        capture_end)
        return self._ranges

    def capture_end(self) -> int:
        """The last timestamp of any kernel, graph launch, launch call or NVTX event: where a
        range that was never closed ends."""
        held = self._item("capture_end")
        if held is not None:
            return int(held[0])
        db, ex = self.export.db, self.export
        ends = [int(self._cols["nvtx.start"].max(initial=0)),
                int(self._cols["nvtx.end"].max(initial=0))]
        if self.has_graphs:
            ends.append(int(db.execute(Q.LAST_GRAPH_END.sql(ex)).fetchone()[0] or 0))
        if self.has_kernels:  # and then their launch calls
            if self.has_kernel_table:
                ends.append(int(db.execute(Q.LAST_KERNEL_END.sql(ex)).fetchone()[0] or 0))
            for source in Q.API_ROWS:
                if all(ex.has_column(source.table, c) for c in source.needs):
                    ends.append(int(db.execute(Q.LAST_API_END.sql(ex, table=source.table)
                                               ).fetchone()[0] or 0))
        stored: dict[str, Item] = {}
        self._keep("capture_end", np.array([max(ends)], dtype=np.int64), None, stored)
        if self.cache is not None:
            self.cache.put(stored, background=True)
        return max(ends)

    @property
    def memops(self) -> MemOps | None:
        """memcpy and memset rows (None: neither was traced)."""
        if not self.has_memops:
            return None
        self.load("memops")
        labels = dict(MEMCPY_KINDS)
        if self.export.has_column("ENUM_CUDA_MEMCPY_OPER", "label"):
            labels.update({int(i): str(lbl) for i, lbl in self.export.db.execute(
                Q.MEMCPY_KIND_NAMES.sql(self.export))})
        parts = [(prefix, {k: self._cols[f"{prefix}.{k}"] for k in MEMOPS})
                 for prefix in ("memcpy", "memset") if f"{prefix}.start" in self._cols]
        cols = {k: np.concatenate([p[k] for _, p in parts]) for k in MEMOPS}
        memset = np.concatenate([np.full(p["start"].size, prefix == "memset")
                                 for prefix, p in parts])
        return MemOps(memset=memset, kind_labels=labels, **cols)

    @property
    def api(self) -> ApiCalls | None:
        """CUDA runtime and driver API calls (None: not traced)."""
        if not self.has_api:
            return None
        self.load("api")
        return ApiCalls(name_code=self._cols["api.name_code"],
                        names=self._strings["api.name_code"],
                        **{k: self._cols[f"api.{k}"] for k in API})

    @property
    def graphs(self) -> GraphLaunches | None:
        """CUDA graph launches of a whole-graph trace (None: no graph was traced)."""
        if not self.has_graphs:
            return None
        self.load("graphs")
        return GraphLaunches(**{k: self._cols[f"graph.{k}"] for k in GRAPHS})

    # -- range names -----------------------------------------------------------------------
    def _complete_names(self) -> bool:
        names = self._held_names()
        return names is not None and names.complete

    def _held_names(self) -> RangeNames | None:
        if self._names is None and self._item("nvtx.names") is not None:
            code = self._cols["nvtx.names"]
            names = self._strings["nvtx.names"]
            if code.size == self._cols.get("nvtx.start", code).size - self._domain_rows() and (
                    not code.size or int(code.max(initial=-1)) < len(names)):
                self._names = RangeNames(code=code, names=names)
        return self._names

    def _domain_rows(self) -> int:
        flags = self._cols.get("nvtx.flags")
        return int(is_domain_row(flags).sum()) if flags is not None else 0

    def range_names(self, rows: np.ndarray | None = None) -> RangeNames:
        """The names of ``ranges``: of all of them, or at least of those at ``rows`` (code -1
        for others not resolved yet: on exports with millions of ranges, the names of the
        few that launch kernels are sought by rowid)."""
        ranges = self.ranges
        assert ranges is not None, "range_names() needs NVTX ranges"
        have = self._held_names()
        if have is not None and (have.complete or (
                rows is not None and bool((have.code[rows] >= 0).all()))):
            return have
        if rows is not None and have is not None:
            rows = rows[have.code[rows] < 0]
        if rows is None or rows.size > FULL_SCAN_SHARE * len(ranges):
            self.load("names")
            assert self._names is not None
            return self._names
        names = self._names_of_rows(ranges, rows)
        stored: dict[str, Item] = {}
        self._set_names(union(have, names) if have is not None else names, stored)
        if self.cache is not None:
            self.cache.put(stored, background=True)
        assert self._names is not None
        return self._names

    def _set_names(self, names: RangeNames, stored: dict[str, Item]) -> None:
        self._names = names
        self._keep("nvtx.names", names.code, names.names, stored)

    def _scan_names_ahead(self, kernels: Kernels, ranges: Ranges) -> None:
        """Start reading every range's name on the reader threads while the pairs are
        computed, when the names of the ranges that launch kernels, asked next, will come
        from one scan anyway (more than FULL_SCAN_SHARE of a sample of ranges launch one)."""
        if (self._names_scan is not None or self._held_names() is not None
                or launching_share(kernels, ranges) <= FULL_SCAN_SHARE):
            return
        self._names_scan = self.reader().text_column(
            Q.NVTX_ROWS.sql(self.export, ["key"]), Q.alias("key"),
            rowid_chunks(self.export.db, Q.NVTX_ROWS.table))

    def _names_from_keys(self, codes: np.ndarray, keys: list[str]) -> RangeNames:
        """Names of every range from the key code of every NVTX row read."""
        ranges = self.ranges
        assert ranges is not None
        dom = is_domain_row(self._cols["nvtx.flags"])
        range_codes = codes[~dom] if dom.any() else codes
        return range_names(ranges, range_codes, codes[dom], self._resolve(keys))

    def _names_of_rows(self, ranges: Ranges, rows: np.ndarray) -> RangeNames:
        """Names of the ranges at ``rows`` (and of the domains), by rowid seeks."""
        want = sorted_unique(np.concatenate([ranges.rowid[rows], ranges.domains[:, 0]]))
        rid, codes, keys = self._keys_by_rowid(want)
        range_codes = np.full(len(ranges), -1, dtype=np.int64)
        if len(ranges):
            pos = np.minimum(np.searchsorted(ranges.rowid, rid), len(ranges) - 1)
            ok = ranges.rowid[pos] == rid
            range_codes[pos[ok]] = codes[ok]
        dpos = np.searchsorted(rid, ranges.domains[:, 0])
        dom_codes = (codes[np.minimum(dpos, max(rid.size - 1, 0))] if rid.size
                     else np.zeros(0, dtype=np.int64))
        return range_names(ranges, range_codes, dom_codes, self._resolve(keys))

    def _keys_by_rowid(self, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """(rowids, key code of each, distinct keys) of NVTX rows, sought in chunks on the
        reader threads."""
        sql = Q.NVTX_KEYS_BY_ROWID.sql(self.export, name_key=Q.nvtx_name_key(self.export))

        def job(ids: str) -> Any:
            def run(conn: Any) -> tuple[np.ndarray, list[str]]:
                rid_json, keys_json = conn.execute(sql, (ids,)).fetchone()
                return ints_from_json(rid_json), json.loads(keys_json)
            return run

        step = max(1, min(ROWID_CHUNK, -(-rowids.size // max(1, self.workers))))
        futures = [self.reader().submit(job(json.dumps(rowids[a:a + step].tolist())))
                   for a in range(0, rowids.size, step)]
        parts = [f.result() for f in futures]
        if not parts:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
        codes, keys = factorize([k for _, ks in parts for k in ks])
        return np.concatenate([r for r, _ in parts]), codes, keys

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
        key = mode if graphs == "launch" else f"capture.{mode}"
        if key not in self._pairs:
            r, k = self._item(f"pairs.{key}.range"), self._item(f"pairs.{key}.kernel")
            if r is not None and k is not None and r.size == k.size:
                self._pairs[key] = Pairs(range_idx=r, kernel_idx=k)
            else:
                self.load("kernels", "launches", "ranges")
                ranges = self.ranges
                kernels = self.kernels if graphs == "launch" else self.capture_kernels()
                assert kernels is not None and ranges is not None
                if mode != "innermost":
                    self._scan_names_ahead(kernels, ranges)
                p = (innermost(self.pairs("all", graphs), ranges) if mode == "innermost"
                     else attribute(kernels, ranges, mode))
                stored: dict[str, Item] = {}
                self._keep(f"pairs.{key}.range", p.range_idx, None, stored)
                self._keep(f"pairs.{key}.kernel", p.kernel_idx, None, stored)
                if self.cache is not None:
                    self.cache.put(stored, background=True)
                self._pairs[key] = p
        return self._pairs[key]

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
            rec = ({"id": self._cols[f"{prefix}.{keys[0]}"],
                    **{c: self._cols[f"{prefix}.{c}"] for c in ("tid", "start", "end",
                                                                "original")}}
                   if f"{prefix}.start" in self._cols else
                   {c: np.zeros(0, dtype=np.int64) for c in ("id", "tid", "start", "end",
                                                             "original")})
            if prefix == "gevent" and rec["id"].size:  # graphs created or cloned, not execs
                made = self._cols["gevent.exec"] < 0
                rec = {c: v[made] for c, v in rec.items()}
            t, s0, e0 = creation_points(k.pid[rows], ids, rec)
            tid[rows], start[rows], end[rows] = t, s0, e0
        return replace(k, launch_tid=tid, launch_start=start, launch_end=end)

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
