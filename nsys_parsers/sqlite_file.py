"""Checks on the SQLite file itself, before and while it is opened read-only.

``check_sqlite_header`` rejects empty, non-SQLite and truncated files before SQLite sees them;
``connect_readonly`` opens ``file:...?mode=ro`` (nothing here can modify the user's file);
``read_schema`` lists tables and columns; ``validate_nsys_tables`` tells an nsys export from
another SQLite database and from the partial file a failed ``nsys export`` leaves behind.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from urllib.parse import quote

from nsys_parsers.errors import NotAnExport, PartialExport
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE, RUNTIME_TABLE, STRINGS_TABLE

SQLITE_MAGIC = b"SQLite format 3\x00"

# Tables that only nsys writes: any one of them makes an SQLite file an nsys export.
NSYS_MARKERS = (
    STRINGS_TABLE, "ThreadNames", "ProcessStreams", "TARGET_INFO_SESSION_START_TIME",
    "TARGET_INFO_SYSTEM_ENV", "TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU", "EXPORT_META_DATA",
    "META_DATA_EXPORT", "ANALYSIS_DETAILS", "PROFILER_OVERHEAD", KERNEL_TABLE, RUNTIME_TABLE,
    NVTX_TABLE, "ENUM_NSYS_EVENT_TYPE",
)
# Tables every finished export has had, 2019 to 2026.
COMPLETE_MARKERS = (STRINGS_TABLE,)
# A finished export also describes the session or the target, or holds activity. A failed
# `nsys export` (nsys 2022.4 given a 2023.1+ report) leaves only StringIds and ProcessStreams.
SESSION_PREFIXES = ("TARGET_INFO_", "META_DATA_", "EXPORT_META_DATA", "ANALYSIS_",
                    "ThreadNames", "PROCESSES", "CUPTI_ACTIVITY_", "NVTX_EVENTS", "OSRT_",
                    "SCHED_EVENTS", "COMPOSITE_EVENTS")
INCOMPLETE = ("{path} is an incomplete nsys export (a failed or interrupted nsys export leaves "
              "such files): export the report again with an nsys at least as new as the one "
              "that recorded it (`nsys export --type sqlite --force-overwrite true "
              "REPORT.nsys-rep`).")


def decode_text(raw: bytes) -> str:
    """StringIds may hold invalid UTF-8: replace bad bytes instead of failing."""
    return raw.decode("utf-8", "replace")


def check_sqlite_header(path: Path) -> None:
    """Reject empty, non-SQLite and truncated files before SQLite sees them."""
    size = path.stat().st_size
    if size == 0:
        raise NotAnExport(f"{path}: the file is empty. An nsys export is made with "
                          f"`nsys export --type sqlite REPORT.nsys-rep`.")
    with path.open("rb") as fh:
        header = fh.read(100)
    if len(header) == 100 and not any(header):
        # nsys writes the first page of its SQLite file last: an export that was killed or
        # crashed leaves the data pages behind a page of zeros
        raise PartialExport(INCOMPLETE.format(path=path))
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
    """A read-only connection (``file:...?mode=ro``) that decodes text leniently, whose
    statements a cancelled question interrupts (``nsys_parsers.cancel``)."""
    from nsys_parsers.cancel import Connection

    uri = "file:" + quote(str(path.resolve())) + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, check_same_thread=False, factory=Connection)
    conn.text_factory = decode_text
    return conn


def read_schema(conn: sqlite3.Connection, path: Path) -> dict[str, tuple[str, ...]]:
    """Every table and view with its column names."""
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


def validate_nsys_tables(tables: dict[str, tuple[str, ...]], path: Path) -> None:
    """Raise NotAnExport for SQLite that nsys did not write, PartialExport for an unfinished
    export."""
    if not any(t in tables for t in NSYS_MARKERS) and not any(
            t.startswith("ENUM_") for t in tables):
        listed = ", ".join(sorted(tables)[:5]) or "no tables at all"
        raise NotAnExport(f"{path}: an SQLite database, but not an nsys export ({listed}). "
                          f"Export a report with `nsys export --type sqlite REPORT.nsys-rep`.")
    missing = [t for t in COMPLETE_MARKERS if t not in tables]
    if missing or not any(t.startswith(SESSION_PREFIXES) for t in tables):
        raise PartialExport(INCOMPLETE.format(path=path))


def usable_export(path: Path) -> bool:
    """Whether ``path`` is a complete nsys export (used to trust a cached export)."""
    from nsys_parsers.errors import NsysMineError

    try:
        check_sqlite_header(path)
        conn = connect_readonly(path)
        try:
            validate_nsys_tables(read_schema(conn, path), path)
        finally:
            conn.close()
        return True
    except (NsysMineError, sqlite3.Error):
        return False
