"""Files of a micro-benchmark run: JSON and CSV rows and the scaling plots.

``write_micro_outputs(kind, rows, columns, out_dir)`` writes ``KIND_STAMP.json``/``.csv`` and:

- matmul: ``matmul_STAMP.png``: time per product against dimension (log-log, the fitted power
  law dashed, its exponent in the legend) and the achieved TFLOP/s;
- mlp: ``mlp_STAMP_PARAM.png`` per scaled parameter: time per sample (num_steps forward +
  backward passes) against the parameter's value, with the fit.

Only ``ok`` rows are plotted; one line per precision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nvtx_model.micro_config import fit_exponent
from profile_cli.model_results import plots
from profile_cli.model_results.infer_files import unique_base
from reports.render import rows_to_json, to_csv

MLP_TITLES = {"num_steps": "steps", "num_layers": "layers", "batch_size": "batch size",
              "dim": "width (dim)"}


def exponent_sentences(rows: list[dict[str, Any]], series_keys: tuple[str, ...],
                       x: str) -> list[str]:
    """One sentence per series: 'fitted exponent (time ~ dim^k): fp32 2.91'."""
    seen: dict[tuple, Any] = {}
    for r in rows:
        seen.setdefault(tuple(r.get(k) for k in series_keys), r.get("exponent"))
    parts = [f"{' '.join(str(k) for k in key)} "
             f"{'n/a (fewer than 2 ok points)' if e is None else f'{e:.2f}'}"
             for key, e in seen.items()]
    return [f"fitted exponent k of time ~ {x}^k (least squares on log-log): " + "; ".join(parts)]


def _series(rows: list[dict[str, Any]], x: str, precision_colors: dict[str, str]
            ) -> list[plots.Series]:
    out = []
    for precision in sorted({r["precision"] for r in rows}):
        pts = sorted((r[x], r["mean_s"], r.get("std_s")) for r in rows
                     if r["precision"] == precision and r.get("status") == "ok"
                     and r.get("mean_s"))
        if not pts:
            continue
        xs, ys = [p[0] for p in pts], [p[1] for p in pts]
        fit = fit_exponent(xs, ys)
        label = precision + (f": exponent {fit[0]:.2f}" if fit else "")
        out.append(plots.Series(label=label, xs=xs, ys=ys, errors=[p[2] for p in pts],
                                color=precision_colors[precision], fit=fit))
    return out


def _colors(rows: list[dict[str, Any]]) -> dict[str, str]:
    """The same colour for a precision in every micro plot."""
    from nvtx_model.config import PRECISIONS

    return {p: plots.SERIES_COLORS[i] for i, p in enumerate(PRECISIONS)}


def matmul_plot(rows: list[dict[str, Any]], path: Path) -> Path | None:
    ok = [r for r in rows if r.get("status") == "ok" and r.get("mean_s")]
    if not ok:
        return None
    colors = _colors(rows)
    dims = sorted({r["dim"] for r in ok})
    scale, unit = plots.time_unit([r["mean_s"] for r in ok])
    time_panel = plots.LinePanel(title="time per product", series=_series(ok, "dim", colors),
                                 x_title="dimension n (n x n @ n x n)",
                                 y_title=f"time ({unit})", x_ticks=dims, y_scale=scale)
    rate = [plots.Series(label=p, color=colors[p],
                         xs=[r["dim"] for r in sorted(ok, key=lambda r: r["dim"])
                             if r["precision"] == p],
                         ys=[r["tflops"] for r in sorted(ok, key=lambda r: r["dim"])
                             if r["precision"] == p])
            for p in sorted({r["precision"] for r in ok})]
    rate_panel = plots.LinePanel(title="achieved TFLOP/s (2 n^3 / time)", series=rate,
                                 x_title="dimension n", y_title="TFLOP/s", x_ticks=dims,
                                 log_y=False)
    device = ok[0].get("device_name") or ok[0].get("device")
    return plots.line_plot(path, [time_panel, rate_panel],
                           f"Square matmul on {device}: time and throughput vs dimension")


def mlp_plots(rows: list[dict[str, Any]], base: Path) -> list[Path]:
    ok = [r for r in rows if r.get("status") == "ok" and r.get("mean_s")]
    colors = _colors(rows)
    out = []
    for param in dict.fromkeys(r["param"] for r in ok):
        members = [r for r in ok if r["param"] == param]
        values = sorted({r["value"] for r in members})
        scale, unit = plots.time_unit([r["mean_s"] for r in members])
        first = members[0]
        fixed = ", ".join(f"{MLP_TITLES[k]} {first[k]}" for k in MLP_TITLES if k != param)
        panel = plots.LinePanel(
            title=f"others fixed: {fixed}", series=_series(members, "value", colors),
            x_title=MLP_TITLES[param],
            y_title=(f"time of all steps ({unit})" if param == "num_steps" else
                     f"time of {first['num_steps']} step{'s' if first['num_steps'] > 1 else ''}"
                     f" ({unit})"),
            x_ticks=values, y_scale=scale)
        out.append(plots.line_plot(
            Path(f"{base}_{param}.png"), [panel],
            f"MLP (Linear + GELU) forward + backward: time vs {MLP_TITLES[param]}"))
    return out


def write_micro_outputs(kind: str, rows: list[dict[str, Any]], columns: list[str],
                        out_dir: Path, *, stamp: str | None = None) -> list[Path]:
    """Write ``kind`` (matmul or mlp) rows as JSON and CSV and their plots; the paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    base = unique_base(out_dir, kind, stamp)
    json_path, csv_path = Path(f"{base}.json"), Path(f"{base}.csv")
    json_path.write_text(rows_to_json(rows, columns),
                         encoding="utf-8")
    csv_path.write_text(to_csv(rows, columns), encoding="utf-8")
    files = [json_path, csv_path]
    if kind == "matmul":
        p = matmul_plot(rows, Path(f"{base}.png"))
        files += [p] if p else []
    else:
        files += mlp_plots(rows, base)
    return files
