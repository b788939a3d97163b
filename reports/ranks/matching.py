"""Ranks side by side: their collectives matched, their clocks aligned, who arrives late and
who waits (``reports.ranks.summary`` summaries in, plain numbers out; no export is read here).

Matching: the n-th collective of each key (a communicator where NCCL's payload names it, else
a collective kind and stream) is the same collective on every rank; keys every rank has are
matched, each as far as the rank with the fewest goes.

Clocks: ranks in one export share its clock. Separate exports are put on the first one's clock
by the ends of their matched collectives (a collective ends within microseconds on every rank:
the offset is the median difference, the residual the median distance from it), else by the
sessions' UTC start times (``TARGET_INFO_SESSION_START_TIME``).

Lateness: a rank's arrival at a collective is the start of its collective kernel; ``late_ns``
is the median, over matched collectives, of its arrival minus the median arrival of all ranks;
``wait_ns`` the time its collective kernels ran before the last rank arrived. A straggler
arrives last, by more than the clock's error, at a third or more of the matched collectives,
and the others wait for it there at least 1% of their time (their GPU span, or their step
time): each other rank's wait at those collectives, the median over them
(``STRAGGLER_SHARE``, ``STRAGGLER_COST``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nsys_parsers.errors import NsysMineError
from reports.ranks.summary import CAUSES, RankSummary
from reports.render import human_ns, shorten

STRAGGLER_SHARE = 1 / 3
STRAGGLER_COST = 0.01
STRAGGLER_LATE_NS = 100_000  # ranges and kernels that grew less than this are not named
MIN_TIE_NS = 1_000  # arrivals closer than this (or than the clock error) are a tie
STRAGGLER_RULE = ("a straggler arrives last (by more than the clock error) at a third or more "
                  "of the matched collectives, and the other ranks wait for it there 1% or "
                  "more of their time (GPU span, or step time)")


class RanksMismatch(NsysMineError):
    """The exports given do not share collectives: they are not ranks of one run."""


@dataclass
class Matched:
    """Matched collectives of R ranks (rows, in the summaries' order) x K collectives
    (columns, by median arrival), on the first rank's clock."""

    keys: list[str]
    kinds: list[str]
    nbytes: np.ndarray  # K; -1 unknown
    arrive: np.ndarray  # R x K, aligned
    end: np.ndarray  # R x K, aligned
    index: np.ndarray  # R x K: the collective's position in each summary
    offsets: np.ndarray  # R: added to a rank's times to put them on the first rank's clock
    clock: str
    residual_ns: int
    notes: list[str] = field(default_factory=list)

    @property
    def count(self) -> int:
        return int(self.arrive.shape[1])


@dataclass
class Lateness:
    """Per rank: median lateness, wait, how often last; per collective: who was last."""

    late: np.ndarray  # R
    wait: np.ndarray  # R
    last_count: np.ndarray  # R
    last_rank: np.ndarray  # K: row index of the last rank, -1 where it is a tie
    wait_at: np.ndarray  # R x K: time each rank's kernel ran before the last arrived
    straggler: np.ndarray  # R bool
    cost: np.ndarray  # R: what each other rank waits for it (median over them), ns
    tie_ns: int


def assign_ranks(summaries: list[RankSummary]) -> tuple[list[int], list[str], list[str]]:
    """The rank of each summary and where it comes from: what the export says (NCCL payload,
    file name, environment, command line), else the order given; and notes on conflicts."""
    notes: list[str] = []
    hints = [s.rank_hint for s in summaries]
    counts = Counter(h for h in hints if h is not None)
    clash = {h for h, n in counts.items() if n > 1}
    if clash:
        notes.append(f"rank(s) {', '.join(map(str, sorted(clash)))} named by more than one "
                     f"export: those are numbered in the order given instead.")
    ranks: list[int | None] = [None if h in clash else h for h in hints]
    used = {r for r in ranks if r is not None}
    nxt = 0
    sources = []
    for i, s in enumerate(summaries):
        if ranks[i] is None:
            while nxt in used:
                nxt += 1
            ranks[i] = nxt
            used.add(nxt)
            sources.append("order")
        else:
            sources.append(s.rank_source)
    return [int(r) for r in ranks if r is not None], sources, notes


def match(summaries: list[RankSummary], ranks: list[int]) -> Matched:
    """Match the collectives of ``summaries`` (see the module docstring)."""
    n = len(summaries)
    notes: list[str] = []
    counts = [Counter(s.key_counts()) for s in summaries]
    with_any = [i for i in range(n) if counts[i]]
    common = set.intersection(*(set(counts[i]) for i in with_any)) if with_any else set()
    if len(with_any) > 1 and not common:
        _mismatch(summaries, counts, with_any)
    missing = [summaries[i] for i in range(n) if not counts[i]]
    if missing and with_any:
        notes.append("no collective kernels in " + ", ".join(
            f"rank {ranks[summaries.index(s)]} ({s.label})" for s in missing)
            + ": it takes no part in the matching.")
    keys, cols = [], []
    for key in sorted(common):
        have = [counts[i][key] for i in with_any]
        m = min(have)
        if max(have) > m:
            extra = [f"rank {ranks[i]} has {counts[i][key]}" for i in with_any
                     if counts[i][key] > m]
            notes.append(f"{key}: {m} collectives matched on every rank; "
                         f"{'; '.join(extra)} (a rank that crashed or a capture cut short "
                         f"has fewer): the rest could not be matched.")
        pos = [summaries[i].positions(key)[:m] for i in range(n)
               if i in with_any]
        keys += [key] * m
        cols.append(np.stack(pos) if pos else np.zeros((0, m), dtype=np.int64))
    rows = with_any
    index = np.full((n, len(keys)), -1, dtype=np.int64)
    if cols:
        index[rows] = np.concatenate(cols, axis=1)
    raw_start = np.zeros(index.shape, dtype=np.int64)
    raw_end = np.zeros(index.shape, dtype=np.int64)
    for i in rows:
        raw_start[i] = summaries[i].coll_start[index[i]]
        raw_end[i] = summaries[i].coll_end[index[i]]
    offsets, clock, residual = _align(summaries, rows, raw_end)
    arrive = raw_start + offsets[:, None]
    end = raw_end + offsets[:, None]
    if rows and keys:
        order = np.argsort(np.median(arrive[rows], axis=0), kind="stable")
        arrive, end, index = arrive[:, order], end[:, order], index[:, order]
        keys = [keys[i] for i in order.tolist()]
    first = rows[0] if rows else 0
    kinds = ([summaries[first].kinds[c] for c in summaries[first].coll_kind[index[first]]]
             if keys else [])
    nbytes = (summaries[first].coll_bytes[index[first]] if keys
              else np.zeros(0, dtype=np.int64))
    return Matched(keys=keys, kinds=kinds, nbytes=nbytes, arrive=arrive, end=end, index=index,
                   offsets=offsets, clock=clock, residual_ns=residual, notes=notes)


def _mismatch(summaries: list[RankSummary], counts: list[Counter], with_any: list[int]
              ) -> None:
    """RanksMismatch naming the exports that share no collective with the most others."""
    votes = Counter(k for i in with_any for k in counts[i])
    key = votes.most_common(1)[0][0]
    odd = sorted({summaries[i].export for i in with_any if key not in counts[i]})
    raise RanksMismatch(
        f"these exports share no collective with the others, so they are not ranks of the "
        f"same run: {', '.join(odd)}. Give the exports of one run (one per rank, or one that "
        f"holds every rank's process).")


def _align(summaries: list[RankSummary], rows: list[int], ends: np.ndarray
           ) -> tuple[np.ndarray, str, int]:
    """Offsets that put every rank on the first one's clock, how, and the residual (ns)."""
    n = len(summaries)
    offsets = np.zeros(n, dtype=np.int64)
    exports = [s.export for s in summaries]
    if len(set(exports)) == 1:
        return offsets, "one clock (one export)", 0
    ref = rows[0] if rows else 0
    same = [i for i in range(n) if exports[i] == exports[ref]]
    if rows and ends.shape[1]:
        residuals = []
        for export in dict.fromkeys(exports):
            group = [i for i in rows if exports[i] == export]
            if export == exports[ref] or not group:
                continue
            diff = (ends[ref][None, :] - ends[group]).ravel()
            off = int(np.median(diff))
            residuals.append(int(np.median(np.abs(diff - off))))
            for i in range(n):
                if exports[i] == export:
                    offsets[i] = off
        for i in range(n):  # ranks without collectives: by the UTC start, if known
            if exports[i] not in {exports[j] for j in rows} and i not in same:
                offsets[i] = _utc_offset(summaries[ref], summaries[i])
        return offsets, "ends of matched collectives", max(residuals, default=0)
    if all(s.utc_start_ns is not None for s in summaries):
        for i in range(n):
            offsets[i] = _utc_offset(summaries[ref], summaries[i])
        return offsets, "session start times (UTC; clock error unknown)", 0
    return offsets, "none (no matched collective, no session start time)", 0


def _utc_offset(ref: RankSummary, other: RankSummary) -> int:
    if ref.utc_start_ns is None or other.utc_start_ns is None:
        return 0
    return int(other.utc_start_ns - ref.utc_start_ns)


def lateness(m: Matched, whole: np.ndarray | None = None) -> Lateness:
    """Who arrives late and who waits, over the matched collectives; ``whole``: each rank's
    time (GPU span or step time) that a straggler's cost is measured against."""
    r, k = m.arrive.shape
    tie = max(MIN_TIE_NS, 2 * m.residual_ns)
    if k == 0 or r < 2:
        zeros = np.zeros(r, dtype=np.int64)
        return Lateness(zeros, zeros, zeros, np.full(k, -1, dtype=np.int64),
                        np.zeros((r, k), dtype=np.int64), np.zeros(r, dtype=bool), zeros, tie)
    present = m.index[:, 0] >= 0  # ranks without collectives take no part
    a = m.arrive[present].astype(np.int64)
    dur = (m.end - m.arrive)[present]
    med = np.median(a, axis=0)
    last = a.max(axis=0)
    wait_at = np.clip(np.minimum(last[None, :] - a, dur), 0, None)
    ordered = np.sort(a, axis=0)
    decisive = (ordered[-1] - ordered[-2]) > tie
    last_rank_p = np.where(decisive, np.argmax(a, axis=0), -1)
    rows = np.flatnonzero(present)
    late = np.zeros(r, dtype=np.int64)
    wait = np.zeros(r, dtype=np.int64)
    last_count = np.zeros(r, dtype=np.int64)
    full_wait = np.zeros((r, k), dtype=np.int64)
    late[rows] = np.round(np.median(a - med[None, :], axis=1)).astype(np.int64)
    wait[rows] = wait_at.sum(axis=1)
    full_wait[rows] = wait_at
    last_rank = np.where(last_rank_p >= 0, rows[np.maximum(last_rank_p, 0)], -1)
    last_count[rows] = np.bincount(last_rank_p[last_rank_p >= 0], minlength=rows.size)
    cost = np.zeros(r, dtype=np.int64)
    share = np.zeros(r)
    whole = np.ones(r) if whole is None else np.asarray(whole, dtype=np.float64)
    for i in rows.tolist():
        others = rows[rows != i]
        lost = full_wait[others][:, last_rank == i].sum(axis=1)
        cost[i] = int(np.median(lost))
        base = float(np.median(whole[others]))
        share[i] = cost[i] / base if base > 0 else 0.0
    straggler = ((last_count >= max(1, int(np.ceil(STRAGGLER_SHARE * k))))
                 & (share >= STRAGGLER_COST) & (late > 0))
    return Lateness(late, wait, last_count, last_rank, full_wait, straggler, cost, tie)


def collective_rows(m: Matched, lt: Lateness, ranks: list[int]) -> list[dict[str, Any]]:
    """One row per matched collective (``ranks --collectives``)."""
    rows = []
    present = m.index[:, 0] >= 0 if m.count else np.zeros(0, dtype=bool)
    for j in range(m.count):
        a = m.arrive[present, j]
        first, last = int(a.min()), int(a.max())
        lr = int(lt.last_rank[j])
        rows.append({
            "collective": j, "key": m.keys[j], "kind": m.kinds[j],
            "bytes": int(m.nbytes[j]) if m.nbytes[j] >= 0 else None,
            "first_arrival_ns": first, "last_arrival_ns": last, "skew_ns": last - first,
            "last_rank": ranks[lr] if lr >= 0 else None,
            "last_late_ns": int(last - np.median(a)),
            "wait_ns": int(lt.wait_at[:, j].sum()),
        })
    return rows


# -- why the straggler is slow ----------------------------------------------------------------


@dataclass
class Why:
    """What differs between a straggler and the median rank before its late arrivals."""

    rank: int
    late_ns: int
    late_at: int
    matched: int
    kind: str
    idle_extra: dict[str, int]  # cause -> extra GPU idle ns before its late arrivals
    idle_range: str | None  # the range open during most of its cpu idle there
    lost_ns: int  # what each other rank loses waiting for it (median over them)
    lost_total_ns: int
    lost_share_pct: float | None
    lost_of: str
    ranges: list[dict[str, Any]]
    ranges_where: str  # the time the ranges' growth is measured over
    kernels: list[dict[str, Any]]

    def sentences(self) -> list[str]:
        cause = max(self.idle_extra, key=lambda c: self.idle_extra[c])
        extra = sum(self.idle_extra.values())
        text = (f"rank {self.rank} arrives {human_ns(self.late_ns)} late at {self.late_at} of "
                f"{self.matched} collectives (mostly {self.kind})")
        if extra > 0:
            text += (f"; {human_ns(extra)} of the time before them is extra GPU idle "
                     f"(beyond the median rank's), {human_ns(self.idle_extra[cause])} of it "
                     f"with cause `{cause}`")
            if cause == "cpu" and self.idle_range:
                text += f" inside `{self.idle_range}`"
        else:
            text += "; the time before them shows no more GPU idle than the median rank's"
        text += f"; the other ranks lose {human_ns(self.lost_ns)} each waiting for it"
        if self.lost_share_pct is not None:
            text += f" ({self.lost_share_pct:g}% of {self.lost_of})"
        out = [text + "."]
        if self.ranges:
            out.append(f"rank {self.rank}: NVTX ranges that grew most {self.ranges_where}, "
                       f"vs the median rank: "
                       + "; ".join(
                           f"`{r['range']}` +{human_ns(r['cpu_growth_ns'])} CPU, "
                           f"+{human_ns(r['gpu_growth_ns'])} GPU"
                           + (f" (dominant kernel {shorten(r['kernel'], 60)})"
                              if r["kernel"] else "")
                           for r in self.ranges) + ".")
        if self.kernels:
            out.append(f"rank {self.rank}: kernels slower on its GPU than the same kernels on "
                       f"the others: " + "; ".join(
                           f"{shorten(k['kernel'], 60)} {k['ratio']:.2f}x "
                           f"(+{human_ns(k['excess_ns'])})"
                           for k in self.kernels) + ".")
        return out


def explain(s: int, summaries: list[RankSummary], m: Matched, lt: Lateness,
            ranks: list[int]) -> Why:
    """What differs for the straggler at row ``s`` from the median rank."""
    others = [i for i in range(len(summaries)) if i != s and m.index[i, 0] >= 0]
    late_set = np.flatnonzero(lt.last_rank == s)
    idle = np.zeros(len(CAUSES), dtype=np.int64)
    ranges: Counter[str] = Counter()
    if late_set.size and others:
        mine = summaries[s].coll_idle[m.index[s, late_set]]
        theirs = np.stack([summaries[i].coll_idle[m.index[i, late_set]] for i in others])
        idle = (mine - np.median(theirs, axis=0)).clip(0).sum(axis=0).astype(np.int64)
        ranges = _idle_ranges(summaries[s], m.index[s, late_set])
        their_ranges = [_idle_ranges(summaries[i], m.index[i, late_set]) for i in others]
        for name in list(ranges):  # beyond the median rank's
            ranges[name] -= int(np.median([t.get(name, 0) for t in their_ranges]))
        ranges = Counter({k: v for k, v in ranges.items() if v > 0})
    lost = lt.wait_at[:, late_set].sum(axis=1) if late_set.size else np.zeros(len(summaries))
    lost_each = int(np.median(lost[others])) if others else 0
    steps = [summaries[i].steps for i in others if summaries[i].steps.shape[0]]
    if steps:
        whole = float(np.median([float((st[:, 1] - st[:, 0]).sum()) for st in steps]))
        lost_of = f"the {summaries[s].step_range!r} time"
    else:
        whole = float(np.median([summaries[i].gpus.get("span_ns") or 0 for i in others] or [0]))
        lost_of = "their GPU span"
    kinds = Counter(m.kinds[j] for j in late_set.tolist()) or Counter(m.kinds)
    return Why(
        rank=ranks[s], late_ns=int(lt.late[s]), late_at=int(late_set.size), matched=m.count,
        kind=kinds.most_common(1)[0][0] if kinds else "collective",
        idle_extra={c: int(v) for c, v in zip(CAUSES, idle.tolist())},
        idle_range=ranges.most_common(1)[0][0] if ranges else None,
        lost_ns=lost_each, lost_total_ns=int(lost[others].sum()) if others else 0,
        lost_share_pct=round(100.0 * lost_each / whole, 1) if whole else None, lost_of=lost_of,
        ranges=_grown_ranges(summaries[s], [summaries[i] for i in others],
                             m.index[s, late_set], [m.index[i, late_set] for i in others]),
        ranges_where="before its late arrivals" if late_set.size else "in the whole capture",
        kernels=_slower_kernels(summaries[s], [summaries[i] for i in others]))


def _idle_ranges(s: RankSummary, at: np.ndarray) -> Counter[str]:
    """The ``cpu`` idle time before the collectives at positions ``at``, per open range."""
    wanted = set(at.tolist())
    out: Counter[str] = Counter()
    for i, code, ns in s.coll_idle_range.tolist():
        if i in wanted:
            out[s.idle_ranges[code]] += ns
    return out


def _window_times(s: RankSummary, at: np.ndarray | None) -> dict[str, tuple[int, int]]:
    """(CPU, GPU) ns per range name: in the windows before the collectives at positions
    ``at``, or in the whole capture (``at`` None)."""
    if at is None:
        return {r["range"]: (r["cpu_ns"], r["gpu_ns"]) for r in s.ranges}
    rows = s.coll_range[np.isin(s.coll_range[:, 0], at)]
    cpu = np.bincount(rows[:, 1], weights=rows[:, 2].astype(np.float64), minlength=len(s.ranges))
    gpu = np.bincount(rows[:, 1], weights=rows[:, 3].astype(np.float64), minlength=len(s.ranges))
    return {r["range"]: (int(c), int(g)) for r, c, g in zip(s.ranges, cpu, gpu) if c or g}


def _grown_ranges(me: RankSummary, others: list[RankSummary], at_me: np.ndarray,
                  at_others: list[np.ndarray], top: int = 3) -> list[dict[str, Any]]:
    """The NVTX ranges whose CPU or GPU time grew most against the others' median: in the
    windows before the collectives at ``at_me`` (and the same collectives of the others),
    or in the whole capture when there are none."""
    whole = at_me.size == 0
    mine = _window_times(me, None if whole else at_me)
    theirs = [_window_times(o, None if whole else at) for o, at in zip(others, at_others)]
    kernel = {r["range"]: r["kernel"] for r in me.ranges}
    out: list[dict[str, Any]] = []
    for name, (my_cpu, my_gpu) in mine.items():
        cpu = np.median([t.get(name, (0, 0))[0] for t in theirs] or [0])
        gpu = np.median([t.get(name, (0, 0))[1] for t in theirs] or [0])
        dc, dg = int(my_cpu - cpu), int(my_gpu - gpu)
        if max(dc, dg) >= STRAGGLER_LATE_NS:
            out.append({"range": name, "cpu_growth_ns": max(dc, 0),
                        "gpu_growth_ns": max(dg, 0), "kernel": kernel.get(name)})
    out.sort(key=lambda x: (-max(x["cpu_growth_ns"], x["gpu_growth_ns"]), x["range"]))
    return out[:top]


def _slower_kernels(me: RankSummary, others: list[RankSummary], top: int = 3
                    ) -> list[dict[str, Any]]:
    """Kernels whose median duration on this rank is 10% or more above the others' median."""
    theirs = [{k["kernel"]: k for k in o.kernels} for o in others]
    out = []
    for k in me.kernels:
        meds = [t[k["kernel"]]["med_ns"] for t in theirs if k["kernel"] in t]
        if k["count"] < 3 or len(meds) * 2 < len(theirs) or not meds:
            continue
        base = float(np.median(meds))
        excess = int(k["count"] * (k["med_ns"] - base))
        if base > 0 and k["med_ns"] >= 1.1 * base and excess >= STRAGGLER_LATE_NS:
            out.append({"kernel": k["kernel"], "ratio": k["med_ns"] / base,
                        "excess_ns": excess})
    out.sort(key=lambda x: -x["excess_ns"])
    return out[:top]
