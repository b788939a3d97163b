"""Module ranges read as a tree: the ranges ``--nvtx modules`` adds to a program
(``nvtx_model.program_nvtx``), placed in its model's module hierarchy.

The launcher names the model by its class (``TinyNet``), each submodule by its qualified name
and class (``encoder.0.proj (Linear)``), and the backward pass of each ``NAME backward``. An
export has module ranges when some range names have the form ``QUALNAME (Class)`` and a model
is found among the others: a class name with a ``CLASS backward`` range, or one whose push/pop
ranges directly enclose, on the same thread, those of a module without a named ancestor
(``encoder (Sequential)``). Other exports have no tree, and every answer about them is as
before.

- ``level``: the model is 1, its children 2, ...: one more than the dots of the qualified
  name (``encoder.0.proj`` is 4), so a container that is never called (an ``nn.ModuleList``
  has no forward, hence no range) still counts, as ``--nvtx modules:DEPTH`` counts (DEPTH + 1).
- ``parent``: the range of the nearest enclosing module that has one (its backward range for a
  backward range, when there is one); None for a model.
- tree order (``order``): depth first, a module's forward range, then its backward range,
  then its submodules; siblings by weight (GPU time), largest first; other ranges (``step``,
  ``optimizer (SGD)``) and each model's tree by weight at the top.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Callable, Protocol, TypeVar

import numpy as np

from nsys_parsers.arrays import ROWS, let_go
from nvtx_model.program_nvtx import BACKWARD_SUFFIX
from reports.render import TREE_INDENT

# ``encoder.0.proj (Linear)``: parts of a qualified name hold no dot (nn.Module refuses one),
# no space and no parenthesis here; the class is a Python identifier.
SUBMODULE = re.compile(r"^(?P<qual>[^\s.()]+(?:\.[^\s.()]+)*) \((?P<cls>[A-Za-z_]\w*)\)$")
MODEL = re.compile(r"^[A-Za-z_]\w*$")
TREE_COLUMNS = ["depth", "parent"]
TREE_COLUMN_TYPES = {"depth": "integer", "parent": "string"}  # their JSON types


@dataclass(frozen=True)
class Module:
    """One module range: the module (its forward range's name), its level, whether it is
    the backward range, and the range of its parent (None: a model)."""

    module: str
    level: int
    backward: bool
    parent: str | None


@dataclass(frozen=True)
class ModuleTree:
    """The module ranges of an export, by range name."""

    ranges: dict[str, Module]

    def level(self, name: str) -> int | None:
        m = self.ranges.get(name)
        return m.level if m is not None else None

    def levels(self, names: list[str]) -> np.ndarray:
        """The level of each name (0: not a module range), and a trailing 0 (for code -1)."""
        return np.array([self.level(n) or 0 for n in names] + [0], dtype=np.int64)

    def order(self, names: list[str], weight: list[float]) -> list[int]:
        """Indices of ``names`` (with ``weight`` each) in tree order (module docstring); a
        module whose parent is not among ``names`` hangs from its nearest ancestor that is,
        or stands at the top."""
        rows: dict[str, list[int]] = {}  # module -> its forward and backward rows here
        for i, n in enumerate(names):
            m = self.ranges.get(n)
            if m is not None:
                rows.setdefault(m.module, []).append(i)
        for r in rows.values():
            r.sort(key=lambda i: self.ranges[names[i]].backward)
        children: dict[str | None, list[str]] = {}
        for module, at in rows.items():
            up = self._parent_module(self.ranges[names[at[0]]])
            while up is not None and up not in rows:
                up = self._parent_module(self.ranges[up])
            children.setdefault(up, []).append(module)

        def w(module: str) -> float:
            return sum(weight[i] for i in rows[module])

        out: list[int] = []

        def walk(module: str) -> None:
            out.extend(rows[module])
            for child in sorted(children.get(module, ()), key=lambda c: (-w(c), _natural(c))):
                walk(child)

        top: list[tuple[float, int, str | None]] = [
            (w(m), rows[m][0], m) for m in children.get(None, ())]
        top += [(weight[i], i, None) for i, n in enumerate(names) if n not in self.ranges]
        for _, i, item in sorted(top, key=lambda t: (-t[0], t[1])):
            if item is None:
                out.append(i)
            else:
                walk(item)
        return out

    def _parent_module(self, m: Module) -> str | None:
        """The module (forward range name) of ``m``'s parent."""
        return self.ranges[m.parent].module if m.parent is not None else None


def _natural(name: str) -> list[Any]:
    """``layers.10`` after ``layers.9``."""
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in re.split(r"(\d+)", name)]


def parse(name: str) -> tuple[str, str, bool] | None:
    """(qualified name, class, backward) of a submodule's range name, else None."""
    if not name.endswith((")", ")" + BACKWARD_SUFFIX)):  # most names, fast (emit_nvtx: 1 M+)
        return None
    backward = name.endswith(BACKWARD_SUFFIX)
    m = SUBMODULE.match(name[: -len(BACKWARD_SUFFIX)] if backward else name)
    return (m.group("qual"), m.group("cls"), backward) if m else None


