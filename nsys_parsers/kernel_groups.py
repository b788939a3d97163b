"""The kernel summary's input for a small export, in plain Python: the durations of each
kernel name, sorted. No numpy: up to ``SMALL_KERNELS`` kernels, importing numpy (about
0.13 s) costs more than reading and summarizing every kernel without it.

Each rowid chunk of the kernel table is grouped by SQLite (``GROUP BY`` the name id, each
group's durations as one JSON array), one chunk per thread of a ``Reader``; the chunks' lists
are joined per name and sorted. Name ids become names through ``StringIds``; ids whose text
is equal are one name, as in ``nsys_parsers.kernels``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from nsys_parsers import queries as Q
from nsys_parsers.errors import BadOption
from nsys_parsers.reader import Reader, rowid_chunks, rowid_span
from nsys_parsers.schema import KERNEL_TABLE, NAME_COLUMN, NAME_KINDS, Schema
from nsys_parsers.strings import strings_by_id

# Up to this many kernel rows (the rowid span), the plain-Python summary answers faster than
# numpy's, cold or from the cache (0.26 vs 0.38 s cold and 0.34 s warm at 0.1 M kernels; the
# numpy path is faster from about 0.25 M on, and caches what it read).
SMALL_KERNELS = 200_000


@dataclass(frozen=True)
class KernelGroups:
    names: list[str]            # distinct kernel names
    durations: list[list[int]]  # of each name, ascending (never empty)
    notes: list[str] = field(default_factory=list)


def kernel_name_column(export: Schema, name_kind: str) -> tuple[str, list[str]]:
    """The kernel table column for ``name_kind`` (falling back to demangled names)."""
    if name_kind not in NAME_KINDS:
        raise BadOption(f"unknown name kind {name_kind!r}; use one of {', '.join(NAME_KINDS)}")
    col = NAME_COLUMN[name_kind]
    notes = []
    if not export.has_column(KERNEL_TABLE, col):
        notes.append(f"this export has no {col} column (older nsys); showing demangled names")
        col = "demangledName"
    return col, notes


def kernel_rows(export) -> int:
    """How many kernel rows the export has at most (its rowid span)."""
    span = rowid_span(export.db, KERNEL_TABLE)
    return span[1] - span[0] if span else 0


class KernelGroupReads:
    """The grouped reads of a small export's kernels, under way on a ``Reader``
    (``start_kernel_groups``); ``result()`` waits for them and joins the chunks."""

    def __init__(self, export, name_kind: str, workers: int = 2):
        name_col, self.notes = kernel_name_column(export, name_kind)
        sql = Q.KERNEL_DURATION_GROUPS.sql(export, name_col=name_col)

        def job(bounds: dict[str, int]):  # noqa: ANN202 - a Reader job
            return lambda conn: [(n, json.loads(ds)) for n, ds in conn.execute(sql, bounds)]

        self.export = export
        self.owns_export = False  # close() closes it too (open_kernel_groups)
        self._reader = Reader(export.path, workers=workers)
        self._jobs = [self._reader.submit(job(b))
                      for b in rowid_chunks(export.db, KERNEL_TABLE, parts=workers)]

    def result(self) -> KernelGroups:
        """Every kernel's duration, grouped by name and sorted (the reads end: closed)."""
        try:
            return self._result()
        finally:
            self.close()

    def _result(self) -> KernelGroups:
        by_id: dict[int, list[int]] = {}
        for pending in self._jobs:
            for name_id, durations in pending.result():
                have = by_id.get(name_id)
                if have is None:
                    by_id[name_id] = durations
                else:
                    have.extend(durations)
        strings = strings_by_id(self.export.db, self.export, sorted(by_id))
        by_name: dict[str, list[int]] = {}
        for name_id in sorted(by_id):
            name = strings.get(name_id, f"<unknown kernel name {name_id}>")
            have = by_name.get(name)
            if have is None:
                by_name[name] = by_id[name_id]
            else:
                have.extend(by_id[name_id])
        for durations in by_name.values():
            durations.sort()
        return KernelGroups(names=list(by_name), durations=list(by_name.values()),
                            notes=list(self.notes))

    def close(self) -> None:
        """Drop the chunks no thread has started, end the threads (and close the export if
        the reads own it)."""
        self._reader.stop()
        if self.owns_export:
            self.export.close()


def start_kernel_groups(export, name_kind: str, workers: int = 2) -> KernelGroupReads | None:
    """Start reading the kernel summary's input of an export of up to ``SMALL_KERNELS``
    kernels (None for a larger one: numpy and the cache answer it faster)."""
    if kernel_rows(export) > SMALL_KERNELS:
        return None
    return KernelGroupReads(export, name_kind, workers)


def open_kernel_groups(path, name_kind: str, *, nsys: str | None = None, workers: int = 2
                       ) -> KernelGroupReads | None:
    """Open the export and start reading its kernel summary's input, if it has up to
    ``SMALL_KERNELS`` kernels (else None, the export closed). The reads own the export.
    Light: a command calls this before it imports the report modules, which load while
    SQLite reads."""
    from nsys_parsers.export import open_export

    export = open_export(path, nsys=nsys)
    try:
        export.require(KERNEL_TABLE, "the kernel summary")
        reads = start_kernel_groups(export, name_kind, workers)
    except BaseException:
        export.close()
        raise
    if reads is None:
        export.close()
        return None
    reads.owns_export = True
    return reads
