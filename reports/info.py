"""``info``: what an export is: nsys and schema version, GPUs, tables and row counts."""

from __future__ import annotations

import os

from nsys_parsers.export import KERNEL_TABLE, NVTX_TABLE, Export
from reports.common import opened

INFO_KEYS = [
    "nsys_version", "schema_version", "gpus", "tables", "capture_command", "kernel_count",
    "nvtx_range_count", "capture_time", "version_source",
]

Q_NVTX_RANGES = "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60, 70, 71)"


def export_info(export: "Export | str | os.PathLike") -> dict:
    with opened(export) as ex:
        meta = ex.meta
        tables = {name: ex.row_count(name) for name in sorted(ex.tables)}
        nvtx_ranges = (ex.conn.execute(Q_NVTX_RANGES).fetchone()[0]
                       if ex.has_column(NVTX_TABLE, "eventType") else 0)
        return {
            "nsys_version": meta.nsys_version,
            "schema_version": meta.schema_version,
            "gpus": meta.gpus,
            "tables": tables,
            "capture_command": meta.capture_command,
            "kernel_count": tables.get(KERNEL_TABLE, 0),
            "nvtx_range_count": nvtx_ranges,
            "capture_time": meta.capture_time,
            "version_source": meta.version_source,
        }