def module_tree(names: list[str], code: np.ndarray, pushpop: np.ndarray,
                enclosing: Callable[[], np.ndarray]) -> ModuleTree | None:
    """The module tree of an export (None: it has no module ranges) from its range names
    (``names``, and the name ``code`` of each range, -1 where unresolved), which ranges are
    push/pop ranges, and ``enclosing()``: the innermost enclosing push/pop range of each
    range (-1: none), asked only when some names look like modules. A module's forward range
    is a push/pop range (``optimizer (SGD)``, a start/end range, is not a module)."""
    pushed = np.zeros(len(names) + 1, dtype=bool)  # the last: code -1
    for a in range(0, code.size, ROWS):  # a block at a time, the mapped codes let go
        part = code[a:a + ROWS]
        pushed[part[pushpop[a:a + ROWS]]] = True
        let_go(part)
    parsed = {n: p for i, n in enumerate(names)
              if (p := parse(n)) is not None and (p[2] or pushed[i])}
    if not parsed:
        return None
    present = set(names)
    quals: dict[str, str] = {}  # qualified name -> its forward range's name (the first)
    for n, (qual, _, backward) in parsed.items():
        if not backward:
            quals.setdefault(qual, n)

    def named_ancestor(qual: str) -> str | None:
        while "." in qual:
            qual = qual.rsplit(".", 1)[0]
            if qual in quals:
                return quals[qual]
        return None

    # models: a class name with a backward range, or enclosing a module without a named
    # ancestor (the most frequent encloser of each such module)
    models = {n for n in names if MODEL.match(n) and n + BACKWARD_SUFFIX in present}
    orphans = [n for n, (qual, _, bw) in parsed.items() if not bw and named_ancestor(qual) is None]
    encloser: dict[str, str] = {}
    if orphans:
        parent = enclosing()
        index = {n: i for i, n in enumerate(names)}
        wanted = np.zeros(len(names) + 1, dtype=bool)
        wanted[[index[n] for n in orphans]] = True
        rows = np.flatnonzero(wanted[code] & (parent >= 0))
        rows = rows[code[parent[rows]] >= 0]
        size = len(names)
        pairs, counts = np.unique(code[rows] * size + code[parent[rows]], return_counts=True)
        best: dict[str, tuple[int, str]] = {}
        for pair, count in zip(pairs.tolist(), counts.tolist()):
            child, up = divmod(pair, size)
            if MODEL.match(names[up]) and count > best.get(names[child], (0, ""))[0]:
                best[names[child]] = (count, names[up])
        encloser = {child: up for child, (_, up) in best.items()}
        models |= set(encloser.values())
    if not models:
        return None
    only_model = next(iter(models)) if len(models) == 1 else None
    tree: dict[str, Module] = {}
    for model in models:
        tree[model] = Module(model, 1, False, None)
        if model + BACKWARD_SUFFIX in present:
            tree[model + BACKWARD_SUFFIX] = Module(model, 1, True, None)
    for n, (qual, _, backward) in parsed.items():
        forward = n[: -len(BACKWARD_SUFFIX)] if backward else n
        up = named_ancestor(qual) or encloser.get(forward) or only_model
        if backward and up is not None and up + BACKWARD_SUFFIX in present:
            up = up + BACKWARD_SUFFIX
        tree[n] = Module(forward, qual.count(".") + 2, backward, up)
    return ModuleTree(tree)


class Answer(Protocol):
    """What ``as_tree`` reads of a ``reports.pipeline.report.Report`` (a dataclass)."""

    rows: Sequence[dict[str, Any]]
    columns: list[str]
    sentences: list[str]


A = TypeVar("A", bound=Answer)


def as_tree(report: A, tree: ModuleTree, *, weight: Callable[[dict], float],
            pinned: int = 0) -> A:
    """``report`` (rows keyed by ``range``, after ``pinned`` leading rows) in tree order, each
    row with its ``depth`` and ``parent`` (None for a range that is not a module's), the
    columns with TREE_COLUMNS added, and its sentences (one per row, when it has them) in the
    same order and indented by level (``Analysis.tree_view`` is how people see it)."""
    head, body = list(report.rows[:pinned]), list(report.rows[pinned:])
    order = tree.order([r["range"] for r in body], [float(weight(r) or 0) for r in body])
    rows = head + [body[i] for i in order]
    rows = [{**r, "depth": m.level if m else None, "parent": m.parent if m else None}
            for r in rows for m in [tree.ranges.get(r.get("range") or "")]]
    sentences = report.sentences
    if len(sentences) == len(report.rows):
        base = min((r["depth"] for r in rows if r["depth"] is not None), default=1)
        said = sentences[:pinned] + [sentences[pinned + i] for i in order]
        sentences = [(TREE_INDENT * (r["depth"] - base) if r["depth"] is not None else "") + s
                     for r, s in zip(rows, said)]
    columns = report.columns + [c for c in TREE_COLUMNS if c not in report.columns]
    return replace(report, rows=rows, columns=columns, sentences=sentences)  # type: ignore


def is_tree(rows: list[dict[str, Any]]) -> bool:
    """Whether rows carry a module tree (``as_tree``)."""
    return any(r.get("depth") is not None for r in rows)
