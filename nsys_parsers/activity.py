"""Load kernels (with their launch calls) and NVTX ranges as numpy columns.

Kernels
    One row per CUPTI kernel record. Its launch is the CUDA runtime or driver API row with the
    same ``correlationId`` in the same process (correlationIds repeat across processes; the
    kernel's ``globalPid`` equals the launch's ``globalTid`` with the low 24 bits cleared).
    nsys 2022.2 writes some launches twice (``cudaLaunchKernel`` and the nested
    ``cudaLaunchKernel_v7000``, one correlationId): the kernel keeps ONE launch, the narrowest
    call, so it counts once; every range that contains either call contains the narrowest.
    Kernels without a launch row (trimmed exports) are kept, with ``launch_tid == -1``.

Ranges
    NVTX push/pop and start/end ranges (event types 59, 60, 70, 71). Name: the ``textId``
    string if set, else the inline ``text``; ranges in a non-default domain are named
    ``domain:name`` (the domain's name comes from its NvtxDomainCreate row, event type 75).
    A range that was never closed ends at the end of the capture (the last timestamp of any
    kernel, launch or NVTX event). Start/end ranges that ended on another thread are flagged
    ``cross_thread``: listed in range summaries, not used for kernel attribution (as nsys).
"""

from __future__ import annotations

import json
import re
import sqlite3
from dataclasses import dataclass, field

import numpy as np
from nsys_parsers.arrays import sorted_unique

from nsys_parsers import queries as Q
from nsys_parsers.export import (
    DRIVER_TABLE, KERNEL_TABLE, NVTX_TABLE, RUNTIME_TABLE, Export,
)
from nsys_parsers.fetch import TEXT_SEP, Reader, int_columns, rowid_chunks, text_column

NAME_KINDS = ("short", "demangled", "mangled")
_NAME_COLUMN = {"short": "shortName", "demangled": "demangledName", "mangled": "mangledName"}
LOW24 = 0xFFFFFF


@dataclass
class KernelData:
    start: np.ndarray
    end: np.ndarray
    name_code: np.ndarray  # index into names
    names: list[str]
    global_pid: np.ndarray
    launch_tid: np.ndarray  # globalTid of the launch call, -1 if none
    launch_start: np.ndarray
    launch_end: np.ndarray
    name_kind: str
    notes: list[str] = field(default_factory=list)

    @property
    def duration(self) -> np.ndarray:
        return self.end - self.start

    def __len__(self) -> int:
        return int(self.start.size)


@dataclass
class RangeData:
    start: np.ndarray
    end: np.ndarray  # unclosed ranges: end of capture
    tid: np.ndarray  # globalTid
    pushpop: np.ndarray  # bool: push/pop (else start/end)
    cross_thread: np.ndarray  # bool: start/end range that ended on another thread
    unclosed: np.ndarray  # bool
    rowid: np.ndarray  # NVTX_EVENTS rowid, to fetch names later
    domain: np.ndarray  # domain id (0: default domain)
    domains: np.ndarray  # NvtxDomainCreate rows: (rowid, domain id, process key, start)
    all_is_domain: np.ndarray  # table order of all rows read: True for domain-create rows
    name_code: np.ndarray | None = None  # index into names; -1 where not resolved
    names: list[str] | None = None

    def __len__(self) -> int:
        return int(self.start.size)


@dataclass
class Activity:
    kernels: KernelData | None
    ranges: RangeData | None
    capture_end: int
    notes: list[str] = field(default_factory=list)


def pid_of(global_tid: np.ndarray) -> np.ndarray:
    return (global_tid >> 24) & LOW24


def tid_of(global_tid: np.ndarray) -> np.ndarray:
    return global_tid & LOW24


