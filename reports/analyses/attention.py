"""Attention: measured runtime next to analytic FLOPs, per attention sub-range.

The CS336 question: in the naive attention of a forward pass, how does the runtime of the
softmax compare with that of the two matmuls, and how does that difference compare with the
difference in FLOPs? For the ranges ``computing attention scores`` (``Q K^T``; the scaling
and the causal mask run inside it too, their FLOPs are not counted), ``computing softmax``
and ``final matmul`` (``P V``), and ``scaled dot product attention`` around them (or alone,
for ``sdpa``), one row each:

- the FLOPs of one instance (one layer's attention in one forward pass), from
  ``nvtx_model.config.forward_flops``: ``2 B T^2 d``, ``5 B h T^2`` and ``2 B T^2 d``;
- the measured time per instance: the GPU time of the kernels launched inside the range
  when the export has kernels, else the CPU time of the range (``time_source`` says which);
- the achieved GFLOP/s, the shares of the three sub-ranges' FLOPs and time, and the ratios
  to ``computing attention scores`` (``flop_ratio`` vs ``time_ratio``).

The model shape comes from the ``NAME.json`` sidecar that ``nsys-mine profile`` writes beside
its export, or from options (``AttentionShape``; options win).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nsys_parsers.errors import BadOption, RangeNotFound
from nsys_parsers.schema import NVTX_TABLE
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import ModelConfig, forward_flops
from reports.analysis import Analysis, Param
from reports.render import View, human_flop, human_ns
from reports.report import Report, r1
from reports.session import Session
from reports.sidecar import measured_steps, read_sidecar

SHAPE_FIELDS = ("d_model", "heads", "context", "batch")


@dataclass(frozen=True)
class AttentionShape:
    """What the FLOPs of attention depend on: d_model, heads, context and batch (``size``:
    a preset that gives d_model and heads)."""

    size: str | None = None
    d_model: int | None = None
    heads: int | None = None
    context: int | None = None
    batch: int | None = None

    def resolved(self) -> AttentionShape:
        """d_model and heads from the preset where not given."""
        if self.size is None:
            return self
        from nvtx_model.config import PRESETS, preset_name

        name = preset_name(self.size)
        if name is None:
            raise BadOption(f"--size {self.size!r} is not a preset; use one of "
                            f"{', '.join(PRESETS)} or give --d-model and --heads")
        shape = PRESETS[name]
        return replace(self, d_model=self.d_model or shape.d_model,
                       heads=self.heads or shape.num_heads)

    def over(self, config: dict[str, Any] | None) -> AttentionShape:
        """These values, else the sidecar ``config``'s (same keys)."""
        mine, config = self.resolved(), config or {}
        values: dict[str, Any] = {n: _int(config.get(n)) for n in SHAPE_FIELDS
                                  if getattr(mine, n) is None}
        return replace(mine, **values)

    @property
    def missing(self) -> list[str]:
        return [f"--{n.replace('_', '-')}" for n in SHAPE_FIELDS if getattr(self, n) is None]

    def describe(self) -> str:
        return (f"d_model {self.d_model}, {self.heads} heads, context {self.context}, "
                f"batch {self.batch}")


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


SUB_RANGES = (nv.ATTENTION_SCORES, nv.SOFTMAX, nv.FINAL_MATMUL)
# which term of forward_flops each range computes
FLOP_TERMS = {nv.ATTENTION_SCORES: ("attn_scores",), nv.SOFTMAX: ("softmax",),
              nv.FINAL_MATMUL: ("attn_value",),
              nv.SDPA: ("attn_scores", "softmax", "attn_value")}
ATTENTION_ROWS = (*SUB_RANGES, nv.SDPA)

ATTENTION_COLUMNS = ["range", "instances", "flop", "time_per_instance_ns", "time_source",
                     "achieved_gflops", "flop_pct", "time_pct", "flop_ratio", "time_ratio"]
ATTENTION_VIEW = View(
    columns=["range", "instances", "flop", "time_per_instance_ns", "achieved_gflops",
             "flop_pct", "time_pct", "flop_ratio", "time_ratio", "time_source"],
    drop=(("flop_ratio", "time_ratio"), "instances"),
    noun="ranges", hide_if_constant=("time_source",),
    hide_if_zero=("flop_ratio", "time_ratio"),
    headers={"flop": "FLOP", "achieved_gflops": "GFLOP/s", "flop_pct": "FLOP %",
             "flop_ratio": "FLOP vs scores", "time_ratio": "time vs scores"})


