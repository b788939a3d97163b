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
import sqlite3
from dataclasses import dataclass, field

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.export import (
    DRIVER_TABLE, KERNEL_TABLE, NVTX_TABLE, RUNTIME_TABLE, Export,
)
from nsys_parsers.fetch import int_columns, run_parallel, text_column

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
    name_code: np.ndarray
    names: list[str]
    pushpop: np.ndarray  # bool: push/pop (else start/end)
    cross_thread: np.ndarray  # bool: start/end range that ended on another thread
    unclosed: np.ndarray  # bool

    def __len__(self) -> int:
        return int(self.start.size)

    @property
    def style(self) -> np.ndarray:
        return np.where(self.pushpop, "PushPop", "StartEnd")


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
# jobs (each runs on its own connection, possibly in a thread)

def _kernel_job(export: Export, name_col: str):
    sql = Q.KERNELS.sql(export, name_col=name_col)

    def job(conn):
        s, e, n, p, c = int_columns(conn, sql, ["s", "e", "n", "p", "c"])
        names = strings_by_id(conn, export, np.unique(n))
        return s, e, n, p, c, names
    return job


def _launch_job(export: Export):
    sqls = [Q.LAUNCHES.sql(export, table=t) for t in (RUNTIME_TABLE, DRIVER_TABLE)
            if all(export.has_column(t, c) for c in ("start", "end", "globalTid",
                                                      "correlationId"))]

    def job(conn):
        parts = [int_columns(conn, sql, ["s", "e", "t", "c"]) for sql in sqls]
        if not parts:
            return [np.zeros(0, dtype=np.int64)] * 4
        return [np.concatenate([p[i] for p in parts]) for i in range(4)]
    return job


def _nvtx_numeric_job(export: Export):
    cross = ("e.endGlobalTid IS NOT NULL AND e.endGlobalTid != e.globalTid"
             if export.has_column(NVTX_TABLE, "endGlobalTid") else "0")
    domain = "ifnull(e.domainId, 0)" if export.has_column(NVTX_TABLE, "domainId") else "0"
    sql = Q.NVTX_NUMERIC.sql(export, cross_thread=cross, domain=domain)

    def job(conn):
        return int_columns(conn, sql, ["s", "e", "t", "f", "d"])
    return job


def _nvtx_names_job(export: Export):
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
    sql = Q.NVTX_NAME_KEYS.sql(export, name_key=key)

    def job(conn):
        import pandas as pd

        keys = text_column(conn, sql, "k")
        codes, uniques = pd.factorize(np.asarray(keys, dtype=object), sort=False)
        del keys
        uniques = list(uniques)
        ids = [int(u[1:]) for u in uniques if u.startswith("\x01") and u[1:].lstrip("-").isdigit()]
        strings = strings_by_id(conn, export, ids)
        resolved = []
        for u in uniques:
            if u.startswith("\x01"):
                try:
                    resolved.append(strings.get(int(u[1:]), f"<textId {u[1:]}>"))
                except ValueError:
                    resolved.append(u[1:])
            else:
                resolved.append(u)
        return codes.astype(np.int64), resolved
    return job


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


def _build_ranges(numeric, names_result, capture_end: int) -> RangeData:
    s, e, t, f, d = numeric
    codes, resolved = names_result
    if codes.size != s.size:  # pragma: no cover - both scans read the same rows in table order
        raise RuntimeError("NVTX name and time columns differ in length")
    etype = f & 0xFF
    is_domain = etype == Q.NVTX_DOMAIN_CREATE
    is_range = ~is_domain
    names = list(resolved)
    final = codes
    if is_domain.any() and (d[is_range] != 0).any():
        # (domainId, process) -> domain name; nsys takes the first creation of each pair.
        dom_idx = np.flatnonzero(is_domain)
        dom_idx = dom_idx[np.argsort(s[dom_idx], kind="stable")]
        pidkey = t & ~np.int64(LOW24)
        domain_of = np.full(s.size, -1, dtype=np.int64)
        dom_names: list[str] = []
        seen: dict[tuple[int, int], int] = {}
        for i in dom_idx:
            key = (int(d[i]), int(pidkey[i]))
            if key in seen:
                continue
            seen[key] = len(dom_names)
            dom_names.append(resolved[codes[i]])
        for (did, pk), j in seen.items():
            domain_of[is_range & (d == did) & (pidkey == pk)] = j
        combo = (domain_of + 1) * (len(resolved) + 1) + codes
        uniq, final = np.unique(combo, return_inverse=True)
        names = []
        for u in uniq:
            dj, c = divmod(int(u), len(resolved) + 1)
            base = resolved[c]
            names.append(f"{dom_names[dj - 1]}:{base}" if dj > 0 else base)
        final = final.ravel()
    keep = np.flatnonzero(is_range)
    s, e, t, f, final = s[keep], e[keep], t[keep], f[keep], final[keep]
    names, final = unique_names(names, final)
    unclosed = e < 0
    e = np.where(unclosed, max(capture_end, int(s.max(initial=0))), e)
    etype = f & 0xFF
    pushpop = (etype == Q.NVTX_PUSHPOP) | (etype == Q.NVTXT_PUSHPOP)
    cross = ((f >> 8) & 1).astype(bool) & ~pushpop
    return RangeData(start=s, end=e, tid=t, name_code=final, names=names, pushpop=pushpop,
                     cross_thread=cross, unclosed=unclosed)


def load_activity(export: Export, *, name_kind: str = "demangled", kernels: bool = True,
                  ranges: bool = True, launches: bool = True) -> Activity:
    """Read what the reports need, in parallel threads. Missing tables give ``None`` parts."""
    notes: list[str] = []
    jobs = {}
    has_kernels = kernels and export.has_table(KERNEL_TABLE)
    has_nvtx = ranges and export.has_table(NVTX_TABLE)
    if has_kernels:
        name_col, n = kernel_name_column(export, name_kind)
        notes += n
        jobs["kernels"] = _kernel_job(export, name_col)
        if launches:
            jobs["launches"] = _launch_job(export)
    if has_nvtx:
        jobs["nvtx_numeric"] = _nvtx_numeric_job(export)
        jobs["nvtx_names"] = _nvtx_names_job(export)
    results = run_parallel(export.path, jobs) if jobs else {}

    capture_end = 0
    kdata = None
    if has_kernels:
        s, e, n, p, c, strings = results["kernels"]
        codes_u, codes = np.unique(n, return_inverse=True)
        names = [strings.get(int(i), f"<unknown kernel name {int(i)}>") for i in codes_u]
        names, codes = unique_names(names, codes.ravel())
        if "launches" in results:
            rs, re_, rt, rc = results["launches"]
            lt, ls, le = _join_launches(p, c, rs, re_, rt, rc)
            capture_end = max(capture_end, int(re_.max(initial=0)))
        else:
            lt = ls = le = np.full(s.size, -1, dtype=np.int64)
        capture_end = max(capture_end, int(e.max(initial=0)))
        kdata = KernelData(start=s, end=e, name_code=codes.ravel(), names=names, global_pid=p,
                           launch_tid=lt, launch_start=ls, launch_end=le, name_kind=name_kind,
                           notes=list(notes))
    rdata = None
    if has_nvtx:
        numeric = results["nvtx_numeric"]
        if numeric[0].size:
            capture_end = max(capture_end, int(numeric[0].max()), int(numeric[1].max()))
        rdata = _build_ranges(numeric, results["nvtx_names"], capture_end)
    return Activity(kernels=kdata, ranges=rdata, capture_end=capture_end, notes=notes)
