"""Why a straggler is late: what differs between it and the median rank of its group before
its late arrivals (net GPU idle by cause, the NVTX ranges that grew, its collectives launched
later or queued longer, kernels slower on its GPU), and what the others lose waiting for it.
Net figures: a cause is named only when the straggler's idle of that cause, summed over its
late arrivals, exceeds the median rank's; an idle that is not larger is said to be so, with
what is larger instead."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from reports.ranks.clocks import median_int
from reports.ranks.matching import Lateness, Matched
from reports.ranks.summary import CAUSES, RankSummary, rank_list
from reports.render import human_ns, shorten

STRAGGLER_LATE_NS = 100_000  # ranges, kernels and launches that moved less are not named


@dataclass
class Why:
    """What differs between a straggler and the median rank of its group before its late
    arrivals."""

    rank: int
    group: str  # its group: the ranks of the collectives it holds back
    late_ns: int
    late_at: int
    matched: int
    kind: str
    idle_net: dict[str, int]  # cause -> its GPU idle before its late arrivals minus the median
    idle_range: str | None  # the range open during most of its extra cpu idle there
    launch_late_ns: int  # how much later its collective kernels were launched (median)
    queue_late_ns: int  # ... and how much longer they waited on the GPU after their launch
    lost_ns: int  # what each other rank loses waiting for it (median over them)
    lost_total_ns: int
    lost_share_pct: float | None
    lost_of: str
    ranges: list[dict[str, Any]]
    ranges_where: str  # the time the ranges' growth is measured over
    kernels: list[dict[str, Any]]
    followers: list[int]  # ranks late in other groups because they wait for it
    one_kind: bool = False  # every collective it is late at is of ``kind``
    # (machine, its ranks in the group, their least and most lateness) where all of them are
    # late with it: the machine is late, not only the rank
    machine: tuple[str, list[int], int, int] | None = None

    def sentences(self) -> list[str]:
        kind = self.kind if self.one_kind else f"mostly {self.kind}"
        at = (f"at its one collective ({self.kind})" if self.matched == 1 else
              f"at {self.late_at} of {self.matched} collectives ({kind})")
        text = f"rank {self.rank} arrives {human_ns(self.late_ns)} late {at} of {self.group}"
        them, its = ("it", "its collective was") if self.late_at == 1 else (
            "them", "its collectives were")
        net = sum(self.idle_net.values())
        more = {c: v for c, v in self.idle_net.items() if v > 0}
        if net > 0 and more:
            cause = max(more, key=lambda c: more[c])
            text += (f"; the time before {them} holds {human_ns(net)} more GPU idle than the "
                     f"median rank's, {human_ns(more[cause])} more with cause `{cause}`")
            if cause == "cpu" and self.idle_range:
                text += f" inside `{self.idle_range}`"
        else:
            text += (f"; the time before {them} holds no more GPU idle than the median rank's "
                     f"({human_ns(-net)} less)")
        if self.launch_late_ns >= STRAGGLER_LATE_NS:
            text += f"; {its} launched {human_ns(self.launch_late_ns)} later"
            if self.queue_late_ns <= -STRAGGLER_LATE_NS:  # the others launch far ahead
                text += (f", and the median rank's then waited {human_ns(-self.queue_late_ns)} "
                         f"longer on its GPU")
        if self.queue_late_ns >= STRAGGLER_LATE_NS:
            text += (f"; {'it' if self.late_at == 1 else 'they'} waited "
                     f"{human_ns(self.queue_late_ns)} longer on its GPU after launch")
        text += f"; the other ranks lose {human_ns(self.lost_ns)} each waiting for it"
        if self.lost_share_pct is not None:
            text += f" ({self.lost_share_pct:g}% of {self.lost_of})"
        out = [text + "."]
        if self.machine is not None:
            host, ranks, lo, hi = self.machine
            out.append(f"ranks {rank_list(ranks)}, all on {host}, arrive {human_ns(lo)} to "
                       f"{human_ns(hi)} late: the machine is late, rank {self.rank} the last "
                       f"of its ranks.")
        if self.followers:
            out.append(f"rank(s) {', '.join(map(str, self.followers))} arrive late in their "
                       f"other groups because they wait for rank {self.rank} here.")
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


def explain(s: int, g: int, summaries: list[RankSummary], m: Matched, lt: Lateness,
            ranks: list[int], whole: np.ndarray) -> Why:
    """What differs for the straggler at row ``s`` in group ``g`` from the median rank of
    that group."""
    cols = m.group_cols(g)
    members = np.flatnonzero(m.member[:, cols[0]])
    others = [i for i in members.tolist() if i != s]
    late_set = cols[lt.last_rank[cols] == s]
    idle = np.zeros(len(CAUSES), dtype=np.int64)
    ranges: Counter[str] = Counter()
    if late_set.size and others:
        mine = summaries[s].coll_idle[m.index[s, late_set]]
        theirs = np.stack([summaries[i].coll_idle[m.index[i, late_set]] for i in others])
        median = np.array([[median_int(theirs[:, j, c]) for c in range(len(CAUSES))]
                           for j in range(late_set.size)], dtype=np.int64).reshape(mine.shape)
        idle = (mine - median).sum(axis=0).astype(np.int64)  # net: never clipped per cause
        ranges = _idle_ranges(summaries[s], m.index[s, late_set])
        their_ranges = [_idle_ranges(summaries[i], m.index[i, late_set]) for i in others]
        for name in list(ranges):  # beyond the median rank's
            ranges[name] -= median_int(np.array([t.get(name, 0) for t in their_ranges]))
        ranges = Counter({k: v for k, v in ranges.items() if v > 0})
    launch, queue = _launch_delays(s, others, late_set, summaries, m)
    lost = lt.wait_at[:, late_set].sum(axis=1) if late_set.size else np.zeros(len(summaries))
    lost_each = median_int(lost[others]) if others else 0
    steps = [summaries[i].steps for i in others if summaries[i].steps.shape[0]]
    lost_of = (f"the {summaries[s].step_range!r} time" if steps else "their GPU span")
    base = float(np.median(whole[others])) if others else 0.0
    kinds = Counter(m.kinds[j] for j in late_set.tolist()) or Counter(m.kinds[j] for j in
                                                                      cols.tolist())
    return Why(
        rank=ranks[s], group=_group_name(m.group_keys(g), [ranks[i] for i in members.tolist()]),
        late_ns=median_int(m.arrive[s, cols] - np.array(
            [median_int(m.arrive[members, j]) for j in cols.tolist()], dtype=np.int64)),
        late_at=int(late_set.size), matched=int(cols.size),
        kind=kinds.most_common(1)[0][0] if kinds else "collective",
        idle_net={c: int(v) for c, v in zip(CAUSES, idle.tolist())},
        idle_range=ranges.most_common(1)[0][0] if ranges else None,
        launch_late_ns=launch, queue_late_ns=queue,
        lost_ns=lost_each, lost_total_ns=int(lost[others].sum()) if others else 0,
        lost_share_pct=round(100.0 * lost_each / base, 1) if base else None, lost_of=lost_of,
        ranges=_grown_ranges(summaries[s], [summaries[i] for i in others],
                             m.index[s, late_set], [m.index[i, late_set] for i in others]),
        ranges_where="before its late arrivals" if late_set.size else "in the whole capture",
        kernels=_slower_kernels(summaries[s], [summaries[i] for i in others]),
        followers=sorted(ranks[f] for f, leader in lt.follows.items() if leader == s),
        one_kind=len(kinds) == 1,
        machine=_late_machine(s, members.tolist(), cols, summaries, lt, ranks))


def _late_machine(s: int, members: list[int], cols: np.ndarray, summaries: list[RankSummary],
                  lt: Lateness, ranks: list[int]) -> tuple[str, list[int], int, int] | None:
    """The straggler's machine when it has other ranks of the group, the group has ranks on
    other machines too, and every rank of that machine is late by more than half the
    straggler's lateness (each rank's lateness: its median over the group's collectives)."""
    host = summaries[s].host
    if host is None:
        return None
    same = [i for i in members if summaries[i].host == host]
    if len(same) < 2 or len(same) == len(members):
        return None
    late = {i: median_int(lt.late_at[i, cols]) for i in same}
    if late[s] <= 0 or any(2 * v <= late[s] for v in late.values()):
        return None
    return host, sorted(ranks[i] for i in same), min(late.values()), max(late.values())


