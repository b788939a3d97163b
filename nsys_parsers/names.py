"""Names: kernel and NVTX range names from ``StringIds`` and inline text.

Kernel names are ids into ``StringIds``. An NVTX range is named by its ``textId`` string if set,
else its inline ``text``; ranges in a non-default domain are named ``domain:name`` (the domain's
name comes from its NvtxDomainCreate row, event type 75, in the same process; nsys takes the
first creation of each (domain, process)). Names equal by text merge into one code.

Range names are a value (``RangeNames``): resolving, merging PyTorch operator calls or
restricting never changes data that another report holds.
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.activity_reads import keys_job, name_keys_sql, nvtx_key_expr
from nsys_parsers.arrays import factorize, sorted_unique
from nsys_parsers.cache import ExportCache, Part
from nsys_parsers.fetch import gather_names, ints_from_json
from nsys_parsers.reader import Reader, rowid_chunks
from nsys_parsers.schema import LOW24, NVTX_TABLE
from nsys_parsers.strings import strings_by_id

# PyTorch's emit_nvtx/record_function ranges carry per-call suffixes: "aten::linear, seq = 7",
# "aten::mm, op_id = 318133", "..., sizes = [[4, 64], [64, 64]]".
OP_ID_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids|stream)\s*=.*$", re.S)
ROWID_CHUNK = 200_000
# Names of more than this share of the ranges are read by one scan of the table (2.7x
# cheaper per row than rowid seeks, measured on 1.3-1.7 M ranges), not row by row.
FULL_SCAN_SHARE = 0.35


@dataclass(frozen=True)
class RangeNames:
    """The name of every range of a RangeData: ``code[i]`` indexes ``names``; -1 where the
    name was not resolved (only some ranges were asked for)."""

    code: np.ndarray
    names: list[str]

    def index(self, name: str) -> int | None:
        try:
            return self.names.index(name)
        except ValueError:
            return None

    @property
    def complete(self) -> bool:
        return bool((self.code >= 0).all())

    def take(self, keep: np.ndarray) -> RangeNames:
        return RangeNames(code=self.code[keep], names=self.names)

    def merged_op_ids(self) -> RangeNames:
        """Every call of a PyTorch operator under one name (``aten::mm, seq = 7`` ->
        ``aten::mm``), so that reports aggregate per operator instead of per call."""
        merged = [OP_ID_SUFFIX.sub("", n) for n in self.names]
        names, remap = unique_names(merged, np.arange(len(merged), dtype=np.int64))
        code = self.code
        if remap.size and code.size:
            if int(code.min()) >= 0:  # every name resolved: one gather (19 -> 7 ms at 1.7 M)
                code = remap[code]
            else:
                code = np.where(code >= 0, remap[np.maximum(code, 0)], -1)
        return RangeNames(code=code, names=names)


def looks_like_emit_nvtx(names: list[str], min_share: float = 0.2) -> bool:
    """Whether range names look like a PyTorch ``emit_nvtx``/``record_function`` capture: at
    least ``min_share`` of the distinct names carry per-call suffixes (``, seq = N``)."""
    if not names:
        return False
    hits = sum(1 for n in names if OP_ID_SUFFIX.search(n))
    return hits >= max(1, int(min_share * len(names)))


def unique_names(names: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Merge codes whose names are equal (e.g. one range named by textId, one inline)."""
    if len(set(names)) == len(names):
        return names, codes
    index: dict[str, int] = {}
    remap = np.array([index.setdefault(n, len(index)) for n in names], dtype=np.int64)
    return list(index), remap[codes] if codes.size else codes


