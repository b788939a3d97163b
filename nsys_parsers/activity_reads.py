"""The chunk reads behind ``load_activity``, submitted on a ``Reader`` without numpy.

``load_activity`` reads kernels, their launch calls and the NVTX rows in rowid chunks on two
threads. Their SQL and jobs live here, free of numpy, so that a command can start them
(``start_activity_reads``) before numpy and the analysis modules are imported: that import
takes 0.15-0.2 s on one core, and the reads now run meanwhile on the other.

A chunk job reads one row of JSON arrays. It parses them itself (numpy, on its thread, as
SQLite reads the next chunk on the other) once the parser of its kind is registered: the
modules that define the parsers (``nsys_parsers.fetch``, ``nsys_parsers.ranges``) register
them when they are imported. A chunk read before then comes back as its text (``Raw``), which
``chunk_value`` parses when the chunk is gathered.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any, Callable

from nsys_parsers import queries as Q
from nsys_parsers.kernel_groups import kernel_name_column
from nsys_parsers.reader import Pending, Reader, rowid_chunks
from nsys_parsers.schema import DRIVER_TABLE, KERNEL_TABLE, NVTX_TABLE, RUNTIME_TABLE, Schema

# the cache parts of the columns load_activity reads: the ranges (and what was traced), and
# the kernels with their launches, apart so that a kernel summary maps only its own columns
ACTIVITY_PART = "activity"
ACTIVITY_KERNELS_PART = "activity.kernels"
KERNEL_COLUMNS = ["s", "e", "n", "p", "c"]
LAUNCH_COLUMNS = ["s", "e", "t", "c"]
NVTX_COLUMNS = ["s", "e", "t", "f", "r"]
LAUNCH_TABLES = (RUNTIME_TABLE, DRIVER_TABLE)


# -- the SQL -----------------------------------------------------------------------------------

def launch_tables(export: Schema) -> list[str]:
    """The API tables that can carry launches (runtime and driver) present in this export."""
    return [t for t in LAUNCH_TABLES if all(
        export.has_column(t, c) for c in ("start", "end", "globalTid", "correlationId"))]


def nvtx_flags_sql(export: Schema) -> str:
    """The ``f`` column of NVTX_NUMERIC: ``eventType + 256 * cross_thread + 512 * domain``.

    Most rows are on no domain and did not end on another thread; there ``f`` is the event
    type, and a CASE answers it after two cheap tests instead of the whole expression (22% of
    the SQLite time of reading the NVTX columns, measured on 0.4-0.5 M rows)."""
    has_end_tid = export.has_column(NVTX_TABLE, "endGlobalTid")
    has_domain = export.has_column(NVTX_TABLE, "domainId")
    cross = "e.endGlobalTid IS NOT NULL AND e.endGlobalTid != e.globalTid" if has_end_tid else "0"
    domain = "ifnull(e.domainId, 0)" if has_domain else "0"
    common = [c for c, has in (("e.endGlobalTid IS NULL", has_end_tid),
                               ("ifnull(e.domainId, 0) = 0", has_domain)) if has]
    if not common:
        return "e.eventType"
    full = f"e.eventType + 256 * ({cross}) + 512 * ({domain} & 1099511627775)"
    return f"CASE WHEN {' AND '.join(common)} THEN e.eventType ELSE {full} END"


def nvtx_numeric_sql(export: Schema, query: Q.Query = Q.NVTX_NUMERIC) -> str:
    """NVTX_NUMERIC (or NVTX_NUMERIC_DENSE) for this schema (older exports lack
    endGlobalTid or domainId)."""
    return query.sql(export, flags=nvtx_flags_sql(export))


def nvtx_key_expr(export: Schema) -> str:
    """SQL for a row's raw name key: "\\x01<textId>" when textId is set, else the inline text."""
    has_id = export.has_column(NVTX_TABLE, "textId")
    has_text = export.has_column(NVTX_TABLE, "text")
    if has_id and has_text:
        return "CASE WHEN e.textId IS NOT NULL THEN char(1) || e.textId ELSE e.text END"
    if has_id:
        return "char(1) || e.textId"
    if has_text:
        return "e.text"
    return "''"


