"""Load kernels (with their launch calls) and NVTX ranges of one export, in one threaded pass.

What each part means is documented where it is built: ``nsys_parsers.kernels`` (kernels and
the launch join), ``nsys_parsers.ranges`` (NVTX rows), ``nsys_parsers.names`` (names),
``nsys_parsers.window`` (keeping only what ran inside a range). With a cache entry
(``nsys_parsers.cache``) the columns are read from the export once and from the cache after.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

from nsys_parsers.activity_reads import (
    ACTIVITY_KERNELS_PART,
    ACTIVITY_PART,
    KERNEL_COLUMNS,
    LAUNCH_COLUMNS,
    NVTX_COLUMNS,
    ActivityReads,
    submit_activity_reads,
)
from nsys_parsers.cache import ExportCache, Part
from nsys_parsers.fetch import gather_ints, gather_names
from nsys_parsers.kernels import KernelData, build_kernels, kernel_names_by_kind
from nsys_parsers.names import RangeNames, cache_range_names, range_names
from nsys_parsers.ranges import RangeData, build_ranges


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
                  workers: int = 2, cache: ExportCache | None = None,
                  reads: ActivityReads | None = None) -> Activity:
    """Read kernels, their launches and NVTX ranges, in chunks, on a pool of threads (or
    from ``cache``, which the columns read are stored in).

    ``with_names=False`` leaves range names unresolved: ``names.range_names(..., rows=...)``
    later fetches only the ones a report needs (cheap on exports with millions of ranges).
    ``reads``: these reads, already started (``activity_reads.start_activity_reads``, before
    numpy was imported); they are used, or closed when the cache answers."""
    if cache is not None:
        act = _from_cache(export, cache, name_kind)
        if act is not None:
            if reads is not None:
                reads.close()
            if with_names and act.ranges is not None:
                names = range_names(export, act.ranges, cache=cache)
                act = Activity(kernels=act.kernels, ranges=act.ranges,
                               capture_end=act.capture_end, names=names, notes=act.notes)
            return act
    if reads is not None and reads.name_kind != name_kind:
        reads.close()
        reads = None
    if reads is None:
        reads = submit_activity_reads(export, name_kind, with_names, workers)
    elif with_names and not reads.with_names:
        reads.add_keys(export)
    elif reads.with_names and not with_names:
        reads.drop_keys()
    act = _read(export, reads)
    _trim_heap()
    if cache is not None:
        _to_cache(cache, act)
        if act.names is not None and act.ranges is not None:
            cache_range_names(cache, act.ranges, act.names)
    return act


def _trim_heap() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``; elsewhere,
    nothing). The chunks' JSON texts, freed by now, otherwise stay resident and add 40-70 MB
    to the peak of a cold x100 question, which comes later, in the report. It takes 1-6 ms."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def _read(export, reads: ActivityReads) -> Activity:
    """Gather the reads (parsing the chunks read before numpy was loaded) and build the
    kernels, their launches, the ranges and their names."""
    notes = list(reads.notes)
    conn = export.db
    try:
        reads.parse_read(conn)
        kernel_cols = launch_cols = nvtx_cols = keys = None
        if reads.kernels is not None:
            kernel_cols = gather_ints(reads.kernels, len(KERNEL_COLUMNS), conn)
            launch_cols = gather_ints(reads.launches or [], len(LAUNCH_COLUMNS), conn)
        if reads.nvtx is not None:
            nvtx_cols = gather_ints(reads.nvtx, len(NVTX_COLUMNS), conn)
        if reads.keys is not None:
            keys = gather_names(reads.keys)
    finally:
        reads.close()

    capture_end = 0
    kernels = None
    if kernel_cols is not None:
        capture_end = int(kernel_cols[1].max(initial=0))
        if launch_cols is not None:
            capture_end = max(capture_end, int(launch_cols[1].max(initial=0)))
        kernels = build_kernels(export, kernel_cols, launch_cols, reads.name_kind, notes)
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


# -- the cache: ranges in one part, kernels with their launches in another (the plain kernel
# summary maps only that one: 0.2 of the 1 GB at x1200), kernel names per name kind in a third

_KERNEL_FIELDS = ("start", "end", "global_pid", "launch_tid", "launch_start", "launch_end")
_RANGE_FIELDS = ("start", "end", "tid", "pushpop", "cross_thread", "unclosed", "rowid",
                 "domain", "domains", "all_is_domain")


def kernel_names_part(name_kind: str) -> str:
    return f"kernel_names.{name_kind}"


def _to_cache(cache: ExportCache, act: Activity) -> None:
    k, r = act.kernels, act.ranges
    # both parts carry one load token: parts of two loads are never combined (one write of
    # the pair can fail, or race another run's)
    meta = {"kernels": k is not None, "ranges": r is not None, "capture_end": act.capture_end,
            "load": os.urandom(8).hex()}
    if k is not None:
        cache.put(kernel_names_part(k.name_kind), Part(
            arrays={"code": k.name_code}, strings={"names": k.names},
            meta={"notes": k.notes}))
    cache.put(ACTIVITY_KERNELS_PART, Part(
        arrays={f"k.{f}": getattr(k, f) for f in _KERNEL_FIELDS} if k is not None else {},
        meta=meta))
    cache.put(ACTIVITY_PART, Part(
        arrays={f"r.{f}": getattr(r, f) for f in _RANGE_FIELDS} if r is not None else {},
        meta=meta))


def cached_kernels(export, cache: ExportCache, name_kind: str
                   ) -> tuple[KernelData | None, dict] | None:
    """(the kernels, None when none were traced; the part's meta) from the cache, if it
    holds them: the kernels part and this name kind's names (read from the export, and
    stored, when only another kind's are cached)."""
    part = cache.get(ACTIVITY_KERNELS_PART)
    if part is None:
        return None
    a, meta = part.arrays, part.meta
    if not meta.get("kernels"):
        return None, meta
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
    return KernelData(name_code=codes, names=kn, name_kind=name_kind, notes=list(knotes),
                      **{f: a[f"k.{f}"] for f in _KERNEL_FIELDS}), meta


def _from_cache(export, cache: ExportCache, name_kind: str) -> Activity | None:
    part = cache.get(ACTIVITY_PART)
    if part is None:
        return None
    got = cached_kernels(export, cache, name_kind)
    if got is None:
        return None
    kernels, kmeta = got
    a, meta = part.arrays, part.meta
    if "load" not in meta or kmeta.get("load") != meta["load"]:
        return None  # parts of two different loads
    ranges = (RangeData(**{f: a[f"r.{f}"] for f in _RANGE_FIELDS}) if meta.get("ranges")
              else None)
    notes = list(kernels.notes) if kernels is not None else []  # the kernel name kind's
    return Activity(kernels=kernels, ranges=ranges, capture_end=int(meta["capture_end"]),
                    notes=notes)
