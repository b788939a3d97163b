"""Names: kernel and NVTX range names from ``StringIds`` and inline text.

Kernel names are ids into ``StringIds``. An NVTX range is named by its ``textId`` string if set,
else its inline ``text``; ranges in a non-default domain are named ``domain:name`` (the domain's
name comes from its NvtxDomainCreate row, event type 75, in the same process; nsys takes the
first creation of each (domain, process)). Names equal by text merge into one code.

Range names are a value (``RangeNames``): resolving, merging PyTorch operator calls or
restricting never changes data that another report holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nsys_parsers.arrays import ROWS, codes_in, few_distinct, let_go
from nsys_parsers.cache import held
from nsys_parsers.ids import global_pid

# PyTorch's emit_nvtx/record_function ranges carry per-call suffixes: "aten::linear, seq = 7",
# "aten::mm, op_id = 318133", "..., sizes = [[4, 64], [64, 64]]".
OP_ID_SUFFIX = re.compile(r",\s*(?:seq|op_id|sizes|input_op_ids|stream)\s*=.*$", re.S)


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
        names, remap = _merged(merged)
        if remap is None:  # every name distinct already
            remap = np.arange(len(merged), dtype=np.int64)
        if len(names) < 2**31:  # a code per range, held for the question: 4 bytes, not 8
            remap = remap.astype(np.int32)
        code = self.code
        if remap.size and code.size:
            code = _remapped(code, remap)
        return RangeNames(code=code, names=names)


def _remapped(code: np.ndarray, remap: np.ndarray) -> np.ndarray:
    """``remap[code]`` (-1 stays -1), a block of rows at a time, into ``cache.held``: the
    code of every range held for a question (4 bytes a range: 307 MB at 80 M ranges) is a
    scratch file's, its pages let go, not the process's memory."""
    out = held(code.size, remap.dtype)
    for a in range(0, code.size, ROWS):
        part, into = code[a:a + ROWS], out[a:a + ROWS]
        np.take(remap, np.maximum(part, 0), out=into)
        into[part < 0] = -1
        let_go(into)
        let_go(part)
    return out


def looks_like_emit_nvtx(names: list[str], min_share: float = 0.2) -> bool:
    """Whether range names look like a PyTorch ``emit_nvtx``/``record_function`` capture: at
    least ``min_share`` of the distinct names carry per-call suffixes (``, seq = N``)."""
    if not names:
        return False
    hits = sum(1 for n in names if OP_ID_SUFFIX.search(n))
    return hits >= max(1, int(min_share * len(names)))


def kernel_names(strings: dict[int, str], name_ids: np.ndarray,
                 ids_u: np.ndarray | None = None) -> tuple[list[str], np.ndarray]:
    """(distinct names, code per kernel) from the kernels' StringIds ids and their text
    (``ids_u``: the distinct ids, sorted, when known), a block (``ROWS``) of kernels at a
    time into a code per kernel (scratch when large)."""
    ids_u = few_distinct(name_ids) if ids_u is None else ids_u
    names, remap = _merged([strings.get(int(i), f"<unknown kernel name {int(i)}>")
                            for i in ids_u.tolist()])  # equal names merged
    codes = held(name_ids.size, np.int64)
    for a in range(0, name_ids.size, ROWS):
        at = np.searchsorted(ids_u, name_ids[a:a + ROWS])
        codes[a:a + ROWS] = at if remap is None else remap[at]
        let_go(codes[a:a + ROWS])
        let_go(name_ids[a:a + ROWS])
    return names, codes


def text_ids(keys: list[str]) -> list[int]:
    """The StringIds ids among raw range name keys ("\\x01<textId>" or inline text)."""
    return [int(u[1:]) for u in keys if u.startswith("\x01") and u[1:].lstrip("-").isdigit()]


def resolve_keys(keys: list[str], strings: dict[int, str]) -> list[str]:
    """Raw keys ("\\x01<textId>" or inline text) -> display names (``strings``: the text of
    the ids, ``text_ids``)."""
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


def union(a: RangeNames, b: RangeNames) -> RangeNames:
    """Names of ``a`` where resolved, else of ``b`` (both of the same ranges)."""
    index = {n: i for i, n in enumerate(a.names)}
    names = list(a.names)
    remap = codes_in(index, b.names)
    names += list(index)[len(names):]
    code = np.where(a.code >= 0, a.code,
                    np.where(b.code >= 0, remap[np.maximum(b.code, 0)] if remap.size else -1,
                             -1))
    return RangeNames(code=code, names=names)


def range_names(ranges, range_codes: np.ndarray, dom_codes: np.ndarray,
                resolved: list[str], owned: bool = False) -> RangeNames:
    """The names of ``ranges`` (a Ranges as read, in table order) from the key code of each
    range (-1: not resolved) and of each domain-create row, and the keys' display names:
    non-default domains prefixed, equal names merged. ``owned``: ``range_codes`` is the
    caller's to change (else the codes are written to a new array: it may be a cached
    item). A block (``ROWS``) of ranges at a time: a code per range is the one array held."""
    domains = _domains(ranges, resolved, dom_codes)
    base = len(resolved) + 1
    combos = None if domains is None else _combos_present(domains, range_codes, base)
    if domains is None or combos is None:
        names, remap = _merged(list(resolved))
        if remap is None:  # every key its own name: the codes are the names' codes
            return RangeNames(code=range_codes, names=names)
    else:
        names, remap = _merged([f"{domains[0][dj - 1]}:{resolved[c]}" if dj > 0
                                else resolved[c]
                                for dj, c in (divmod(u, base) for u in combos.tolist())])
    final = range_codes if owned else held(len(range_codes), np.int32)
    for a in range(0, len(range_codes), ROWS):
        b = min(a + ROWS, len(range_codes))
        codes = np.asarray(range_codes[a:b])
        of = (codes if domains is None or combos is None
              else np.searchsorted(combos, _combo(domains, a, b, codes, base)))
        if remap is not None and remap.size:
            of = remap[np.maximum(of, 0)]
        final[a:b] = np.where(codes >= 0, of, -1)
        let_go(final[a:b])
        let_go(range_codes[a:b])
    return RangeNames(code=final, names=names)


def _merged(names: list[str]) -> tuple[list[str], np.ndarray | None]:
    """Equal names merged (e.g. one range named by textId, one inline): (distinct names,
    the new code of each of ``names``), the codes None where every name is distinct
    already."""
    index: dict[str, int] = {}
    remap = codes_in(index, names)
    return (names, None) if len(index) == len(names) else (list(index), remap)


# (the name of each (domain, process) pair; of the ranges [a, b): each one's pair index + 1)
Domains = tuple[list[str], Callable[[int, int], np.ndarray]]


def _domains(ranges, resolved: list[str], dom_codes: np.ndarray) -> Domains | None:
    """(name of each (domain, process) pair, the function giving the pair's index + 1 of
    each range of a block, 0 in the default domain) of ranges in non-default domains,
    None where every range is in the default one."""
    if ranges.domains.shape[0] == 0 or not any(
            bool(ranges.domain_at(a, a + ROWS).any()) for a in range(0, len(ranges), ROWS)):
        return None
    # (domainId, process) -> domain name; nsys takes the first creation of each pair.
    order = np.argsort(ranges.domains[:, 3], kind="stable")
    seen: dict[tuple[int, int], int] = {}
    dom_names: list[str] = []
    for i in order:
        key = (int(ranges.domains[i, 1]), int(ranges.domains[i, 2]))
        if key not in seen:
            seen[key] = len(dom_names)
            dom_names.append(resolved[int(dom_codes[i])])

    def domain_of(a: int, b: int) -> np.ndarray:
        out = np.zeros(b - a, dtype=np.int64)
        did, pidkey = ranges.domain_at(a, b), global_pid(np.asarray(ranges.tid[a:b]))
        for (d, pk), j in seen.items():
            out[(did == d) & (pidkey == pk)] = j + 1
        let_go(ranges.tid[a:b])
        return out
    return dom_names, domain_of


def _combo(domains: Domains, a: int, b: int, codes: np.ndarray, base: int) -> np.ndarray:
    """Each range's (domain, key) pair of the block [a, b) as one integer; -1 unresolved."""
    return np.where(codes >= 0, domains[1](a, b) * base + codes, -1)


def _combos_present(domains: Domains, range_codes: np.ndarray, base: int) -> np.ndarray:
    """The distinct (domain, key) pairs of the resolved ranges, sorted."""
    parts = []
    for a in range(0, len(range_codes), ROWS):
        b = min(a + ROWS, len(range_codes))
        combo = _combo(domains, a, b, np.asarray(range_codes[a:b]), base)
        parts.append(np.unique(combo[combo >= 0]))
        let_go(range_codes[a:b])
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
