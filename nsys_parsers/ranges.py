"""NVTX ranges as numpy columns (names are resolved separately, see ``nsys_parsers.names``).

NVTX push/pop and start/end ranges (event types 59, 60, 70, 71). A range that was never closed
ends at the end of the capture (the last timestamp of any kernel, launch or NVTX event).
Start/end ranges that ended on another thread are flagged ``cross_thread``: listed in range
summaries, not used for kernel attribution (as nsys). Domain-create rows (type 75) are kept
apart: they name the non-default domains.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nsys_parsers import queries as Q
from nsys_parsers.fetch import int_columns
from nsys_parsers.schema import (
    LOW24,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_RANGE_TYPES,
    NVTX_TABLE,
    NVTXT_PUSHPOP,
    Schema,
)

NVTX_COLUMNS = ["s", "e", "t", "f", "r"]
READ_TYPES = np.array(NVTX_RANGE_TYPES + (NVTX_DOMAIN_CREATE,), dtype=np.int64)


@dataclass(frozen=True)
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

    def __len__(self) -> int:
        return int(self.start.size)

    def take(self, keep: np.ndarray) -> RangeData:
        """The ranges at indices ``keep`` (domains kept; no longer aligned with table order)."""
        return RangeData(start=self.start[keep], end=self.end[keep], tid=self.tid[keep],
                         pushpop=self.pushpop[keep], cross_thread=self.cross_thread[keep],
                         unclosed=self.unclosed[keep], rowid=self.rowid[keep],
                         domain=self.domain[keep], domains=self.domains,
                         all_is_domain=np.zeros(0, dtype=bool))


def pid_of(global_tid: np.ndarray) -> np.ndarray:
    return (global_tid >> 24) & LOW24


def tid_of(global_tid: np.ndarray) -> np.ndarray:
    return global_tid & LOW24


def nvtx_flags_sql(export: Schema) -> str:
    """The ``f`` column of NVTX_NUMERIC: ``eventType + 256 * cross_thread + 512 * domain``.

    Most rows are on no domain and did not end on another thread; there ``f`` is the event
    type, and a CASE answers it after two cheap tests instead of the whole expression (22% of
    the SQLite time of reading the NVTX columns, measured on 0.4-0.5 M rows)."""
    has_end_tid = export.has_column(NVTX_TABLE, "endGlobalTid")
    has_domain = export.has_column(NVTX_TABLE, "domainId")
    cross = "e.endGlobalTid IS NOT NULL AND e.endGlobalTid != e.globalTid" if has_end_tid else "0"
    domain = "ifnull(e.domainId, 0)" if has_domain else "0"
    common = [c for c, has in (("e.endGlobalTid IS NULL", has_end_tid),
                               ("ifnull(e.domainId, 0) = 0", has_domain)) if has]
    if not common:
        return "e.eventType"
    full = f"e.eventType + 256 * ({cross}) + 512 * ({domain} & 1099511627775)"
    return f"CASE WHEN {' AND '.join(common)} THEN e.eventType ELSE {full} END"


def nvtx_numeric_sql(export: Schema, query: Q.Query = Q.NVTX_NUMERIC) -> str:
    """NVTX_NUMERIC (or NVTX_NUMERIC_DENSE) for this schema (older exports lack
    endGlobalTid or domainId)."""
    return query.sql(export, flags=nvtx_flags_sql(export))


def nvtx_numeric_job(export: Schema, bounds: dict[str, int]
                     ) -> Callable[[sqlite3.Connection], list[np.ndarray]]:
    """A chunk job giving the NVTX_COLUMNS of the range and domain-create rows with rowids in
    ``bounds``. Reads every row without its rowid (implied when the rowids have no gap) and
    keeps the event types read; a chunk with gaps is read again with its rowids."""
    dense_sql = nvtx_numeric_sql(export, Q.NVTX_NUMERIC_DENSE)
    sparse_sql = nvtx_numeric_sql(export)

    def run(conn: sqlite3.Connection) -> list[np.ndarray]:
        s, e, t, f = int_columns(conn, dense_sql, NVTX_COLUMNS[:4], bounds)
        if s.size != bounds["hi"] - bounds["lo"]:
            return int_columns(conn, sparse_sql, NVTX_COLUMNS, bounds)
        r = np.arange(bounds["lo"], bounds["hi"], dtype=np.int64)
        keep = np.isin(f & 0xFF, READ_TYPES)
        if not keep.all():
            s, e, t, f, r = s[keep], e[keep], t[keep], f[keep], r[keep]
        return [s, e, t, f, r]
    return run


def build_ranges(cols: list[np.ndarray], capture_end: int) -> RangeData:
    """RangeData from the NVTX_NUMERIC columns (s, e, t, f, r) of every row read."""
    s, e, t, f, r = cols
    etype = f & 0xFF
    is_domain = etype == NVTX_DOMAIN_CREATE
    dom = np.flatnonzero(is_domain)
    domains = np.stack([r[dom], f[dom] >> 9, t[dom] & ~np.int64(LOW24), s[dom]], axis=1)
    if dom.size:
        keep = np.flatnonzero(~is_domain)
        s, e, t, f, r = s[keep], e[keep], t[keep], f[keep], r[keep]
    unclosed = e < 0
    if unclosed.any():
        e = np.where(unclosed, max(capture_end, int(s.max(initial=0))), e)
    etype = f & 0xFF
    pushpop = (etype == NVTX_PUSHPOP) | (etype == NVTXT_PUSHPOP)
    cross = ((f >> 8) & 1).astype(bool) & ~pushpop
    return RangeData(start=s, end=e, tid=t, pushpop=pushpop, cross_thread=cross,
                     unclosed=unclosed, rowid=r, domain=f >> 9, domains=domains,
                     all_is_domain=is_domain)
