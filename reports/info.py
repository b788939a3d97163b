"""``info``: what an export is: nsys and schema version, GPUs, tables and row counts."""

from __future__ import annotations

from typing import Any

from nsys_parsers.export import Export
from nsys_parsers.queries import Query
from nsys_parsers.schema import KERNEL_TABLE, NVTX_RANGE_TYPES, NVTX_TABLE, sql_list

Q_NVTX_RANGES = Query(
    "nvtx_range_count",
    "SELECT count(*) FROM NVTX_EVENTS WHERE eventType IN (" + sql_list(NVTX_RANGE_TYPES) + ")",
    needs={NVTX_TABLE: ("eventType",)})


def export_info(ex: Export) -> dict[str, Any]:
    """What an export is: versions, GPUs, capture command and time, table row counts."""
    meta = ex.meta
    tables = {name: ex.row_count(name) for name in sorted(ex.tables)}
    nvtx_ranges = (ex.db.execute(Q_NVTX_RANGES.sql(ex)).fetchone()[0]
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
