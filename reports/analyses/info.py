"""``info``: what an export is: nsys and schema version, GPUs, tables and row counts."""

from __future__ import annotations

from collections import Counter
from typing import Any

from nsys_parsers import queries as Q
from nsys_parsers.export import Export
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE
from reports.pipeline.analysis import Analysis
from reports.pipeline.report import Report
from reports.pipeline.session import Session

INFO_KEYS = ["nsys_version", "schema_version", "gpus", "tables", "capture_command",
             "kernel_count", "nvtx_range_count", "capture_time", "version_source"]


def export_info(ex: Export) -> dict[str, Any]:
    """What an export is: versions, GPUs, capture command and time, table row counts."""
    meta = ex.meta
    tables = {name: ex.row_count(name) for name in sorted(ex.tables)}
    nvtx_ranges = (ex.db.execute(Q.NVTX_RANGE_COUNT.sql(ex)).fetchone()[0]
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


def info_for_people(info: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``info`` for a table: identical GPUs counted (``8 x NVIDIA H100``), only the tables
    that hold rows and are not nsys's ENUM_ lookup tables; and notes saying what was left out."""
    out = dict(info)
    gpus = Counter(info.get("gpus") or [])
    out["gpus"] = ", ".join(f"{n} x {g}" if n > 1 else g for g, n in gpus.items()) or "none listed"
    tables = info.get("tables") or {}
    shown = {t: n for t, n in tables.items() if n and not t.startswith("ENUM_")}
    out["tables"] = shown
    notes = []
    hidden = len(tables) - len(shown)
    if hidden:
        notes.append(f"{len(tables)} tables; {hidden} empty or ENUM_ lookup tables not shown "
                     f"(--format json lists every table)")
    return out, notes


def info(s: Session) -> Report:
    data = export_info(s.export)
    _, notes = info_for_people(data)
    return Report(rows=[], columns=INFO_KEYS, obj=data, notes=notes,
                  title=f"nsys export {s.export.source.name}")


ANALYSIS = Analysis(
    name="info",
    help="""Export metadata: nsys and schema version, GPUs, capture command, table row counts.

    Example: `nsys-mine info run.sqlite --format json`
    """,
    run=info, columns=INFO_KEYS, order=10, default_top=0,
    people=lambda obj: info_for_people(obj)[0],
)
