"""Load kernels (with their launch calls) and NVTX ranges of one export, in one threaded pass.

What each part means is documented where it is built: ``nsys_parsers.kernels`` (kernels and
the launch join), ``nsys_parsers.ranges`` (NVTX rows), ``nsys_parsers.names`` (names),
``nsys_parsers.window`` (keeping only what ran inside a range). With a cache entry
(``nsys_parsers.cache``) the columns are read from the export once and from the cache after.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.cache import ExportCache, Part
from nsys_parsers.fetch import gather_ints, gather_names, ints_job, names_job
from nsys_parsers.kernel_groups import kernel_name_column
from nsys_parsers.kernels import (
    KERNEL_COLUMNS,
    LAUNCH_COLUMNS,
    KernelData,
    build_kernels,
    kernel_names_by_kind,
    launch_tables,
)
from nsys_parsers.names import RangeNames, cache_range_names, name_keys_sql, range_names
from nsys_parsers.ranges import NVTX_COLUMNS, RangeData, build_ranges, nvtx_numeric_job
from nsys_parsers.reader import Reader, rowid_chunks
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE

ACTIVITY_PART = "activity"


@dataclass(frozen=True)
class Activity:
    """Kernels and ranges of one export (None: not traced). ``names`` are the range names
    when they were loaded with the ranges (else resolve them with ``names.range_names``)."""

    kernels: KernelData | None
    ranges: RangeData | None
    capture_end: int
    names: RangeNames | None = None
    notes: list[str] = field(default_factory=list)


def load_activity(export, *, name_kind: str = "demangled", with_names: bool = True,
                  workers: int = 2, cache: ExportCache | None = None) -> Activity:
    """Read kernels, their launches and NVTX ranges, in chunks, on a pool of threads (or
    from ``cache``, which the columns read are stored in).

    ``with_names=False`` leaves range names unresolved: ``names.range_names(..., rows=...)``
    later fetches only the ones a report needs (cheap on exports with millions of ranges)."""
    if cache is not None:
        act = _from_cache(export, cache, name_kind)
        if act is not None:
            if with_names and act.ranges is not None:
                names = range_names(export, act.ranges, cache=cache)
                act = Activity(kernels=act.kernels, ranges=act.ranges,
                               capture_end=act.capture_end, names=names, notes=act.notes)
            return act
    act = _read(export, name_kind, with_names, workers)
    if cache is not None:
        _to_cache(cache, act)
        if act.names is not None and act.ranges is not None:
            cache_range_names(cache, act.ranges, act.names)
    return act


def _read(export, name_kind: str, with_names: bool, workers: int) -> Activity:
    notes: list[str] = []
    has_kernels = export.has_table(KERNEL_TABLE)
    has_nvtx = export.has_table(NVTX_TABLE)
    conn = export.db
    kernel_jobs, launch_jobs, nvtx_jobs, key_jobs = [], [], [], []
    with Reader(export.path, workers=workers) as rd:
        if has_nvtx:  # the biggest table first: the pool works on it while the rest queues
            keys_sql = name_keys_sql(export)
            for b in rowid_chunks(conn, NVTX_TABLE):
                nvtx_jobs.append(rd.submit(nvtx_numeric_job(export, b)))
                if with_names:
                    key_jobs.append(rd.submit(names_job(keys_sql, b)))
        if has_kernels:
            name_col, more = kernel_name_column(export, name_kind)
            notes += more
            ksql = Q.KERNELS.sql(export, name_col=name_col)
            kernel_jobs = [rd.submit(ints_job(ksql, KERNEL_COLUMNS, b))
                           for b in rowid_chunks(conn, KERNEL_TABLE)]
            for table in launch_tables(export):
                lsql = Q.LAUNCHES.sql(export, table=table)
                launch_jobs += [rd.submit(ints_job(lsql, LAUNCH_COLUMNS, b))
                                for b in rowid_chunks(conn, table)]
        kernel_cols = gather_ints(kernel_jobs, len(KERNEL_COLUMNS)) if has_kernels else None
        launch_cols = gather_ints(launch_jobs, len(LAUNCH_COLUMNS)) if has_kernels else None
        nvtx_cols = gather_ints(nvtx_jobs, len(NVTX_COLUMNS)) if has_nvtx else None
        keys = gather_names(key_jobs) if has_nvtx and with_names else None

    capture_end = 0
    kernels = None
    if kernel_cols is not None:
        capture_end = int(kernel_cols[1].max(initial=0))
        if launch_cols is not None:
            capture_end = max(capture_end, int(launch_cols[1].max(initial=0)))
        kernels = build_kernels(export, kernel_cols, launch_cols, name_kind, notes)
        del kernel_cols, launch_cols
    ranges = names = None
    if nvtx_cols is not None:
        if nvtx_cols[0].size:
            capture_end = max(capture_end, int(nvtx_cols[0].max()), int(nvtx_cols[1].max()))
        ranges = build_ranges(nvtx_cols, capture_end)
        del nvtx_cols
        if keys is not None:
            names = range_names(export, ranges, all_keys=keys)
    return Activity(kernels=kernels, ranges=ranges, capture_end=capture_end, names=names,
                    notes=notes)


# -- the cache: numeric columns in one part, kernel names per name kind in another ----------

_KERNEL_FIELDS = ("start", "end", "global_pid", "launch_tid", "launch_start", "launch_end")
_RANGE_FIELDS = ("start", "end", "tid", "pushpop", "cross_thread", "unclosed", "rowid",
                 "domain", "domains", "all_is_domain")


def kernel_names_part(name_kind: str) -> str:
    return f"kernel_names.{name_kind}"


def _to_cache(cache: ExportCache, act: Activity) -> None:
    arrays: dict[str, np.ndarray] = {}
    k, r = act.kernels, act.ranges
    if k is not None:
        arrays.update({f"k.{f}": getattr(k, f) for f in _KERNEL_FIELDS})
        cache.put(kernel_names_part(k.name_kind), Part(
            arrays={"code": k.name_code}, strings={"names": k.names},
            meta={"notes": k.notes}))
    if r is not None:
        arrays.update({f"r.{f}": getattr(r, f) for f in _RANGE_FIELDS})
    cache.put(ACTIVITY_PART, Part(arrays=arrays, meta={
        "kernels": k is not None, "ranges": r is not None, "capture_end": act.capture_end}))


def _from_cache(export, cache: ExportCache, name_kind: str) -> Activity | None:
    part = cache.get(ACTIVITY_PART)
    if part is None:
        return None
    a, meta = part.arrays, part.meta
    notes: list[str] = []  # the load notes are those of the kernel name kind
    kernels = None
    if meta.get("kernels"):
        names = cache.get(kernel_names_part(name_kind))
        n = len(a["k.start"])
        if names is None or len(names.arrays.get("code", ())) != n:
            codes, kn, knotes = kernel_names_by_kind(export, name_kind)
            if codes.size != n:
                return None
            cache.put(kernel_names_part(name_kind), Part(
                arrays={"code": codes}, strings={"names": kn}, meta={"notes": knotes}))
        else:
            codes, kn, knotes = names.arrays["code"], names.strings["names"], \
                names.meta.get("notes", [])
        notes = list(knotes)
        kernels = KernelData(name_code=codes, names=kn, name_kind=name_kind, notes=list(knotes),
                             **{f: a[f"k.{f}"] for f in _KERNEL_FIELDS})
    ranges = (RangeData(**{f: a[f"r.{f}"] for f in _RANGE_FIELDS}) if meta.get("ranges")
              else None)
    return Activity(kernels=kernels, ranges=ranges, capture_end=int(meta["capture_end"]),
                    notes=notes)