def name_keys_sql(export: Schema) -> str:
    return Q.NVTX_NAME_KEYS.sql(export, name_key=nvtx_key_expr(export))


def json_columns_sql(source_sql: str, columns: list[str] | tuple[str, ...]) -> str:
    """``SELECT json_group_array(col), ... FROM (source_sql)``: one row, a JSON array per
    column."""
    select = ", ".join(f"json_group_array({c})" for c in columns)
    return f"SELECT {select} FROM ({source_sql})"


# -- chunk jobs ----------------------------------------------------------------------------------

# kind -> parse(texts, conn, *args): registered by the modules that define them (with numpy)
_PARSERS: dict[str, Callable[..., Any]] = {}


def register_parser(kind: str, parse: Callable[..., Any]) -> None:
    _PARSERS[kind] = parse


@dataclass(frozen=True)
class Raw:
    """A chunk read before its parser was registered: the row of JSON texts."""

    kind: str
    texts: tuple[str, ...]
    args: tuple[Any, ...] = ()

    def parse(self, conn: sqlite3.Connection) -> Any:
        """The chunk parsed by its (now registered) parser; ``conn`` for one that reads
        again."""
        return _PARSERS[self.kind](self.texts, conn, *self.args)


def chunk_job(kind: str, sql: str, bounds: dict[str, int], *args: Any
              ) -> Callable[[sqlite3.Connection], Any]:
    """A job reading one rowid chunk with ``sql`` (one row of JSON texts), parsed on its
    thread by the parser of ``kind`` (``parse(texts, conn, *args)``) if that is registered
    by then, else returned as ``Raw``."""
    def job(conn: sqlite3.Connection) -> Any:
        texts = conn.execute(sql, bounds).fetchone()
        parse = _PARSERS.get(kind)
        return Raw(kind, texts, args) if parse is None else parse(texts, conn, *args)
    return job


def chunk_value(pending: Pending, conn: sqlite3.Connection) -> Any:
    """A chunk job's value, taken from the job (a text is freed once parsed), parsed here
    (on ``conn``, for parsers that read again) if it was read before its parser was
    registered."""
    value = pending.take()
    return value.parse(conn) if isinstance(value, Raw) else value


def ints_job(sql: str, columns: list[str], bounds: dict[str, int]
             ) -> Callable[[sqlite3.Connection], Any]:
    """Integer columns of a chunk (parsed: a list of int64 arrays)."""
    return chunk_job("ints", json_columns_sql(sql, columns), bounds)


def keys_job(sql: str, bounds: dict[str, int]) -> Callable[[sqlite3.Connection], Any]:
    """Column ``k`` of a chunk, text (NULL as ''; parsed: code per row, distinct values)."""
    return chunk_job("keys", json_columns_sql(sql, ["ifnull(k, '')"]), bounds)


def nvtx_sqls(export: Schema) -> tuple[str, str]:
    """The NVTX chunk reads of this schema: every row without its rowid (dense), and the
    range rows with their rowids (sparse)."""
    return (json_columns_sql(nvtx_numeric_sql(export, Q.NVTX_NUMERIC_DENSE), NVTX_COLUMNS[:4]),
            json_columns_sql(nvtx_numeric_sql(export), NVTX_COLUMNS))


def nvtx_job(sqls: tuple[str, str], bounds: dict[str, int]
             ) -> Callable[[sqlite3.Connection], Any]:
    """NVTX_COLUMNS of the range and domain-create rows with rowids in ``bounds``: every row
    is read without its rowid (implied when the rowids have no gap); a chunk with gaps is
    read again with its rowids (``nsys_parsers.ranges`` parses it)."""
    dense, sparse = sqls
    return chunk_job("nvtx", dense, bounds, sparse, bounds)


