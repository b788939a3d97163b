"""Names shortened for people, by their structure: C++ kernel signatures lose template and
parameter lists before their middle; pyprof/DLProf markers become their summary; names that
would read alike in one table show where they differ. Data, JSON and CSV keep names whole."""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from reports.render.inductor import display, shortened

# Long kernel names (templated C++ can be hundreds of KiB) are shortened only here.
MAX_NAME_CHARS = 100
# Name columns that hold C++ kernel signatures.
SIGNATURE_COLUMNS = {"name", "kernel", "runner_up", "key"}


def cell_width(text: str) -> int:
    """How many terminal cells ``text`` takes: its length when ASCII, else as rich measures
    it (a CJK character or most emoji take two cells, a combining accent none)."""
    if text.isascii():
        return len(text)
    from rich.cells import cell_len

    return cell_len(text)


def shorten(value: Any, width: int = MAX_NAME_CHARS, *, signature: bool = False) -> Any:
    """Strings wider than ``width`` cells shortened with ``shorten_name``; other values as
    given. A kernel name (``signature``) of TorchInductor says what it fused
    (``reports.render.inductor.display``)."""
    if signature and isinstance(value, str):
        value = display(value)
    if isinstance(value, str) and cell_width(value) > width:
        return shorten_name(value, width, signature=signature)
    return value


@functools.lru_cache(maxsize=8192)  # tables and sentences repeat kernel names, row after row
def shorten_name(name: str, width: int, *, signature: bool = True) -> str:
    """``name`` in at most ``width`` terminal cells (``cell_width``: characters, where a CJK
    character counts two), keeping its start and its end. For C++
    signatures the structure gives way first: template argument lists collapse (largest
    first: ``kernel<…>(int, T1)``), then the parameter list (``kernel<…>(…)``), then the return
    type and namespaces (``…::kernel<…>(…)``); only then the middle of what is left
    (``void at::native::vec…(int, T1)``). ``signature=False`` (range names, paths): a
    pyprof/DLProf marker (a Python dict literal) becomes its summary (``marker_summary``),
    then only the middle gives way."""
    if cell_width(name) <= width:
        return name
    if not signature:
        return _middle(marker_summary(name) or name, width)
    short = shortened(name, width)  # an Inductor kernel: its label says what it lists
    if short is not None:
        return short
    text = name
    groups = _template_groups(name)
    chosen: list[tuple[int, int]] = []
    for group in sorted(groups, key=lambda g: g[0] - g[1]):  # largest first
        if cell_width(text) <= width:
            return text
        chosen.append(group)
        text = _collapsed(name, chosen)
    for step in (_collapse_params, _drop_return_type, _drop_namespaces):
        if cell_width(text) <= width:
            return text
        text = step(text)
    return text if cell_width(text) <= width else _middle(text, width)


