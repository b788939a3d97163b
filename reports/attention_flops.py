"""The FLOPs of the naive attention's sub-ranges and their measured times side by side: what
``nsys-mine attention`` answers for an export and the sweep page for each config.

``AttentionShape`` (d_model, heads, context, batch; ``size``: a preset), the FLOPs of one
instance of each range (``flop_per_instance``: from ``nvtx_model.config.forward_flops``) and
the rows of ``attention_rows`` (from range summary rows: an export's or a sweep's)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from nsys_parsers.errors import BadOption, RangeNotFound
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import ModelConfig, forward_flops
from reports.pipeline.report import Report, r1
from reports.render import human_flop, human_ns

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
