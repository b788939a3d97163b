"""Ranks side by side: their collectives matched, their clocks aligned, who arrives late and
who waits (``reports.ranks.summary`` summaries in, plain numbers out; no export is read here).

Matching: a collective has a key that is the same on every rank that takes part in it: its
NCCL communicator where NCCL's NVTX payload names it, else its kind and its stream numbered in
the order the process first used its NCCL streams (stream ids and process ids are each
process's own numbers). The n-th collective of a key is the same collective on every rank that
has the key: those ranks are its group (a communicator: a data-parallel or tensor-parallel
group, or the pair of a ``SendRecv``); each key is matched as far as its member with the
fewest goes, and ranks of different groups are never compared.

Clocks: ``reports.ranks.clocks`` (the ends of shared collectives, one machine, the sessions'
UTC starts; the error of each pair of exports, measured or unknown).

Lateness, in integer nanoseconds: a rank's arrival at a collective is the start of its
collective kernel; its lateness in a group (the ranks that share a set of keys) is the
median, over the group's collectives, of its arrival minus the median arrival of the group's
ranks, and ``late_ns`` is its lateness in the group where it is latest; ``wait_ns`` the time
its collective kernels ran before the last rank of the group arrived. A rank is last at a
collective when it arrives after every other member by more than their clock error (twice
it, at least 1 µs); with an unknown error, nobody is last. A straggler arrives last at a
third or more of its group's collectives, and the group's other ranks wait for it there at
least 1% of their time (their GPU span, or their step time). A rank that does so only
because it waited for a straggler in another of its groups (a tensor-parallel group's
straggler holds back its data-parallel partners) follows that straggler, and is named as
such, not as a straggler.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from nsys_parsers.errors import NsysMineError
from reports.ranks.clocks import UNKNOWN, Clocks, align, median_int
from reports.ranks.summary import RankSummary, rank_list

STRAGGLER_SHARE = 1 / 3
STRAGGLER_COST = 0.01
MIN_TIE_NS = 1_000  # arrivals closer than this (or than twice the clock error) are a tie
STRAGGLER_RULE = ("a straggler arrives last (by more than twice the clock error) at a third "
                  "or more of its group's collectives, and the group's other ranks wait for "
                  "it there 1% or more of their time (GPU span, or step time)")


class RanksMismatch(NsysMineError):
    """The exports given do not share collectives: they are not ranks of one run."""


@dataclass
class Matched:
    """Matched collectives of R ranks (rows, in the summaries' order) x K collectives
    (columns, by median arrival), on the first rank's clock; ``index`` -1 where a rank takes
    no part in a collective (not of its group)."""

    keys: list[str]  # K: each collective's group (its matching key)
    kinds: list[str]
    nbytes: np.ndarray  # K; -1 unknown
    arrive: np.ndarray  # R x K, aligned
    end: np.ndarray  # R x K, aligned
    index: np.ndarray  # R x K: the collective's position in each summary, -1: not a member
    clocks: Clocks
    notes: list[str] = field(default_factory=list)
    group: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # K: its group

    @property
    def groups(self) -> int:
        """How many groups (distinct sets of member ranks)."""
        return int(self.group.max()) + 1 if self.group.size else 0

    def group_cols(self, g: int) -> np.ndarray:
        """The collectives of group ``g``."""
        return np.flatnonzero(self.group == g)

    def group_keys(self, g: int) -> list[str]:
        """The matching keys of group ``g``, in order."""
        return list(dict.fromkeys(self.keys[j] for j in self.group_cols(g).tolist()))

    @property
    def count(self) -> int:
        return int(self.arrive.shape[1])

    @property
    def member(self) -> np.ndarray:
        return self.index >= 0

    @property
    def offsets(self) -> np.ndarray:
        return self.clocks.offsets


@dataclass
class Lateness:
    """Per rank: median lateness, wait, how often last, straggler (or the straggler it
    follows); per collective: who was last."""

    late: np.ndarray  # R
    wait: np.ndarray  # R
    last_count: np.ndarray  # R
    last_rank: np.ndarray  # K: row index of the last rank, -1 where nobody is
    wait_at: np.ndarray  # R x K: time each rank's kernel ran before the last arrived
    straggler: np.ndarray  # R bool
    groups: list[tuple[int, int]]  # (straggler row, its group): where each one is
    follows: dict[int, int]  # row -> the straggler row it waits for elsewhere
    late_at: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.int64))  # R x K


RANK_SOURCES = ("nccl", "file name", "environment", "command line")


def assign_ranks(summaries: list[RankSummary]) -> tuple[list[int], list[str], list[str]]:
    """The rank of each summary and where it comes from: the best source that names every
    summary a rank of its own (NCCL's payload: the rank in the process's largest
    communicator, which is not the job's rank when every communicator is a tensor- or
    data-parallel group; then the file name, environment, command line); else each
    summary's best hint, and the order given where none or a clash; and notes on clashes."""
    notes: list[str] = []
    per_source = [[next((r for r, src in s.hints if src == source), None) for s in summaries]
                  for source in RANK_SOURCES]
    for k, values in enumerate(per_source):
        if None not in values and len(set(values)) == len(values):
            clashed = [RANK_SOURCES[j] for j in range(k) if any(v is not None
                                                                for v in per_source[j])]
            if clashed:
                said = " and ".join("NCCL's payload" if c == "nccl" else f"the {c}"
                                    for c in clashed)
                notes.append(f"rank numbers from the {RANK_SOURCES[k]}s: {said} did not "
                             f"give every export a rank of its own (NCCL numbers the ranks "
                             f"of each communicator from 0).")
            return [int(v) for v in values if v is not None], [RANK_SOURCES[k]] * len(values), \
                notes
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
    counts = [Counter(s.key_counts()) for s in summaries]
    members: dict[str, list[int]] = {}
    for i in range(n):
        for key in counts[i]:
            members.setdefault(key, []).append(i)
    shared = {k: rows for k, rows in members.items() if len(rows) > 1}
    with_any = [i for i in range(n) if counts[i]]
    parts = _components(n, shared.values())
    joined = [c for c in parts if len(c) > 1]
    if len(with_any) > 1 and len(joined) != 1:
        _mismatch(summaries, with_any, max(joined, key=len) if joined else [])
    unpaired = [k for k, rows in shared.items() if len(rows) > 2 and _kind_of(
        summaries[rows[0]], k) == P2P]
    for k in unpaired:  # they join the run's ranks, but who meets whom is unknown
        del shared[k]
    notes = _membership_notes(summaries, ranks, counts, shared, with_any)
    if unpaired:
        notes.append(f"{', '.join(sorted(unpaired))}: point-to-point kernels on more than two "
                     f"ranks, with no peer to say who meets whom: not matched (Send/Recv "
                     f"between two ranks is).")
    keys: list[str] = []
    cols = []
    for key in sorted(shared):
        rows = shared[key]
        m = min(counts[i][key] for i in rows)
        col = np.full((n, m), -1, dtype=np.int64)
        for i in rows:
            col[i] = summaries[i].positions(key)[:m]
        keys += [key] * m
        cols.append(col)
    index = np.concatenate(cols, axis=1) if cols else np.zeros((n, 0), dtype=np.int64)
    raw_start = np.zeros(index.shape, dtype=np.int64)
    raw_end = np.zeros(index.shape, dtype=np.int64)
    for i in range(n):
        at = index[i] >= 0
        raw_start[i, at] = summaries[i].coll_start[index[i, at]]
        raw_end[i, at] = summaries[i].coll_end[index[i, at]]
    clocks = align(summaries, raw_end, index, ranks)
    arrive = raw_start + clocks.offsets[:, None]
    end = raw_end + clocks.offsets[:, None]
    if keys:
        order = np.argsort([median_int(arrive[index[:, j] >= 0, j])
                            for j in range(len(keys))], kind="stable")
        arrive, end, index = arrive[:, order], end[:, order], index[:, order]
        keys = [keys[j] for j in order.tolist()]
    kinds, nbytes = [], np.full(len(keys), -1, dtype=np.int64)
    sets: dict[tuple[int, ...], int] = {}
    group = np.zeros(len(keys), dtype=np.int64)
    for j in range(len(keys)):
        taking = np.flatnonzero(index[:, j] >= 0)
        group[j] = sets.setdefault(tuple(taking.tolist()), len(sets))
        s = summaries[int(taking[0])]
        kinds.append(s.kinds[s.coll_kind[index[taking[0], j]]])
        nbytes[j] = s.coll_bytes[index[taking[0], j]]
    return Matched(keys=keys, kinds=kinds, nbytes=nbytes, arrive=arrive, end=end,
                   index=index, clocks=clocks, notes=notes + clocks.notes, group=group)


P2P = "Send/Recv"


def _kind_of(s: RankSummary, key: str) -> str:
    """The collective kind of ``key``'s first collective in ``s``."""
    return s.kinds[int(s.coll_kind[s.positions(key)[0]])]


def _membership_notes(summaries: list[RankSummary], ranks: list[int], counts: list[Counter],
                      shared: dict[str, list[int]], with_any: list[int]) -> list[str]:
    """How the collectives were matched and grouped; ranks left out; keys cut short."""
    if not with_any:
        return ["no collective kernels (NCCL or other communication) in any rank: nothing to "
                "match, so nobody is late or waits; each rank's GPU time is still its own "
                "(communication needs the collectives traced: nsys profile --trace=cuda)."]
    notes = []
    by_comm = any(s.keyed_by == "communicator" for s in summaries)
    groups = Counter(tuple(rows) for rows in shared.values())
    how = ("per NCCL communicator (its id in NCCL's NVTX payload)" if by_comm else
           "per collective kind and NCCL stream, the streams numbered in the order each "
           "process first used them (stream ids are each process's own)")
    if len(groups) <= 1:
        notes.append(f"collectives matched {how}, the n-th with the n-th; every rank with "
                     f"collectives takes part in each.")
    else:
        listed = "; ".join(f"ranks {rank_list([ranks[i] for i in rows])} ({n} key"
                           f"{'s' if n > 1 else ''})" for rows, n in sorted(groups.items()))
        notes.append(f"collectives matched {how}, the n-th with the n-th, among the ranks "
                     f"that have the key: {len(groups)} groups: {listed}. Ranks of different "
                     f"groups are not compared.")
    for key, rows in shared.items():
        have = [counts[i][key] for i in rows]
        m = min(have)
        if max(have) > m:
            extra = [f"rank {ranks[i]} has {counts[i][key]}" for i in rows
                     if counts[i][key] > m]
            notes.append(f"{key}: {m} collectives matched on every rank of its group; "
                         f"{'; '.join(extra)} (a rank that crashed or a capture cut short "
                         f"has fewer): the rest could not be matched.")
    alone = [i for i in with_any if not any(k in shared for k in counts[i])]
    none = [i for i in range(len(summaries)) if not counts[i]]
    if none and with_any:
        notes.append("no collective kernels in " + ", ".join(
            f"rank {ranks[i]} ({summaries[i].label})" for i in none)
            + ": it takes no part in the matching.")
    if alone:
        notes.append("no collective shared with another rank in " + ", ".join(
            f"rank {ranks[i]} ({summaries[i].label})" for i in alone)
            + ": it takes no part in the matching.")
    return notes


def _components(n: int, groups: Any) -> list[list[int]]:
    """The ranks joined by shared collectives (a rank in two groups joins them)."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for rows in groups:
        for i in rows[1:]:
            parent[root(i)] = root(rows[0])
    out: dict[int, list[int]] = {}
    for i in range(n):
        out.setdefault(root(i), []).append(i)
    return list(out.values())


def _mismatch(summaries: list[RankSummary], with_any: list[int], largest: list[int]) -> None:
    """RanksMismatch naming the exports that share no collective with the most of the
    others (with none joined at all: every one)."""
    odd = sorted({summaries[i].export for i in with_any if i not in largest})
    raise RanksMismatch(
        f"these exports share no collective with the others (no NCCL communicator, nor a "
        f"collective kind on the same stream in order of first use), so they are not ranks "
        f"of the same run: {', '.join(odd)}. Give the exports of one run (one per rank, or "
        f"one that holds every rank's process).")


def lateness(m: Matched, whole: np.ndarray | None = None) -> Lateness:
    """Who arrives late and who waits, over the matched collectives, group by group;
    ``whole``: each rank's time (GPU span or step time) that a straggler's cost is measured
    against."""
    r, k = m.arrive.shape
    member = m.member
    late = np.zeros(r, dtype=np.int64)
    wait_at = np.zeros((r, k), dtype=np.int64)
    last_rank = np.full(k, -1, dtype=np.int64)
    late_at = np.zeros((r, k), dtype=np.int64)  # arrival minus its group's median (0: no part)
    for j in range(k):
        rows = np.flatnonzero(member[:, j])
        a = m.arrive[rows, j]
        late_at[rows, j] = a - median_int(a)
        last = int(a.max())
        wait_at[rows, j] = np.clip(np.minimum(last - a, (m.end - m.arrive)[rows, j]), 0, None)
        last_rank[j] = _decisive_last(m.clocks, rows, a)
    for i in range(r):  # its lateness in the group where it is latest
        mine = [median_int(late_at[i, cols]) for g in range(m.groups)
                for cols in [m.group_cols(g)] if member[i, cols[0]]]
        if mine:
            late[i] = max(mine)
    last_count = np.bincount(last_rank[last_rank >= 0], minlength=r).astype(np.int64)
    whole = np.ones(r) if whole is None else np.asarray(whole, dtype=np.float64)
    candidates = _candidates(m, late_at, wait_at, last_rank, whole)
    roots, follows = _roots(m, candidates, wait_at, last_rank)
    straggler = np.zeros(r, dtype=bool)
    straggler[[i for i, _ in roots]] = True
    return Lateness(late, wait_at.sum(axis=1), last_count, last_rank, wait_at, straggler,
                    roots, follows, late_at)


def _decisive_last(clocks: Clocks, rows: np.ndarray, a: np.ndarray) -> int:
    """The row of the last arrival at one collective, when it is after every other member's
    by more than their tie (twice their clock error, at least MIN_TIE_NS); else -1."""
    if rows.size < 2:
        return -1
    top = int(np.argmax(a))
    for q in range(rows.size):
        if q == top:
            continue
        err = clocks.pair_error(int(rows[top]), int(rows[q]))
        if err == UNKNOWN or int(a[top]) - int(a[q]) <= max(MIN_TIE_NS, 2 * err):
            return -1
    return int(rows[top])


def _candidates(m: Matched, late_at: np.ndarray, wait_at: np.ndarray, last_rank: np.ndarray,
                whole: np.ndarray) -> list[tuple[int, int, int]]:
    """(row, group, what the group's others lose waiting for it) of each rank that holds
    back a group: last at a third or more of its collectives, late, costly."""
    out = []
    for g in range(m.groups):
        cols = m.group_cols(g)
        rows = np.flatnonzero(m.member[:, cols[0]])
        for i in rows.tolist():
            mine = cols[last_rank[cols] == i]
            if mine.size < max(1, int(np.ceil(STRAGGLER_SHARE * cols.size))):
                continue
            if median_int(late_at[i, cols]) <= 0:
                continue
            others = rows[rows != i]
            lost = wait_at[others][:, mine].sum(axis=1)
            cost = median_int(lost)
            base = float(np.median(whole[others]))
            if base > 0 and cost / base >= STRAGGLER_COST:
                out.append((i, g, cost))
    return out


def _roots(m: Matched, candidates: list[tuple[int, int, int]], wait_at: np.ndarray,
           last_rank: np.ndarray) -> tuple[list[tuple[int, int]], dict[int, int]]:
    """The candidates that are stragglers of their own doing, and those that follow one: a
    rank that waited, in another of its groups, at the collectives another candidate came
    last to, at least half the time it holds its own group back."""
    roots, follows = [], {}
    for i, g, cost in candidates:
        waited = {s: int(wait_at[i, (m.group != g) & (last_rank == s)].sum())
                  for s, other, _ in candidates if s != i and other != g}
        leader = max(waited, key=lambda s: waited[s], default=None)
        if leader is not None and waited[leader] * 2 >= cost:
            follows[i] = leader
        else:
            roots.append((i, g))
    for i in list(follows):
        if i in {r for r, _ in roots}:
            del follows[i]  # a straggler of its own somewhere
    return roots, follows


def collective_rows(m: Matched, lt: Lateness, ranks: list[int]) -> list[dict[str, Any]]:
    """One row per matched collective (``ranks --collectives``)."""
    rows = []
    for j in range(m.count):
        members = np.flatnonzero(m.member[:, j])
        a = m.arrive[members, j]
        first, last = int(a.min()), int(a.max())
        lr = int(lt.last_rank[j])
        rows.append({
            "collective": j, "key": m.keys[j], "kind": m.kinds[j],
            "bytes": int(m.nbytes[j]) if m.nbytes[j] >= 0 else None,
            "ranks": members.size,
            "first_arrival_ns": first, "last_arrival_ns": last, "skew_ns": last - first,
            "last_rank": ranks[lr] if lr >= 0 else None,
            "last_late_ns": last - median_int(a),
            "wait_ns": int(lt.wait_at[:, j].sum()),
        })
    return rows
