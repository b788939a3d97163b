"""The sections of one export's page, in page order (``SECTIONS``), each drawn from answers:
``PageContext.answer`` asks an analysis once for the whole page (``reports.pipeline.ask``),
its view is the declaration's (``PageContext.view``). Nothing here computes an analysis."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from nsys_parsers.errors import BadOption, MissingData, RangeNotFound
from nvtx_model import nvtx_ranges as nv
from reports.model_ranges import headline_ranges
from reports.page import plots
from reports.page.model import Block, Facts, Figure, Section, Sentences, Table, Text
from reports.pipeline.ask import answer
from reports.pipeline.registry import get
from reports.pipeline.report import Report
from reports.pipeline.session import Session
from reports.render import TREE_INDENT, View, human_ns, shorten
from reports.sidecar import config_line

ATTENTION_ROWS = (nv.ATTENTION_SCORES, nv.SOFTMAX, nv.FINAL_MATMUL, nv.SDPA)
TREE_ROWS = 40  # ranges in the page's plot of the module tree


@dataclass
class PageContext:
    """What the sections of one export's page are made from: the session, the export's
    label, its ``profile`` sidecar (None if it has none), the attention shape (``attention``'s
    parameters by name), how many rows the tables show, and notes about how the export was
    read."""

    session: Session
    label: str
    sidecar: dict[str, Any] | None = None
    shape: dict[str, Any] = field(default_factory=dict)
    top: int = 20
    notes: list[str] = field(default_factory=list)
    _answers: dict[tuple[str, tuple[Any, ...]], Report] = field(default_factory=dict)

    def answer(self, name: str, **params: Any) -> Report:
        """The analysis ``name``'s answer to ``params``, asked once for the page."""
        key = (name, tuple(sorted(params.items())))
        if key not in self._answers:
            self._answers[key] = answer(self.session, name, **params)
        return self._answers[key]

    def view(self, name: str, report: Report | None = None) -> View:
        """How people see the answer of ``name`` (``report``: that answer, a tree maybe)."""
        a = get(name)
        view = a.view_of(report, {}) if report is not None else a.view
        assert view is not None
        return view

    @property
    def has_kernels(self) -> bool:
        return self.session.has_kernels

    @property
    def has_ranges(self) -> bool:
        return self.session.has_ranges

    def range_rows(self) -> dict[str, dict[str, Any]]:
        """The NVTX range summary's rows by range name ({} without NVTX)."""
        ranges = self.answer("ranges") if self.has_ranges else None
        return {r["range"]: r for r in (ranges.rows if ranges else [])}


def headline_section(ctx: PageContext) -> list[Section]:
    """The page's first section: the dominant kernel of the export and of the headline
    ranges (CPU times of the ranges without kernels)."""
    range_rows = ctx.range_rows()
    dominant = ctx.answer("dominant") if ctx.has_kernels else None
    said = dict(zip(map(id, dominant.rows), dominant.sentences)) if dominant else {}
    dom_rows = {r["range"]: r for r in (dominant.rows[1:] if dominant else [])}
    if ctx.has_kernels:
        gpu_ns = {n: float(r["range_kernel_ns"] or 0) for n, r in dom_rows.items()}
        names = list(dom_rows) or list(range_rows)
    else:
        gpu_ns = {n: float(r["total_ns"] or 0) for n, r in range_rows.items()}
        names = list(range_rows)
    chosen = headline_ranges(names, gpu_ns)
    answers = Section("Headline answers", "headline")
    if dominant is not None:
        rows = [dominant.rows[0]] + [dom_rows[n] for n in chosen if n in dom_rows]
        # one line per row, as the answer says it (a module tree's indentation left out)
        answers.blocks.append(Sentences([said[id(r)].lstrip(TREE_INDENT[0]) for r in rows]))
        bars = [(r["range"], r.get("category_shares") or {}) for r in rows
                if r.get("category_shares")]
        if bars:
            answers.blocks.append(Figure(
                "category-shares", plots.category_shares_png(
                    [("(whole export)" if n is None else n, s) for n, s in bars],
                    title="Kernel categories per range (share of the range's GPU time)"),
                alt="Stacked bars: the share of each kernel category in the GPU time of "
                    "the whole export and of each headline range."))
        answers.blocks.append(Table(rows, ctx.view("dominant"),
                                    title="Dominant kernel per range", notes=dominant.notes,
                                    top=0))
    elif range_rows:
        rows = [range_rows[n] for n in chosen if n in range_rows]
        answers.blocks.append(Sentences([_cpu_sentence(r) for r in rows]))
        if rows:
            answers.blocks.append(Figure(
                "range-times", plots.range_times_png(
                    [(r["range"], float(r["avg_ns"] or 0)) for r in rows],
                    title="Time per range instance (CPU time of the NVTX range)",
                    xlabel="CPU time per instance (ms)"),
                alt="Horizontal bars: the CPU time per instance of each headline range."))
        answers.blocks.append(Text("No CUDA kernels in this export: the times are CPU times "
                                   "of the NVTX ranges."))
    else:
        answers.blocks.append(Text("This export has neither CUDA kernels nor NVTX ranges."))
    return [answers]


