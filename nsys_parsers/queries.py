"""Every SQL statement the readers run, named, with the tables and columns it needs.

``Query.sql(export, **idents)`` checks the export's schema first: a missing table raises
``MissingData`` with the ``nsys profile --trace`` option that would have produced it; identifier
placeholders (``{name_col}``) are filled only with columns that exist in the schema, never with
user input. Values are always bound parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nsys_parsers.errors import MissingData
from nsys_parsers.schema import (
    KERNEL_TABLE,
    NVTX_DOMAIN_CREATE,
    NVTX_RANGE_TYPES,
    NVTX_TABLE,
    STRINGS_TABLE,
    Schema,
    sql_list,
)

# NVTX rows the readers use: ranges and the domain-create rows that name their domains.
_NVTX_READ_TYPES = sql_list(NVTX_RANGE_TYPES + (NVTX_DOMAIN_CREATE,))


@dataclass(frozen=True)
class Query:
    name: str
    template: str
    needs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    purpose: str = ""

    def sql(self, export: Schema, **parts: str) -> str:
        """The statement for this export. ``table``/``*_col`` parts must name tables/columns
        of the export's schema; other parts are SQL fragments built by this package from the
        schema (never from user input)."""
        for table, cols in self.needs.items():
            export.require(table, self.purpose or self.name)
            missing = [c for c in cols if not export.has_column(table, c)]
            if missing:
                raise MissingData(
                    f"{export.label}: table {table} lacks column(s) {', '.join(missing)} "
                    f"needed for {self.purpose or self.name}; this export's schema is not "
                    f"supported for that report.")
        tables = list(self.needs) or [parts.get("table", "")]
        for key, value in parts.items():
            if key == "table":
                export.require(value, self.purpose or self.name)
            elif key.endswith("_col") and not any(export.has_column(t, value) for t in tables):
                raise ValueError(f"{self.name}: no column {value!r} in {tables}")
        return self.template.format(**parts)


KERNELS = Query(
    "kernels",
    """SELECT k.start AS s, k.end AS e,
              ifnull(coalesce(k.{name_col}, k.demangledName), -1) AS n,
              ifnull(k.globalPid, -1) AS p, ifnull(k.correlationId, -1) AS c
       FROM CUPTI_ACTIVITY_KIND_KERNEL AS k NOT INDEXED
       WHERE k.rowid >= :lo AND k.rowid < :hi""",
    needs={KERNEL_TABLE: ("start", "end", "demangledName", "globalPid",
                                          "correlationId")},
    purpose="the kernel summary",
)

KERNEL_DURATIONS = Query(
    "kernel_durations",
    """SELECT k.end - k.start AS d, ifnull(coalesce(k.{name_col}, k.demangledName), -1) AS n
       FROM CUPTI_ACTIVITY_KIND_KERNEL AS k NOT INDEXED
       WHERE k.rowid >= :lo AND k.rowid < :hi""",
    needs={KERNEL_TABLE: ("start", "end", "demangledName")},
    purpose="the kernel summary",
)

# The same durations grouped by name id, one JSON array per name (the small-export summary:
# SQLite groups in C, so plain Python only joins, sorts and sums lists).
KERNEL_DURATION_GROUPS = Query(
    "kernel_duration_groups",
    """SELECT n, json_group_array(d) AS ds FROM (
         SELECT k.end - k.start AS d, ifnull(coalesce(k.{name_col}, k.demangledName), -1) AS n
         FROM CUPTI_ACTIVITY_KIND_KERNEL AS k NOT INDEXED
         WHERE k.rowid >= :lo AND k.rowid < :hi)
       GROUP BY n""",
    needs={KERNEL_TABLE: ("start", "end", "demangledName")},
    purpose="the kernel summary",
)

# Launch calls: CUDA runtime and driver API rows (both carry the kernel's correlationId).
LAUNCHES = Query(
    "launches",
    """SELECT r.start AS s, r.end AS e, r.globalTid AS t, r.correlationId AS c
       FROM {table} AS r NOT INDEXED
       WHERE r.rowid >= :lo AND r.rowid < :hi
         AND r.correlationId IS NOT NULL AND r.globalTid IS NOT NULL""",
    purpose="kernel launch attribution",
)

# NVTX rows in table order. `f` packs the event type (bits 0-7), whether a start/end range
# ended on another thread (bit 8) and the domain id (bits 9-48; ids are small counters).
# ``{flags}`` is that expression for the export's schema (``ranges.nvtx_flags_sql``).
NVTX_NUMERIC = Query(
    "nvtx_numeric",
    """SELECT e.start AS s, ifnull(e.end, -1) AS e, ifnull(e.globalTid, -1) AS t,
              {flags} AS f,
              e.rowid AS r
       FROM NVTX_EVENTS AS e NOT INDEXED
       WHERE e.rowid >= :lo AND e.rowid < :hi AND e.eventType IN (""" + _NVTX_READ_TYPES + ")",
    needs={NVTX_TABLE: ("start", "end", "eventType", "globalTid")},
    purpose="the NVTX range summary",
)

# The same columns without the rowid, for every row of a rowid range (no event-type filter):
# when the range has no gaps the rowids are implied, one column fewer to read and parse.
NVTX_NUMERIC_DENSE = Query(
    "nvtx_numeric_dense",
    """SELECT e.start AS s, ifnull(e.end, -1) AS e, ifnull(e.globalTid, -1) AS t,
              {flags} AS f
       FROM NVTX_EVENTS AS e NOT INDEXED
       WHERE e.rowid >= :lo AND e.rowid < :hi""",
    needs={NVTX_TABLE: ("start", "end", "eventType", "globalTid")},
    purpose="the NVTX range summary",
)

# The raw name key of each NVTX row, in the same order: "\x01<textId>" or the inline text.
NVTX_NAME_KEYS = Query(
    "nvtx_name_keys",
    """SELECT {name_key} AS k FROM NVTX_EVENTS AS e NOT INDEXED
       WHERE e.rowid >= :lo AND e.rowid < :hi AND e.eventType IN (""" + _NVTX_READ_TYPES + ")",
    needs={NVTX_TABLE: ("eventType",)},
    purpose="NVTX range names",
)

# Name keys of chosen rows (a JSON array of rowids): rowids and keys as two JSON arrays, in
# the same order.
NVTX_KEYS_BY_ROWID = Query(
    "nvtx_keys_by_rowid",
    """SELECT json_group_array(e.rowid), json_group_array(ifnull({name_key}, ''))
       FROM NVTX_EVENTS AS e WHERE e.rowid IN (SELECT value FROM json_each(?))""",
    needs={NVTX_TABLE: ("eventType",)},
    purpose="NVTX range names",
)

STRINGS_BY_ID = Query(
    "strings_by_id",
    "SELECT id, value FROM StringIds WHERE id IN (SELECT value FROM json_each(?))",
    needs={STRINGS_TABLE: ("id", "value")},
    purpose="names",
)

MEMCPY_KIND_NAMES = Query(
    "memcpy_kind_names",
    "SELECT id, label FROM ENUM_CUDA_MEMCPY_OPER",
    needs={"ENUM_CUDA_MEMCPY_OPER": ("id", "label")},
)
