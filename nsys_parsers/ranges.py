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

import numpy as np

from nsys_parsers.activity_reads import register_parser
from nsys_parsers.fetch import ints_from_json
from nsys_parsers.schema import (
    LOW24,
    NVTX_DOMAIN_CREATE,
    NVTX_PUSHPOP,
    NVTX_RANGE_TYPES,
    NVTXT_PUSHPOP,
)

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


def parse_nvtx(texts: tuple[str, ...], conn: sqlite3.Connection, sparse_sql: str,
               bounds: dict[str, int]) -> list[np.ndarray]:
    """The NVTX_COLUMNS of a chunk (``activity_reads.nvtx_job``) from its dense read (every
    row, without rowids), keeping the event types read; a chunk with gaps in its rowids is
    read again with them (``sparse_sql`` on ``conn``)."""
    s, e, t, f = (ints_from_json(v) for v in texts)
    if s.size != bounds["hi"] - bounds["lo"]:
        return [ints_from_json(v) for v in conn.execute(sparse_sql, bounds).fetchone()]
    r = np.arange(bounds["lo"], bounds["hi"], dtype=np.int64)
    keep = np.isin(f & 0xFF, READ_TYPES)
    if not keep.all():
        s, e, t, f, r = s[keep], e[keep], t[keep], f[keep], r[keep]
    return [s, e, t, f, r]


register_parser("nvtx", parse_nvtx)


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