def strings_by_id(conn: sqlite3.Connection, export: Export, ids) -> dict[int, str]:
    ids = [int(i) for i in ids if int(i) >= 0]
    if not ids or not export.has_table("StringIds"):
        return {}
    out: dict[int, str] = {}
    for start in range(0, len(ids), 100_000):
        chunk = json.dumps(ids[start:start + 100_000])
        for k, v in conn.execute(Q.STRINGS_BY_ID.sql(export), (chunk,)):
            out[int(k)] = v if isinstance(v, str) else str(v)
    return out


def kernel_name_column(export: Export, name_kind: str) -> tuple[str, list[str]]:
    if name_kind not in NAME_KINDS:
        from nsys_parsers.errors import BadOption

        raise BadOption(f"unknown name kind {name_kind!r}; use one of {', '.join(NAME_KINDS)}")
    col = _NAME_COLUMN[name_kind]
    notes = []
    if not export.has_column(KERNEL_TABLE, col):
        notes.append(f"this export has no {col} column (older nsys); showing demangled names")
        col = "demangledName"
    return col, notes


# ---------------------------------------------------------------------------------------------
# chunk jobs (each runs on a pool thread's own connection)

def _ints_job(sql: str, columns: list[str], bounds: dict[str, int]):
    return lambda conn: int_columns(conn, sql, columns, bounds)


def _names_job(sql: str, bounds: dict[str, int]):
    def job(conn):
        import pandas as pd

        keys = text_column(conn, sql, "k", bounds)
        if not keys:
            return np.zeros(0, dtype=np.int64), []
        codes, uniques = pd.factorize(np.asarray(keys, dtype=object), sort=False)
        return codes.astype(np.int64), list(uniques)
    return job


def _gather_ints(futures: list, ncols: int) -> list[np.ndarray]:
    """Concatenate chunk results column by column, freeing each chunk column once copied
    (peak memory: the chunks plus one final column, not twice the data)."""
    parts = [f.result() for f in futures]
    futures.clear()
    if not parts:
        return [np.zeros(0, dtype=np.int64) for _ in range(ncols)]
    out = []
    for i in range(ncols):
        out.append(np.concatenate([p[i] for p in parts]) if len(parts) > 1 else parts[0][i])
        for p in parts:
            p[i] = None
    return out


def _gather_names(futures) -> tuple[np.ndarray, list[str]]:
    """Merge per-chunk factorizations into one code space."""
    index: dict[str, int] = {}
    codes = []
    for f in futures:
        c, uniques = f.result()
        remap = np.array([index.setdefault(u, len(index)) for u in uniques], dtype=np.int64)
        codes.append(remap[c] if c.size else c)
    allc = np.concatenate(codes) if codes else np.zeros(0, dtype=np.int64)
    return allc, list(index)


def _nvtx_numeric_sql(export: Export) -> str:
    cross = ("e.endGlobalTid IS NOT NULL AND e.endGlobalTid != e.globalTid"
             if export.has_column(NVTX_TABLE, "endGlobalTid") else "0")
    domain = "ifnull(e.domainId, 0)" if export.has_column(NVTX_TABLE, "domainId") else "0"
    return Q.NVTX_NUMERIC.sql(export, cross_thread=cross, domain=domain)


def _nvtx_key_expr(export: Export) -> str:
    """SQL for a row's raw name key: "\x01<textId>" when textId is set, else the inline text."""
    has_id = export.has_column(NVTX_TABLE, "textId")
    has_text = export.has_column(NVTX_TABLE, "text")
    if has_id and has_text:
        key = "CASE WHEN e.textId IS NOT NULL THEN char(1) || e.textId ELSE e.text END"
    elif has_id:
        key = "char(1) || e.textId"
    elif has_text:
        key = "e.text"
    else:
        key = "''"
    return key


def _resolve_name_keys(conn, export: Export, keys: list[str]) -> list[str]:
    """Raw keys ("\x01<textId>" or inline text) -> display names."""
    ids = [int(u[1:]) for u in keys if u.startswith("\x01") and u[1:].lstrip("-").isdigit()]
    strings = strings_by_id(conn, export, ids)
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


# ---------------------------------------------------------------------------------------------

