"""NVTX ranges as columns (their names are resolved apart: ``nsys_parsers.names``).

NVTX push/pop and start/end ranges (event types 59, 60, 70, 71). A range that was never closed
ends at the end of the capture (the last timestamp of any kernel, launch or NVTX event).
Start/end ranges that ended on another thread are flagged ``cross_thread``: listed in range
summaries, not used for kernel attribution (as nsys). Domain-create rows (type 75) are kept
apart: they name the non-default domains.

The rows are read with a packed ``flags`` column: the event type (bits 0-7), whether a
start/end range ended on another thread (bit 8) and the domain id (bits 9-48).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nsys_parsers.arrays import Rows, let_go
from nsys_parsers.cache import held
from nsys_parsers.ids import global_pid
from nsys_parsers.schema import NVTX_DOMAIN_CREATE, NVTX_PUSHPOP, NVTXT_PUSHPOP


@dataclass(frozen=True)
class Ranges(Rows):
    """NVTX ranges as columns, one row per range, in table order unless taken."""

    start: np.ndarray
    end: np.ndarray  # unclosed ranges: the end of the capture
    tid: np.ndarray  # globalTid
    pushpop: np.ndarray  # bool: push/pop (else start/end)
    cross_thread: np.ndarray  # bool: a start/end range that ended on another thread
    unclosed: np.ndarray  # bool
    rowid: np.ndarray  # NVTX_EVENTS rowid, to fetch names by
    flags: np.ndarray  # the packed flags as read (the resolver's array: no copy)
    domains: np.ndarray  # NvtxDomainCreate rows: (rowid, domain id, process key, start)
    WHOLE = ("domains",)  # a table of its own: not taken with the ranges

    def domain_at(self, a: int, b: int) -> np.ndarray:
        """The domain id (0: the default domain) of the ranges [a, b), computed when asked
        (an int64 per range held for the few questions that read it cost 8 bytes a
        range), the flags' pages let go once read."""
        f = self.flags[a:b]
        out = f >> 9
        let_go(f)
        return out

    def in_domains(self) -> np.ndarray:
        """The rows of the ranges in a non-default domain, a step of FLAG_STEP at a time."""
        return np.concatenate([np.flatnonzero(self.domain_at(a, a + FLAG_STEP)) + a
                               for a in range(0, len(self), FLAG_STEP)] or [_NO_ROWS])


# Rows per step of the flags' masks: their int64 temporaries stay a few MB (whole, they
# took 24 bytes a range at once: 460 MiB at 20 M ranges).
FLAG_STEP = 1 << 20


_NO_ROWS = np.zeros(0, dtype=np.int64)


def _masks(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(domain-create row, push/pop, start/end ended on another thread) of NVTX rows, from
    their packed flags, a step of FLAG_STEP rows at a time."""
    n = flags.size
    is_domain = np.empty(n, dtype=bool)
    pushpop, cross = held(n, bool), held(n, bool)  # held by the ranges: scratch when large
    for a in range(0, n, FLAG_STEP):
        f = flags[a:a + FLAG_STEP]
        etype = f & 0xFF
        pp = pushpop[a:a + FLAG_STEP]
        np.equal(etype, NVTX_DOMAIN_CREATE, out=is_domain[a:a + FLAG_STEP])
        np.equal(etype, NVTX_PUSHPOP, out=pp)
        pp |= etype == NVTXT_PUSHPOP
        np.not_equal((f >> 8) & 1, 0, out=cross[a:a + FLAG_STEP])
        cross[a:a + FLAG_STEP] &= ~pp
        let_go(f)  # the mapped flags' pages, once read (and the scratch pages written)
        let_go(pp)
        let_go(cross[a:a + FLAG_STEP])
    return is_domain, pushpop, cross


def is_domain_row(flags: np.ndarray) -> np.ndarray:
    """Which NVTX rows read (by their flags) are domain-create rows, not ranges (a step of
    FLAG_STEP rows at a time, the mapped flags' pages let go once read)."""
    out = np.empty(flags.size, dtype=bool)
    for a in range(0, flags.size, FLAG_STEP):
        f = flags[a:a + FLAG_STEP]
        np.equal(f & 0xFF, NVTX_DOMAIN_CREATE, out=out[a:a + FLAG_STEP])
        let_go(f)
    return out


def attributable_rows(flags: np.ndarray) -> np.ndarray:
    """Which NVTX rows read (by their flags) are ranges that kernels are attributed to: not
    domain-create rows, and not start/end ranges that ended on another thread."""
    etype = flags & 0xFF
    pushpop = (etype == NVTX_PUSHPOP) | (etype == NVTXT_PUSHPOP)
    cross = ((flags >> 8) & 1).astype(bool) & ~pushpop
    return (etype != NVTX_DOMAIN_CREATE) & ~cross


def build_ranges(start: np.ndarray, end: np.ndarray, tid: np.ndarray, flags: np.ndarray,
                 rowid: np.ndarray, capture_end: Callable[[], int]) -> Ranges:
    """Ranges from the NVTX rows read (range and domain-create rows, in table order; ``end``
    is -1 where a range was never closed: it ends at ``capture_end()``, asked only then, or
    at the last start if later)."""
    is_domain, pushpop, cross = _masks(flags)
    dom = np.flatnonzero(is_domain)
    domains = np.stack([rowid[dom], flags[dom] >> 9, global_pid(tid[dom]),
                        start[dom]], axis=1)
    if dom.size:
        keep = np.flatnonzero(~is_domain)
        start, end, tid, flags, rowid, pushpop, cross = (
            a[keep] for a in (start, end, tid, flags, rowid, pushpop, cross))
    del is_domain
    unclosed, some = held(end.size, bool), False
    for a in range(0, end.size, FLAG_STEP):  # a step at a time, the mapped pages let go
        part = unclosed[a:a + FLAG_STEP]
        np.less(end[a:a + FLAG_STEP], 0, out=part)
        some = some or bool(part.any())
        let_go(end[a:a + FLAG_STEP])
        let_go(part)
    if some:
        end = np.where(unclosed, max(capture_end(), int(start.max(initial=0))), end)
    return Ranges(start=start, end=end, tid=tid, pushpop=pushpop, cross_thread=cross,
                  unclosed=unclosed, rowid=rowid, flags=flags, domains=domains)
