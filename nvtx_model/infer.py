"""Inference latency: ``run_inference(configs)`` -> one row per grid point, timed generation.

Per config: build the model (weights cast to bf16 for ``--precision bf16``, as inference
engines do), draw ``batch`` prompts of exactly ``input_length`` random token ids (no
tokenizer), then ``generate`` ``output_length`` tokens with a KV cache (greedy by default;
temperature and top-p sampling available), ``warmup`` times untimed and ``runs`` times timed.
The device is synchronized after the prompt's first token and after every later token, and the
times come from ``timeit.default_timer`` between those synchronizations.

Metrics (definitions of vLLM's latency/serving benchmarks and optimum-benchmark, so numbers
compare):

- ``prefill_s``: time to first token (TTFT): the prompt's forward pass and the first sample;
- ``decode_s``: the remaining ``output_length - 1`` tokens: ``total_s - prefill_s``;
- ``decode_per_token_s``: time per output token (TPOT) = ``(total - TTFT) / (output_length - 1)``;
- ``itl_p50_s``/``itl_p90_s``/``itl_p99_s``: percentiles of the inter-token latencies (the time
  between consecutive tokens of the decode phase), pooled over the measured runs;
- ``total_s``: the whole generate call (end-to-end latency);
- ``tokens_per_s``: generated tokens per second, ``batch * output_length / total_s``;
  ``prefill_tokens_per_s = batch * input_length / prefill_s`` and ``decode_tokens_per_s =
  batch * (output_length - 1) / decode_s`` split it by phase.

Time columns are means over the runs; ``*_std_s`` their sample standard deviations. Peak memory
is CUDA's ``max_memory_allocated`` (weights included) or, on CPU, the RSS growth during the
measured runs (the weights, loaded before, are not in it); the estimate of
``nvtx_model.infer_config.inference_memory`` is reported beside it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from timeit import default_timer
from typing import Any, Callable

import torch

from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import param_counts
from nvtx_model.grid import CPU_MEMORY_SHARE, STATUS_COLUMNS, Progress, SweepResult, run_configs
from nvtx_model.infer_config import (
    DEFAULT_MAX_BATCH_INPUT_PRODUCT,
    InferConfig,
    memory_of,
    skip_reason,
)
from nvtx_model.runtime import Runtime

INFER_CONFIG_COLUMNS: dict[str, type] = {
    "size": str, "params": int, "d_model": int, "d_ff": int, "layers": int, "heads": int,
    "vocab": int, "batch": int, "input_length": int, "output_length": int, "precision": str,
    "attention": str, "sampling": str, "nvtx": str, "device": str, "device_name": str,
    "threads": int, "seed": int, "warmup": int, "runs": int,
}
INFER_METRIC_COLUMNS: dict[str, type] = {
    "prefill_s": float, "prefill_std_s": float, "decode_s": float, "decode_std_s": float,
    "decode_per_token_s": float, "decode_per_token_std_s": float, "itl_p50_s": float,
    "itl_p90_s": float, "itl_p99_s": float, "total_s": float, "total_std_s": float,
    "tokens_per_s": float, "prefill_tokens_per_s": float, "decode_tokens_per_s": float,
    "peak_allocated_bytes": int, "peak_reserved_bytes": int, "rss_growth_bytes": int,
    "weights_bytes": int, "kv_cache_bytes": int, "activations_est_bytes": int,
    "memory_est_bytes": int,
}
INFER_COLUMN_TYPES: dict[str, type] = {**INFER_CONFIG_COLUMNS, **INFER_METRIC_COLUMNS,
                                       **STATUS_COLUMNS}
INFER_COLUMNS = list(INFER_COLUMN_TYPES)
ITL_PERCENTILES = (50, 90, 99)


# ---- sampling and generation ----------------------------------------------------------------
def sample_next(logits: torch.Tensor, temperature: float = 0.0, top_p: float = 1.0,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """The next token of each sequence from its logits (B, V): argmax for temperature 0,
    else a draw from softmax(logits / temperature), restricted to the smallest set of most
    likely tokens whose probabilities reach ``top_p`` (nucleus sampling)."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1:
        probs, order = probs.sort(dim=-1, descending=True)
        before = probs.cumsum(dim=-1) - probs  # mass of the more likely tokens
        probs = probs.masked_fill(before >= top_p, 0.0)  # the first token always stays
        choice = torch.multinomial(probs, 1, generator=generator)
        return order.gather(-1, choice).squeeze(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


@dataclass
class GenerationTiming:
    """Seconds of one generate call: the prefill (TTFT), each later token, the whole call."""

    prefill_s: float
    step_s: list[float] = field(default_factory=list)
    total_s: float = 0.0


@dataclass
class Generation:
    tokens: torch.Tensor  # (B, output_length)
    timing: GenerationTiming


def generate(model: Any, prompt: torch.Tensor, output_length: int, *,
             temperature: float = 0.0, top_p: float = 1.0,
             generator: torch.Generator | None = None,
             synchronize: Callable[[], None] = lambda: None,
             timer: Callable[[], float] = default_timer) -> Generation:
    """Generate ``output_length`` tokens after ``prompt`` (B, T) with a KV cache.

    NVTX: ``prefill`` around the prompt's forward pass and the first sample; ``decode``
    around the rest, one ``decode step`` per token (level fine). ``model`` has
    ``new_kv_cache(batch, max_length)`` and ``forward_cached(ids, cache, last_only=...)``
    (``TransformerLM``, or the Hugging Face adapter)."""
    B, T = prompt.shape
    cache = model.new_kv_cache(B, T + output_length - 1)
    tokens = torch.empty((B, output_length), dtype=torch.long, device=prompt.device)
    synchronize()
    start = timer()
    with nv.nvtx_range(nv.PREFILL):
        logits = model.forward_cached(prompt, cache, last_only=True)
        tokens[:, 0] = sample_next(logits[:, -1], temperature, top_p, generator)
        synchronize()
    mark = timer()
    timing = GenerationTiming(prefill_s=mark - start)
    if output_length > 1:
        with nv.nvtx_range(nv.DECODE):
            for i in range(1, output_length):
                with nv.nvtx_range(nv.DECODE_STEP):
                    logits = model.forward_cached(tokens[:, i - 1:i], cache)
                    tokens[:, i] = sample_next(logits[:, -1], temperature, top_p, generator)
                    synchronize()
                now = timer()
                timing.step_s.append(now - mark)
                mark = now
    timing.total_s = mark - start
    return Generation(tokens, timing)


# ---- metrics --------------------------------------------------------------------------------
def _mean_std(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def percentile(values: list[float], q: float) -> float:
    """numpy's default (linear interpolation between closest ranks), as vLLM reports."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def latency_metrics(timings: list[GenerationTiming], batch: int, input_length: int,
                    output_length: int) -> dict[str, float | None]:
    """The metric columns of one config from its measured generate calls."""
    prefill = [t.prefill_s for t in timings]
    total = [t.total_s for t in timings]
    decode = [t.total_s - t.prefill_s for t in timings]
    out: dict[str, float | None] = {}
    out["prefill_s"], out["prefill_std_s"] = _mean_std(prefill)
    out["total_s"], out["total_std_s"] = _mean_std(total)
    steps = output_length - 1
    if steps:
        out["decode_s"], out["decode_std_s"] = _mean_std(decode)
        out["decode_per_token_s"], out["decode_per_token_std_s"] = _mean_std(
            [d / steps for d in decode])
        itl = [s for t in timings for s in t.step_s]
        for q in ITL_PERCENTILES:
            out[f"itl_p{q}_s"] = percentile(itl, q)
    else:
        out["decode_s"], out["decode_std_s"] = 0.0, None
        out["decode_per_token_s"] = out["decode_per_token_std_s"] = None
        for q in ITL_PERCENTILES:
            out[f"itl_p{q}_s"] = None
    mean_total, mean_prefill, mean_decode = out["total_s"], out["prefill_s"], out["decode_s"]
    out["tokens_per_s"] = batch * output_length / mean_total if mean_total else None
    out["prefill_tokens_per_s"] = batch * input_length / mean_prefill if mean_prefill else None
    out["decode_tokens_per_s"] = batch * steps / mean_decode if steps and mean_decode else None
    return out


# ---- one config -----------------------------------------------------------------------------
def infer_config_row(cfg: InferConfig, runtime: Runtime) -> dict[str, Any]:
    m = cfg.model
    return {
        "size": cfg.size, "params": param_counts(m)["total"], "d_model": m.d_model,
        "d_ff": m.d_ff, "layers": m.num_layers, "heads": m.num_heads, "vocab": m.vocab_size,
        "batch": cfg.batch, "input_length": cfg.input_length,
        "output_length": cfg.output_length, "precision": cfg.precision,
        "attention": cfg.attention, "sampling": cfg.sampling, "nvtx": cfg.nvtx,
        "device": runtime.kind, "device_name": runtime.name,
        "threads": cfg.threads or torch.get_num_threads(), "seed": cfg.seed,
        "warmup": cfg.warmup, "runs": cfg.runs,
    }


def memory_columns(cfg: InferConfig) -> dict[str, int]:
    est = memory_of(cfg)
    return {"weights_bytes": est.weights_bytes, "kv_cache_bytes": est.kv_cache_bytes,
            "activations_est_bytes": est.activations_bytes, "memory_est_bytes": est.total_bytes}


def build_model(cfg: InferConfig, runtime: Runtime) -> Any:
    """The model to generate with, on the device, in eval mode, weights in the precision."""
    if cfg.hf_path is not None:
        from nvtx_model.hf_model import load_hf_model

        return load_hf_model(cfg.hf_path, runtime.device, cfg.precision, cfg.attention)
    from nvtx_model.model import TransformerLM

    torch.manual_seed(cfg.seed)
    with torch.device(runtime.device):
        model = TransformerLM.from_config(cfg.model, attention=cfg.attention)
    if cfg.precision == "bf16":
        model = model.to(torch.bfloat16)
    return model.eval()


def measure_inference(cfg: InferConfig, runtime: Runtime, instrumentation: nv.Instrumentation,
                      row: dict[str, Any]) -> None:
    """Generate ``warmup`` (range ``warmup``) then ``runs`` (range ``measure``) times; put
    the metric and peak-memory columns into ``row``."""
    model = build_model(cfg, runtime)
    if cfg.hf_path is not None:  # the shape formula does not know this architecture's extras
        params = model.num_parameters()
        weights = params * (2 if cfg.precision == "bf16" else 4)
        row.update(params=params, weights_bytes=weights, memory_est_bytes=weights
                   + row["kv_cache_bytes"] + row["activations_est_bytes"])
    generator = torch.Generator(device=runtime.device).manual_seed(cfg.seed)
    prompt = torch.randint(0, cfg.model.vocab_size, (cfg.batch, cfg.input_length),
                           generator=generator, device=runtime.device)
    runtime.synchronize()

    def once() -> GenerationTiming:
        return generate(model, prompt, cfg.output_length, temperature=cfg.temperature,
                        top_p=cfg.top_p, generator=generator,
                        synchronize=runtime.synchronize).timing

    with nv.activated(instrumentation), torch.inference_mode():
        if cfg.warmup:
            with nv.nvtx_range(nv.WARMUP):
                for _ in range(cfg.warmup):
                    once()
        runtime.reset_peak()
        with nv.nvtx_range(nv.MEASURE):
            timings = [once() for _ in range(cfg.runs)]
    row.update(runtime.peak())
    row.update(latency_metrics(timings, cfg.batch, cfg.input_length, cfg.output_length))
    notes = []
    if cfg.output_length == 1:
        notes.append("output_length 1: no decode phase, so no TPOT or ITL")
    if cfg.warmup == 0:
        notes.append("warmup 0: the first run includes one-time costs")
    if notes:
        row["note"] = "; ".join(notes)


# ---- the sweep ------------------------------------------------------------------------------
def run_inference(
    configs: list[InferConfig],
    *,
    max_batch_input_product: int = DEFAULT_MAX_BATCH_INPUT_PRODUCT,
    progress: Progress | None = None,
    db: Path | None = None,
    memory_limit_bytes: int | None = None,
    nvtx_backend: nv.Backend | None = None,
) -> SweepResult:
    """Run every config of the grid; rows have ``INFER_COLUMNS``. Configs over the
    ``max_batch_input_product`` limit or whose memory estimate exceeds the device's free
    memory (or ``memory_limit_bytes``) are ``skipped`` with the reason; an OOM is an ``oom``
    row; with ``db`` rows go to table ``infer`` as they finish."""

    def check(cfg: InferConfig, runtime: Runtime, limit: int | None) -> str | None:
        if cfg.precision == "bf16" and not runtime.bf16_supported():
            return f"bf16 is not supported on {runtime.name}; use --precision fp32"
        free: int | None
        if limit is not None:
            free, label = limit, "(the given limit)"
        else:
            free_now = runtime.free_bytes()
            free = None if free_now is None else int(free_now * CPU_MEMORY_SHARE)
            label = f"= {CPU_MEMORY_SHARE:.0%} {runtime.free_label}"
        return skip_reason(cfg, max_batch_input_product=max_batch_input_product,
                           free_bytes=free, free_label=label)

    result = run_configs(configs, measure_inference, static_columns=memory_columns,
                         config_columns=infer_config_row, check=check, progress=progress,
                         db=db, table="infer", column_types=INFER_COLUMN_TYPES,
                         memory_limit_bytes=memory_limit_bytes, nvtx_backend=nvtx_backend)
    ok = [r for r in result.rows if r["status"] == "ok"]
    if ok and ok[0]["device"] == "cpu":
        result.notes.append("cpu: rss_growth_bytes is the peak RSS growth of the measured runs "
                            "(KV cache and activations; the weights were loaded before); "
                            "memory_est_bytes is weights + KV cache + activations (estimate)")
    return result