def _join_launches(k_pid, k_corr, r_start, r_end, r_tid, r_corr):
    """For each kernel, the narrowest launch call with its correlationId in its process."""
    n = k_pid.size
    l_tid = np.full(n, -1, dtype=np.int64)
    l_start = np.full(n, -1, dtype=np.int64)
    l_end = np.full(n, -1, dtype=np.int64)
    if n == 0 or r_corr.size == 0:
        return l_tid, l_start, l_end
    r_pid = r_tid & ~np.int64(LOW24)
    # Small integer codes for processes, so that (process, correlationId) packs in one int64.
    pids, inv = np.unique(np.concatenate([r_pid, k_pid]), return_inverse=True)
    r_code, k_code = inv[: r_pid.size], inv[r_pid.size:]
    corr_max = int(max(r_corr.max(initial=0), k_corr.max(initial=0))) + 1
    if corr_max * len(pids) < 2**62 and min(int(r_corr.min(initial=0)), int(k_corr.min(initial=0))) >= -1:
        r_key = r_code * corr_max + r_corr
        k_key = k_code * corr_max + k_corr
    else:  # pragma: no cover - astronomically large ids
        both = np.unique(np.stack([np.concatenate([r_code, k_code]),
                                   np.concatenate([r_corr, k_corr])], axis=1), axis=0,
                         return_inverse=True)[1].ravel()
        r_key, k_key = both[: r_code.size], both[r_code.size:]
    order = np.lexsort((r_end - r_start, r_key))  # by key, narrowest call first
    sorted_key = r_key[order]
    pos = np.searchsorted(sorted_key, k_key, side="left")
    pos_c = np.minimum(pos, sorted_key.size - 1)
    hit = (sorted_key[pos_c] == k_key) & (k_corr >= 0)
    src = order[pos_c[hit]]
    l_tid[hit] = r_tid[src]
    l_start[hit] = r_start[src]
    l_end[hit] = r_end[src]
    return l_tid, l_start, l_end