def shorten_columns(cells: dict[str, list[str]], widths: dict[str, int],
                    full: dict[str, list[Any]] | None = None) -> dict[str, list[str]]:
    """``shorten_name`` of every cell of the name columns ``cells`` (each to its column's
    width). Where different names would read the same, in one column or across them (a
    kernel and its runner-up), each of those shows instead its start and the part where the
    names differ: the names of the clash without their common start and end, the start of
    that part first (``sm80_xmma_gem…l__5x_cublas`` three times becomes
    ``sm80_x…64x256x8_sta…ecute…``, ``sm80_x…128x128x8_st…ecute…``,
    ``sm80_x…64x256x8_sta…plit_k…``). ``full``: the whole names, when the cells hold
    them shortened already (to ``MAX_NAME_CHARS``); pyprof markers are left as they are."""
    cells = {c: [display(v) for v in values] if is_signature(c) else values
             for c, values in cells.items()}
    full = {c: [display(v) if isinstance(v, str) else v for v in values]
            if is_signature(c) else values for c, values in (full or {}).items()}
    out = {c: [shorten_name(v, widths[c], signature=is_signature(c)) for v in values]
           for c, values in cells.items()}
    whole = {c: [w if isinstance(w, str) and w else v
                 for v, w in zip(values, (full or {}).get(c, values))]
             for c, values in cells.items()}
    groups: dict[str, set[str]] = {}
    for c in cells:
        for name, short in zip(whole[c], out[c]):
            groups.setdefault(short, set()).add(name)
    clashes = {short: sorted(group) for short, group in groups.items()
               if len(group) > 1 and not any(n.startswith("{'") for n in group)}
    if not clashes:
        return out
    told: dict[tuple[str, int], dict[str, str] | None] = {}  # (short text, width) -> texts

    def shown(kept: set[str]) -> dict[str, list[str]]:
        """The cells with the clashes told apart, but those of ``kept`` (as shortened)."""
        res: dict[str, list[str]] = {}
        for c in cells:
            res[c] = []
            for name, short in zip(whole[c], out[c]):
                better = None
                if short in clashes and short not in kept:
                    key = (short, widths[c])
                    if key not in told:
                        told[key] = _told_apart(short, clashes[short], widths[c])
                    better = told[key]
                res[c].append(better[name] if better is not None else short)
        return res

    # A clash told apart must not read as another name (two cub kernels shortened apart,
    # DeviceReduceKernel<…>(…) and DeviceReduceSingleTileKernel<…>(…), whose clashes were
    # told apart by the same start): such a clash keeps its shortened names.
    kept: set[str] = set()
    while True:
        result = shown(kept)
        owners: dict[str, set[str]] = {}
        for c in cells:
            for name, text in zip(whole[c], result[c]):
                owners.setdefault(text, set()).add(name)
        worse = {short for c in cells
                 for name, short, text in zip(whole[c], out[c], result[c])
                 if text != short and len(owners[text]) > 1}
        if not worse:
            return result
        kept |= worse


