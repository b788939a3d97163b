"""``Session``: one export opened for questions, seen through the analysis options.

    from reports.pipeline.ask import answer

    with Session("run.sqlite", within="measure") as s:
        answer(s, "ranges")                          # Report: NVTX range summary
        answer(s, "dominant", range_names=["step"])  # any analysis of reports.analyses
        answer(s, "kernels").to_pandas()             # a DataFrame (pandas imported then)

A session holds one ``nsys_parsers.trace.Trace`` (every column read once, from the export or
its cache entry) and the views the options make of it, each a new value computed once:
``within`` keeps what ran inside instances of one range; ``merge_op_ids`` (off, on, auto)
gives every call of a PyTorch operator one name (``aten::mm, seq = 7`` -> ``aten::mm``);
``depth`` and ``match`` choose which range instances are shown (attribution still runs on
every range; ``depth`` counts module levels for module ranges: ``module_tree``). Analyses
(``reports.analyses``) compute their answers from these.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import replace
from typing import Any

import numpy as np

from nsys_parsers.arrays import (
    ROWS,
    gather,
    let_go,
    let_go_all,
    let_go_fields,
    runs_by_code,
    sorted_unique,
)
from nsys_parsers.attribution import Pairs, attribute, innermost
from nsys_parsers.cache import held
from nsys_parsers.errors import RangeNotFound
from nsys_parsers.export import Export, open_export
from nsys_parsers.gpu_ops import GpuOps, gpu_ops
from nsys_parsers.kernels import Kernels
from nsys_parsers.memops import MemOps
from nsys_parsers.names import OP_ID_SUFFIX, RangeNames, looks_like_emit_nvtx
from nsys_parsers.nesting import enclosing, nesting_depth
from nsys_parsers.ranges import Ranges
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE
from nsys_parsers.trace import Trace
from nsys_parsers.window import inside_range
from reports.module_tree import ModuleTree, module_tree
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.report import check_range_names


class Session:
    """Questions about one export under ``AnalysisOptions`` (an object, keywords, or both:
    keywords win). Close it (or use ``with``) to end its reader threads."""

    def __init__(self, export: Export | str | os.PathLike[str],
                 options: AnalysisOptions | None = None, *, trace: Trace | None = None,
                 **kwargs: Any):
        """``trace``: the loaded values of ``export`` to share (made with this session's
        ``name_kind`` and ``cache``), which the session then does not close: sessions of
        other options over one load (``reports.pipeline.memo.Memo``)."""
        from reports.categories import load_rules

        self.options = replace(options or AnalysisOptions(), **kwargs)
        self.rules = load_rules(self.options.rules)  # a bad rules file fails before reading
        self._owned = not isinstance(export, Export)
        self._owns_trace = trace is None
        self.export: Export = (export if isinstance(export, Export)
                               else open_export(export, nsys=self.options.nsys))
        if trace is not None:
            if trace.export is not self.export or trace.name_kind != self.options.name_kind:
                raise ValueError("a shared trace must be of this export and name kind")
            self.trace = trace
        else:
            try:
                self.trace = Trace(self.export, name_kind=self.options.name_kind,
                                   cache=self.options.cache)
            except BaseException:
                self.close()
                raise
        # what is computed once: views of the loaded values ("view." keys, made again when
        # more columns are loaded), the within window, pairs, the merge decision, filters
        self._memo: dict[Any, Any] = {}

    @property
    def within(self) -> str | None:
        return self.options.within

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if getattr(self, "trace", None) is not None and self._owns_trace:
            self.trace.close()
        if self._owned:
            self.export.close()

    # -- loading -------------------------------------------------------------------------
    def expect(self, what: str | None, bytes_per_row: int = 0) -> None:
        """Check the next load that reads the export against the memory budget
        (``nsys_parsers.budget``), for ``what`` (the question, in its message) at
        ``bytes_per_row`` of the tables it reads: ``Trace.expected``. The analysis's bytes
        per row are measured on that first load's tables (what it loads later is in them).
        ``None``: no check (the question is over)."""
        self.trace.expected = None if what is None else (what, bytes_per_row)

    def load(self, *groups: str) -> None:
        """Load column groups (``nsys_parsers.trace.GROUPS``) with what the options need:
        ``within`` and ``match`` need every range name, ``within`` the kernels' launches."""
        want = set(groups)
        if self.within is not None or self.options.match:
            want |= {"ranges", "names"}
        if self.within is not None and want & {"kernels", "kernel_ids"}:
            want |= {"kernels", "launches"}
        if "launches" in want:
            want.add("kernels")
        self.trace.load(*sorted(want))
        for key in [k for k in self._memo if str(k).startswith("view.")]:
            del self._memo[key]  # made again with the new columns

    def let_go(self) -> None:
        """Let the pages of every mapped or scratch array held for this session go
        (``Trace.let_go``, and what the session made from them): a later read maps them
        again from the page cache."""
        self.trace.let_go()
        let_go_all(list(self._memo.values()))

    def _once(self, key: Any, make: Any) -> Any:
        """``make()``, computed once per ``key``."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def _window_rows(self) -> tuple[np.ndarray | None, np.ndarray, int]:
        """(kernel rows, range rows, instances) inside the ``within`` range."""
        def make() -> tuple[np.ndarray | None, np.ndarray, int]:
            assert self.within is not None
            self.load("kernels", "launches", "ranges", "names")
            ranges = self.trace.ranges
            return inside_range(self.trace.kernels, ranges,
                                self.trace.range_names() if ranges is not None else None,
                                self.within)
        return self._once("window", make)

    @property
    def kernels(self) -> Kernels | None:
        """The kernels (restricted to ``within``; None: not traced)."""
        def make() -> Kernels | None:
            k = self.trace.kernels
            if k is None or self.within is None:
                return k
            rows = self._window_rows()[0]
            return k.take(rows) if rows is not None else k
        return self._once("view.kernels", make)

    @property
    def ranges(self) -> Ranges | None:
        """The NVTX ranges (restricted to ``within``; None: not traced)."""
        def make() -> Ranges | None:
            r = self.trace.ranges
            if r is None or self.within is None:
                return r
            return r.take(self._window_rows()[1])
        return self._once("view.ranges", make)

    @property
    def memops(self) -> MemOps | None:
        return self.trace.memops

    def gpu_ops(self, launches: bool = False, keep: bool = True) -> GpuOps | None:
        """Every GPU operation (``nsys_parsers.gpu_ops``: kernels, memcpy, memset), whatever
        ``within`` says (questions about time windows restrict them themselves); with the
        API call that launched each when ``launches``. None: none was traced. ``keep``
        False: built afresh and not kept for the next question, unless it is kept already
        (a question that lets them go before its memory peaks)."""
        key = f"view.gpu_ops.{launches}"
        if not keep and key not in self._memo:
            return gpu_ops(self.trace, launches=launches)
        return self._once(key, lambda: gpu_ops(self.trace, launches=launches))

    @property
    def notes(self) -> list[str]:
        """What every answer of this session says about its data."""
        notes = list(self.trace.notes) if self.has_kernels else []
        if self.trace.has_graph_records or self.options.graph_attribution == "capture":
            from reports.pipeline.graphs import graph_notes

            notes += graph_notes(self)
        if self.within is not None:
            notes.append(f"only what ran inside the {self.within!r} range(s): "
                         f"{self._window_rows()[2]} instance(s); everything outside (e.g. "
                         f"warmup) is left out.")
        return notes

    @property
    def trace_warnings(self) -> list[str]:
        """What every answer of this export says whatever its format: that its CUDA trace
        stopped early (``nsys_parsers.completeness``), or nothing."""
        def make() -> list[str]:
            from nsys_parsers.completeness import trace_cut

            cut = trace_cut(self.export, found=self.trace.extents)
            return [cut.message()] if cut is not None else []
        return list(self._once("trace_cut", make))

    @property
    def has_kernels(self) -> bool:
        """Whether the export has kernels (a kernel table, or whole-graph launches)."""
        return self.trace.has_kernels

    def require_kernels(self, purpose: str) -> None:
        """MissingData (with the trace option that records kernels) without kernels."""
        if not self.has_kernels:
            self.export.require(KERNEL_TABLE, purpose)

    @property
    def has_ranges(self) -> bool:
        return self.export.has_table(NVTX_TABLE)

    # -- names ---------------------------------------------------------------------------
    def names(self, rows: np.ndarray | None = None) -> RangeNames:
        """Names of ``ranges`` (merged per operator when asked): all of them, or at least
        those at ``rows``."""
        assert self.ranges is not None, "names() needs NVTX ranges; check has_ranges first"
        if self.within is not None:
            names = self.trace.range_names().take(self._window_rows()[1])
        else:
            names = self.trace.range_names(rows)
        if not self.merges_op_ids(names):
            return names
        # per names value (kept beside its merge, so that its id is not reused)
        return self._once(("merged", id(names)), lambda: (names, names.merged_op_ids()))[1]

    def merges_op_ids(self, names: RangeNames | None = None) -> bool:
        """Whether PyTorch operator calls are merged (``auto``: decided once, on the names)."""
        mode = self.options.merge_op_ids
        if mode != "auto":
            return mode == "on"
        def decide() -> bool:
            if self.ranges is None:
                return False
            every = names if names is not None and names.complete else self.trace.range_names()
            return looks_like_emit_nvtx(every.names)
        return bool(self._once("merge", decide))

    def keep_calls_for(self, range_names: list[str] | None) -> None:
        """A question about one call of an operator (``aten::mm, seq = 7``) keeps calls apart
        under ``merge_op_ids=auto``."""
        if (self.options.merge_op_ids == "auto" and range_names
                and any(OP_ID_SUFFIX.search(n) for n in range_names)):
            self._memo["merge"] = False

    def operator_notes(self) -> list[str]:
        if self.options.merge_op_ids == "auto" and self.merges_op_ids():
            return ["PyTorch operator calls are grouped per operator (an emit_nvtx capture: "
                    "`aten::mm, seq = 7` counts as `aten::mm`); --merge-op-ids off lists "
                    "every call."]
        return []

    def module_tree(self) -> ModuleTree | None:
        """The module ranges ``--nvtx modules`` added, as a tree (``reports.module_tree``;
        None: the export has none), from every range of the export."""
        def make() -> ModuleTree | None:
            raw = self.trace.ranges
            if raw is None:
                return None
            names = self.trace.range_names()
            return module_tree(names.names, names.code, raw.pushpop, lambda: enclosing(raw))
        return self._once("tree", make)

    # -- attribution and filters -----------------------------------------------------------
    def pairs(self, attribution: str = "all") -> Pairs:
        """(range, kernel) attribution pairs of ``ranges`` and ``kernels`` (kernels of CUDA
        graphs where the ``graph_attribution`` option says)."""
        graphs = self.options.graph_attribution
        if self.within is None:
            return self.trace.pairs(attribution, graphs)
        def make() -> Pairs:
            if graphs == "capture":
                self.load("kernels", "kernel_ids", "launches", "graph_capture")
            k, r = self.kernels, self.ranges
            assert k is not None and r is not None
            if graphs == "capture":
                k = self.trace.capture_kernels(k)
            return (innermost(self.pairs("all"), r) if attribution == "innermost"
                    else attribute(k, r, attribution))
        return self._once(("pairs", attribution), make)

    def shown(self) -> np.ndarray | None:
        """Which ranges the ``depth``/``match`` filters show (None: all)."""
        if not self.options.filtered:
            return None
        return self._once("shown", self._make_shown)

    def _make_shown(self) -> np.ndarray:
        """Which ranges the ``depth``/``match`` filters keep (``shown``)."""
        r = self.ranges
        assert r is not None
        keep = np.ones(len(r), dtype=bool)
        if self.options.depth is not None:
            raw = self.trace.ranges
            assert raw is not None
            depth = nesting_depth(raw)
            if self.within is not None:
                depth = depth[self._window_rows()[1]]
            tree = self.module_tree()
            if tree is not None:  # a module range's depth is its module level
                names = self.names()
                level = tree.levels(names.names)[names.code]
                depth = np.where(level > 0, level, depth)
            keep &= depth <= self.options.depth
        if self.options.match:
            names = self.names()
            pattern = re.compile("|".join(fnmatch.translate(m) for m in self.options.match))
            ok = np.array([bool(pattern.match(n)) for n in names.names] + [False])
            keep &= ok[names.code]  # code -1 (unresolved) reads the trailing False
        return keep

    def shown_pairs(self, p: Pairs) -> Pairs:
        """The pairs of shown ranges."""
        shown = self.shown()
        if shown is None or len(p) == 0:
            return p
        sel = shown[p.range_idx]
        return Pairs(range_idx=p.range_idx[sel], kernel_idx=p.kernel_idx[sel])

    def filter_notes(self, noun: str = "ranges") -> list[str]:
        o = self.options
        parts = []
        if o.depth is not None:
            parts.append(f"at nesting depth <= {o.depth}" + (
                f" (module ranges: module level <= {o.depth}, the model 1)"
                if self.ranges is not None and self.module_tree() is not None else ""))
        if o.match:
            parts.append("named like " + " or ".join(repr(m) for m in o.match))
        return [f"only {noun} {' and '.join(parts)} are shown."] if parts else []

    def shown_instances(self, names: RangeNames) -> np.ndarray:
        """Shown instances per range name code (a block of ranges at a time)."""
        shown = self.shown()
        count = np.zeros(len(names.names), dtype=np.int64)
        for a in range(0, names.code.size, ROWS):
            code = names.code[a:a + ROWS]
            if shown is not None:
                code = code[shown[a:a + ROWS]]
            count += np.bincount(code[code >= 0], minlength=len(names.names))
            let_go(names.code[a:a + ROWS])
        return count

    # -- building blocks of the gates (compare, diff, check) -------------------------------
    def need_ranges(self, range_name: str) -> None:
        """MissingData (with the trace option that records NVTX) when the export has no NVTX
        ranges to find ``range_name`` in."""
        if self.ranges is None:
            self.export.require(NVTX_TABLE, f"NVTX range {range_name!r}")
            raise RangeNotFound(f"no NVTX range named {range_name!r}: the export holds no "
                                f"NVTX ranges.")

    def range_code(self, range_name: str) -> int:
        """The name code of ``range_name`` (RangeNotFound with the closest names if absent)."""
        self.need_ranges(range_name)
        names = self.names()
        code = names.index(range_name)
        if code is None:
            check_range_names([range_name], names.names)
            raise AssertionError("unreachable")
        return code

    def instances_of(self, range_name: str) -> np.ndarray:
        """Indices (into ``ranges``) of the shown instances of ``range_name``."""
        code = self.range_code(range_name)
        names, order, bounds = self._instances_by_code()
        return _run_of(order, bounds, code)

    def _instances_by_code(self) -> tuple[RangeNames, np.ndarray, np.ndarray]:
        """The shown ranges in order of name code, then index, and where each code's run
        begins: every name's instances from one sort (``diff`` asks for each name)."""
        names = self.names()
        def make() -> tuple[RangeNames, np.ndarray, np.ndarray]:
            # held for the question: 4 bytes a shown range with a name
            order, bounds = runs_by_code(names.code, len(names.names), keep=self.shown(),
                                         alloc=held)
            return names, order, bounds
        return self._once(("instances", id(names)), make)

    def kernels_in(self, range_name: str | None) -> np.ndarray:
        """Indices of the kernels launched inside (shown instances of) ``range_name``, each
        once; None: every kernel."""
        k = self.kernels
        assert k is not None
        if range_name is None:
            return np.arange(len(k))
        self.need_ranges(range_name)
        p = self.pairs("all")
        inst = np.zeros(len(self.ranges or ()), dtype=bool)
        inst[self.instances_of(range_name)] = True
        return sorted_unique(p.kernel_idx[inst[p.range_idx]])

    def kernels_in_ranges(self) -> np.ndarray:
        """Which kernels' launch lies in some NVTX range (a mask: not those without a launch
        row)."""
        k = self.kernels
        assert k is not None
        inside = np.zeros(len(k), dtype=bool)
        if self.ranges is not None:
            inside[self.pairs("all").kernel_idx] = True
        return inside

    def instance_gpu_ns(self, range_name: str, attribution: str = "innermost") -> np.ndarray:
        """GPU time of the kernels attributed to each shown instance of ``range_name`` (0 for
        an instance without kernels). ``innermost``: the range's own time."""
        k = self.kernels
        assert k is not None
        inst = self.instances_of(range_name)
        p = self.pairs(attribution)
        order, bounds = self._pairs_by_code(attribution)
        code = self.range_code(range_name)
        mine = _run_of(order, bounds, code)  # its pairs, in pair order
        rows = p.range_idx[mine]
        pos = np.minimum(np.searchsorted(inst, rows), max(inst.size - 1, 0))
        shown = inst[pos] == rows if inst.size else np.zeros(rows.size, dtype=bool)
        kernel = p.kernel_idx[mine[shown]]
        out = np.bincount(pos[shown], weights=k.end[kernel] - k.start[kernel],
                          minlength=inst.size).astype(np.int64)
        let_go_fields(p, k)  # what the gathers mapped of the pairs and the kernels
        return out

    def _pairs_by_code(self, attribution: str) -> tuple[np.ndarray, np.ndarray]:
        """The pairs of ``attribution`` in order of their range's name code (then pair
        order), and where each code's run begins: every name's pairs from one sort, held
        for the last attribution asked (``diff`` asks for each name; the pairs' length, not
        a value per range)."""
        names = self.names()
        memo = self._memo.get("pairs by code")
        if memo is None or memo[0] != (attribution, id(names)):
            code = gather(names.code, self.pairs(attribution).range_idx)  # windowed
            order, bounds = runs_by_code(code, len(names.names), alloc=held)
            del code
            memo = ((attribution, id(names)), names, order, bounds)
            self._memo["pairs by code"] = memo
        return memo[2], memo[3]

    def instance_cpu_ns(self, range_name: str) -> np.ndarray:
        """CPU duration of each shown instance of ``range_name``."""
        r = self.ranges
        assert r is not None
        return (r.end - r.start)[self.instances_of(range_name)]


def _run_of(order: np.ndarray, bounds: np.ndarray, code: int) -> np.ndarray:
    """Code ``code``'s run of ``order`` (``runs_by_code``), copied out: the order is in a
    scratch file (``cache.held``), whose pages are let go once read."""
    view = order[bounds[code]:bounds[code + 1]]
    out = np.array(view)
    let_go(view)
    return out
