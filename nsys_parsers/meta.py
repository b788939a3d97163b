"""Probe what an export says about itself: nsys and schema version, GPUs, capture command/time.

Versions come from, in order: ``META_DATA_EXPORT`` (nsys 2023.3+), ``EXPORT_META_DATA``
(2022.1-2023.2), the install directory in ``TARGET_INFO_SYSTEM_ENV`` (``TargetInstallDir``),
install paths in ``StringIds``; else ``unknown``. GPUs come from ``TARGET_INFO_GPU`` (2021.2+)
or ``TARGET_INFO_CUDA_GPU`` (older), or the list is empty (trimmed files).
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import dataclass

from nsys_parsers.ids import global_pid
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE, Schema

_VERSION_IN_PATH = re.compile(
    r"(?i)(?:nsight[-_ ]?systems|nsys)[^0-9]{0,40}(20\d\d\.\d+(?:\.\d+){0,2})")
_BARE_VERSION = re.compile(r"(20\d\d\.\d+(?:\.\d+){0,2})")

Q_META_KV = 'SELECT name, value FROM {table} WHERE name IN (?, ?)'
Q_SYSTEM_ENV = "SELECT value FROM TARGET_INFO_SYSTEM_ENV WHERE name = 'TargetInstallDir'"
Q_STRING_PATHS = ("SELECT value FROM StringIds WHERE value LIKE '%nsight-systems%' "
                  "OR value LIKE '%Nsight-Systems%' OR value LIKE '%nsight_systems%' LIMIT 200")
Q_CAPTURE = ("SELECT name, value FROM META_DATA_CAPTURE WHERE name LIKE 'PROCESS\\_0:COMMAND' "
             "ESCAPE '\\' OR name LIKE 'PROCESS\\_0:ARGUMENT\\_%' ESCAPE '\\' ORDER BY rowid")
Q_SESSION_START = "SELECT utcTime FROM TARGET_INFO_SESSION_START_TIME LIMIT 1"
Q_GPU_NAMES = 'SELECT {key}, name FROM "{table}" ORDER BY rowid'  # key/table from the schema
Q_FIRST_KERNEL_PID = "SELECT globalPid FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1"
Q_FIRST_NVTX_TID = "SELECT globalTid FROM NVTX_EVENTS WHERE globalTid IS NOT NULL LIMIT 1"
Q_PROCESS_NAME = "SELECT name FROM PROCESSES WHERE globalPid = ?"


@dataclass
class ExportMeta:
    """What the export says about itself."""

    nsys_version: str
    schema_version: str | None
    version_source: str
    gpus: list[str]
    capture_command: str | None
    capture_time: str | None


def _kv(conn: sqlite3.Connection, table: str) -> dict[str, str]:
    rows = conn.execute(Q_META_KV.format(table=table),
                               ("EXPORT_PRODUCT_VERSION", "EXPORT_SCHEMA_VERSION")).fetchall()
    return {str(k): str(v) for k, v in rows if v is not None}


def install_dir_version(conn: sqlite3.Connection, schema: Schema) -> str | None:
    """The version of the nsys that recorded the capture, from its install directory
    (``TargetInstallDir``), or None."""
    if schema.has_column("TARGET_INFO_SYSTEM_ENV", "value"):
        for (value,) in conn.execute(Q_SYSTEM_ENV):
            m = _VERSION_IN_PATH.search(str(value)) or _BARE_VERSION.search(str(value))
            if m:
                return m.group(1)
    return None


def probe_versions(conn: sqlite3.Connection, schema: Schema) -> tuple[str, str | None, str]:
    for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
        if schema.has_column(table, "name") and schema.has_column(table, "value"):
            kv = _kv(conn, table)
            if kv.get("EXPORT_PRODUCT_VERSION"):
                return kv["EXPORT_PRODUCT_VERSION"], kv.get("EXPORT_SCHEMA_VERSION"), table
    recorded = install_dir_version(conn, schema)
    if recorded is not None:
        return recorded, None, "TARGET_INFO_SYSTEM_ENV (capture install dir)"
    if schema.has_column("StringIds", "value"):
        for (value,) in conn.execute(Q_STRING_PATHS):
            m = _VERSION_IN_PATH.search(str(value))
            if m:
                return m.group(1), None, "StringIds (install path)"
    return "unknown", None, "none"


def probe_gpus(conn: sqlite3.Connection, schema: Schema) -> list[str]:
    """GPU names, one per device (TARGET_INFO_CUDA_GPU repeats a device for each process)."""
    for table in ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU"):
        if not schema.has_column(table, "name"):
            continue
        key = next((c for c in ("id", "deviceId", "cuDevice") if schema.has_column(table, c)),
                   "rowid")
        seen: dict[object, str] = {}
        for dev, name in conn.execute(Q_GPU_NAMES.format(key=key, table=table)):
            if name is not None and dev not in seen:
                seen[dev] = str(name)
        if seen:
            return list(seen.values())
    return []


def schema_era(schema: Schema) -> str | None:
    """A version bound read off the schema, for exports without any version metadata."""
    if schema.has_table(KERNEL_TABLE) and not schema.has_column(
            KERNEL_TABLE, "mangledName"):
        if not schema.has_table("TARGET_INFO_GPU"):
            return "older than 2021.2 (no TARGET_INFO_GPU, no mangledName column)"
        return "older than 2022.1 (no mangledName column)"
    return None


def probe_capture(conn: sqlite3.Connection, schema: Schema) -> tuple[str | None, str | None]:
    command = None
    if schema.has_column("META_DATA_CAPTURE", "name"):
        parts: list[str] = []
        args: list[tuple[int, str]] = []
        for name, value in conn.execute(Q_CAPTURE):
            if name == "PROCESS_0:COMMAND":
                parts.append(str(value))
            else:
                try:
                    args.append((int(str(name).rsplit("_", 1)[1]), str(value)))
                except ValueError:
                    pass
        if parts:
            command = " ".join(parts + [a for _, a in sorted(args)])
    if command is None and schema.has_column("PROCESSES", "globalPid") and schema.has_column(
            "PROCESSES", "name"):
        # The process that did the work: first kernel's, else first NVTX range's.
        gpid = None
        if schema.has_column(KERNEL_TABLE, "globalPid"):
            row = conn.execute(Q_FIRST_KERNEL_PID).fetchone()
            gpid = row[0] if row else None
        if gpid is None and schema.has_column(NVTX_TABLE, "globalTid"):
            row = conn.execute(Q_FIRST_NVTX_TID).fetchone()
            gpid = global_pid(int(row[0])) if row else None
        if gpid is not None:
            row = conn.execute(Q_PROCESS_NAME, (gpid,)).fetchone()
            if row and row[0]:
                command = str(row[0])
    time = None
    if schema.has_column("TARGET_INFO_SESSION_START_TIME", "utcTime"):
        row = conn.execute(Q_SESSION_START).fetchone()
        if row and row[0] is not None:
            time = str(row[0])
    return command, time


def probe_meta(conn: sqlite3.Connection, schema: Schema) -> ExportMeta:
    version, schema_version, source = probe_versions(conn, schema)
    if version == "unknown":
        era = schema_era(schema)
        source = f"none; schema suggests {era}" if era else source
    command, time = probe_capture(conn, schema)
    return ExportMeta(nsys_version=version, schema_version=schema_version,
                      version_source=source, gpus=probe_gpus(conn, schema),
                      capture_command=command, capture_time=time)