def _told_apart(short: str, group: list[str], width: int) -> dict[str, str] | None:
    """Texts of at most ``width`` cells that tell the names of ``group`` (all shortened to
    ``short``) apart, or None when the width cannot."""
    start = len(os.path.commonprefix(group))
    end = len(os.path.commonprefix([g[::-1] for g in group]))
    end = min(end, min(len(g) for g in group) - start)  # the common end after the start
    if min(len(g) for g in group) - start - end < 3:  # a name is (almost) all common: its
        end = 0  # differing part is what follows the common start, to the end
    # the start: a signature's function name when it takes at most half the width (it tells
    # DeviceReduceKernel<…> from DeviceReduceSingleTileKernel<…>), else a quarter of it
    stem = re.split(r"[<(]", short, maxsplit=1)[0]
    if stem != short and 4 <= cell_width(stem) <= width // 2:
        head = stem
    else:
        head = _fit_cells(short, max(4, width // 4))
    if head.endswith("…"):
        head = head[:-1]
    room = width - cell_width(head) - 1 - (1 if end else 0)  # the ellipses around the part
    if room < 5:
        return None
    # the differing part: two thirds from its start (where the names first differ)
    told = {g: head + "…" + _middle(g[start:len(g) - end], room, tail_share=3)
            + ("…" if end else "") for g in group}
    return told if len(set(told.values())) == len(group) else None


# pyprof / DLProf write a Python dict per NVTX range: an operator call with its arguments, or
# the Python stack that made it. Their distinctive parts are the argument shapes and the
# innermost frame of the user's own code, hundreds of characters in.
_MARKER_MAX = 20_000


def marker_summary(name: str) -> str | None:
    """A pyprof/DLProf marker in a few words, else None: ``{'mod': 'torch.nn.functional',
    'op': 'conv2d', 'args': [{'shape': (1, 3, 32, 32), ...}, ...]}`` ->
    ``conv2d(1x3x32x32, 6x3x3x3, 6)``; ``{'traceMarker': [frames], 'funcStack':
    '/…/Conv2d::forward/conv2d'}`` -> ``conv2d @ dummy_network.py:25`` (the innermost frame
    outside site-packages)."""
    if not (name.startswith("{'") and name.endswith("}")) or len(name) > _MARKER_MAX:
        return None
    import ast

    try:
        marker = ast.literal_eval(name)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(marker, dict):
        return None
    if isinstance(marker.get("op"), str):
        args = marker.get("args")
        args = args if isinstance(args, list) else []
        return f"{marker['op']}({', '.join(_marker_arg(a) for a in args)})"
    frames = marker.get("traceMarker")
    if isinstance(frames, list) and all(isinstance(f, str) for f in frames):
        own = [f for f in frames if "site-packages" not in f and "dist-packages" not in f]
        stack = marker.get("funcStack")
        op = stack.rsplit("/", 1)[-1] if isinstance(stack, str) and stack else ""
        where = (own or frames or [""])[-1].rsplit("/", 1)[-1]
        return f"{op} @ {where}" if op and where else (op or where or None)
    return None


def _marker_arg(arg: Any) -> str:
    """One argument of a pyprof operator marker: a tensor's shape (``16x6x5x5``), else its
    value or type."""
    if not isinstance(arg, dict):
        return "?"
    shape = arg.get("shape")
    if isinstance(shape, (tuple, list)):
        return "x".join(map(str, shape)) if shape else "scalar"
    if "value" in arg:
        return str(arg["value"])
    return str(arg.get("type", "?"))


def _collapse_params(text: str) -> str:
    """``f<…>(int, T1 *, ...)`` -> ``f<…>(…)`` (the last top-level parameter list)."""
    if not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            return text if i == len(text) - 2 else text[:i] + "(…)"
    return text


def _drop_return_type(text: str) -> str:
    """``void ns::f(…)`` -> ``ns::f(…)`` (only C++ return types, not words of a range name)."""
    for head in ("void ", "static ", "__global__ ", "__device__ "):
        if text.startswith(head):
            return text[len(head):]
    return text


def _drop_namespaces(text: str) -> str:
    """``at::native::f<…>(…)`` -> ``…::f<…>(…)``."""
    head = text.split("<", 1)[0].split("(", 1)[0]
    cut = head.rfind("::")
    return "…" + text[cut:] if cut > 0 else text


def _template_groups(name: str) -> list[tuple[int, int]]:
    """(start, end) of the content of each top-level ``<...>`` group, if brackets balance."""
    groups, depth, start = [], 0, 0
    for i, ch in enumerate(name):
        if ch == "<":
            if depth == 0:
                start = i + 1
            depth += 1
        elif ch == ">" and depth > 0:
            depth -= 1
            if depth == 0 and i > start:
                groups.append((start, i))
    return groups if depth == 0 else []


def _collapsed(name: str, groups: list[tuple[int, int]]) -> str:
    """``name`` with the content of each group replaced by an ellipsis."""
    out, pos = [], 0
    for a, b in sorted(groups):
        out += [name[pos:a], "…"]
        pos = b
    out.append(name[pos:])
    return "".join(out)


def _middle(text: str, width: int, *, tail_share: int = 2) -> str:
    """``text`` in ``width`` cells: its start, an ellipsis, its end (1 / ``tail_share`` of
    the cells kept)."""
    if cell_width(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    keep = width - 1
    head = _fit_cells(text, keep - keep // tail_share)
    tail = _fit_cells(text[::-1], keep - cell_width(head))[::-1]  # a cell head left over
    return head + "…" + tail


def _fit_cells(text: str, cells: int) -> str:
    """The longest start of ``text`` that takes at most ``cells`` terminal cells (a wide
    character that would straddle the limit is left out)."""
    if text.isascii():
        return text[:cells]
    from rich.cells import get_character_cell_size

    used = 0
    for i, ch in enumerate(text):
        used += get_character_cell_size(ch)
        if used > cells:
            return text[:i]
    return text


def is_signature(column: str) -> bool:
    """Whether a column holds C++ kernel signatures."""
    return column in SIGNATURE_COLUMNS or column.endswith("_kernel")


def structure(name: str) -> str:
    """A signature with its template and parameter lists collapsed: its useful width."""
    groups = _template_groups(name)
    return _collapse_params(_collapsed(name, groups) if groups else name)
