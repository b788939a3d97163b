"""Open an nsys export read-only, validate it, and probe its schema once.

``open_export(path)`` accepts a ``.sqlite`` export directly, or a ``.nsys-rep``/``.qdrep`` report
(exported to SQLite with nsys, see ``nsys_parsers.nsys_tool``). It raises typed errors for every
kind of bad input: missing path, directory, empty file, not SQLite, truncated SQLite, SQLite that
nsys did not write, partial export (``nsys_parsers.sqlite_file``).

The connection is opened with ``file:...?mode=ro``: nothing here can modify the user's file.
Temporary tables, if any, go to SQLite's separate temp database.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from nsys_parsers.errors import ExportNotFound, NotAnExport
from nsys_parsers.meta import ExportMeta, probe_meta
from nsys_parsers.schema import Schema
from nsys_parsers.sqlite_file import (
    check_sqlite_header,
    connect_readonly,
    read_schema,
    validate_nsys_tables,
)

REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


@dataclass
class Export(Schema):
    """An open, validated nsys SQLite export. Use as a context manager or call ``close()``."""

    path: Path = Path()  # the SQLite file actually read
    source: Path = Path()  # what the user gave (may be a .nsys-rep)
    conn: sqlite3.Connection | None = None

    def __enter__(self) -> Export:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def db(self) -> sqlite3.Connection:
        if self.conn is None:
            raise ValueError(f"{self.label} is closed")
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def row_count(self, table: str) -> int:
        if table not in self.tables:
            return 0
        return int(self.db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])

    @cached_property
    def meta(self) -> ExportMeta:
        return probe_meta(self.db, self)


def open_export(path: str | os.PathLike[str], *, nsys: str | None = None) -> Export:
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
    check_sqlite_header(sqlite_path)
    try:
        conn = connect_readonly(sqlite_path)
    except sqlite3.Error as exc:
        raise NotAnExport(f"{sqlite_path}: cannot open as SQLite ({exc}).") from None
    try:
        tables = read_schema(conn, sqlite_path)
        validate_nsys_tables(tables, sqlite_path)
    except Exception:
        conn.close()
        raise
    return Export(tables=tables, label=source.name, path=sqlite_path, source=source, conn=conn)
