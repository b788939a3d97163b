"""The report page of one export: headline answers per range, where the GPU time goes, the
attention FLOPs against runtime, top kernels, the forward vs step mix, memory operations and
the export's metadata. Everything comes from one ``ExportAnalysis`` (one load for the page).

The forward vs step mix is ``compare``'s category rows (``forward_vs_step``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from nsys_parsers.errors import BadOption, MissingData, RangeNotFound
from nvtx_model import nvtx_ranges as nv
from reports.attention import (
    ATTENTION_VIEW,
    SUB_RANGES,
    AttentionShape,
    export_attention,
)
from reports.dominant import DOMINANT_VIEW, model_order, sentence
from reports.kernel_summary import KERNEL_VIEW
from reports.memops import MEMOPS_VIEW
from reports.page import Block, Facts, Figure, Page, Section, Sentences, Table, Text
from reports.range_summary import RANGE_VIEW
from reports.render import View, human_ns, shorten
from reports.sidecar import config_line

OTHER_RANGES = 10  # ranges in the headline of an export that is not this project's model


def forward_vs_step(analysis: Any, names: list[str]) -> list[dict[str, Any]]:
    """Category rows of ``compare --range forward --vs-range step`` (both must exist):
    category, forward_pct, step_pct, change_pct (step minus forward, percentage points)."""
    from reports.compare import compare_sides, side_of

    if nv.FORWARD not in names or nv.STEP not in names:
        return []
    report = compare_sides(side_of(analysis, nv.FORWARD, nv.FORWARD),
                           side_of(analysis, nv.STEP, nv.STEP))
    return [{"category": r["key"], "forward_pct": r["a_share_pct"] or 0.0,
             "step_pct": r["b_share_pct"] or 0.0, "change_pct": r["delta_share_pct"]}
            for r in report.rows if r["level"] == "category"]


def headline_ranges(names: list[str], gpu_ns: dict[str, float]) -> list[str]:
    """The ranges a page leads with: this project's model ranges in nesting order (step >
    forward > ... > attention internals) when the export is of its model, else the
    OTHER_RANGES ranges with the most time."""
    order = model_order(names)
    if order:
        return sorted(order, key=order.__getitem__)
    return sorted(names, key=lambda n: (-gpu_ns.get(n, 0.0), n))[:OTHER_RANGES]


def export_page(analysis: Any, *, label: str, sidecar: dict[str, Any] | None = None,
                shape: AttentionShape | None = None, top: int = 20,
                notes: list[str] | tuple[str, ...] = ()) -> Page:
    """The page of one export opened as ``reports.analysis.ExportAnalysis``; ``sidecar``:
    its ``nsys-mine profile`` sidecar (the config); ``shape``: attention shape options."""
    from reports import page_plots as plots

    config = (sidecar or {}).get("config")
    has_k, has_r = analysis.has_kernels, analysis.has_ranges
    info = analysis.info()
    ranges = analysis.ranges() if has_r else None
    dominant = analysis.dominant() if has_k else None
    kernels = analysis.kernels() if has_k else None

    range_rows = {r["range"]: r for r in (ranges.rows if ranges else [])}
    dom_rows = {r["range"]: r for r in (dominant.rows[1:] if dominant else [])}
    if has_k:
        gpu_ns = {n: float(r["range_kernel_ns"] or 0) for n, r in dom_rows.items()}
        names = list(dom_rows) or list(range_rows)
    else:
        gpu_ns = {n: float(r["total_ns"] or 0) for n, r in range_rows.items()}
        names = list(range_rows)
    headline = headline_ranges(names, gpu_ns)
    window = analysis.within

    lead = [f"export: {label}"]
    if config:
        lead.append(config_line(config))
    lead.append(_scope_line(window, has_k))
    page = Page(title=f"nsys-mine report: {Path(label).name}", lead=lead)

    # -- headline answers ------------------------------------------------------------------
    answers = Section("Headline answers", "headline")
    if dominant is not None:
        whole = dominant.rows[0]
        rows = [whole] + [dom_rows[n] for n in headline if n in dom_rows]
        answers.blocks.append(Sentences([sentence(r) for r in rows]))
        bars = [(r["range"], r.get("category_shares") or {}) for r in rows
                if r.get("category_shares")]
        if bars:
            answers.blocks.append(Figure(
                "category-shares", plots.category_shares_png(
                    [("(whole export)" if n is None else n, s) for n, s in bars],
                    title="Kernel categories per range (share of the range's GPU time)"),
                alt="Stacked bars: the share of each kernel category in the GPU time of "
                    "the whole export and of each headline range."))
        answers.blocks.append(Table(rows, replace(DOMINANT_VIEW, pinned=1),
                                    title="Dominant kernel per range", notes=dominant.notes,
                                    top=0))
    elif ranges is not None:
        rows = [range_rows[n] for n in headline if n in range_rows]
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
    page.sections.append(answers)

    # -- attention -------------------------------------------------------------------------
    if any(n in range_rows for n in (*SUB_RANGES, nv.SDPA)):
        page.sections.append(_attention_section(analysis, shape or AttentionShape(), sidecar))

    # -- forward vs step mix (compare) -------------------------------------------------
    mix = forward_vs_step(analysis, list(range_rows)) if has_k else []
    if mix:
        page.sections.append(Section("Forward vs step: kernel-category mix", "mix", [
            Text("Share of each kernel category in the GPU time launched inside `forward` "
                 "and inside the whole `step` (%), and the change (nsys-mine compare "
                 "--range forward --vs-range step)."),
            Table(mix, View(columns=["category", "forward_pct", "step_pct", "change_pct"],
                            noun="categories"), top=0)]))

    # -- kernels and ranges --------------------------------------------------------------
    if kernels is not None:
        page.sections.append(Section("Top kernels", "kernels", [
            Table(kernels.rows, KERNEL_VIEW, notes=kernels.notes, top=top)]))
    if ranges is not None:
        view = replace(RANGE_VIEW, rank_by=()) if model_order(list(range_rows)) else RANGE_VIEW
        rows = (sorted(ranges.rows, key=lambda r: _model_rank(r["range"]))
                if view is not RANGE_VIEW else ranges.rows)
        page.sections.append(Section("NVTX ranges", "ranges", [
            Table(rows, view, notes=ranges.notes, top=top)]))

    # -- memory operations -------------------------------------------------------------
    try:
        memops = analysis.memops()
        mem_blocks: list[Any] = [Table(memops.rows, MEMOPS_VIEW, notes=memops.notes, top=0)]
    except MissingData as exc:
        mem_blocks = [Text(str(exc))]
    page.sections.append(Section("Memory operations", "memops", mem_blocks))

    # -- metadata ----------------------------------------------------------------------
    facts: list[Block] = [Facts(_facts(info, label, sidecar))]
    page.sections.append(Section("Export", "export", facts + [Text(n) for n in notes]))
    return page


def _model_rank(name: str) -> tuple[int, str]:
    order = {n: i for i, n in enumerate(nv.HEADLINE_RANGES)}
    return order.get(name, len(order)), name


def _scope_line(window: str | None, has_kernels: bool) -> str:
    scope = (f"only what ran inside the {window!r} range" if window
             else "the whole capture")
    times = ("GPU kernel times (range times are CPU times)" if has_kernels
             else "CPU times of the NVTX ranges (no CUDA kernels)")
    return f"covers {scope}; {times}"


def _cpu_sentence(row: dict[str, Any]) -> str:
    n = int(row["instances"] or 0)
    return (f"{shorten(row['range'], 60)}: {human_ns(row['avg_ns'])} per instance (CPU time), "
            f"{n:,} instance{'s' if n != 1 else ''}, {human_ns(row['total_ns'])} in all")


def _attention_section(analysis: Any, shape: AttentionShape,
                       sidecar: dict[str, Any] | None) -> Section:
    from reports import page_plots as plots

    section = Section("Attention: runtime vs FLOPs", "attention")
    try:
        report = export_attention(analysis, shape, sidecar)
    except (BadOption, RangeNotFound) as exc:
        section.blocks.append(Text(str(exc)))
        return section
    section.blocks.append(Sentences(report.sentences))
    subs = [r for r in report.rows if r["range"] in SUB_RANGES]
    if subs and any(r["flop_pct"] is not None for r in subs):
        section.blocks.append(Figure(
            "attention", plots.attention_png(subs, title="Attention sub-ranges: FLOPs vs "
                                                         "runtime"),
            alt="Bars: each attention sub-range's share of the FLOPs next to its share of the "
                "runtime, and its achieved GFLOP/s."))
    section.blocks.append(Table(report.rows, ATTENTION_VIEW, notes=report.notes, top=0))
    return section


def _facts(info: dict[str, Any], label: str, sidecar: dict[str, Any] | None
           ) -> list[tuple[str, str]]:
    from collections import Counter

    gpus = Counter(info.get("gpus") or [])
    tables = {t: n for t, n in (info.get("tables") or {}).items()
              if n and not t.startswith("ENUM_")}
    facts = [
        ("export", label),
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
    if sidecar:
        command = sidecar.get("command")
        facts += [
            ("profiled config", config_line(sidecar.get("config") or {})),
            ("nsys command", " ".join(map(str, command)) if isinstance(command, list)
             else str(command)),
            ("python / torch", f"{sidecar.get('python')} / {sidecar.get('torch')}"),
        ]
    return facts


def report_for_export(path: Any, options: Any, shape: AttentionShape | None = None, *,
                      top: int = 20, opener: Any = None) -> Page:
    """The page of one export file: its ``profile`` sidecar read when there is one (config,
    measured steps only unless ``within`` is given), then one ``ExportAnalysis`` for it all.
    ``opener(path, options)``: a context manager giving the analysis (default: open it)."""
    from reports.analysis import ExportAnalysis
    from reports.sidecar import measured_steps, read_sidecar

    sidecar = read_sidecar(path)
    options, notes = measured_steps(options, sidecar)
    with (opener or ExportAnalysis)(path, options) as analysis:
        return export_page(analysis, label=str(path), sidecar=sidecar, shape=shape, top=top,
                           notes=notes)
