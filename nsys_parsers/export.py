"""Open an nsys export read-only, validate it, and probe its schema once.

``open_export(path)`` accepts a ``.sqlite`` export directly, or a ``.nsys-rep``/``.qdrep`` report
(exported to SQLite with nsys, see ``nsys_parsers.nsys_tool``). It raises typed errors for every
kind of bad input: missing path, directory, empty file, not SQLite, truncated SQLite, SQLite that
nsys did not write, partial export.

The connection is opened with ``file:...?mode=ro``: nothing here can modify the user's file.
Temporary tables, if any, go to SQLite's separate temp database.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from urllib.parse import quote

from nsys_parsers.errors import ExportNotFound, MissingData, NotAnExport, PartialExport

SQLITE_MAGIC = b"SQLite format 3\x00"
REPORT_SUFFIXES = (".nsys-rep", ".qdrep")

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER_TABLE = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX_TABLE = "NVTX_EVENTS"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
STRINGS_TABLE = "StringIds"

# Which `nsys profile` option produces each table: used in MissingData messages.
TRACE_HINTS = {
    KERNEL_TABLE: "CUDA kernels were not traced: profile with `nsys profile --trace=cuda`",
    RUNTIME_TABLE: "CUDA API calls were not traced: profile with `nsys profile --trace=cuda`",
    NVTX_TABLE: "NVTX was not traced (or the program emitted no NVTX ranges): profile with "
                "`nsys profile --trace=nvtx` and instrument the code with NVTX ranges",
    MEMCPY_TABLE: "no CUDA memcpy was traced: profile with `nsys profile --trace=cuda`",
    MEMSET_TABLE: "no CUDA memset was traced: profile with `nsys profile --trace=cuda`",
}

# Tables that only nsys writes: any one of them makes an SQLite file an nsys export.
_NSYS_MARKERS = (
    STRINGS_TABLE, "ThreadNames", "ProcessStreams", "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU", "EXPORT_META_DATA",
    "META_DATA_EXPORT", "ANALYSIS_DETAILS", "PROFILER_OVERHEAD", KERNEL_TABLE, RUNTIME_TABLE,
    NVTX_TABLE, "ENUM_NSYS_EVENT_TYPE",
)
# Tables every finished export has had, 2019 to 2026 (nsys writes them last or always).
_COMPLETE_MARKERS = (STRINGS_TABLE,)
_CONTENT_MARKERS = ("ThreadNames", "ProcessStreams", "PROCESSES", "TARGET_INFO_SYSTEM_ENV",
                    "TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU", "TARGET_INFO_SESSION_START_TIME")


def _decode(raw: bytes) -> str:
    """StringIds may hold invalid UTF-8: replace bad bytes instead of failing."""
    return raw.decode("utf-8", "replace")


@dataclass
class ExportMeta:
    """What the export says about itself."""

    nsys_version: str
    schema_version: str | None
    version_source: str
    gpus: list[str]
    capture_command: str | None
    capture_time: str | None


@dataclass
class Export:
    """An open, validated nsys SQLite export. Use as a context manager or call ``close()``."""

    path: Path  # the SQLite file actually read
    source: Path  # what the user gave (may be a .nsys-rep)
    conn: sqlite3.Connection
    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __enter__(self) -> "Export":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self.conn.close()

    # -- schema ---------------------------------------------------------------------------
    def has_table(self, name: str) -> bool:
        return name in self.tables

    def has_column(self, table: str, column: str) -> bool:
        return column in self.tables.get(table, ())

    def columns(self, table: str) -> tuple[str, ...]:
        return self.tables.get(table, ())

    def require(self, table: str, purpose: str = "") -> None:
        if table not in self.tables:
            hint = TRACE_HINTS.get(table, f"the export has no {table} table")
            what = f" for {purpose}" if purpose else ""
            raise MissingData(f"{self.source.name}: no {table} table{what}: {hint}.")

    def row_count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return self.conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]

    @cached_property
    def meta(self) -> ExportMeta:
        from nsys_parsers.meta import probe_meta

        return probe_meta(self)


def _sqlite_header_check(path: Path) -> None:
    """Reject empty, non-SQLite and truncated files before SQLite sees them."""
    size = path.stat().st_size
    if size == 0:
        raise NotAnExport(f"{path}: the file is empty. An nsys export is made with "
                          f"`nsys export --type sqlite REPORT.nsys-rep`.")
    with path.open("rb") as fh:
        header = fh.read(100)
    if not header.startswith(SQLITE_MAGIC):
        raise NotAnExport(f"{path}: not an SQLite database. Give an nsys SQLite export "
                          f"(`nsys export --type sqlite`) or a .nsys-rep report.")
    if len(header) < 100:
        raise NotAnExport(f"{path}: truncated SQLite file ({size} bytes). Export it again with "
                          f"`nsys export --type sqlite --force-overwrite true`.")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    page_count = int.from_bytes(header[28:32], "big")
    change_counter = int.from_bytes(header[24:28], "big")
    valid_for = int.from_bytes(header[92:96], "big")
    if page_count and change_counter == valid_for and size < page_size * page_count:
        raise NotAnExport(
            f"{path}: truncated SQLite file ({size} bytes, the header says "
            f"{page_size * page_count}). Copy it again or re-export it with "
            f"`nsys export --type sqlite --force-overwrite true`.")


def connect_readonly(path: Path) -> sqlite3.Connection:
    uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
    conn.text_factory = _decode
    return conn


def _read_tables(conn: sqlite3.Connection, path: Path) -> dict[str, tuple[str, ...]]:
    try:
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")]
        tables: dict[str, tuple[str, ...]] = {}
        for name in names:
            cols = tuple(r[0] for r in conn.execute(
                "SELECT name FROM pragma_table_info(?)", (name,)))
            tables[name] = cols
    except sqlite3.DatabaseError as exc:
        raise NotAnExport(f"{path}: unreadable SQLite file ({exc}); it may be truncated or "
                          f"corrupt. Re-export it with `nsys export --type sqlite`.") from None
    return tables


def validate_tables(tables: dict[str, tuple[str, ...]], path: Path) -> None:
    if not any(t in tables for t in _NSYS_MARKERS) and not any(
            t.startswith("ENUM_") for t in tables):
        listed = ", ".join(sorted(tables)[:5]) or "no tables at all"
        raise NotAnExport(f"{path}: an SQLite database, but not an nsys export ({listed}). "
                          f"Export a report with `nsys export --type sqlite REPORT.nsys-rep`.")
    missing = [t for t in _COMPLETE_MARKERS if t not in tables]
    if missing or not any(t in tables for t in _CONTENT_MARKERS):
        raise PartialExport(
            f"{path}: a partial nsys export (no {', '.join(missing) or 'thread/process tables'}"
            f"; nsys stopped while writing it, e.g. a failed `nsys export` of a report from a "
            f"newer nsys). It is not mined. Export the report again with an nsys at least as "
            f"new as the one that recorded it.")


def open_export(path: str | os.PathLike, *, nsys: str | None = None) -> Export:
    """Open and validate an export; .nsys-rep/.qdrep reports are exported with nsys first."""
    source = Path(path).expanduser()
    if not source.exists():
        raise ExportNotFound(f"{source}: no such file. Give the path of an nsys export "
                             f"(.sqlite) or report (.nsys-rep).")
    if source.is_dir():
        raise ExportNotFound(f"{source}: is a directory, not an export file. Give the path of "
                             f"a .sqlite export or a .nsys-rep report inside it.")
    if not source.is_file():
        raise ExportNotFound(f"{source}: not a regular file.")
    sqlite_path = source
    if source.suffix.lower() in REPORT_SUFFIXES:
        from nsys_parsers.nsys_tool import export_report

        sqlite_path = export_report(source, nsys=nsys)
    _sqlite_header_check(sqlite_path)
    try:
        conn = connect_readonly(sqlite_path)
    except sqlite3.Error as exc:
        raise NotAnExport(f"{sqlite_path}: cannot open as SQLite ({exc}).") from None
    try:
        tables = _read_tables(conn, sqlite_path)
        validate_tables(tables, sqlite_path)
    except Exception:
        conn.close()
        raise
    return Export(path=sqlite_path, source=source, conn=conn, tables=tables)
