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

import numpy as np

from nsys_parsers.arrays import ROWS, codes_in, let_go
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
        names, remap = unique_names(merged, np.arange(len(merged), dtype=np.int64))
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


def unique_names(names: list[str], codes: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Merge codes whose names are equal (e.g. one range named by textId, one inline)."""
    if len(set(names)) == len(names):
        return names, codes
    index: dict[str, int] = {}
    remap = codes_in(index, names)
    return list(index), remap[codes] if codes.size else codes


def kernel_names(strings: dict[int, str], name_ids: np.ndarray
                 ) -> tuple[list[str], np.ndarray]:
    """(distinct names, code per kernel) from the kernels' StringIds ids and their text."""
    ids_u, codes = np.unique(name_ids, return_inverse=True)
    names = [strings.get(int(i), f"<unknown kernel name {int(i)}>") for i in ids_u]
    return unique_names(names, codes.ravel())


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
    caller's to change (else it is copied before it changes: it may be a cached item)."""
    names, final = _with_domains(ranges, resolved, range_codes, dom_codes)
    valid = final >= 0
    if not valid.all():
        sub_names, sub_codes = unique_names(names, final[valid])
        if final is range_codes and not owned:
            final = final.copy()
        final[valid] = sub_codes
        names = sub_names
    else:
        names, final = unique_names(names, final)
    return RangeNames(code=final, names=names)


def _with_domains(ranges, resolved: list[str], codes: np.ndarray, dom_codes: np.ndarray
                  ) -> tuple[list[str], np.ndarray]:
    """Prefix names of ranges in non-default domains with ``domain:``."""
    if ranges.domains.shape[0] == 0:
        return list(resolved), codes
    domain = ranges.domain
    if not bool((domain != 0).any()):
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
    pidkey = global_pid(ranges.tid)
    for (did, pk), j in seen.items():
        domain_of[(domain == did) & (pidkey == pk)] = j
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
