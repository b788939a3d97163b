"""Every SQL statement the readers run, named, with the tables and columns it needs.

``Query.sql(export, **parts)`` checks the export's schema first: a missing table raises
``MissingData`` with the ``nsys profile --trace`` option that would have produced it; the
parts filled into a template (``{columns}``) are built here from the schema, never from user
input. Values are always bound parameters.

``RowSource`` is a table read chunk by chunk (``:lo``/``:hi`` rowid bounds) with the SQL
expression of each column a reader may take from it: ``nsys_parsers.trace`` asks for the
columns it needs, all of them in one scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Union

from nsys_parsers.errors import MissingData
from nsys_parsers.schema import (
    DRIVER_TABLE,
    KERNEL_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    NVTX_DOMAIN_CREATE,
    NVTX_RANGE_TYPES,
    NVTX_TABLE,
    RUNTIME_TABLE,
    STRINGS_TABLE,
    Schema,
    sql_list,
)

# NVTX rows the readers use: ranges and the domain-create rows that name their domains.
_NVTX_READ_TYPES = sql_list(NVTX_RANGE_TYPES + (NVTX_DOMAIN_CREATE,))


def require_columns(export: Schema, table: str, columns: tuple[str, ...], purpose: str) -> None:
    export.require(table, purpose)
    missing = [c for c in columns if not export.has_column(table, c)]
    if missing:
        raise MissingData(f"{export.label}: table {table} lacks column(s) {', '.join(missing)} "
                          f"needed for {purpose}; this export's schema is not supported for "
                          f"that report.")


@dataclass(frozen=True)
class Query:
    name: str
    template: str
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    purpose: str = ""

    def sql(self, export: Schema, **parts: str) -> str:
        """The statement for this export (``parts``: SQL fragments built from its schema)."""
        for table, cols in self.needs.items():
            require_columns(export, table, cols, self.purpose or self.name)
        return self.template.format(**parts)


# A column's SQL expression: fixed, or made from the export's schema.
Expr = Union[str, Callable[[Schema], str]]


@dataclass(frozen=True)
class RowSource:
    """Rows of one table, read in rowid chunks, and the columns a reader may take."""

    name: str
    table: str
    columns: dict[str, Expr]
    needs: tuple[str, ...] = ()
    where: str = ""
    purpose: str = ""
    text: tuple[str, ...] = ()  # columns read as text: a code per row and the distinct values
    unstored: tuple[str, ...] = ()  # read only to make other items: never cached

    def sql(self, export: Schema, keys: list[str] | tuple[str, ...]) -> str:
        """``SELECT`` of the columns ``keys`` (as themselves) for one chunk of rows."""
        require_columns(export, self.table, self.needs, self.purpose or self.name)
        exprs = []
        for key in keys:
            expr = self.columns[key]
            exprs.append(f"{expr if isinstance(expr, str) else expr(export)} AS {alias(key)}")
        where = f" AND {self.where}" if self.where else ""
        return (f'SELECT {", ".join(exprs)} FROM "{self.table}" AS t NOT INDEXED '
                f"WHERE t.rowid >= :lo AND t.rowid < :hi{where}")


def alias(key: str) -> str:
    """The name a column is selected as."""
    return "c_" + "".join(ch if ch.isalnum() else "_" for ch in key)


def optional(table: str, column: str, absent: str = "-1") -> Callable[[Schema], str]:
    """``ifnull(t.column, -1)``, or ``-1`` in exports whose table lacks the column."""
    return lambda ex: (f"ifnull(t.{column}, {absent})" if ex.has_column(table, column)
                       else absent)


def kernel_name_id(column: str) -> Callable[[Schema], str]:
    return lambda ex: f"ifnull(coalesce(t.{column}, t.demangledName), -1)"


KERNEL_ROWS = RowSource(
    "kernels", KERNEL_TABLE,
    columns={
        "start": "t.start", "end": "t.end",
        "pid": optional(KERNEL_TABLE, "globalPid"),
        "correlation": optional(KERNEL_TABLE, "correlationId"),
        "device": optional(KERNEL_TABLE, "deviceId"),
        "stream": optional(KERNEL_TABLE, "streamId"),
        "context": optional(KERNEL_TABLE, "contextId"),
        "graph": optional(KERNEL_TABLE, "graphId"),
        "graph_node": optional(KERNEL_TABLE, "graphNodeId"),
        "name_id.shortName": kernel_name_id("shortName"),
        "name_id.demangledName": kernel_name_id("demangledName"),
        "name_id.mangledName": kernel_name_id("mangledName"),
    },
    needs=("start", "end", "demangledName"), purpose="the kernel summary",
    unstored=("name_id.shortName", "name_id.demangledName", "name_id.mangledName"))


def api_rows(table: str) -> RowSource:
    """CUDA runtime or driver API calls (those with a correlationId: launches carry the
    kernel's)."""
    return RowSource(
        f"api calls ({table})", table,
        columns={"start": "t.start", "end": "t.end", "tid": "t.globalTid",
                 "correlation": "t.correlationId", "name_id": optional(table, "nameId")},
        needs=("start", "end", "globalTid", "correlationId"),
        where="t.correlationId IS NOT NULL AND t.globalTid IS NOT NULL",
        purpose="kernel launch attribution")


API_ROWS = (api_rows(RUNTIME_TABLE), api_rows(DRIVER_TABLE))


def nvtx_flags(export: Schema) -> str:
    """The ``flags`` column of an NVTX row: ``eventType + 256 * cross_thread + 512 * domain``
    (most rows are on no domain and did not end on another thread: there it is the event
    type, which a CASE answers after two cheap tests)."""
    has_end_tid = export.has_column(NVTX_TABLE, "endGlobalTid")
    has_domain = export.has_column(NVTX_TABLE, "domainId")
    cross = "t.endGlobalTid IS NOT NULL AND t.endGlobalTid != t.globalTid" if has_end_tid else "0"
    domain = "ifnull(t.domainId, 0)" if has_domain else "0"
    common = [c for c, has in (("t.endGlobalTid IS NULL", has_end_tid),
                               ("ifnull(t.domainId, 0) = 0", has_domain)) if has]
    if not common:
        return "t.eventType"
    full = f"t.eventType + 256 * ({cross}) + 512 * ({domain} & 1099511627775)"
    return f"CASE WHEN {' AND '.join(common)} THEN t.eventType ELSE {full} END"


def nvtx_name_key(export: Schema) -> str:
    """A row's raw name key: "\\x01<textId>" when textId is set, else the inline text."""
    has_id = export.has_column(NVTX_TABLE, "textId")
    has_text = export.has_column(NVTX_TABLE, "text")
    if has_id and has_text:
        return "CASE WHEN t.textId IS NOT NULL THEN char(1) || t.textId ELSE t.text END"
    if has_id:
        return "char(1) || t.textId"
    return "t.text" if has_text else "''"


NVTX_ROWS = RowSource(
    "nvtx", NVTX_TABLE,
    columns={"start": "t.start", "end": "ifnull(t.end, -1)", "tid": "ifnull(t.globalTid, -1)",
             "flags": nvtx_flags, "rowid": "t.rowid", "key": nvtx_name_key},
    needs=("start", "end", "eventType", "globalTid"),
    where=f"t.eventType IN ({_NVTX_READ_TYPES})", purpose="the NVTX range summary",
    text=("key",), unstored=("key",))

MEMCPY_ROWS = RowSource(
    "memcpy", MEMCPY_TABLE,
    columns={"start": "t.start", "end": "t.end", "bytes": "ifnull(t.bytes, 0)",
             "kind": "ifnull(t.copyKind, 0)", "device": optional(MEMCPY_TABLE, "deviceId"),
             "stream": optional(MEMCPY_TABLE, "streamId"),
             "pid": optional(MEMCPY_TABLE, "globalPid"),
             "correlation": optional(MEMCPY_TABLE, "correlationId")},
    needs=("start", "end", "copyKind", "bytes"), purpose="the memory-operation summary")

MEMSET_ROWS = RowSource(
    "memset", MEMSET_TABLE,
    columns={"start": "t.start", "end": "t.end", "bytes": "ifnull(t.bytes, 0)", "kind": "0",
             "device": optional(MEMSET_TABLE, "deviceId"),
             "stream": optional(MEMSET_TABLE, "streamId"),
             "pid": optional(MEMSET_TABLE, "globalPid"),
             "correlation": optional(MEMSET_TABLE, "correlationId")},
    needs=("start", "end", "bytes"), purpose="the memory-operation summary")

GRAPH_TRACE_TABLE = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"
GRAPH_ROWS = RowSource(
    "graph launches", GRAPH_TRACE_TABLE,
    columns={"start": "t.start", "end": "t.end",
             "device": optional(GRAPH_TRACE_TABLE, "deviceId"),
             "stream": optional(GRAPH_TRACE_TABLE, "streamId"),
             "context": optional(GRAPH_TRACE_TABLE, "contextId"),
             "pid": optional(GRAPH_TRACE_TABLE, "globalPid"),
             "correlation": optional(GRAPH_TRACE_TABLE, "correlationId"),
             "graph": optional(GRAPH_TRACE_TABLE, "graphId"),
             "graph_exec": optional(GRAPH_TRACE_TABLE, "graphExecId")},
    needs=("start", "end"), purpose="CUDA graph launches")

# Graph and node creation records (nsys schema: CUDA_GRAPH_NODE_EVENTS holds a row per graph
# node created, ``originalGraphNodeId`` set on the clones that instantiating or cloning a
# graph makes; CUDA_GRAPH_EVENTS a row per graph created, cloned (``originalGraphId``) or
# instantiated (``graphExecId``). Before nsys 2023 CUDA_GRAPH_EVENTS held the node rows.)
GRAPH_NODE_TABLE = "CUDA_GRAPH_NODE_EVENTS"
GRAPH_EVENTS_TABLE = "CUDA_GRAPH_EVENTS"


def graph_node_rows(table: str) -> RowSource:
    return RowSource(
        f"graph nodes ({table})", table,
        columns={"start": "t.start", "end": "t.end", "tid": "ifnull(t.globalTid, -1)",
                 "node": "t.graphNodeId", "original": optional(table, "originalGraphNodeId")},
        needs=("start", "end", "graphNodeId"), where="t.graphNodeId IS NOT NULL",
        purpose="capture-time attribution of graph kernels")


GRAPH_EVENT_ROWS = RowSource(
    "graphs", GRAPH_EVENTS_TABLE,
    columns={"start": "t.start", "end": "t.end", "tid": "ifnull(t.globalTid, -1)",
             "graph": "t.graphId", "original": optional(GRAPH_EVENTS_TABLE, "originalGraphId"),
             "exec": optional(GRAPH_EVENTS_TABLE, "graphExecId")},
    needs=("start", "end", "graphId"), where="t.graphId IS NOT NULL",
    purpose="capture-time attribution of graph launches")

def nvtx_name(export: Schema) -> str:
    """A range's name as SQL: its inline text, else its ``textId`` string."""
    has_text = export.has_column(NVTX_TABLE, "text")
    if export.has_column(NVTX_TABLE, "textId"):
        by_id = "(SELECT s.value FROM StringIds AS s WHERE s.id = t.textId)"
        return f"coalesce(t.text, {by_id})" if has_text else by_id
    return "t.text" if has_text else "''"


# NCCL's calls (NCCL 2.19 on): its NVTX ranges whose JSON payload names a communicator
# (nsys_parsers.nccl reads the payload).
NCCL_ROWS = RowSource(
    "nccl calls", NVTX_TABLE,
    columns={"start": "t.start", "end": 'ifnull(t."end", t.start)',
             "tid": "ifnull(t.globalTid, 0)", "name": nvtx_name, "payload": "t.jsonText"},
    needs=("start", "end", "globalTid", "jsonText"),
    where="t.jsonText IS NOT NULL AND instr(t.jsonText, 'NCCL communicator ID') > 0",
    purpose="NCCL's NVTX payloads", text=("name", "payload"))


def _present(source: RowSource) -> Callable[[Schema], list[RowSource]]:
    return lambda ex: [source] if ex.has_table(source.table) else []


def _api_sources(ex: Schema) -> list[RowSource]:
    return [s for s in API_ROWS if all(ex.has_column(s.table, c) for c in s.needs)]


def _graph_node_sources(ex: Schema) -> list[RowSource]:
    """Node creation records: CUDA_GRAPH_NODE_EVENTS, or (before nsys 2023)
    CUDA_GRAPH_EVENTS."""
    for table in (GRAPH_NODE_TABLE, GRAPH_EVENTS_TABLE):
        if ex.has_column(table, "graphNodeId"):
            return [graph_node_rows(table)]
    return []


def _graph_event_sources(ex: Schema) -> list[RowSource]:
    return [GRAPH_EVENT_ROWS] if ex.has_column(GRAPH_EVENTS_TABLE, "graphId") else []


# Every table the loader reads, by the prefix of its items (``nsys_parsers.items``): the row
# sources an export has for it ([]: none), and the columns a source of it can give. A new
# table is a RowSource and one entry in each of SOURCES, COLUMN_KEYS and TEMPLATES; each of
# its columns becomes an item ``<prefix>.<key>``.
SOURCES: dict[str, Callable[[Schema], list[RowSource]]] = {
    "nvtx": _present(NVTX_ROWS), "kernel": _present(KERNEL_ROWS),
    "memcpy": _present(MEMCPY_ROWS), "memset": _present(MEMSET_ROWS), "api": _api_sources,
    "graph": _present(GRAPH_ROWS), "gnode": _graph_node_sources,
    "gevent": _graph_event_sources,
    "nccl": lambda ex: [NCCL_ROWS] if ex.has_column(NVTX_TABLE, "jsonText") else [],
}
COLUMN_KEYS: dict[str, tuple[str, ...]] = {
    "nvtx": tuple(NVTX_ROWS.columns), "kernel": tuple(KERNEL_ROWS.columns),
    "memcpy": tuple(MEMCPY_ROWS.columns), "memset": tuple(MEMSET_ROWS.columns),
    "api": tuple(API_ROWS[0].columns), "graph": tuple(GRAPH_ROWS.columns),
    "gnode": tuple(graph_node_rows(GRAPH_NODE_TABLE).columns),
    "gevent": tuple(GRAPH_EVENT_ROWS.columns), "nccl": tuple(NCCL_ROWS.columns),
}
# One row source of each prefix: what its columns are read as and whether they are cached.
TEMPLATES: dict[str, RowSource] = {
    "nvtx": NVTX_ROWS, "kernel": KERNEL_ROWS, "memcpy": MEMCPY_ROWS, "memset": MEMSET_ROWS,
    "api": API_ROWS[0], "graph": GRAPH_ROWS, "gnode": graph_node_rows(GRAPH_NODE_TABLE),
    "gevent": GRAPH_EVENT_ROWS, "nccl": NCCL_ROWS,
}


# Name keys of chosen rows (a JSON array of rowids): rowids and keys as two JSON arrays.
NVTX_KEYS_BY_ROWID = Query(
    "nvtx_keys_by_rowid",
    """SELECT json_group_array(t.rowid), json_group_array(ifnull({name_key}, ''))
       FROM NVTX_EVENTS AS t WHERE t.rowid IN (SELECT value FROM json_each(?))""",
    needs={NVTX_TABLE: ("eventType",)}, purpose="NVTX range names")

STRINGS_BY_ID = Query(
    "strings_by_id",
    "SELECT id, value FROM StringIds WHERE id IN (SELECT value FROM json_each(?))",
    needs={STRINGS_TABLE: ("id", "value")}, purpose="names")

MEMCPY_KIND_NAMES = Query(
    "memcpy_kind_names", "SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER",
    needs={"ENUM_CUDA_MEMCPY_OPER": ("id", "label")})

NVTX_RANGE_COUNT = Query(
    "nvtx_range_count",
    f"SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN ({sql_list(NVTX_RANGE_TYPES)})",
    needs={NVTX_TABLE: ("eventType",)})

# The end of the capture, for ranges never closed: the last kernel, launch and NVTX times.
LAST_KERNEL_END = Query("last_kernel_end", "SELECT max(end) FROM CUPTI_ACTIVITY_KIND_KERNEL",
                        needs={KERNEL_TABLE: ("end",)})
LAST_GRAPH_END = Query("last_graph_end",
                       "SELECT max(end) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                       needs={"CUPTI_ACTIVITY_KIND_GRAPH_TRACE": ("end",)})
LAST_API_END = Query(
    "last_api_end",
    'SELECT max(end) FROM "{table}" WHERE correlationId IS NOT NULL AND globalTid IS NOT NULL')

# The CUDA profiling overhead nsys's gpu-starv rule counts as GPU-busy (GPU gaps "that cannot
# be addressed by the user"): its start, end and thread.
CUDA_PROFILER_OVERHEAD = Query(
    "cuda_profiler_overhead",
    """SELECT po.start, po.end, po.globalTid FROM PROFILER_OVERHEAD AS po
       JOIN StringIds AS s ON s.id = po.nameId
       WHERE s.value IN ('CUDA profiling data flush overhead', 'CUDA profiling stop overhead',
                         'CUDA profiling overhead')""",
    needs={"PROFILER_OVERHEAD": ("start", "end", "globalTid", "nameId"),
           STRINGS_TABLE: ("id", "value")},
    purpose="the CUDA profiling overhead")

# NVTX payloads as JSON text (NCCL's collectives carry their message size there).
NVTX_JSON_PAYLOADS = Query(
    "nvtx_json_payloads",
    "SELECT rowid, jsonText FROM NVTX_EVENTS WHERE jsonText IS NOT NULL",
    needs={NVTX_TABLE: ("jsonText",)}, purpose="NVTX payloads")

# Whether NCCL created its NVTX domain (NCCL 2.19 on): its collectives' ranges are there.
NVTX_DOMAIN_NAMED = Query(
    "nvtx_domain_named",
    """SELECT count(*) FROM NVTX_EVENTS AS t WHERE t.eventType = 75
       AND ({name_key}) IN (?, char(1) || (SELECT id FROM StringIds WHERE value = ?))""",
    needs={NVTX_TABLE: ("eventType",)}, purpose="NVTX domains")
