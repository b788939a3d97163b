"""The report page of a sweep folder (``nsys-mine sweep --out-dir DIR``), from the rows of its
index (``profile_cli.runs.sweep.sweep_tables``): step time and the dominant kernel category over
size x context (one heatmap per mode, precision, attention and compile mode), forward/backward
time against context length, attention FLOPs against runtime per config, eager against
compiled runs (``--compile``: step time, kernel mix, the GPU time whole-graph launches hide),
the dominant kernel per config, and the configs that failed, ran out of memory or were
skipped, with their reasons.

Times are the NVTX ranges' wall-clock times per instance (the harness synchronizes the device
at the end of each phase, so forward/backward/step times are real on a GPU too), except in the
attention table, which uses kernel time when there are kernels.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from nsys_parsers.errors import BadOption, RangeNotFound
from nvtx_model import nvtx_ranges as nv
from reports.attention_flops import SUB_RANGES, AttentionShape, attention_rows
from reports.page.model import Figure, Page, Section, Sentences, Table, Text
from reports.pipeline.registry import get
from reports.render import View
from reports.sidecar import read_sidecar

GROUP_FIELDS = ("mode", "precision", "attention", "batch", "compile")
# What an eager run and a compiled run of one config have in common.
TWIN_FIELDS = ("size", "context", "batch", "mode", "precision", "attention", "nvtx", "device")
GRAPH_CATEGORY = "cuda graph"
COMPILE_VIEW = View(
    columns=["config", "compile", "eager_step_ns", "compiled_step_ns", "speedup",
             "eager_mix", "compiled_mix", "graph_pct"],
    noun="compiled configs", hide_if_zero=("graph_pct", "eager_mix", "compiled_mix"),
    headers={"eager_step_ns": "eager step", "compiled_step_ns": "compiled step",
             "eager_mix": "eager kernel mix", "compiled_mix": "compiled kernel mix",
             "graph_pct": "in graphs %"})
PHASES = (nv.STEP, nv.FORWARD, nv.LOSS, nv.BACKWARD, nv.OPTIMIZER)
PROBLEM_VIEW = View(columns=["config", "status", "reason"], noun="configs")
RUNS_VIEW = View(columns=["config", "size", "context", "batch", "mode", "precision",
                          "attention", "compile", "status", "wall_s"], noun="configs",
                 hide_if_constant=("size", "context", "batch", "mode", "precision",
                                   "attention", "compile", "status"))


def _group_key(run: dict[str, Any], fields: list[str]) -> tuple[Any, ...]:
    return tuple(_compile_mode(run) if f == "compile" else run.get(f) for f in fields)


def _group_title(key: tuple[Any, ...], fields: list[str]) -> str:
    names = {"batch": "batch "}

    def text(f: str, v: Any) -> str:
        if f == "compile":
            return "eager" if v == "none" else f"compile {v}"
        return f"{names.get(f, '')}{v}"
    return " · ".join(text(f, v) for f, v in zip(fields, key, strict=True)) or "all configs"


@dataclass
class _Sweep:
    """What the sections of a sweep page are made from: the runs, the label of each run
    name, the range times and the step's category mix of each run, the groups of runs that
    differ in more than size and context (``varying``: the fields that tell them apart), and
    the sizes and contexts of the heatmaps."""

    runs: list[dict[str, Any]]
    label: dict[str, str]
    times: dict[str, dict[str, dict[str, Any]]]
    step_mix: dict[str, dict[str, float]]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]]
    varying: list[str]
    sizes: list[str]
    contexts: list[int]
    has_kernels: bool


def sweep_page(runs: list[dict[str, Any]], dominant: list[dict[str, Any]],
               mix: list[dict[str, Any]], range_times: list[dict[str, Any]],
               notes: list[str], *, labels: dict[str, str], folder: str) -> Page:
    """The page of a sweep: ``runs``, ``dominant``, ``mix`` and ``range_times`` as
    ``sweep_tables`` returns them (the last three carry ``config`` labels); ``labels``: the
    label of each run name."""
    c = _sweep(runs, dominant, mix, range_times, labels)
    counts: dict[str, int] = defaultdict(int)
    for r in runs:
        counts[r["status"]] += 1
    page = Page(title=f"nsys-mine sweep report: {folder}", lead=[
        f"sweep folder: {folder}",
        f"{len(runs)} configs: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
        "times: wall-clock per NVTX range instance, measured steps only (the device is "
        "synchronized at the end of each phase)" + (
            "" if c.has_kernels else "; no CUDA kernels in these runs (CPU profiles)"),
    ])
    answers = Section("Headline answers", "headline")
    answers.blocks.append(Sentences(_sweep_sentences(runs, c.label, c.times, c.step_mix)))
    counts_note = re.compile(r"^\d+ \w+(, \d+ \w+)*$")  # said in the lead already
    answers.blocks += [Text(n) for n in notes if not counts_note.match(n)]
    page.sections += [answers, _heatmaps(c), _context_lines(c)]
    att_rows, att_notes = _attention_rows(runs, c.label, c.times)
    if att_rows or att_notes:
        view = get("attention").view
        assert view is not None
        page.sections.append(Section("Attention: runtime vs FLOPs per config", "attention", [
            Table(att_rows, replace(view, columns=["config", *view.columns]),
                  notes=att_notes, top=0)]))
    if c.has_kernels:
        page.sections.append(_dominant_section(dominant, mix))
    compiled = _compile_rows(runs, c.label, c.times, c.step_mix)
    if compiled:
        page.sections.append(_compile_section(compiled))
    problems = [{"config": c.label[r["name"]], "status": r["status"],
                 "reason": r.get("reason") or ""} for r in runs if r["status"] != "ok"]
    page.sections.append(Section("Configs that did not finish", "problems", [
        Table(problems, PROBLEM_VIEW, top=0) if problems
        else Text("Every config finished ok.")]))
    page.sections.append(Section("All configs", "configs", [
        Table([{"config": c.label[r["name"]], **r} for r in runs], RUNS_VIEW, top=0)]))
    return page


def _sweep(runs: list[dict[str, Any]], dominant: list[dict[str, Any]],
           mix: list[dict[str, Any]], range_times: list[dict[str, Any]],
           labels: dict[str, str]) -> _Sweep:
    times: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for t in range_times:
        times[t["name"]][t["range"]] = t
    step_mix: dict[str, dict[str, float]] = defaultdict(dict)
    for m in mix:
        if m["scope"] == nv.STEP:
            step_mix[m["name"]] = {k[:-4]: float(v or 0) for k, v in m.items()
                                   if k.endswith("_pct") and v}
    varying = [f for f in GROUP_FIELDS if len({_group_key(r, [f]) for r in runs}) > 1]
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = defaultdict(list)
    for r in runs:
        groups[_group_key(r, varying)].append(r)
    return _Sweep(
        runs=runs, label={r["name"]: labels.get(r["name"], r["name"]) for r in runs},
        times=times, step_mix=step_mix, groups=groups, varying=varying,
        sizes=list(dict.fromkeys(str(r["size"]) for r in runs)),
        contexts=sorted({int(r["context"]) for r in runs if r.get("context") is not None}),
        has_kernels=bool(dominant))


def _heatmaps(c: _Sweep) -> Section:
    """Per group, the step time over size x context and (with kernels) the dominant
    category of a step and its share."""
    heat = Section("Step time and dominant category over size x context", "heatmaps")
    for key, members in c.groups.items():
        title = _group_title(key, c.varying)
        cells = {(str(r["size"]), int(r["context"])): r for r in members}
        grid = [[cells.get((size, ctx)) for ctx in c.contexts] for size in c.sizes]
        heat.blocks.append(_step_time_heatmap(c, grid, title))
        if c.has_kernels:
            heat.blocks.append(_category_heatmap(c, grid, title))
    if not c.has_kernels:
        heat.blocks.append(Text("No CUDA kernels in these runs: no dominant-category heatmap "
                                "(it needs a GPU sweep)."))
    return heat


def _step_time_heatmap(c: _Sweep, grid: list[list[dict[str, Any] | None]], title: str
                       ) -> Figure:
    from reports.page import plots

    values: list[list[float | None]] = []
    texts: list[list[str]] = []
    for row in grid:
        vrow: list[float | None] = []
        trow: list[str] = []
        for run in row:
            step = c.times.get(run["name"], {}).get(nv.STEP) if run else None
            if run is None:
                vrow.append(None)
                trow.append("")
            elif run["status"] != "ok" or step is None:
                vrow.append(None)
                trow.append(run["status"] if run["status"] != "ok" else "no step")
            else:
                vrow.append(float(step["avg_ns"]) / 1e6)
                trow.append(plots.compact_ns(float(step["avg_ns"])))
        values.append(vrow)
        texts.append(trow)
    return Figure(
        f"step-time-{_slug(title)}", plots.heatmap_png(
            values, texts, c.sizes, [str(x) for x in c.contexts],
            title=f"Step time ({title})", xlabel="context length (tokens)",
            ylabel="model size", colorbar="step time (ms, log scale)"),
        alt=f"Heatmap of the step time over model size and context length ({title}); "
            f"cells of configs that did not run say why.")


def _category_heatmap(c: _Sweep, grid: list[list[dict[str, Any] | None]], title: str
                      ) -> Figure:
    from reports.page import plots

    shares: list[list[float | None]] = []
    ctext: list[list[str]] = []
    ccolor: list[list[str | None]] = []
    for row in grid:
        srow: list[float | None] = []
        krow: list[str | None] = []
        trow = []
        for run in row:
            cell = c.step_mix.get(run["name"]) if run else None
            if not cell:
                srow.append(None)
                krow.append(None)
                trow.append(run["status"] if run and run["status"] != "ok" else "")
                continue
            cat, pct = max(cell.items(), key=lambda kv: (kv[1], kv[0]))
            srow.append(pct)
            krow.append(plots.category_color(cat))
            trow.append(f"{cat}\n{pct:.0f}%")
        shares.append(srow)
        ctext.append(trow)
        ccolor.append(krow)
    present = sorted({t.split("\n")[0] for row in ctext for t in row if "\n" in t})
    return Figure(
        f"dominant-category-{_slug(title)}", plots.heatmap_png(
            shares, ctext, c.sizes, [str(x) for x in c.contexts],
            title=f"Dominant kernel category of a step and its share ({title})",
            xlabel="context length (tokens)", ylabel="model size", colors=ccolor,
            legend=plots.category_order(present)),
        alt=f"Heatmap of the dominant kernel category of a training step and its "
            f"share of the step's GPU time, over model size and context ({title}).")


def _context_lines(c: _Sweep) -> Section:
    """Forward and backward time per instance against context, per group and size."""
    from reports.page import plots

    lines = Section("Forward and backward time vs context length", "context")
    for key, members in c.groups.items():
        title = _group_title(key, c.varying)
        series = []
        for size in c.sizes:
            ok = sorted((r for r in members if str(r["size"]) == size and r["status"] == "ok"),
                        key=lambda r: int(r["context"]))
            for phase in (nv.FORWARD, nv.BACKWARD):
                pts = [(int(r["context"]), float(c.times[r["name"]][phase]["avg_ns"]) / 1e6)
                       for r in ok if phase in c.times.get(r["name"], {})]
                if pts:
                    series.append((size, phase, [p[0] for p in pts], [p[1] for p in pts]))
        if series:
            lines.blocks.append(Figure(
                f"context-{_slug(title)}", plots.lines_png(
                    series, title=f"Forward and backward time vs context ({title})",
                    xlabel="context length (tokens, log scale)",
                    ylabel="time per instance (ms, log scale)"),
                alt=f"Lines: forward (solid) and backward (dashed) time per instance against "
                    f"context length, one colour per model size ({title})."))
    if not lines.blocks:
        lines.blocks.append(Text("No finished config has forward or backward range times."))
    lines.blocks.append(Table(_phase_rows(c.runs, c.label, c.times), View(
        columns=["config", *(f"{p}_ns" for p in PHASES)], noun="configs",
        hide_if_zero=tuple(f"{p}_ns" for p in PHASES)), title="Time per phase instance",
        top=0))
    return lines


def _dominant_section(dominant: list[dict[str, Any]], mix: list[dict[str, Any]]) -> Section:
    pct = [k for k in (mix[0] if mix else {}) if k.endswith("_pct")]
    return Section("Dominant kernel per config and range", "dominant", [
        Table(dominant, View(columns=["config", "range", "share_pct", "per_range_instance",
                                      "category", "kernel"], noun="rows",
                             headers={"per_range_instance": "calls per range"}), top=0),
        Table(mix, View(columns=["config", "scope", *pct], noun="rows",
                        hide_if_zero=tuple(pct)),
              title="Kernel-category mix: forward vs the whole step (%)", top=0)])


def _compile_section(compiled: list[dict[str, Any]]) -> Section:
    """Eager vs compiled twins: sentences, step-time bars, kernel mixes, the table."""
    from reports.page import plots

    section = Section("Eager vs compiled (--compile)", "compile", [
        Sentences([_compile_sentence(r) for r in compiled])])
    bars = [(f"{r['config']}: {who}", float(r[f"{who}_step_ns"]))
            for r in compiled for who in ("eager", "compiled")]
    section.blocks.append(Figure("compile-step-time", plots.range_times_png(
        bars, title="Step time: eager vs compiled", xlabel="time per step (ms)"),
        alt="Horizontal bars: the step time of each compiled config and of its eager twin."))
    mixes = [(f"{r['config']}: {who}", r[f"_{who}_shares"]) for r in compiled
             for who in ("eager", "compiled") if r[f"_{who}_shares"]]
    if mixes:
        section.blocks.append(Figure("compile-kernel-mix", plots.category_shares_png(
            mixes, title="Kernel categories of a step: eager vs compiled (share of the "
                          "step's GPU time)"),
            alt="Stacked bars: the kernel-category mix of a step of each compiled config "
                "and of its eager twin; cuda graph is GPU time of whole-graph launches "
                "whose kernels were not recorded."))
    notes = ["speedup: eager step time / compiled step time."]
    if any(r["graph_pct"] for r in compiled):
        notes.append("in graphs: the share of the compiled step's GPU time spent in "
                     "whole-graph launches (nsys --cuda-graph-trace=graph), whose kernels "
                     "were not recorded; profile asks nsys for node-level graph traces, "
                     "which record them, where the nsys at hand can.")
    section.blocks.append(Table(compiled, COMPILE_VIEW, top=0, notes=notes))
    return section


def _compile_mode(run: dict[str, Any]) -> str:
    return run.get("compile") or "none"  # older indexes: eager


def _compile_rows(runs: list[dict[str, Any]], label: dict[str, str],
                  times: dict[str, dict[str, dict[str, Any]]],
                  step_mix: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """One row per finished compiled run that has a finished eager twin (same config
    otherwise): both step times, the speedup, both kernel mixes of a step and the share of
    the compiled step in whole-graph launches."""
    eager = {tuple(r.get(f) for f in TWIN_FIELDS): r for r in runs
             if _compile_mode(r) == "none" and r["status"] == "ok"}
    rows = []
    for r in runs:
        twin = eager.get(tuple(r.get(f) for f in TWIN_FIELDS))
        if _compile_mode(r) == "none" or r["status"] != "ok" or twin is None:
            continue
        a, b = times.get(twin["name"], {}).get(nv.STEP), times.get(r["name"], {}).get(nv.STEP)
        if a is None or b is None:
            continue
        ea, eb = step_mix.get(twin["name"], {}), step_mix.get(r["name"], {})
        rows.append({
            "config": label[twin["name"]] if label[twin["name"]] != "eager" else twin["size"],
            "compile": _compile_mode(r), "eager_step_ns": a["avg_ns"],
            "compiled_step_ns": b["avg_ns"],
            "speedup": round(a["avg_ns"] / b["avg_ns"], 2) if b["avg_ns"] else None,
            "eager_mix": _mix_text(ea), "compiled_mix": _mix_text(eb),
            "graph_pct": eb.get(GRAPH_CATEGORY, 0.0),
            "_eager_shares": ea, "_compiled_shares": eb})
    for row in rows:  # the twin's label says "eager": name the config without it
        row["config"] = re.sub(r"(^| )eager( |$)", " ", row["config"]).strip() or "config"
    return rows


def _mix_text(shares: dict[str, float], top: int = 3) -> str:
    best = sorted(shares.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    return ", ".join(f"{c} {v:g}%" for c, v in best if v > 0)


def _compile_sentence(row: dict[str, Any]) -> str:
    from reports.page.plots import compact_ns

    speed = row["speedup"]
    text = (f"{row['config']}: compile {row['compile']} "
            + (f"{speed:g}x faster" if speed and speed >= 1 else
               f"{1 / speed:.2g}x slower" if speed else "as fast")
            + f" per step than eager ({compact_ns(float(row['compiled_step_ns']))} vs "
              f"{compact_ns(float(row['eager_step_ns']))})")
    if row["eager_mix"] or row["compiled_mix"]:
        text += f"; kernels eager {row['eager_mix'] or '-'}, compiled {row['compiled_mix'] or '-'}"
    if row["graph_pct"]:
        text += (f"; {row['graph_pct']:g}% of the compiled step's GPU time ran in CUDA graph "
                 f"launches whose kernels were not recorded")
    return text


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "all"


def _phase_rows(runs: list[dict[str, Any]], label: dict[str, str],
                times: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    rows = []
    for r in runs:
        if r["status"] != "ok":
            continue
        t = times.get(r["name"], {})
        rows.append({"config": label[r["name"]],
                     **{f"{p}_ns": (t[p]["avg_ns"] if p in t else None) for p in PHASES}})
    return rows


def _attention_rows(runs: list[dict[str, Any]], label: dict[str, str],
                    times: dict[str, dict[str, dict[str, Any]]]
                    ) -> tuple[list[dict[str, Any]], list[str]]:
    rows: list[dict[str, Any]] = []
    notes: list[str] = []
    for r in runs:
        t = times.get(r["name"], {})
        if r["status"] != "ok" or not any(n in t for n in SUB_RANGES):
            continue
        sidecar = read_sidecar(r["sqlite"]) if r.get("sqlite") else None
        shape = AttentionShape().over((sidecar or {}).get("config"))
        gpu = any((x.get("gpu_inclusive_ns") or 0) > 0 for x in t.values())
        try:
            report = attention_rows(list(t.values()), shape, gpu=gpu)
        except (BadOption, RangeNotFound) as exc:
            notes.append(f"{label[r['name']]}: {exc}")
            continue
        rows += [{"config": label[r["name"]], **x} for x in report.rows
                 if x["range"] in SUB_RANGES]
        for n in report.notes[1:]:
            if n not in notes:
                notes.append(n)
    if rows:
        notes.insert(0, "time per instance: " + (
            "GPU time of the kernels launched inside each range" if rows[0]["time_source"] ==
            "gpu" else "CPU time of the ranges (no CUDA kernels)") + "; one instance = one "
            "layer's attention in one forward pass.")
    return rows, notes


def _sweep_sentences(runs: list[dict[str, Any]], label: dict[str, str],
                     times: dict[str, dict[str, dict[str, Any]]],
                     step_mix: dict[str, dict[str, float]]) -> list[str]:
    """One sentence per finished config (phase times, the forward's dominant kernel, the
    step's dominant category), then one per reason configs did not finish."""
    from reports.page.plots import compact_ns
    from reports.render import shorten

    out = []
    problems: dict[tuple[str, str], list[str]] = defaultdict(list)
    for r in runs:
        name = label[r["name"]]
        if r["status"] != "ok":
            reason = (r.get("reason") or "").strip().splitlines()
            problems[(r["status"], reason[0][:200] if reason else "")].append(name)
            continue
        t = times.get(r["name"], {})
        parts = [f"{p} {compact_ns(float(t[p]['avg_ns']))}"
                 for p in (nv.STEP, nv.FORWARD, nv.BACKWARD) if p in t]
        text = f"{name}: " + (", ".join(parts) if parts else "no step ranges")
        kernel = r.get("forward_kernel")
        if kernel:
            text += (f"; forward dominated by {shorten(kernel, 60, signature=True)} "
                     f"({r.get('forward_share_pct'):g}%)")
        m = step_mix.get(r["name"])
        if m:
            cat, pct = max(m.items(), key=lambda kv: (kv[1], kv[0]))
            text += f"; step: {cat} {pct:g}%"
        out.append(text)
    for (status, reason), names in problems.items():
        listed = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        out.append(f"{status}: {len(names)} config{'s' if len(names) != 1 else ''} ({listed})"
                   + (f": {reason}" if reason else ""))
    return out