def unique_names(names: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Merge codes whose names are equal (e.g. one range named by textId, one inline)."""
    if len(set(names)) == len(names):
        return names, codes
    index: dict[str, int] = {}
    remap = np.array([index.setdefault(n, len(index)) for n in names], dtype=np.int64)
    return list(index), remap[codes] if codes.size else codes


def _build_ranges(cols: list[np.ndarray], capture_end: int) -> RangeData:
    s, e, t, f, r = cols
    etype = f & 0xFF
    is_domain = etype == Q.NVTX_DOMAIN_CREATE
    dom = np.flatnonzero(is_domain)
    domains = np.stack([r[dom], f[dom] >> 9, t[dom] & ~np.int64(LOW24), s[dom]], axis=1)
    keep = np.flatnonzero(~is_domain) if dom.size else None
    if keep is not None:
        s, e, t, f, r = s[keep], e[keep], t[keep], f[keep], r[keep]
    unclosed = e < 0
    if unclosed.any():
        e = np.where(unclosed, max(capture_end, int(s.max(initial=0))), e)
    etype = f & 0xFF
    pushpop = (etype == Q.NVTX_PUSHPOP) | (etype == Q.NVTXT_PUSHPOP)
    cross = ((f >> 8) & 1).astype(bool) & ~pushpop
    return RangeData(start=s, end=e, tid=t, pushpop=pushpop, cross_thread=cross,
                     unclosed=unclosed, rowid=r, domain=f >> 9, domains=domains,
                     all_is_domain=is_domain)


def _subset_keys(conn, export: Export, rowids: np.ndarray) -> tuple[np.ndarray, np.ndarray,
                                                                      list[str]]:
    """Name keys of the given NVTX rowids: (rowids, codes, unique keys), by rowid seeks."""
    import pandas as pd

    key = _nvtx_key_expr(export)
    out_r, out_c = [], []
    index: dict[str, int] = {}
    for a in range(0, rowids.size, 200_000):
        ids = json.dumps(rowids[a:a + 200_000].tolist())
        sql = Q.NVTX_KEYS_BY_ROWID.sql(export, name_key=key)
        rid_text, keys_text, count = conn.execute(sql, (ids,)).fetchone()
        if not count:
            continue
        rid = np.fromstring(rid_text, dtype=np.int64, sep=",")
        keys = keys_text.split(TEXT_SEP)
        if len(keys) != count:  # a name contains the separator: row by row
            rows = conn.execute(Q.NVTX_KEYS_BY_ROWID_ROWS.sql(export, name_key=key),
                                (ids,)).fetchall()
            rid = np.array([x[0] for x in rows], dtype=np.int64)
            keys = [x[1] or "" for x in rows]
        codes, uniq = pd.factorize(np.asarray(keys, dtype=object), sort=False)
        remap = np.array([index.setdefault(u, len(index)) for u in uniq], dtype=np.int64)
        out_r.append(rid)
        out_c.append(remap[codes] if codes.size else codes.astype(np.int64))
    if not out_r:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), []
    return np.concatenate(out_r), np.concatenate(out_c), list(index)


def resolve_range_names(export: Export, ranges: RangeData, rows: np.ndarray | None = None,
                        full_keys: tuple[np.ndarray, list[str]] | None = None) -> RangeData:
    """Give ranges their display names: all of them, or only ``rows`` (indices), which is
    much cheaper on exports with millions of ranges when only those with kernels matter."""
    conn = export.conn
    if rows is None and full_keys is None:
        with Reader(export.path) as rd:
            names_sql = Q.NVTX_NAME_KEYS.sql(export, name_key=_nvtx_key_expr(export))
            futures = [rd.submit(_names_job(names_sql, b)) for b in rowid_chunks(conn, NVTX_TABLE)]
            full_keys = _gather_names(futures)
    if full_keys is not None:
        codes_all, uniq = full_keys
        dom_codes = codes_all[ranges.all_is_domain]
        range_codes = codes_all[~ranges.all_is_domain] if ranges.all_is_domain.any() else codes_all
    else:
        want = sorted_unique(np.concatenate([ranges.rowid[rows], ranges.domains[:, 0]]))
        rid, codes, uniq = _subset_keys(conn, export, want)
        pos = np.searchsorted(ranges.rowid, rid)
        pos_c = np.minimum(pos, max(ranges.rowid.size - 1, 0))
        hit = ranges.rowid.size > 0
        range_codes = np.full(len(ranges), -1, dtype=np.int64)
        if hit:
            ok = ranges.rowid[pos_c] == rid
            range_codes[pos_c[ok]] = codes[ok]
        dpos = np.searchsorted(rid, ranges.domains[:, 0])
        dom_codes = codes[np.minimum(dpos, max(rid.size - 1, 0))] if rid.size else \
            np.zeros(0, dtype=np.int64)
    resolved = _resolve_name_keys(conn, export, uniq)
    names = list(resolved)
    final = range_codes
    has_domain = ranges.domains.shape[0] > 0 and bool((ranges.domain != 0).any())
    if has_domain:
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
        combo = np.where(final >= 0, (domain_of + 1) * base + final, -1)
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
    valid = final >= 0
    if not valid.all():
        sub_names, sub_codes = unique_names(names, final[valid])
        final = final.copy()
        final[valid] = sub_codes
        names = sub_names
    else:
        names, final = unique_names(names, final)
    ranges.name_code = final
    ranges.names = names
    return ranges


def load_kernel_durations(export: Export, *, name_kind: str = "demangled",
                          workers: int = 2) -> tuple[list[str], np.ndarray, np.ndarray, list[str]]:
    """Just what a plain kernel summary needs: (names, name code per kernel, durations, notes)."""
    name_col, notes = kernel_name_column(export, name_kind)
    sql = Q.KERNEL_DURATIONS.sql(export, name_col=name_col)
    with Reader(export.path, workers=workers) as rd:
        d, n = _gather_ints([rd.submit(_ints_job(sql, ["d", "n"], b))
                             for b in rowid_chunks(export.conn, KERNEL_TABLE)], 2)
    codes_u, codes = np.unique(n, return_inverse=True)
    strings = strings_by_id(export.conn, export, codes_u)
    names = [strings.get(int(i), f"<unknown kernel name {int(i)}>") for i in codes_u]
    names, codes = unique_names(names, codes.ravel())
    return names, codes, d, notes


def load_activity(export: Export, *, name_kind: str = "demangled", kernels: bool = True,
                  ranges: bool = True, launches: bool = True, range_names: bool = True,
                  workers: int = 2) -> Activity:
    """Read what the reports need, in chunks, on a pool of threads. Missing tables give None.

    ``range_names=False`` leaves NVTX range names unresolved (``resolve_range_names`` later
    fetches only the ones a report needs)."""
    notes: list[str] = []
    has_kernels = kernels and export.has_table(KERNEL_TABLE)
    has_nvtx = ranges and export.has_table(NVTX_TABLE)
    conn = export.conn
    with Reader(export.path, workers=workers) as rd:
        kf, lf, nf, tf = [], [], [], []
        if has_kernels:
            name_col, n = kernel_name_column(export, name_kind)
            notes += n
            ksql = Q.KERNELS.sql(export, name_col=name_col)
            kf = [rd.submit(_ints_job(ksql, ["s", "e", "n", "p", "c"], b))
                  for b in rowid_chunks(conn, KERNEL_TABLE)]
            if launches:
                for table in (RUNTIME_TABLE, DRIVER_TABLE):
                    if all(export.has_column(table, c) for c in ("start", "end", "globalTid",
                                                                  "correlationId")):
                        lsql = Q.LAUNCHES.sql(export, table=table)
                        lf += [rd.submit(_ints_job(lsql, ["s", "e", "t", "c"], b))
                               for b in rowid_chunks(conn, table)]
        if has_nvtx:
            num_sql = _nvtx_numeric_sql(export)
            names_sql = Q.NVTX_NAME_KEYS.sql(export, name_key=_nvtx_key_expr(export))
            for b in rowid_chunks(conn, NVTX_TABLE):
                nf.append(rd.submit(_ints_job(num_sql, ["s", "e", "t", "f", "r"], b)))
                if range_names:
                    tf.append(rd.submit(_names_job(names_sql, b)))
        kcols = _gather_ints(kf, 5) if has_kernels else None
        lcols = _gather_ints(lf, 4) if has_kernels and launches else None
        ncols = _gather_ints(nf, 5) if has_nvtx else None
        ncodes = _gather_names(tf) if has_nvtx and range_names else None

    capture_end = 0
    kdata = None
    if kcols is not None:
        s, e, n, p, c = kcols
        codes_u, codes = np.unique(n, return_inverse=True)
        strings = strings_by_id(conn, export, codes_u)
        names = [strings.get(int(i), f"<unknown kernel name {int(i)}>") for i in codes_u]
        names, codes = unique_names(names, codes.ravel())
        if lcols is not None:
            rs, re_, rt, rc = lcols
            lt, ls, le = _join_launches(p, c, rs, re_, rt, rc)
            capture_end = max(capture_end, int(re_.max(initial=0)))
            del lcols, rs, re_, rt, rc
        else:
            lt = ls = le = np.full(s.size, -1, dtype=np.int64)
        capture_end = max(capture_end, int(e.max(initial=0)))
        kdata = KernelData(start=s, end=e, name_code=codes, names=names, global_pid=p,
                           launch_tid=lt, launch_start=ls, launch_end=le, name_kind=name_kind,
                           notes=list(notes))
    rdata = None
    if ncols is not None:
        if ncols[0].size:
            capture_end = max(capture_end, int(ncols[0].max()), int(ncols[1].max()))
        rdata = _build_ranges(ncols, capture_end)
        del ncols
        if ncodes is not None:
            resolve_range_names(export, rdata, full_keys=ncodes)
    return Activity(kernels=kdata, ranges=rdata, capture_end=capture_end, notes=notes)


def _take_ranges(r: RangeData, keep: np.ndarray) -> RangeData:
    return RangeData(start=r.start[keep], end=r.end[keep], tid=r.tid[keep],
                     pushpop=r.pushpop[keep], cross_thread=r.cross_thread[keep],
                     unclosed=r.unclosed[keep], rowid=r.rowid[keep], domain=r.domain[keep],
                     domains=r.domains, all_is_domain=np.zeros(0, dtype=bool),
                     name_code=None if r.name_code is None else r.name_code[keep],
                     names=r.names)


def _take_kernels(k: KernelData, keep: np.ndarray) -> KernelData:
    return KernelData(start=k.start[keep], end=k.end[keep], name_code=k.name_code[keep],
                      names=k.names, global_pid=k.global_pid[keep],
                      launch_tid=k.launch_tid[keep], launch_start=k.launch_start[keep],
                      launch_end=k.launch_end[keep], name_kind=k.name_kind, notes=k.notes)


def restrict_to_range(export: Export, act: Activity, window: str) -> Activity:
    """Keep only what happened inside instances of the range ``window`` on the same thread:
    ranges nested in it (itself included) and kernels launched in it. Used to leave warmup
    steps out of the numbers (e.g. ``window="measure"``)."""
    from nsys_parsers.errors import RangeNotFound

    r = act.ranges
    if r is None:
        raise RangeNotFound(f"cannot restrict to range {window!r}: the export has no NVTX "
                            f"ranges (profile with `nsys profile --trace=nvtx`).")
    if r.name_code is None or (r.name_code < 0).any():
        resolve_range_names(export, r)
    if window not in r.names:
        import difflib

        close = difflib.get_close_matches(window, r.names, n=5, cutoff=0.5)
        raise RangeNotFound(f"no NVTX range named {window!r} to restrict to"
                            + (f"; closest: {', '.join(map(repr, close))}." if close else "."))
    code = r.names.index(window)
    wins = np.flatnonzero(r.name_code == code)
    keep_r = np.zeros(len(r), dtype=bool)
    k = act.kernels
    keep_k = np.zeros(len(k), dtype=bool) if k is not None else None
    for w in wins:
        tid, ws, we = r.tid[w], r.start[w], r.end[w]
        keep_r |= (r.tid == tid) & (r.start >= ws) & (r.end <= we)
        if k is not None:
            keep_k |= (k.launch_tid == tid) & (k.launch_start >= ws) & (k.launch_end <= we)
    notes = act.notes + [f"only what ran inside the {window!r} range(s): {wins.size} "
                         f"instance(s); everything outside (e.g. warmup) is left out."]
    return Activity(kernels=_take_kernels(k, np.flatnonzero(keep_k)) if k is not None else None,
                    ranges=_take_ranges(r, np.flatnonzero(keep_r)),
                    capture_end=act.capture_end, notes=notes)


# PyTorch's emit_nvtx/record_function ranges carry per-call suffixes: "aten::linear, seq = 7",
# "aten::mm, op_id = 318133", "..., sizes = [[4, 64], [64, 64]]".
OP_ID_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids|stream)\s*=.*$", re.S)


def merge_op_ids(ranges: RangeData) -> RangeData:
    """Give every call of an operator one name (drop PyTorch's seq/op_id/sizes suffixes), so
    that reports aggregate per operator instead of per call."""
    if ranges.names is None:
        raise ValueError("resolve range names first")
    merged = [OP_ID_SUFFIX.sub("", n) for n in ranges.names]
    names, remap = unique_names(merged, np.arange(len(merged), dtype=np.int64))
    code = ranges.name_code
    ranges.name_code = np.where(code >= 0, remap[np.maximum(code, 0)], -1) if remap.size else code
    ranges.names = names
    return ranges
