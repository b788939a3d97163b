"""``ExportAnalysis``: open an export once, load what is asked for once, answer many questions.

    with ExportAnalysis("run.sqlite", within="measure") as a:
        a.ranges()          # Report: NVTX range summary (CPU + GPU time)
        a.dominant()        # Report: the dominant kernel of the export and of each range
        a.kernels(top=10)   # Report: kernel summary

Every method returns a ``reports.common.Report`` (row dicts in ``columns`` order, plus notes);
``info()`` returns one dict. Data is read lazily, at most once, with the least each question
needs (``kernels()`` alone reads only durations and names; ``nvtx_kernels()`` resolves only the
names of ranges that launched kernels). Loaded data is never modified: ``within`` and
``merge_op_ids`` make new views.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from nsys_parsers.activity import Activity, load_activity
from nsys_parsers.arrays import sorted_unique
from nsys_parsers.attribution import Pairs, attribute
from nsys_parsers.export import Export, open_export
from nsys_parsers.kernels import load_kernel_durations
from nsys_parsers.names import RangeNames, range_names
from nsys_parsers.schema import KERNEL_TABLE, NVTX_TABLE
from nsys_parsers.window import restrict_to_range
from reports.common import Report, check_range_names


class ExportAnalysis:
    """Questions about one export. ``within``: only what ran inside instances of that range;
    ``merge_op_ids``: one name per PyTorch operator (``aten::mm, seq = 7`` -> ``aten::mm``)
    in every range name; ``name_kind``: kernel names short, demangled or mangled; ``rules``: a
    TOML file of extra kernel-category rules."""

    def __init__(self, export: "Export | str | os.PathLike[str]", *, within: str | None = None,
                 merge_op_ids: bool = False, name_kind: str = "demangled",
                 rules: "str | os.PathLike[str] | None" = None, nsys: str | None = None):
        from reports.categories import load_rules

        self.rules = load_rules(rules)  # a bad rules file fails before any reading
        self._owned = not isinstance(export, Export)
        self.export = open_export(export, nsys=nsys) if self._owned else export
        self.within = within
        self.merge_op_ids = merge_op_ids
        self.name_kind = name_kind
        self._raw: Activity | None = None
        self._raw_names: RangeNames | None = None  # complete names of the raw ranges
        self._view: Activity | None = None
        self._view_names: RangeNames | None = None  # complete names of the view, if known
        self._pairs: dict[str, Pairs] = {}

    # -- lifetime ------------------------------------------------------------------------
    def __enter__(self) -> "ExportAnalysis":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owned:
            self.export.close()

    # -- loading (once) ------------------------------------------------------------------
    def _load(self, *, need_names: bool) -> None:
        if self._raw is None:
            self._raw = load_activity(self.export, name_kind=self.name_kind,
                                      with_names=need_names or self.within is not None)
            self._raw_names = self._raw.names
        if self._view is None:
            if self.within:
                names = self._complete_raw_names()
                self._view, self._view_names = restrict_to_range(self._raw, names, self.within)
            else:
                self._view, self._view_names = self._raw, self._raw_names

    def _complete_raw_names(self) -> RangeNames:
        assert self._raw is not None
        if self._raw_names is None:
            if self._raw.ranges is None:
                raise AssertionError("no ranges")
            self._raw_names = range_names(self.export, self._raw.ranges)
        return self._raw_names

    @property
    def activity(self) -> Activity:
        """Kernels and ranges, restricted to ``within`` (names not necessarily resolved)."""
        self._load(need_names=False)
        assert self._view is not None
        return self._view

    def names(self, rows: np.ndarray | None = None) -> RangeNames:
        """Names of the ranges of ``activity``: all of them, or at least those at ``rows``."""
        act = self.activity
        if act.ranges is None:
            raise AssertionError("names() needs NVTX ranges; check has_ranges first")
        names = self._view_names
        if names is None:
            if rows is None:  # no `within` (it resolves every name): the view is the raw data
                names = self._view_names = self._complete_raw_names()
            else:
                names = range_names(self.export, act.ranges, rows=rows)
        return names.merged_op_ids() if self.merge_op_ids else names

    def pairs(self, attribution: str = "all") -> Pairs:
        """(range, kernel) attribution pairs of ``activity`` (``all`` or ``innermost``)."""
        if attribution not in self._pairs:
            act = self.activity
            assert act.kernels is not None and act.ranges is not None
            self._pairs[attribution] = attribute(act.kernels, act.ranges, attribution)
        return self._pairs[attribution]

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
        ranges named ``range_name``."""
        from reports.kernel_summary import KERNEL_COLUMNS, summarize_kernels

        self.export.require(KERNEL_TABLE, "the kernel summary")
        if range_name is not None:
            self.export.require(NVTX_TABLE, f"kernels in range {range_name!r}")
        if range_name is None and self.within is None and self._raw is None:
            names, codes, durations, notes = load_kernel_durations(self.export,
                                                                   name_kind=self.name_kind)
            rows = summarize_kernels(names, codes, durations, self.rules)
            return Report(rows=rows[:top] if top else rows, columns=KERNEL_COLUMNS, notes=notes)
        act = self.activity
        k = act.kernels
        assert k is not None
        notes = list(act.notes)
        durations, codes = k.duration, k.name_code
        if range_name is not None:
            p = self.pairs("all")
            names = self.names(rows=sorted_unique(p.range_idx))
            code = names.index(range_name)
            if code is None:  # no kernels in it: does it exist at all?
                check_range_names([range_name], self.names().names)
                select = np.zeros(0, dtype=np.int64)
            else:
                select = sorted_unique(p.kernel_idx[names.code[p.range_idx] == code])
            if select.size == 0:
                notes.append(f"no kernel was launched inside a range named {range_name!r}.")
            durations, codes = durations[select], codes[select]
        rows = summarize_kernels(k.names, codes, durations, self.rules)
        return Report(rows=rows[:top] if top else rows, columns=KERNEL_COLUMNS, notes=notes)

    def ranges(self) -> Report:
        """NVTX range summary: CPU durations (nsys nvtx_sum) and GPU time of their kernels."""
        from reports.range_summary import range_report

        self.export.require(NVTX_TABLE, "the NVTX range summary")
        self._load(need_names=True)
        act = self.activity
        pairs = self.pairs("all") if act.kernels is not None and len(act.kernels) else None
        return range_report(act, self.names(), pairs)

    def nvtx_kernels(self, *, attribution: str = "all") -> Report:
        """Kernels grouped by the range that launched them (nsys nvtx_kern_sum)."""
        from reports.nvtx_kernels import nvtx_kernel_report

        self.export.require(KERNEL_TABLE, "kernels by NVTX range")
        self.export.require(NVTX_TABLE, "kernels by NVTX range")
        p = self.pairs(attribution)
        names = self.names(rows=sorted_unique(p.range_idx))
        return nvtx_kernel_report(self.activity, names, p)

    def dominant(self, *, range_names: list[str] | None = None,
                 attribution: str = "all") -> Report:
        """The dominant kernel of the whole export and of each range name."""
        from reports.dominant import dominant_report

        self.export.require(KERNEL_TABLE, "the dominant-kernel report")
        if range_names and not self.has_ranges:
            self.export.require(NVTX_TABLE, "per-range dominant kernels")
        self._load(need_names=True)
        act = self.activity
        if act.ranges is None:
            return dominant_report(act, None, None, range_names=None, rules=self.rules)
        return dominant_report(act, self.names(), self.pairs(attribution),
                               range_names=range_names, attribution=attribution,
                               rules=self.rules)