# -- the reads of load_activity ------------------------------------------------------------------

@dataclass
class ActivityReads:
    """The chunk reads of one export's kernels, launches, NVTX rows (and their name keys
    when ``with_names``), under way on ``reader``; None: the table is not in the export.
    ``close()`` drops what no thread has started and ends the threads."""

    reader: Reader
    name_kind: str
    with_names: bool
    kernels: list[Pending] | None = None
    launches: list[Pending] | None = None
    nvtx: list[Pending] | None = None
    keys: list[Pending] | None = None
    notes: list[str] = field(default_factory=list)

    def parse_read(self, conn: sqlite3.Connection) -> None:
        """Parse the chunks that were read before their parsers were loaded, now (the
        threads parse every chunk they end from then on). Their texts are freed while the
        other chunks are still read, rather than after: freed late, they kept 40-70 MB more
        in the heap at the peak of nested x100 (glibc does not give it back)."""
        for jobs in (self.nvtx, self.keys, self.kernels, self.launches):
            for p in jobs or ():
                if p.done() and isinstance(p.value, Raw):
                    p.value = p.value.parse(conn)

    def drop_keys(self) -> None:
        for p in self.keys or ():
            p.cancel()
        self.keys, self.with_names = None, False

    def add_keys(self, export: Schema) -> None:
        if self.nvtx is not None and self.keys is None:
            sql = name_keys_sql(export)
            self.keys = [self.reader.submit(keys_job(sql, b))
                         for b in rowid_chunks(export.db, NVTX_TABLE)]  # type: ignore[attr-defined]
        self.with_names = True

    def close(self) -> None:
        self.reader.stop()


def submit_activity_reads(export: Any, name_kind: str, with_names: bool, workers: int = 2
                          ) -> ActivityReads:
    """Submit every chunk read of ``load_activity`` on a new ``Reader`` (the biggest table
    first: the threads work on it while the rest queues)."""
    conn = export.db
    reads = ActivityReads(Reader(export.path, workers=workers), name_kind, with_names)
    try:
        if export.has_table(NVTX_TABLE):
            keys_sql, nvtx = name_keys_sql(export), nvtx_sqls(export)
            reads.nvtx, keys = [], []
            for b in rowid_chunks(conn, NVTX_TABLE):
                reads.nvtx.append(reads.reader.submit(nvtx_job(nvtx, b)))
                if with_names:
                    keys.append(reads.reader.submit(keys_job(keys_sql, b)))
            reads.keys = keys if with_names else None
        if export.has_table(KERNEL_TABLE):
            name_col, reads.notes = kernel_name_column(export, name_kind)
            ksql = Q.KERNELS.sql(export, name_col=name_col)
            reads.kernels = [reads.reader.submit(ints_job(ksql, KERNEL_COLUMNS, b))
                             for b in rowid_chunks(conn, KERNEL_TABLE)]
            reads.launches = []
            for table in launch_tables(export):
                lsql = Q.LAUNCHES.sql(export, table=table)
                reads.launches += [reads.reader.submit(ints_job(lsql, LAUNCH_COLUMNS, b))
                                   for b in rowid_chunks(conn, table)]
    except BaseException:
        reads.close()
        raise
    return reads


def start_activity_reads(export: Any, name_kind: str, with_names: bool, *,
                         use_cache: bool = True) -> ActivityReads | None:
    """Start reading what ``load_activity`` reads, before numpy is imported; None when the
    export's cache entry holds it (a warm question reads nothing from the export).
    Hand the reads to ``load_activity(reads=...)``, or ``close()`` them."""
    if use_cache:
        from nsys_parsers.cache import ExportCache

        cache = ExportCache.for_export(export)
        if (cache is not None and cache.has(ACTIVITY_PART)
                and cache.has(ACTIVITY_KERNELS_PART)):
            return None
    return submit_activity_reads(export, name_kind, with_names)
