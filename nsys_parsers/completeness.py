"""Whether an export's CUDA trace stopped early: the capture went on, its CUDA record did not.

An nsys older than the program's CUDA records the program's NVTX ranges but can stop recording
kernels once a newer CUDA library starts (nsys 2023.4 with a CUDA 13 program: 478 kernels of
model set-up, then none inside any step, while the ranges go on). Every answer then reads
"no kernels in forward", as if the program had none. Two signs, either of which is enough:

- **ranges go on**: no kernel, memory copy, memset or CUDA API call is recorded after a time
  ``t``, while ``MIN_AFTER`` or more NVTX ranges start after ``t`` and go on for at least
  ``MIN_TAIL_SHARE`` of the capture (its span from the first CUDA event to the last event);
- **launches go on**: ``MIN_AFTER`` or more kernel launches (``cudaLaunchKernel``,
  ``cuLaunchKernel``) start after the last kernel ends, over at least ``MIN_TAIL_SHARE`` of
  the capture: a kernel starts after its launch, so those kernels are missing.

The capture alone going on is no sign (a program's interpreter shutdown, its CPU-only
work after the GPU's: a DDP capture of the shared fixtures runs 1.6 s past its last CUDA call),
nor are a few launches without kernels at the very end (a capture stopped while kernels were
queued). Every shared fixture is clean by these rules (tests/test_completeness.py).

The extents are a few ``MIN``/``MAX``/``COUNT`` scans (0.3 s on a 160 MB export, most of it the
NVTX table); they start on the reader's pool when the export is opened, beside the first
answer's own reads, and the column cache keeps them, so each export pays once. Times are plain
integer nanoseconds.
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from nsys_parsers.capture import capture_environment, on_utc_clock, session_start_utc
from nsys_parsers.export import Export
from nsys_parsers.meta import install_dir_version
from nsys_parsers.queries import Query
from nsys_parsers.schema import (
    KERNEL_TABLE,
    MEMCPY_TABLE,
    MEMSET_TABLE,
    NVTX_RANGE_TYPES,
    NVTX_TABLE,
    RUNTIME_TABLE,
    STRINGS_TABLE,
    sql_list,
)

MIN_AFTER = 10
MIN_TAIL_SHARE = 0.10
CACHE_ITEM = "trace_extent"
SYSTEM_ENV = "TARGET_INFO_SYSTEM_ENV"
RANGES, LAUNCHES = "ranges", "launches"


def _extent(name: str, table: str) -> Query:
    return Query(f"extent_{name}", f"SELECT MIN(start), MAX(end), COUNT(*) FROM {table}",
                 needs={table: ("start", "end")}, purpose="where the CUDA trace ends")


CUDA_EXTENTS = tuple(_extent(n, t) for n, t in (
    ("kernels", KERNEL_TABLE), ("memcpy", MEMCPY_TABLE), ("memset", MEMSET_TABLE),
    ("runtime", RUNTIME_TABLE)))
_RANGE_TYPES = sql_list(NVTX_RANGE_TYPES)
NVTX_LAST_START = Query(
    "nvtx_last_start", f"SELECT MAX(start) FROM {NVTX_TABLE}",
    needs={NVTX_TABLE: ("start",)}, purpose="where the NVTX events end")
NVTX_AFTER = Query(
    "nvtx_after", f"SELECT COUNT(*), MAX(COALESCE(end, start)) FROM {NVTX_TABLE} "
                  f"WHERE start > ? AND eventType IN ({_RANGE_TYPES})",
    needs={NVTX_TABLE: ("start", "end", "eventType")}, purpose="NVTX ranges after the trace")
LAUNCHES_AFTER = Query(
    "launches_after",
    f"""SELECT COUNT(*), MAX(r.end) FROM {RUNTIME_TABLE} AS r
        JOIN {STRINGS_TABLE} AS s ON s.id = r.nameId
        WHERE r.start > ?
          AND (s.value LIKE 'cudaLaunchKernel%' OR s.value LIKE 'cuLaunchKernel%')""",
    needs={RUNTIME_TABLE: ("start", "end", "nameId"), STRINGS_TABLE: ("id", "value")},
    purpose="kernel launches after the last kernel")
DRIVER_CUDA = Query(
    "driver_cuda", f"SELECT value FROM {SYSTEM_ENV} WHERE name = 'CudaDriverVersion'",
    needs={SYSTEM_ENV: ("name", "value")}, purpose="the CUDA version the driver supports")


@dataclass(frozen=True)
class TraceCut:
    """Where the CUDA trace stops and what goes on after it (integer ns)."""

    sign: str  # RANGES or LAUNCHES
    stops_ns: int  # the time the trace stops, from the capture's start
    goes_on_ns: int  # how long the ranges or launches go on after it
    span_ns: int  # the capture from its first CUDA event
    count: int  # NVTX ranges or kernel launches after it
    nsys: str | None = None  # the recording nsys (its install directory)
    driver_cuda: str | None = None  # the CUDA version the driver supports
    program_cuda: str | None = None  # CUDA_VERSION in the program's environment

    def message(self) -> str:
        when = f"{self.stops_ns / 1e9:.3f} s"
        if self.sign == RANGES:
            what = (f"nothing CUDA (kernels, memory copies, API calls) is recorded after {when}, "
                    f"while {self.count:,} NVTX ranges go on for {self.goes_on_ns / 1e9:.3f} s "
                    f"more")
        else:
            what = (f"no kernel is recorded after {when}, while {self.count:,} kernel launches "
                    f"go on for {self.goes_on_ns / 1e9:.3f} s more")
        share = 100 * self.goes_on_ns / self.span_ns
        versions = [f"recorded by nsys {self.nsys}" if self.nsys else "",
                    f"a driver for CUDA {self.driver_cuda}" if self.driver_cuda else "",
                    f"the program's CUDA_VERSION {self.program_cuda}" if self.program_cuda else ""]
        said = ", ".join(v for v in versions if v)
        return (f"incomplete CUDA trace: {what} ({share:.0f}% of the capture): answers miss the "
                f"kernels of that time and read 'no kernels' there. An nsys older than the "
                f"program's CUDA does this{' (' + said + ')' if said else ''}: record again "
                f"with an nsys at least as new as the program's CUDA.")


def _row(export: Export, query: Query, *args: Any) -> tuple[Any, ...]:
    row = export.db.execute(query.sql(export), args).fetchone()
    return tuple(row) if row else ()


def extents(export: Export) -> np.ndarray:
    """[first CUDA event, CUDA trace end, last kernel end, NVTX ranges that start after the
    trace end, their last end, kernel launches that start after the last kernel ends, their
    last end]: -1 where absent. Plain SQL over the export: one scan of each CUDA table, one of
    the NVTX table's ``start`` (its first column: the cheapest scan), and only where an NVTX
    event starts after the CUDA trace ends, one more of the NVTX table."""
    first = cuda_end = kernel_end = -1
    for query in CUDA_EXTENTS:
        (table,) = query.needs
        if not export.has_column(table, "start") or not export.has_column(table, "end"):
            continue
        lo, hi, n = _row(export, query)
        if not n or lo is None or hi is None:
            continue
        first = int(lo) if first < 0 else min(first, int(lo))
        cuda_end = max(cuda_end, int(hi))
        if table == KERNEL_TABLE:
            kernel_end = int(hi)
    ranges_after = ranges_end = launches_after = launches_end = -1
    if cuda_end >= 0 and export.has_column(NVTX_TABLE, "eventType") \
            and export.has_column(NVTX_TABLE, "end"):
        (last_start,) = _row(export, NVTX_LAST_START)  # the cheapest scan: start is first
        ranges_after = 0
        if last_start is not None and int(last_start) > cuda_end:
            n, hi = _row(export, NVTX_AFTER, cuda_end)
            ranges_after, ranges_end = int(n or 0), int(hi) if hi is not None else -1
    if kernel_end >= 0 and export.has_column(RUNTIME_TABLE, "nameId"):
        n, hi = _row(export, LAUNCHES_AFTER, kernel_end)
        launches_after, launches_end = int(n or 0), int(hi) if hi is not None else -1
    return np.array([first, cuda_end, kernel_end, ranges_after, ranges_end, launches_after,
                     launches_end], dtype=np.int64)


class Extents:
    """The ``extents`` of an export: from its column cache entry, else read on the reader's
    pool (``reader.submit``: a thread and a connection of its own) from the moment the export
    is opened, while the first answer reads its own columns; ``values()`` waits for them."""

    def __init__(self, export: Export, cache: Any = None, reader: Any = None):
        self.export, self.cache = export, cache
        self._values: np.ndarray | None = None
        self._future: Future | None = None
        item = cache.get(CACHE_ITEM) if cache is not None else None
        if item is not None and item.array.shape == (7,):
            self._values = np.asarray(item.array)
        elif reader is not None:
            self._future = reader.submit(lambda conn: extents(replace(export, conn=conn)))

    def values(self) -> np.ndarray:
        if self._values is None:
            from nsys_parsers.cache import Item

            self._values = (self._future.result() if self._future is not None
                            else extents(self.export))
            if self.cache is not None:
                self.cache.put({CACHE_ITEM: Item(self._values)}, background=True)
        return self._values


def trace_cut(export: Export, cache: Any = None, found: Extents | None = None
              ) -> TraceCut | None:
    """Where the export's CUDA trace stopped early, or None (complete, or nothing to tell).
    ``found``: its extents, started earlier (else read now, through ``cache``)."""
    found = found or Extents(export, cache)
    first, cuda_end, kernel_end, ranges_after, ranges_end, launches_after, launches_end = (
        int(v) for v in found.values())
    if first < 0 or cuda_end < 0:
        return None  # no CUDA trace at all: nothing stopped (the answers say there is none)
    span = max(cuda_end, ranges_end) - first  # the capture's span from its first CUDA event
    cut = None
    if ranges_after >= MIN_AFTER and ranges_end - cuda_end >= MIN_TAIL_SHARE * span > 0:
        cut = (RANGES, cuda_end, ranges_end - cuda_end, ranges_after)
    elif launches_after >= MIN_AFTER and launches_end - kernel_end >= MIN_TAIL_SHARE * span > 0:
        cut = (LAUNCHES, kernel_end, launches_end - kernel_end, launches_after)
    if cut is None:
        return None
    sign, stops, goes_on, count = cut
    utc = session_start_utc(export)
    origin = utc if utc is not None and on_utc_clock(stops, utc) else 0
    return TraceCut(sign=sign, stops_ns=stops - origin, goes_on_ns=goes_on, span_ns=span,
                    count=count, **versions(export))


def versions(export: Export) -> dict[str, str | None]:
    """The recording nsys (its install directory), the driver's CUDA and the program's
    CUDA_VERSION, where the export records them."""
    driver = None
    if export.has_column(SYSTEM_ENV, "name") and export.has_column(SYSTEM_ENV, "value"):
        for (value,) in export.db.execute(DRIVER_CUDA.sql(export)):
            if str(value or "").isdigit():
                v = int(value)
                driver = f"{v // 1000}.{v % 1000 // 10}"
    env, _ = capture_environment(export)
    return {"nsys": install_dir_version(export.db, export), "driver_cuda": driver,
            "program_cuda": env.get("CUDA_VERSION")}
