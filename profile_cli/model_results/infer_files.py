"""The analysis of an inference-latency run: JSON and CSV rows, plots, a markdown report.

``write_inference_outputs(rows, out_dir, context)`` writes, all named ``infer_STAMP*``:

- ``.json`` and ``.csv``: every row and column (raw seconds and bytes);
- ``_latency.png``: heatmaps of TTFT, TPOT and end-to-end latency over batch x input length;
- ``_throughput.png``: heatmaps of generated tokens/s and prefill tokens/s;
- ``_batch_scaling.png`` / ``_input_scaling.png``: TTFT, TPOT and tokens/s against batch size
  (one line per input length) and against input length (one line per batch size);
- ``_breakdown.png``: each config's latency split into prefill and decode;
- ``_memory.png``: weights + KV cache + activations (estimate) with the measured peak;
- ``_report.md``: the settings, the results table, what was skipped and why, findings, the
  plots and the metric definitions.

A run with several sizes, precisions, attentions or sampling settings gets one set of plots per
combination (the file names say which). Rows that did not end ok are grey "skipped"/"oom"
cells in the heatmaps and are left out of the other plots.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from profile_cli.model_results import plots
from reports.render import render_rows, rows_to_json, to_csv

GROUP_KEYS = ("size", "precision", "attention", "sampling")
REPORT_COLUMNS = ["size", "precision", "attention", "batch", "input_length", "output_length",
                  "prefill_s", "decode_per_token_s", "itl_p50_s", "itl_p99_s", "total_s",
                  "tokens_per_s", "peak_allocated_bytes", "rss_growth_bytes",
                  "memory_est_bytes", "status"]


@dataclass
class InferOutputs:
    files: list[Path] = field(default_factory=list)
    report: Path | None = None


def timestamp() -> str:
    return datetime.now().strftime("%Y%m%d-%H%M%S")


def unique_base(out_dir: Path, prefix: str, stamp: str | None = None) -> Path:
    """``out_dir/prefix_STAMP``, with ``-2``, ``-3`` ... when a run of the same second exists."""
    stamp = stamp or timestamp()
    base = out_dir / f"{prefix}_{stamp}"
    n = 2
    while any(out_dir.glob(base.name + "*")):
        base = out_dir / f"{prefix}_{stamp}-{n}"
        n += 1
    return base


def _groups(rows: list[dict[str, Any]]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in GROUP_KEYS), []).append(r)
    return groups


def _group_label(key: tuple, many: bool) -> tuple[str, str]:
    """(title part, file-name suffix) of a group."""
    size, precision, attention, sampling = key
    title = f"{size}, {precision}, {attention} attention, {sampling}"
    if not many:
        return title, ""
    import re

    return title, "_" + re.sub(r"[^A-Za-z0-9.]+", "-", f"{size}-{precision}-{attention}-"
                                                        f"{sampling}").strip("-")


def _ok(r: dict[str, Any]) -> bool:
    return r.get("status") == "ok"


# ---- plots ----------------------------------------------------------------------------------
def _heat(rows, metric: str, batches, inputs) -> tuple[list[list[Any]], list[list[str]]]:
    cell = {(r["batch"], r["input_length"]): r for r in rows}
    values, missing = [], []
    for b in batches:
        vrow, mrow = [], []
        for i in inputs:
            r = cell.get((b, i))
            ok = r is not None and _ok(r) and r.get(metric) is not None
            vrow.append(r[metric] if ok and r is not None else None)
            mrow.append("" if ok else ("n/a" if r is None or _ok(r) else r["status"]))
        values.append(vrow)
        missing.append(mrow)
    return values, missing


def _time_panel(rows, metric, title, batches, inputs) -> plots.HeatPanel:
    values, missing = _heat(rows, metric, batches, inputs)
    scale, unit = plots.time_unit([v for row in values for v in row])
    scaled = [[None if v is None else v / scale for v in row] for row in values]
    return plots.HeatPanel(title=f"{title} ({unit})", values=scaled,
                           x_labels=[str(i) for i in inputs], y_labels=[str(b) for b in batches],
                           x_title="input length (tokens)", y_title="batch size",
                           colorbar_label=f"{title} ({unit})", missing=missing)


def _rate_panel(rows, metric, title, batches, inputs) -> plots.HeatPanel:
    values, missing = _heat(rows, metric, batches, inputs)
    return plots.HeatPanel(title=title, values=values, x_labels=[str(i) for i in inputs],
                           y_labels=[str(b) for b in batches], x_title="input length (tokens)",
                           y_title="batch size", colorbar_label=title, missing=missing)


def _with_data(panels: list[plots.HeatPanel]) -> list[plots.HeatPanel]:
    """The panels with at least one value (TPOT has none with one output token)."""
    return [p for p in panels if any(v is not None for row in p.values for v in row)]


SCALING_METRICS = (("prefill_s", "TTFT"), ("decode_per_token_s", "TPOT"),
                   ("tokens_per_s", "throughput"))


def _scaling(path: Path, rows, *, x_key: str, line_key: str, x_title: str, line_title: str,
             title: str) -> Path | None:
    ok = [r for r in rows if _ok(r)]
    xs_all = sorted({r[x_key] for r in ok})
    if len(xs_all) < 2:
        return None
    line_values = sorted({r[line_key] for r in ok})
    colors = plots.ordinal_colors(line_values, "viridis" if line_key == "input_length"
                                  else "plasma")
    panels = []
    for metric, name in SCALING_METRICS:
        vals = [r[metric] for r in ok if r.get(metric) is not None]
        if not vals:
            continue
        if metric == "tokens_per_s":
            scale, y_title = 1.0, "generated tokens/s"
        else:
            scale, unit = plots.time_unit(vals)
            y_title = f"{name} ({unit})"
        series = []
        for lv in line_values:
            pts = sorted((r[x_key], r[metric], r.get(metric.replace("_s", "_std_s")))
                         for r in ok if r[line_key] == lv and r.get(metric) is not None)
            if pts:
                series.append(plots.Series(
                    label=str(lv), xs=[p[0] for p in pts], ys=[p[1] for p in pts],
                    errors=[p[2] for p in pts] if metric != "tokens_per_s" else None,
                    color=colors[lv]))
        panels.append(plots.LinePanel(title=name, series=series, x_title=x_title,
                                      y_title=y_title, x_ticks=xs_all, y_scale=scale))
    if not panels:
        return None
    return plots.line_plot(path, panels, title, legend_title=line_title)


def _breakdown(path: Path, rows, title: str) -> Path | None:
    ok = [r for r in rows if _ok(r) and r.get("total_s")]
    if not ok:
        return None
    scale, unit = plots.time_unit([r["total_s"] for r in ok])
    labels = [f"b{r['batch']} · in {r['input_length']}" for r in ok]
    pct = [f"prefill {100 * r['prefill_s'] / r['total_s']:.0f}%" for r in ok]
    return plots.stacked_bars(
        path, labels, {"prefill": [r["prefill_s"] for r in ok],
                       "decode": [r["decode_s"] or 0.0 for r in ok]},
        plots.PHASE_COLORS, value_title=f"latency of one generate call ({unit})",
        title=title, scale=scale, annotations=pct, label_title="batch · input length")


def _memory(path: Path, rows, title: str) -> Path | None:
    ok = [r for r in rows if _ok(r) and r.get("memory_est_bytes") is not None]
    if not ok:
        return None
    cuda = any(r.get("peak_allocated_bytes") is not None for r in ok)
    if cuda:
        measured_name = "measured: peak allocated (torch.cuda)"
        measured = [r.get("peak_allocated_bytes") for r in ok]
    else:  # the RSS growth of the runs leaves out the weights, loaded before them
        measured_name = "measured: weights + RSS growth of the runs"
        measured = [None if r.get("rss_growth_bytes") is None
                    else r["weights_bytes"] + r["rss_growth_bytes"] for r in ok]
    values = [r["memory_est_bytes"] for r in ok] + [m for m in measured if m is not None]
    scale, unit = plots.byte_unit(values)
    labels = [f"b{r['batch']} · in {r['input_length']}" for r in ok]
    stacks = {"weights": [r["weights_bytes"] for r in ok],
              "KV cache": [r["kv_cache_bytes"] for r in ok],
              "activations": [r["activations_est_bytes"] for r in ok]}
    return plots.stacked_bars(
        path, labels, stacks, plots.MEMORY_COLORS, value_title=f"memory ({unit})",
        title=title, scale=scale, markers={measured_name: measured},
        marker_colors={measured_name: plots.MEMORY_COLORS["measured"]},
        label_title="batch · input length")


def write_plots(rows: list[dict[str, Any]], base: Path) -> list[tuple[str, Path]]:
    """Every plot of the run as (caption, path)."""
    out: list[tuple[str, Path]] = []
    groups = _groups(rows)
    for key, members in groups.items():
        label, suffix = _group_label(key, len(groups) > 1)
        batches = sorted({r["batch"] for r in members})
        inputs = sorted({r["input_length"] for r in members})
        output = members[0]["output_length"]
        sub = f"{label}; {output} output token{'s' if output != 1 else ''}"
        if any(_ok(r) for r in members):
            latency = _with_data([
                _time_panel(members, "prefill_s", "TTFT", batches, inputs),
                _time_panel(members, "decode_per_token_s", "TPOT", batches, inputs),
                _time_panel(members, "total_s", "total latency", batches, inputs)])
            out.append((f"Latency over the grid ({label})", plots.heatmap(
                Path(f"{base}{suffix}_latency.png"), latency,
                f"Latency: {', '.join(p.title.split(' (')[0] for p in latency)} ({sub})")))
            out.append((f"Throughput over the grid ({label})", plots.heatmap(
                Path(f"{base}{suffix}_throughput.png"),
                [_rate_panel(members, "tokens_per_s", "generated tokens/s", batches, inputs),
                 _rate_panel(members, "prefill_tokens_per_s", "prefill input tokens/s",
                             batches, inputs)],
                f"Throughput ({sub})")))
        for name, kwargs in (
                ("batch_scaling", dict(x_key="batch", line_key="input_length",
                                       x_title="batch size", line_title="input length",
                                       title=f"Scaling with batch size ({sub})")),
                ("input_scaling", dict(x_key="input_length", line_key="batch",
                                       x_title="input length (tokens)", line_title="batch size",
                                       title=f"Scaling with input length ({sub})"))):
            p = _scaling(Path(f"{base}{suffix}_{name}.png"), members, **kwargs)
            if p is not None:
                out.append((kwargs["title"], p))
        p = _breakdown(Path(f"{base}{suffix}_breakdown.png"), members,
                       f"Prefill vs decode time ({sub})")
        if p is not None:
            out.append((f"Prefill / decode breakdown ({label})", p))
        p = _memory(Path(f"{base}{suffix}_memory.png"), members,
                    f"Memory: estimate and measured peak ({label})")
        if p is not None:
            out.append((f"Memory ({label})", p))
    return out


# ---- the report -----------------------------------------------------------------------------
def _fmt_s(value: float | None) -> str:
    from reports.render import human_ns

    return "n/a" if value is None else human_ns(value * 1e9)


def findings(rows: list[dict[str, Any]]) -> list[str]:
    """Plain statements about the measured grid (no interpretation beyond the numbers)."""
    out: list[str] = []
    for key, members in _groups(rows).items():
        ok = [r for r in members if _ok(r)]
        if not ok:
            continue
        where = ", ".join(str(k) for k in key)
        best = max(ok, key=lambda r: r["tokens_per_s"] or 0)
        fast = min(ok, key=lambda r: r["prefill_s"])
        out.append(f"{where}: highest throughput {best['tokens_per_s']:.1f} generated tokens/s "
                   f"at batch {best['batch']}, input {best['input_length']}; lowest TTFT "
                   f"{_fmt_s(fast['prefill_s'])} at batch {fast['batch']}, input "
                   f"{fast['input_length']}.")
        for fixed, vary, name in (("input_length", "batch", "batch"),
                                  ("batch", "input_length", "input length")):
            for value in sorted({r[fixed] for r in ok}):
                line = sorted((r for r in ok if r[fixed] == value), key=lambda r: r[vary])
                lo, hi = line[0], line[-1]
                if len(line) < 2 or not lo.get("decode_per_token_s") \
                        or not hi.get("decode_per_token_s"):
                    continue
                out.append(
                    f"{fixed.replace('_', ' ')} {value}: from {name} {lo[vary]} to {hi[vary]} "
                    f"({hi[vary] / lo[vary]:.0f}x): TTFT x"
                    f"{hi['prefill_s'] / lo['prefill_s']:.2g}, TPOT x"
                    f"{hi['decode_per_token_s'] / lo['decode_per_token_s']:.2g}, throughput x"
                    f"{hi['tokens_per_s'] / lo['tokens_per_s']:.2g}.")
                break  # the first fixed value says it; the plots show the rest
        shares = [100 * r["prefill_s"] / r["total_s"] for r in ok if r.get("total_s")]
        if shares:
            out.append(f"Prefill is {min(shares):.0f}% to {max(shares):.0f}% of the total "
                       "latency across the grid.")
    return out


DEFINITIONS = """\
- **TTFT** (`prefill_s`): time to first token: the prompt's forward pass and the first sample.
- **TPOT** (`decode_per_token_s`): time per output token after the first,
  `(total_s - prefill_s) / (output_length - 1)`.