def _cpu_sentence(row: dict[str, Any]) -> str:
    n = int(row["instances"] or 0)
    return (f"{shorten(row['range'], 60)}: {human_ns(row['avg_ns'])} per instance (CPU time), "
            f"{n:,} instance{'s' if n != 1 else ''}, {human_ns(row['total_ns'])} in all")


def module_tree_section(ctx: PageContext) -> list[Section]:
    """The module tree (none without module ranges): each module's ranges in tree order with
    their GPU time, its share of all the GPU time and the dominant kernel (without kernels:
    CPU time per instance)."""
    if not ctx.has_ranges or ctx.session.module_tree() is None:
        return []
    section = Section("Module tree", "modules")
    order = ("a module's forward range, then its backward range, then its submodules; "
             "siblings by")
    if ctx.has_kernels:
        report = ctx.answer("dominant")
        whole = float(report.rows[0]["range_kernel_ns"] or 0)
        rows = [{**r, "gpu_share_pct": round(100.0 * r["range_kernel_ns"] / whole, 1)
                 if whole else None} for r in report.rows[1:] if r.get("depth") is not None]
        section.blocks.append(Text(
            f"The ranges --nvtx modules added, as the model's module tree ({order} GPU "
            f"time). GPU time: of the kernels launched inside a module's ranges, its "
            f"submodules' included; % of all: of the GPU time of every kernel; the dominant "
            f"kernel and its share of the module's GPU time."))
        bars = [(r["range"], r["depth"] - rows[0]["depth"], r["gpu_share_pct"] or 0.0,
                 r["category"], f"{r['gpu_share_pct'] or 0:g}%  "
                 f"{shorten(r['kernel'] or 'no kernels', 44, signature=True)}")
                for r in rows[:TREE_ROWS]]
        xlabel = "share of all GPU kernel time (%)"
        tree = ctx.view("dominant", report)
        view = replace(tree, columns=[
            "range", "range_kernel_ns", "gpu_share_pct", "share_pct", "per_range_instance",
            "category", "kernel"], headers={
            **tree.headers, "range_kernel_ns": "gpu time", "gpu_share_pct": "% of all",
            "share_pct": "dominant %"})
    else:
        report = ctx.answer("ranges")
        rows = [r for r in report.rows if r.get("depth") is not None]
        section.blocks.append(Text(
            f"The ranges --nvtx modules added, as the model's module tree ({order} CPU time: "
            f"this export has no CUDA kernels, so no dominant kernel either)."))
        bars = [(r["range"], r["depth"] - rows[0]["depth"], float(r["med_ns"] or 0) / 1e6, None,
                 f"{human_ns(r['med_ns'])} x {r['instances']:,}") for r in rows[:TREE_ROWS]]
        xlabel = "median CPU time per instance (ms)"
        view = replace(ctx.view("ranges", report), columns=[
            "range", "instances", "avg_ns", "med_ns", "total_ns"], hide_if_constant=())
    if not rows:
        return []
    more = f" (the first {TREE_ROWS} of {len(rows)})" if len(rows) > TREE_ROWS else ""
    section.blocks.append(Figure("module-tree", plots.module_tree_png(
        bars, title=f"Module tree{more}", xlabel=xlabel),
        alt="Horizontal bars, one per module range in tree order (names indented by level): "
            + ("its share of all GPU kernel time, coloured by its dominant kernel's category."
               if ctx.has_kernels else "its median CPU time per instance.")))
    section.blocks.append(Table(rows, view, notes=report.notes, top=ctx.top))
    return [section]


def gpus_section(ctx: PageContext) -> list[Section]:
    """GPU utilization per device, and the timeline (none without GPU operations)."""
    from reports.page.timeline import timeline_figures

    if ctx.session.gpu_ops() is None:
        return []
    report = ctx.answer("gpus")
    blocks: list[Any] = [Sentences(report.sentences),
                         Table(report.rows, ctx.view("gpus"), notes=report.notes, top=0)]
    return [Section("GPU utilization", "gpus", blocks + timeline_figures(ctx.session))]