def flop_per_instance(shape: AttentionShape) -> dict[str, int]:
    """FLOPs of one instance of each attention range: one layer, one forward pass."""
    assert not shape.missing
    one_layer = ModelConfig(vocab_size=1, context_length=int(shape.context or 0),
                            d_model=int(shape.d_model or 0), num_layers=1,
                            num_heads=int(shape.heads or 0), d_ff=1)
    terms = forward_flops(one_layer, int(shape.batch or 0))
    return {r: sum(terms[t] for t in FLOP_TERMS[r]) for r in ATTENTION_ROWS}


def attention_rows(range_rows: list[dict[str, Any]], shape: AttentionShape, *,
                   gpu: bool) -> Report:
    """Rows of ATTENTION_COLUMNS from range summary rows (``range``, ``instances``,
    ``avg_ns``, ``gpu_inclusive_ns``: the range summary of an export or a sweep's range times).
    ``gpu``: time kernels (the export has kernels), else CPU range times."""
    if shape.missing:
        raise BadOption("the attention FLOPs need the model shape: no `nsys-mine profile` "
                        "sidecar (NAME.json) gives it here; pass " + ", ".join(shape.missing))
    by_name = {r["range"]: r for r in range_rows if r.get("range") in ATTENTION_ROWS}
    if not by_name:
        raise RangeNotFound(
            "no attention ranges in this export ('" + "', '".join(ATTENTION_ROWS) + "'): "
            "profile the model with `--nvtx fine` (and `--attention naive` for the three "
            "sub-ranges).")
    flop = flop_per_instance(shape)
    source = "gpu" if gpu else "cpu"

    def per_instance(r: dict[str, Any]) -> float | None:
        n = r.get("instances") or 0
        if not n:
            return None
        return float(r.get("gpu_inclusive_ns") or 0) / n if gpu else float(r.get("avg_ns") or 0)

    times = {name: per_instance(r) for name, r in by_name.items()}
    subs = [n for n in SUB_RANGES if n in by_name]
    flop_sum = sum(flop[n] for n in subs)
    time_sum = sum(times[n] or 0 for n in subs)
    base = nv.ATTENTION_SCORES if nv.ATTENTION_SCORES in by_name else None
    base_time = times[base] if base else None
    rows = []
    for name in [*subs, *([nv.SDPA] if nv.SDPA in by_name else [])]:
        t = times[name]
        is_sub = name in subs
        rows.append({
            "range": name,
            "instances": int(by_name[name].get("instances") or 0),
            "flop": flop[name],
            "time_per_instance_ns": round(t, 1) if t is not None else None,
            "time_source": source,
            "achieved_gflops": round(flop[name] / t, 3) if t else None,
            "flop_pct": r1(100.0 * flop[name] / flop_sum) if is_sub and flop_sum else None,
            "time_pct": r1(100.0 * (t or 0) / time_sum) if is_sub and time_sum else None,
            "flop_ratio": (round(flop[name] / flop[base], 3)
                           if base and is_sub else None),
            "time_ratio": (round((t or 0) / base_time, 3)
                           if base and is_sub and base_time else None),
        })
    what = "GPU time of the kernels launched inside each range" if gpu else (
        "CPU time of the ranges (no CUDA kernels in this export)")
    notes = [f"time per instance: {what}; one instance = one layer's attention in one "
             f"forward pass ({shape.describe()}).",
             "FLOPs: Q K^T and P V 2 B T^2 d each, softmax 5 B h T^2 (max, subtract, exp, sum, "
             "divide), the whole T x T matrix counted; the scaling and causal mask inside "
             "'computing attention scores' are not counted."]
    if base is None and subs:
        notes.append("no 'computing attention scores' range: no ratios.")
    return Report(rows=rows, columns=ATTENTION_COLUMNS, notes=notes,
                  sentences=[attention_sentence(r) for r in rows])


def attention_sentence(row: dict[str, Any]) -> str:
    """``computing softmax: 4.8% of the attention FLOPs, 35.1% of its time (gpu); 0.08x the
    FLOPs of computing attention scores, 1.2x its time; 12.3 GFLOP/s``."""
    t = row["time_per_instance_ns"]
    text = (f"{row['range']}: {human_flop(row['flop'])}FLOP and "
            f"{human_ns(t) if t is not None else 'no time'} per instance "
            f"({row['time_source'].upper()} time)")
    if row["flop_pct"] is not None and row["time_pct"] is not None:
        text += (f"; {row['flop_pct']:g}% of the attention FLOPs, {row['time_pct']:g}% of its "
                 f"time")
    if row["flop_ratio"] is not None and row["time_ratio"] is not None \
            and row["range"] != nv.ATTENTION_SCORES:
        text += (f"; {row['flop_ratio']:g}x the FLOPs of {nv.ATTENTION_SCORES} and "
                 f"{row['time_ratio']:g}x its time")
    rate = row["achieved_gflops"]
    if rate is not None:
        text += f"; {rate:,.0f}" if rate >= 100 else f"; {rate:.3g}"
        text += " GFLOP/s achieved"
    return text