- **ITL** (`itl_p50_s`, `itl_p90_s`, `itl_p99_s`): percentiles of the inter-token latencies
  (time between consecutive tokens of the decode phase), pooled over the measured runs.
- **total** (`total_s`): one generate call, end to end; `decode_s = total_s - prefill_s`.
- **throughput** (`tokens_per_s`): `batch * output_length / total_s`; `prefill_tokens_per_s`
  is `batch * input_length / prefill_s`.
- Times are means over the measured runs (after warmup), with the device synchronized after
  every token; `*_std_s` are sample standard deviations. These follow vLLM's latency and
  serving benchmarks and optimum-benchmark.
"""


def markdown_report(rows: list[dict[str, Any]], context: dict[str, Any],
                    plot_files: list[tuple[str, Path]], data_files: list[Path],
                    notes: list[str]) -> str:
    first = rows[0] if rows else {}
    lines = ["# Inference latency report", ""]
    lines += [f"- created: {context.get('created', '')}",
              f"- device: {first.get('device', '?')} ({first.get('device_name', '?')}), "
              f"threads {first.get('threads', '?')}",
              f"- model: {', '.join(sorted({str(r['size']) for r in rows}))} "
              f"({', '.join(sorted({format(r['params'], ',') for r in rows}))} parameters)",
              f"- grid: {context.get('grid_source', '?')}: batch sizes "
              f"{', '.join(map(str, sorted({r['batch'] for r in rows})))} x input lengths "
              f"{', '.join(map(str, sorted({r['input_length'] for r in rows})))}, "
              f"{first.get('output_length', '?')} output tokens",
              f"- runs: {first.get('warmup', '?')} warmup + {first.get('runs', '?')} measured "
              f"per config; sampling: {first.get('sampling', '?')}",
              f"- max_batch_input_product: {context.get('max_batch_input_product', '?'):,}"
              if isinstance(context.get("max_batch_input_product"), int)
              else "- max_batch_input_product: ?",
              f"- data: {', '.join(p.name for p in data_files)}", ""]
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "skipped", "oom")}
    planned = context.get("planned") or len(rows)
    lines += [f"{counts['ok']} of {planned} configs ran"
              + "".join(f", {n} {s}" for s, n in counts.items() if s != "ok" and n) + "."
              + (f" Interrupted (Ctrl-C) after {len(rows)} configs: the rest did not run."
                 if context.get("interrupted") else ""), ""]
    lines += ["## Results", ""]
    columns = [c for c in REPORT_COLUMNS if any(r.get(c) not in (None, "") for r in rows)]
    for fixed in ("size", "precision", "attention", "output_length"):
        if len({r.get(fixed) for r in rows}) == 1 and fixed in columns:
            columns.remove(fixed)
    lines.append(render_rows(rows, columns, "md").text or "")
    not_run = [r for r in rows if r["status"] != "ok"]
    if not_run:
        lines += ["## Not run", ""]
        lines += [f"- batch {r['batch']}, input {r['input_length']} ({r['size']}, "
                  f"{r['precision']}): {r['status']}: {r.get('note') or ''}" for r in not_run]
        lines.append("")
    found = findings(rows)
    if found:
        lines += ["## Findings", ""] + [f"- {f}" for f in found] + [""]
    if plot_files:
        lines += ["## Plots", ""]
        for caption, path in plot_files:
            lines += [f"### {caption}", "", f"![{caption}]({path.name})", ""]
    lines += ["## Definitions", "", DEFINITIONS]
    notes = [n for n in notes if not n.endswith("see the note column")]  # "Not run" says it
    if notes:
        lines += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    return "\n".join(lines).rstrip() + "\n"


def write_inference_outputs(rows: list[dict[str, Any]], columns: list[str], out_dir: Path, *,
                            context: dict[str, Any], notes: list[str],
                            stamp: str | None = None) -> InferOutputs:
    """Write the JSON, CSV, plots and markdown report of a run into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = unique_base(out_dir, "infer", stamp)
    json_path, csv_path = Path(f"{base}.json"), Path(f"{base}.csv")
    json_path.write_text(rows_to_json(rows, columns),
                         encoding="utf-8")
    csv_path.write_text(to_csv(rows, columns), encoding="utf-8")
    outputs = InferOutputs(files=[json_path, csv_path])
    plot_files = write_plots(rows, base) if rows else []
    outputs.files += [p for _, p in plot_files]
    context = {"created": datetime.now().isoformat(timespec="seconds"), **context}
    report = Path(f"{base}_report.md")
    report.write_text(markdown_report(rows, context, plot_files, [json_path, csv_path], notes),
                      encoding="utf-8")
    outputs.files.append(report)
    outputs.report = report
    return outputs
