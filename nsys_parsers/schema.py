"""What nsys writes: table names, NVTX event types, and the schema of one export.

``Schema`` is the set of tables and columns of one export, probed once when it is opened;
named queries (``nsys_parsers.queries``) and readers check it before they run anything, and
``require`` names the ``nsys profile --trace`` option that would have produced a missing table.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nsys_parsers.errors import MissingData

KERNEL_TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
RUNTIME_TABLE = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER_TABLE = "CUPTI_ACTIVITY_KIND_DRIVER"
NVTX_TABLE = "NVTX_EVENTS"
MEMCPY_TABLE = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET_TABLE = "CUPTI_ACTIVITY_KIND_MEMSET"
STRINGS_TABLE = "StringIds"

# NVTX event types (nsys schema docs): push/pop and start/end ranges, their NVTXT variants,
# and the domain-create event that names a domain.
NVTX_PUSHPOP = 59
NVTX_STARTEND = 60
NVTXT_PUSHPOP = 70
NVTXT_STARTEND = 71
NVTX_DOMAIN_CREATE = 75
NVTX_RANGE_TYPES = (NVTX_PUSHPOP, NVTX_STARTEND, NVTXT_PUSHPOP, NVTXT_STARTEND)

# Kernel name columns by the kind of name a user asks for.
NAME_KINDS = ("short", "demangled", "mangled")
NAME_COLUMN = {"short": "shortName", "demangled": "demangledName", "mangled": "mangledName"}

# How kernels are attributed to ranges (nsys_parsers.attribution): in every enclosing range
# (nsys nvtx_kern_sum), or only in the deepest one.
ATTRIBUTIONS = ("all", "innermost")
# Where the kernels of CUDA graphs count: in the ranges around the graph's launch (as nsys),
# or in those open when the graph (or its node) was captured.
GRAPH_ATTRIBUTIONS = ("launch", "capture")

# Which `nsys profile` option produces each table: used in MissingData messages.
TRACE_HINTS = {
    KERNEL_TABLE: "CUDA kernels were not traced: profile with `nsys profile --trace=cuda`",
    RUNTIME_TABLE: "CUDA API calls were not traced: profile with `nsys profile --trace=cuda`",
    NVTX_TABLE: "NVTX was not traced (or the program emitted no NVTX ranges): profile with "
                "`nsys profile --trace=nvtx` and instrument the code with NVTX ranges",
    MEMCPY_TABLE: "no CUDA memcpy was traced: profile with `nsys profile --trace=cuda`",
    MEMSET_TABLE: "no CUDA memset was traced: profile with `nsys profile --trace=cuda`",
}


def sql_list(values: tuple[int, ...]) -> str:
    """An SQL ``IN`` list of integer constants of this module (never user input)."""
    return ", ".join(str(int(v)) for v in values)


@dataclass
class Schema:
    """Tables (and views) of one export with their columns; ``label`` names it in messages."""

    tables: dict[str, tuple[str, ...]] = field(default_factory=dict)
    label: str = "export"

    def has_table(self, name: str) -> bool:
        return name in self.tables

    def has_column(self, table: str, column: str) -> bool:
        return column in self.tables.get(table, ())

    def columns(self, table: str) -> tuple[str, ...]:
        return self.tables.get(table, ())

    def require(self, table: str, purpose: str = "") -> None:
        """Raise MissingData (with the trace option that records it) if ``table`` is absent."""
        if table not in self.tables:
            hint = TRACE_HINTS.get(table, f"the export has no {table} table")
            what = f" for {purpose}" if purpose else ""
            raise MissingData(f"{self.label}: no {table} table{what}: {hint}.")