def export_attention(s: Session, shape: AttentionShape,
                     sidecar: dict[str, Any] | None = None) -> Report:
    """The attention rows of a session, with the shape completed from its profile
    sidecar."""
    from reports.ask import answer

    s.export.require(NVTX_TABLE, "the attention FLOPs vs runtime table")
    full = shape.over((sidecar or {}).get("config"))
    if full.missing:  # say what is missing before reading anything
        return attention_rows([], full, gpu=False)
    s.load("kernels", "launches", "ranges", "names")
    ranges = answer(s, "ranges")
    report = attention_rows(list(ranges.rows), full, gpu=s.has_kernels)
    report.notes += [n for n in ranges.notes if n not in report.notes]
    return report


def attention(s: Session, size: str | None = None, d_model: int | None = None,
              heads: int | None = None, context: int | None = None,
              batch: int | None = None) -> Report:
    """``nsys-mine attention EXPORT``: the shape completed from the export's ``profile``
    sidecar."""
    return export_attention(s, AttentionShape(size, d_model, heads, context, batch),
                            read_sidecar(s.export.source))


def _page(ctx: Any) -> list[Any]:
    """The attention section, when the export has attention ranges."""
    from reports.page import plots
    from reports.page.model import Figure, Section, Sentences, Table, Text

    if not any(n in ctx.range_rows() for n in ATTENTION_ROWS):
        return []
    section = Section("Attention: runtime vs FLOPs", "attention")
    try:
        report = export_attention(ctx.session, ctx.shape, ctx.sidecar)
    except (BadOption, RangeNotFound) as exc:
        section.blocks.append(Text(str(exc)))
        return [section]
    section.blocks.append(Sentences(report.sentences))
    subs = [r for r in report.rows if r["range"] in SUB_RANGES]
    if subs and any(r["flop_pct"] is not None for r in subs):
        section.blocks.append(Figure(
            "attention", plots.attention_png(subs, title="Attention sub-ranges: FLOPs vs "
                                                         "runtime"),
            alt="Bars: each attention sub-range's share of the FLOPs next to its share of the "
                "runtime, and its achieved GFLOP/s."))
    section.blocks.append(Table(list(report.rows), ATTENTION_VIEW, notes=report.notes, top=0))
    return [section]


SHAPE_PANEL = "Attention FLOPs (default: the profile sidecar NAME.json)"
SHAPE_PARAMS = (
    Param("size", ("--size",), "Model size preset: gives --d-model and --heads.",
          metavar="PRESET", panel=SHAPE_PANEL),
    Param("d_model", ("--d-model",), "Model width d.", type=int, minimum=1, metavar="N",
          panel=SHAPE_PANEL),
    Param("heads", ("--heads",), "Attention heads h.", type=int, minimum=1, metavar="N",
          panel=SHAPE_PANEL),
    Param("context", ("--context",), "Context length T (tokens).", type=int, minimum=1,
          metavar="N", panel=SHAPE_PANEL),
    Param("batch", ("--batch",), "Batch size B.", type=int, minimum=1, metavar="N",
          panel=SHAPE_PANEL),
)

ANALYSIS = Analysis(
    name="attention",
    help="""Attention runtime vs FLOPs: scores, softmax and final matmul of the naive attention.

    Per sub-range: the analytic FLOPs of one instance (one layer, one forward pass), the
    measured time per instance (GPU kernel time, else CPU range time: said which), achieved
    GFLOP/s, and the ratios to `computing attention scores`. The shape comes from the
    `profile` sidecar (NAME.json) or the options; `profile` exports count measured steps only.

    Examples: `nsys-mine attention profiles/tiny_ctx128_b4_train_fp32_naive_nvtx-fine_w2s3.sqlite`
    ·
    `nsys-mine attention run.sqlite --size small --context 512 --batch 4 --format md`
    """,
    run=attention, options=("within", "nsys"), params=SHAPE_PARAMS,
    prepare=lambda options, source: measured_steps(options, read_sidecar(source)),
    columns=ATTENTION_COLUMNS, view=ATTENTION_VIEW,
    title="Attention: runtime vs FLOPs per instance", order=80,
    page=_page, page_order=20,
)
