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

from typing import Any

from nsys_parsers.schema import NVTX_TABLE
from reports.attention_flops import ATTENTION_COLUMNS, AttentionShape, attention_rows
from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.ask import answer
from reports.pipeline.report import Report
from reports.pipeline.session import Session
from reports.render import View
from reports.sidecar import measured_steps, read_sidecar

ATTENTION_VIEW = View(
    columns=["range", "instances", "flop", "time_per_instance_ns", "achieved_gflops",
             "flop_pct", "time_pct", "flop_ratio", "time_ratio", "time_source"],
    drop=(("flop_ratio", "time_ratio"), "instances"),
    noun="ranges", hide_if_constant=("time_source",),
    hide_if_zero=("flop_ratio", "time_ratio"),
    headers={"flop": "FLOP", "achieved_gflops": "GFLOP/s", "flop_pct": "FLOP %",
             "flop_ratio": "FLOP vs scores", "time_ratio": "time vs scores"})



def export_attention(s: Session, shape: AttentionShape,
                     sidecar: dict[str, Any] | None = None) -> Report:
    """The attention rows of a session, with the shape completed from its profile
    sidecar."""
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
)