def _group_name(keys: list[str], ranks: list[int]) -> str:
    """``communicator 3e8f… (ranks 4-7)``, ``AllReduce stream #1 (ranks 0-7)``; a group of
    several keys: ``communicators 3e8, 3e9 (ranks 0-7)``, ``3 NCCL streams (ranks 0-7)``."""
    comms = [k[5:] for k in keys if k.startswith("comm ")]
    if len(keys) == 1:
        what = f"communicator {comms[0]}" if comms else keys[0]
    elif len(comms) == len(keys):
        what = f"communicators {', '.join(comms)}"
    else:
        what = f"{len(keys)} NCCL streams"
    return f"{what} (ranks {rank_list(ranks)})"


def _launch_delays(s: int, others: list[int], cols: np.ndarray, summaries: list[RankSummary],
                   m: Matched) -> tuple[int, int]:
    """(how much later the straggler launched its collectives there, how much longer they
    then waited on its GPU), each against the median rank, median over ``cols``; 0 where the
    launches are not known."""
    if not cols.size or not others:
        return 0, 0

    def launch(i: int) -> np.ndarray:
        at = summaries[i].coll_launch[m.index[i, cols]]
        return np.where(at >= 0, at + m.offsets[i], -1)

    mine = launch(s)
    theirs = [launch(i) for i in others]
    late_l, late_q = [], []
    for q in range(cols.size):
        known = [t[q] for t in theirs if t[q] >= 0]
        if mine[q] < 0 or not known:
            continue
        med_launch = median_int(np.array(known, dtype=np.int64))
        waits = [int(m.arrive[i, cols[q]] - t[q]) for i, t in zip(others, theirs) if t[q] >= 0]
        late_l.append(int(mine[q]) - med_launch)
        late_q.append(int(m.arrive[s, cols[q]] - mine[q]) - median_int(np.array(waits)))
    if not late_l:
        return 0, 0
    return median_int(np.array(late_l)), median_int(np.array(late_q))


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