def attention_section(ctx: PageContext) -> list[Section]:
    """The attention section, when the export has attention ranges."""
    if not any(n in ctx.range_rows() for n in ATTENTION_ROWS):
        return []
    section = Section("Attention: runtime vs FLOPs", "attention")
    try:
        report = ctx.answer("attention", **ctx.shape)
    except (BadOption, RangeNotFound) as exc:
        section.blocks.append(Text(str(exc)))
        return [section]
    section.blocks.append(Sentences(report.sentences))
    subs = [r for r in report.rows if r["range"] in ATTENTION_ROWS[:3]]
    if subs and any(r["flop_pct"] is not None for r in subs):
        section.blocks.append(Figure(
            "attention", plots.attention_png(subs, title="Attention sub-ranges: FLOPs vs "
                                                         "runtime"),
            alt="Bars: each attention sub-range's share of the FLOPs next to its share of the "
                "runtime, and its achieved GFLOP/s."))
    section.blocks.append(Table(list(report.rows), ctx.view("attention"), notes=report.notes,
                                top=0))
    return [section]


def mix_section(ctx: PageContext) -> list[Section]:
    """The kernel-category mix of ``compare --range forward --vs-range step``, for exports of
    this project's model."""
    names = ctx.range_rows()
    if not ctx.has_kernels or nv.FORWARD not in names or nv.STEP not in names:
        return []
    report = ctx.answer("compare", range_a=nv.FORWARD, range_b=nv.STEP)
    mix = [{"category": r["key"], "forward_pct": r["a_share_pct"] or 0.0,
            "step_pct": r["b_share_pct"] or 0.0, "change_pct": r["delta_share_pct"]}
           for r in report.rows if r["level"] == "category"]
    if not mix:
        return []
    return [Section("Forward vs step: kernel-category mix", "mix", [
        Text("Share of each kernel category in the GPU time launched inside `forward` "
             "and inside the whole `step` (%), and the change (nsys-mine compare "
             "--range forward --vs-range step)."),
        Table(mix, View(columns=["category", "forward_pct", "step_pct", "change_pct"],
                        noun="categories"), top=0)])]


def kernels_section(ctx: PageContext) -> list[Section]:
    if not ctx.has_kernels:
        return []
    report = ctx.answer("kernels")
    return [Section("Top kernels", "kernels", [
        Table(report.rows, ctx.view("kernels"), notes=report.notes, top=ctx.top)])]


def ranges_section(ctx: PageContext) -> list[Section]:
    """The range table (as the module tree for exports with module ranges)."""
    if not ctx.has_ranges:
        return []
    report = ctx.answer("ranges")
    return [Section("NVTX ranges", "ranges", [Table(report.rows, ctx.view("ranges", report),
                                                    notes=report.notes, top=ctx.top)])]


def memops_section(ctx: PageContext) -> list[Section]:
    try:
        report = ctx.answer("memops")
        blocks: list[Block] = [Table(report.rows, ctx.view("memops"), notes=report.notes,
                                     top=0)]
    except MissingData as exc:
        blocks = [Text(str(exc))]
    return [Section("Memory operations", "memops", blocks)]


def export_section(ctx: PageContext) -> list[Section]:
    """The page's last section: what the export is."""
    info = ctx.answer("info").obj or {}
    gpus = Counter(info.get("gpus") or [])
    tables = {t: n for t, n in (info.get("tables") or {}).items()
              if n and not t.startswith("ENUM_")}
    facts = [
        ("export", ctx.label),
        ("nsys version", str(info.get("nsys_version") or "unknown")),
        ("schema version", str(info.get("schema_version") or "unknown")),
        ("GPUs", ", ".join(f"{n} x {g}" if n > 1 else g for g, n in gpus.items())
         or "none listed"),
        ("capture command", str(info.get("capture_command") or "not recorded")),
        ("capture time", str(info.get("capture_time") or "not recorded")),
        ("CUDA kernels", f"{info.get('kernel_count', 0):,}"),
        ("NVTX ranges", f"{info.get('nvtx_range_count', 0):,}"),
        ("tables with rows", ", ".join(f"{t} {n:,}" for t, n in tables.items())),
    ]
    if ctx.sidecar:
        command = ctx.sidecar.get("command")
        facts += [
            ("profiled config", config_line(ctx.sidecar.get("config") or {})),
            ("nsys command", " ".join(map(str, command)) if isinstance(command, list)
             else str(command)),
            ("python / torch", f"{ctx.sidecar.get('python')} / {ctx.sidecar.get('torch')}"),
        ]
    blocks: list[Block] = [Facts(facts)]
    return [Section("Export", "export", blocks + [Text(n) for n in ctx.notes])]


# The sections of one export's page, in order.
SECTIONS: tuple[Callable[[PageContext], list[Section]], ...] = (
    headline_section, module_tree_section, gpus_section, attention_section, mix_section,
    kernels_section, ranges_section, memops_section, export_section)
