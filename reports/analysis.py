"""``ExportAnalysis``: open an export once, load what is asked for once, answer many questions.

    with ExportAnalysis("run.sqlite", within="measure") as a:
        a.ranges()          # Report: NVTX range summary (CPU + GPU time)
        a.dominant()        # Report: the dominant kernel of the export and of each range
        a.kernels(top=10)   # Report: kernel summary

Every method returns a ``reports.common.Report`` (row dicts in ``columns`` order, plus notes);
``info()`` returns one dict. Data is read lazily, at most once, with the least each question
needs (``kernels()`` alone reads only durations and names; ``nvtx_kernels()`` resolves only the
names of ranges that launched kernels). Loaded data is never modified: ``within``,
``merge_op_ids`` and the range filters make new views.

Options (``AnalysisOptions``): ``within`` keeps what ran inside instances of one range;
``merge_op_ids`` (off, on, auto) gives every call of a PyTorch operator one name
(``aten::mm, seq = 7`` -> ``aten::mm``), ``auto`` when the names look like an ``emit_nvtx``
capture; ``depth`` shows only range instances at nesting depth <= N (1 = outermost on its
thread, counted in the whole export); ``match`` shows only ranges whose name matches one of
the glob patterns. Filters choose what is shown; attribution is computed on every range.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import replace
from typing import Any

import numpy as np

from nsys_parsers.activity import Activity, cached_kernels, kernel_names_part, load_activity
from nsys_parsers.activity_reads import ActivityReads
from nsys_parsers.arrays import sorted_unique
from nsys_parsers.attribution import (
    Pairs,
    attribute,
    cache_pairs,
    cached_pairs,
    innermost,
    launching_share,
)
from nsys_parsers.cache import ExportCache
from nsys_parsers.errors import RangeNotFound
from nsys_parsers.export import Export, open_export
from nsys_parsers.kernels import KernelData, kernel_durations_part, load_kernel_durations
from nsys_parsers.names import (
    FULL_SCAN_SHARE,
    OP_ID_SUFFIX,
    PendingKeys,
    RangeNames,
    cached_range_names,
    looks_like_emit_nvtx,
    range_names,
)
from nsys_parsers.nesting import nesting_depth
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE
from nsys_parsers.window import restrict_to_range
from reports.common import Report, check_range_names
from reports.options import AnalysisOptions


class ExportAnalysis:
    """Questions about one export, under ``AnalysisOptions`` (given as an object, keywords,
    or both: keywords win)."""

    def __init__(self, export: Export | str | os.PathLike[str],
                 options: AnalysisOptions | None = None, *, reads: ActivityReads | None = None,
                 **kwargs: Any):
        """``reads``: the export's activity reads, started early (``start_activity_reads``
        on the same Export, before numpy was imported): the first load uses them."""
        from reports.categories import load_rules

        self._reads = reads  # closed by close() if no load took them
        try:
            self.options = replace(options or AnalysisOptions(), **kwargs)
            self.rules = load_rules(self.options.rules)  # a bad rules file fails before reading
        except BaseException:
            if reads is not None:
                reads.close()
            raise
        self._owned = not isinstance(export, Export)
        self.export: Export = (export if isinstance(export, Export)
                               else open_export(export, nsys=self.options.nsys))
        self._raw: Activity | None = None
        self._raw_names: RangeNames | None = None  # complete names of the raw ranges
        self._view: Activity | None = None
        self._view_rows: np.ndarray | None = None  # raw index of each view range (within)
        self._view_names: RangeNames | None = None  # complete names of the view, if known
        self._pairs: dict[str, Pairs] = {}
        self._keys: PendingKeys | None = None  # every range's name key, being read
        self._merge: bool | None = None
        self._merged: dict[int, tuple[RangeNames, RangeNames]] = {}  # names -> merged names
        self._shown: np.ndarray | None = None
        # the export's cache entry (None: --no-cache); it holds what was read and resolved
        self.cache: ExportCache | None = (ExportCache.for_export(self.export)
                                          if self.options.cache else None)

    @property
    def within(self) -> str | None:
        return self.options.within

    # -- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> ExportAnalysis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._reads is not None:  # started for a load that did not come
            self._reads.close()
            self._reads = None
        if self._keys is not None:  # read for names that were not asked for after all
            self._keys.close()
            self._keys = None
        if self.cache is not None:
            self.cache.flush()
        if self._owned:
            self.export.close()

    # -- loading (once) ------------------------------------------------------------------
    def _load(self, *, need_names: bool) -> None:
        need_names = self.options.loads_names(need_names)
        if self._raw is None:
            reads, self._reads = self._reads, None
            self._raw = load_activity(self.export, name_kind=self.options.name_kind,
                                      with_names=need_names, cache=self.cache, reads=reads)
            self._raw_names = self._raw.names
        if self._view is None:
            if self.within:  # (without NVTX ranges, restrict_to_range says so)
                names = self._complete_raw_names() if self._raw.ranges is not None else None
                self._view, self._view_names, self._view_rows = restrict_to_range(
                    self._raw, names, self.within)
            else:
                self._view, self._view_names = self._raw, self._raw_names

    def _complete_raw_names(self) -> RangeNames:
        assert self._raw is not None and self._raw.ranges is not None
        if self._raw_names is None:
            self._raw_names = range_names(self.export, self._raw.ranges, cache=self.cache,
                                          all_keys=self._take_keys())
        return self._raw_names

    @property
    def activity(self) -> Activity:
        """Kernels and ranges, restricted to ``within`` (names not necessarily resolved)."""
        self._load(need_names=False)
        assert self._view is not None
        return self._view

    def names(self, rows: np.ndarray | None = None) -> RangeNames:
        """Names of the ranges of ``activity`` (merged per operator when asked): all of
        them, or at least those at ``rows``."""
        act = self.activity
        if act.ranges is None:
            raise AssertionError("names() needs NVTX ranges; check has_ranges first")
        names = self._view_names
        if names is None:
            if rows is None:  # no `within` (it resolves every name): the view is the raw data
                names = self._view_names = self._complete_raw_names()
            else:  # likewise: the view is the raw data, whose names the cache keeps
                names = range_names(self.export, act.ranges, rows=rows, cache=self.cache,
                                    all_keys=self._take_keys())
        if not self.merges_op_ids(names):
            return names
        cached = self._merged.get(id(names))
        if cached is None or cached[0] is not names:
            cached = self._merged[id(names)] = (names, names.merged_op_ids())
        return cached[1]

    def merges_op_ids(self, names: RangeNames | None = None) -> bool:
        """Whether PyTorch operator calls are merged (``auto``: decided once, on the names)."""
        mode = self.options.merge_op_ids
        if mode != "auto":
            return mode == "on"
        if self._merge is None:
            if names is None and self.activity.ranges is None:  # no NVTX: no calls to merge
                self._merge = False
                return False
            if names is None or not names.complete:
                names = self._complete_view_names()
            self._merge = looks_like_emit_nvtx(names.names)
        return self._merge

    def _complete_view_names(self) -> RangeNames:
        self._load(need_names=True)
        if self._view_names is None:
            self._view_names = self._complete_raw_names()
        return self._view_names

    def pairs(self, attribution: str = "all", *, names_next: bool = False) -> Pairs:
        """(range, kernel) attribution pairs of ``activity`` (``all`` or ``innermost``).
        ``names_next``: the caller asks for the names of the ranges with kernels next."""
        if attribution not in self._pairs:
            act = self.activity
            assert act.kernels is not None and act.ranges is not None
            cached = self.within is None and self.cache is not None
            p = cached_pairs(self.cache, attribution, act) if cached else None
            if p is None:
                if attribution == "innermost":  # from the `all` pairs, computed once
                    p = innermost(self.pairs("all", names_next=names_next), act.ranges)
                else:
                    if names_next:
                        self._read_names_meanwhile()
                    p = attribute(act.kernels, act.ranges, attribution)
                if cached:
                    cache_pairs(self.cache, attribution, act, p)
            self._pairs[attribution] = p
        return self._pairs[attribution]

    def _read_names_meanwhile(self) -> None:
        """Start reading every range's name key (on threads of its own) while the pairs are
        computed, when the names of the ranges with kernels will come from one scan anyway:
        most ranges launch kernels (PyTorch nesting: every ancestor of a launch), as
        estimated on a sample. The scan then overlaps the attribution instead of following
        it (0.1 s of the 1.3 s of nested x30's nvtx-kernels)."""
        act = self.activity
        if (self._keys is not None or self._view_names is not None or self.within is not None
                or act.ranges is None or act.kernels is None):
            return
        if self.cache is not None and cached_range_names(self.cache, act.ranges) is not None:
            return  # names resolved before: only the missing ones are read, by rowid
        if launching_share(act.kernels, act.ranges) > FULL_SCAN_SHARE:
            self._keys = PendingKeys(self.export)

    def _take_keys(self) -> tuple[np.ndarray, list[str]] | None:
        """Every range's name keys, if their scan was started (taken: read once)."""
        keys, self._keys = self._keys, None
        return keys.result() if keys is not None else None

    def shown(self) -> np.ndarray | None:
        """Which ranges of ``activity`` the ``depth``/``match`` filters show (None: all)."""
        if not self.options.filtered:
            return None
        if self._shown is None:
            act = self.activity
            assert act.ranges is not None and self._raw is not None
            keep = np.ones(len(act.ranges), dtype=bool)
            if self.options.depth is not None:
                assert self._raw.ranges is not None
                depth = nesting_depth(self._raw.ranges)
                if self._view_rows is not None:
                    depth = depth[self._view_rows]
                keep &= depth <= self.options.depth
            if self.options.match:
                names = self.names()
                pattern = re.compile("|".join(fnmatch.translate(m) for m in self.options.match))
                ok = np.array([bool(pattern.match(n)) for n in names.names] + [False])
                keep &= ok[names.code]  # code -1 (unresolved) reads the trailing False
            self._shown = keep
        return self._shown

    def _shown_pairs(self, p: Pairs) -> Pairs:
        shown = self.shown()
        if shown is None or len(p) == 0:
            return p
        sel = shown[p.range_idx]
        return Pairs(range_idx=p.range_idx[sel], kernel_idx=p.kernel_idx[sel])

    def _filter_notes(self, noun: str = "ranges") -> list[str]:
        o = self.options
        parts = []
        if o.depth is not None:
            parts.append(f"at nesting depth <= {o.depth}")
        if o.match:
            parts.append("named like " + " or ".join(repr(m) for m in o.match))
        return [f"only {noun} {' and '.join(parts)} are shown."] if parts else []

    def merge_notes(self) -> list[str]:
        if self.options.merge_op_ids == "auto" and self.merges_op_ids():
            return ["PyTorch operator calls are grouped per operator (an emit_nvtx capture: "
                    "`aten::mm, seq = 7` counts as `aten::mm`); --merge-op-ids off lists "
                    "every call."]
        return []

    @property
    def has_kernels(self) -> bool:
        return self.export.has_table(KERNEL_TABLE)

    @property
    def has_ranges(self) -> bool:
        return self.export.has_table(NVTX_TABLE)

    # -- questions -----------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        from reports.info import export_info

        return export_info(self.export)

    def memops(self) -> Report:
        from reports.memops import memops_summary

        return memops_summary(self.export)

    def kernels(self, *, range_name: str | None = None, top: int | None = None) -> Report:
        """Kernel summary by name, of the whole export or of the kernels launched inside
        (the shown instances of) ranges named ``range_name``."""
        from reports.kernel_summary import KERNEL_COLUMNS, small_kernel_rows, summarize_kernels

        self.export.require(KERNEL_TABLE, "the kernel summary")
        if range_name is not None:
            self.export.require(NVTX_TABLE, f"kernels in range {range_name!r}")
        if range_name is None and self.within is None and self._raw is None:
            # a small export: plain Python, nothing cached; else the summary's own columns,
            # unless an earlier question cached the activity (then from there, below)
            small = small_kernel_rows(self.export, self.options.name_kind, self.rules)
            if small is None:
                cached = self._cached_activity_kernels()
                if cached is not None:
                    small = summarize_kernels(cached.names, cached.name_code, cached.duration,
                                              self.rules), list(cached.notes)
                else:
                    names, codes, durations, notes = load_kernel_durations(
                        self.export, name_kind=self.options.name_kind, cache=self.cache)
                    small = summarize_kernels(names, codes, durations, self.rules), notes
            if small is not None:
                rows, notes = small
                return Report(rows=rows[:top] if top else rows, columns=KERNEL_COLUMNS,
                              notes=notes)
        act = self.activity
        k = act.kernels
        assert k is not None
        notes = list(act.notes)
        durations, codes = k.duration, k.name_code
        if range_name is not None:
            p = self._shown_pairs(self.pairs("all"))
            rnames = self.names(rows=sorted_unique(p.range_idx))
            code = rnames.index(range_name)
            if code is None:  # no kernels in it: does it exist at all?
                check_range_names([range_name], self.names().names)
                select = np.zeros(0, dtype=np.int64)
            else:
                select = sorted_unique(p.kernel_idx[rnames.code[p.range_idx] == code])
            if select.size == 0:
                notes.append(f"no kernel was launched inside a range named {range_name!r}.")
            durations, codes = durations[select], codes[select]
            notes += self._filter_notes(f"kernels in {range_name!r} instances")
        rows = summarize_kernels(k.names, codes, durations, self.rules)
        return Report(rows=rows[:top] if top else rows, columns=KERNEL_COLUMNS, notes=notes)

    def _cached_activity_kernels(self) -> KernelData | None:
        """The kernels of the cached activity of an earlier question (nvtx-kernels, ranges,
        dominant...), for the plain kernel summary, rather than a read of the export: when
        the cache holds them with this name kind's names, but not the summary's own part
        (looked at by the parts' headers first). Only the kernels' part is mapped, not the
        ranges' (at x1200: 0.2 of 1.2 GB)."""
        c, kind = self.cache, self.options.name_kind
        if c is None or c.has(kernel_durations_part(kind)) or not c.has(kernel_names_part(kind)):
            return None  # (without this kind's names, cached_kernels would read the export)
        cached = cached_kernels(self.export, c, kind)
        return cached[0] if cached is not None else None

    def ranges(self) -> Report:
        """NVTX range summary: CPU durations (nsys nvtx_sum) and GPU time of their kernels."""
        from reports.range_summary import range_report

        self.export.require(NVTX_TABLE, "the NVTX range summary")
        self._load(need_names=True)
        act = self.activity
        has_kernels = act.kernels is not None and len(act.kernels) > 0
        pairs = self.pairs("all") if has_kernels else None
        inner = self.pairs("innermost") if has_kernels else None
        report = range_report(act, self.names(), pairs, shown=self.shown(), inner=inner)
        report.notes += self.merge_notes() + self._filter_notes()
        return report

    def nvtx_kernels(self, *, attribution: str = "all") -> Report:
        """Kernels grouped by the range that launched them (nsys nvtx_kern_sum)."""
        from reports.nvtx_kernels import nvtx_kernel_report

        self.export.require(KERNEL_TABLE, "kernels by NVTX range")
        self.export.require(NVTX_TABLE, "kernels by NVTX range")
        p = self.pairs(attribution, names_next=True)
        shown = self._shown_pairs(p)
        names = self.names(rows=sorted_unique(shown.range_idx))
        report = nvtx_kernel_report(self.activity, names, p, shown=shown)
        report.notes += self.merge_notes() + self._filter_notes()
        return report

    def dominant(self, *, range_names: list[str] | None = None,
                 attribution: str = "all") -> Report:
        """The dominant kernel of the whole export and of each (shown) range name."""
        from reports.dominant import dominant_report

        self.export.require(KERNEL_TABLE, "the dominant-kernel report")
        if range_names and not self.has_ranges:
            self.export.require(NVTX_TABLE, "per-range dominant kernels")
        self._load(need_names=True)
        act = self.activity
        if act.ranges is None:
            return dominant_report(act, None, None, range_names=None, rules=self.rules)
        if (self.options.merge_op_ids == "auto" and range_names
                and any(OP_ID_SUFFIX.search(n) for n in range_names)):
            self._merge = False  # the user asks about one call of an operator: keep calls
        names = self.names()
        report = dominant_report(act, names, self._shown_pairs(self.pairs(attribution)),
                                 range_names=range_names, attribution=attribution,
                                 rules=self.rules, instances=self._shown_instances(names),
                                 filtered=self.options.filtered)
        report.notes += self.merge_notes() + self._filter_notes()
        return report

    # -- building blocks for compare / diff / check -------------------------------------
    def _need_ranges(self, range_name: str) -> None:
        """MissingData (with the trace option that records NVTX) when the export has no NVTX
        ranges to find ``range_name`` in: a gate's rule or side names a range of an export
        traced without NVTX."""
        if self.activity.ranges is None:
            self.export.require(NVTX_TABLE, f"NVTX range {range_name!r}")
            raise RangeNotFound(f"no NVTX range named {range_name!r}: the export holds no "
                                f"NVTX ranges.")

    def range_code(self, range_name: str) -> int:
        """The name code of ``range_name`` (RangeNotFound with the closest names if absent;
        MissingData when the export has no NVTX ranges)."""
        self._need_ranges(range_name)
        names = self.names()
        code = names.index(range_name)
        if code is None:
            check_range_names([range_name], names.names)
            raise AssertionError("unreachable")
        return code

    def instances_of(self, range_name: str) -> np.ndarray:
        """Indices (into ``activity.ranges``) of the shown instances of ``range_name``."""
        self._need_ranges(range_name)
        names = self.names()
        mask = names.code == self.range_code(range_name)
        shown = self.shown()
        if shown is not None:
            mask &= shown
        return np.flatnonzero(mask)

    def kernels_in(self, range_name: str | None) -> np.ndarray:
        """Indices of the kernels launched inside (shown instances of) ``range_name``, each
        once; ``None``: every kernel."""
        k = self.activity.kernels
        assert k is not None
        if range_name is None:
            return np.arange(len(k))
        self._need_ranges(range_name)
        p = self.pairs("all")
        inst = np.zeros(len(self.activity.ranges or ()), dtype=bool)
        inst[self.instances_of(range_name)] = True
        return sorted_unique(p.kernel_idx[inst[p.range_idx]])

    def kernels_outside_ranges(self) -> np.ndarray:
        """Indices of the kernels whose launch lies in no NVTX range (or has no launch row)."""
        k = self.activity.kernels
        assert k is not None
        inside = np.zeros(len(k), dtype=bool)
        if self.activity.ranges is not None:
            inside[self.pairs("all").kernel_idx] = True
        return np.flatnonzero(~inside)

    def instance_gpu_ns(self, range_name: str, attribution: str = "innermost") -> np.ndarray:
        """GPU time of the kernels attributed to each shown instance of ``range_name`` (one
        value per instance, 0 for an instance without kernels). ``innermost`` (default):
        time of the range itself, not of the ranges nested in it."""
        k = self.activity.kernels
        assert k is not None
        inst = self.instances_of(range_name)
        pos = np.full(len(self.activity.ranges or ()), -1, dtype=np.int64)
        pos[inst] = np.arange(inst.size)
        p = self.pairs(attribution)
        sel = pos[p.range_idx] >= 0
        return np.bincount(pos[p.range_idx[sel]], weights=k.duration[p.kernel_idx[sel]],
                           minlength=inst.size).astype(np.int64)

    def instance_cpu_ns(self, range_name: str) -> np.ndarray:
        """CPU duration of each shown instance of ``range_name``."""
        r = self.activity.ranges
        assert r is not None
        inst = self.instances_of(range_name)
        return (r.end - r.start)[inst]

    def _shown_instances(self, names: RangeNames) -> np.ndarray:
        """Shown instances per range name code."""
        code = names.code
        shown = self.shown()
        if shown is not None:
            code = code[shown]
        return np.bincount(code[code >= 0], minlength=len(names.names))