def kernel_names(export, name_ids: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(distinct names, code per kernel) from the kernels' StringIds ids."""
    ids_u, codes = np.unique(name_ids, return_inverse=True)
    strings = strings_by_id(export.db, export, ids_u)
    names = [strings.get(int(i), f"<unknown kernel name {int(i)}>") for i in ids_u]
    return unique_names(names, codes.ravel())


def read_all_keys(export) -> tuple[np.ndarray, list[str]]:
    """The name key code of every NVTX row read (table order) and the distinct keys."""
    return PendingKeys(export).result()


class PendingKeys:
    """``read_all_keys`` under way on threads (and SQLite connections) of its own, so that
    the caller computes meanwhile; ``result()`` waits for the keys, ``close()`` for the
    threads when the keys are not wanted after all."""

    def __init__(self, export) -> None:
        sql = name_keys_sql(export)
        chunks = rowid_chunks(export.db, NVTX_TABLE)  # on the caller's connection, here
        self._reader = Reader(export.path)
        self._futures = [self._reader.submit(keys_job(sql, b)) for b in chunks]

    def result(self) -> tuple[np.ndarray, list[str]]:
        try:
            return gather_names(self._futures)
        finally:
            self.close()

    def close(self) -> None:
        self._reader.stop()  # chunks not started yet are not read


def _resolve_keys(export, keys: list[str]) -> list[str]:
    """Raw keys ("\\x01<textId>" or inline text) -> display names."""
    ids = [int(u[1:]) for u in keys if u.startswith("\x01") and u[1:].lstrip("-").isdigit()]
    strings = strings_by_id(export.db, export, ids)
    out = []
    for u in keys:
        if u.startswith("\x01"):
            try:
                out.append(strings.get(int(u[1:]), f"<textId {u[1:]}>"))
            except ValueError:
                out.append(u[1:])
        else:
            out.append(u)
    return out


def _subset_keys(export, rowids: np.ndarray, workers: int = 2
                 ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Name keys of the given NVTX rowids: (rowids, codes, unique keys), by rowid seeks in
    chunks, on a pool of threads (each chunk is one statement: SQLite runs it without the
    GIL)."""
    sql = Q.NVTX_KEYS_BY_ROWID.sql(export, name_key=nvtx_key_expr(export))

    def job(ids: str) -> Callable[[sqlite3.Connection], tuple[np.ndarray, list[str]]]:
        def run(conn: sqlite3.Connection) -> tuple[np.ndarray, list[str]]:
            rid_json, keys_json = conn.execute(sql, (ids,)).fetchone()
            return ints_from_json(rid_json), json.loads(keys_json)
        return run

    step = max(1, min(ROWID_CHUNK, -(-rowids.size // max(1, workers))))
    with Reader(export.path, workers=workers) as rd:
        futures = [rd.submit(job(json.dumps(rowids[a:a + step].tolist())))
                   for a in range(0, rowids.size, step)]
        parts = [f.result() for f in futures]
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
    keys = [k for _, ks in parts for k in ks]
    codes, uniq = factorize(keys)
    return np.concatenate([r for r, _ in parts]), codes, uniq


def range_names(export, ranges, rows: np.ndarray | None = None,
                all_keys: tuple[np.ndarray, list[str]] | None = None,
                cache: ExportCache | None = None) -> RangeNames:
    """The display names of ``ranges`` (a RangeData as read, in table order): of all of them,
    or only of ``rows`` (indices), which is much cheaper on exports with millions of ranges
    when only those with kernels matter. ``all_keys`` are the name keys of every row read
    (``read_all_keys``), if already loaded. With ``cache`` (the entry of this export; the
    ranges must be those read from it), names resolved before are reused and new ones kept."""
    cached = cached_range_names(cache, ranges) if cache is not None else None
    if cached is not None and (cached.complete or (
            rows is not None and bool((cached.code[rows] >= 0).all()))):
        return cached
    if rows is not None and cached is not None:  # resolve only the rows still missing
        rows = rows[cached.code[rows] < 0]
    if rows is not None and rows.size > FULL_SCAN_SHARE * len(ranges):
        rows = None  # seeking most rows one by one costs more than reading them all
    names = _resolve_range_names(export, ranges, rows, all_keys)
    if cached is not None:
        names = _union(cached, names)
    if cache is not None:
        cache_range_names(cache, ranges, names)
    return names


RANGE_NAMES_PART = "range_names"


def cached_range_names(cache: ExportCache, ranges) -> RangeNames | None:
    """The names of ``ranges`` resolved so far (code -1: not yet), if the cache has them."""
    part = cache.get(RANGE_NAMES_PART)
    if part is None or part.meta.get("ranges") != len(ranges):
        return None
    code = part.arrays.get("code")
    names = part.strings.get("names")
    if code is None or names is None or code.size != len(ranges) or (
            code.size and int(code.max(initial=-1)) >= len(names)):
        return None
    return RangeNames(code=code, names=names)


def cache_range_names(cache: ExportCache, ranges, names: RangeNames) -> None:
    cache.put(RANGE_NAMES_PART, Part(arrays={"code": names.code},
                                     strings={"names": names.names},
                                     meta={"ranges": len(ranges)}))


def _union(a: RangeNames, b: RangeNames) -> RangeNames:
    """Names of ``a`` where resolved, else of ``b`` (both of the same ranges)."""
    index = {n: i for i, n in enumerate(a.names)}
    names = list(a.names)
    remap = np.array([index.setdefault(n, len(index)) for n in b.names], dtype=np.int64)
    names += list(index)[len(names):]
    code = np.where(a.code >= 0, a.code,
                    np.where(b.code >= 0, remap[np.maximum(b.code, 0)] if remap.size else -1,
                             -1))
    return RangeNames(code=code, names=names)


def _resolve_range_names(export, ranges, rows: np.ndarray | None,
                         all_keys: tuple[np.ndarray, list[str]] | None) -> RangeNames:
    if rows is None and all_keys is None:
        all_keys = read_all_keys(export)
    if all_keys is not None:
        codes_all, uniq = all_keys
        dom_codes = codes_all[ranges.all_is_domain]
        range_codes = (codes_all[~ranges.all_is_domain] if ranges.all_is_domain.any()
                       else codes_all)
    else:
        assert rows is not None
        want = sorted_unique(np.concatenate([ranges.rowid[rows], ranges.domains[:, 0]]))
        rid, codes, uniq = _subset_keys(export, want)
        range_codes = np.full(len(ranges), -1, dtype=np.int64)
        if len(ranges):
            pos_c = np.minimum(np.searchsorted(ranges.rowid, rid), len(ranges) - 1)
            ok = ranges.rowid[pos_c] == rid
            range_codes[pos_c[ok]] = codes[ok]
        dpos = np.searchsorted(rid, ranges.domains[:, 0])
        dom_codes = (codes[np.minimum(dpos, max(rid.size - 1, 0))] if rid.size
                     else np.zeros(0, dtype=np.int64))
    resolved = _resolve_keys(export, uniq)
    names, final = _with_domains(ranges, resolved, range_codes, dom_codes)
    valid = final >= 0
    if not valid.all():
        sub_names, sub_codes = unique_names(names, final[valid])
        final = final.copy()
        final[valid] = sub_codes
        names = sub_names
    else:
        names, final = unique_names(names, final)
    return RangeNames(code=final, names=names)


def _with_domains(ranges, resolved: list[str], codes: np.ndarray, dom_codes: np.ndarray
                  ) -> tuple[list[str], np.ndarray]:
    """Prefix names of ranges in non-default domains with ``domain:``."""
    if not (ranges.domains.shape[0] > 0 and bool((ranges.domain != 0).any())):
        return list(resolved), codes
    # (domainId, process) -> domain name; nsys takes the first creation of each pair.
    order = np.argsort(ranges.domains[:, 3], kind="stable")
    seen: dict[tuple[int, int], int] = {}
    dom_names: list[str] = []
    for i in order:
        key = (int(ranges.domains[i, 1]), int(ranges.domains[i, 2]))
        if key not in seen:
            seen[key] = len(dom_names)
            dom_names.append(resolved[int(dom_codes[i])])
    domain_of = np.full(len(ranges), -1, dtype=np.int64)
    pidkey = ranges.tid & ~np.int64(LOW24)
    for (did, pk), j in seen.items():
        domain_of[(ranges.domain == did) & (pidkey == pk)] = j
    base = len(resolved) + 1
    combo = np.where(codes >= 0, (domain_of + 1) * base + codes, -1)
    uniq_c, inv = np.unique(combo, return_inverse=True)
    names = []
    for u in uniq_c:
        if u < 0:
            names.append("")  # placeholder for unresolved rows, dropped below
            continue
        dj, c = divmod(int(u), base)
        names.append(f"{dom_names[dj - 1]}:{resolved[c]}" if dj > 0 else resolved[c])
    final = inv.ravel()
    if uniq_c.size and uniq_c[0] < 0:  # unresolved rows stay -1
        names = names[1:]
        final = final - 1
    return names, final
