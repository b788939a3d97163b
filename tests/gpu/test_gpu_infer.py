"""``infer`` on a GPU: KV-cache generation synchronized after every token, TTFT, TPOT and
inter-token latency percentiles, the allocator's peak, the files; and the cache giving the
logits of the full forward pass on the device."""

from __future__ import annotations

import math

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("gpu")]

OUTPUT_LENGTH = 32


def test_infer_grid_on_cuda(gpu, nsys_mine, tmp_path, record):
    precisions = "fp32,bf16" if gpu.bf16 else "fp32"
    out = tmp_path / "infer_results"
    rows = nsys_mine("infer", "--size", "small", "--device", "cuda", "--precision", precisions,
                     "--batch-sizes", "1,4", "--input-lengths", "128,512", "--output-length",
                     OUTPUT_LENGTH, "--runs", "3", "--warmup", "1", "--out-dir", out,
                     "--format", "json").json()
    assert len(rows) == 4 * len(precisions.split(","))
    by = {}
    for r in rows:
        assert r["status"] == "ok", r["note"]
        assert (r["device"], r["device_name"]) == ("cuda", gpu.name)
        by[r["precision"], r["batch"], r["input_length"]] = r
        ttft, tpot, total = r["prefill_s"], r["decode_per_token_s"], r["total_s"]
        assert all(math.isfinite(x) and x > 0 for x in (ttft, tpot, total))
        assert ttft < total
        assert r["decode_s"] == pytest.approx(total - ttft, rel=1e-6)
        assert tpot == pytest.approx(r["decode_s"] / (OUTPUT_LENGTH - 1), rel=1e-6)
        assert 0 < r["itl_p50_s"] <= r["itl_p90_s"] <= r["itl_p99_s"]
        assert r["tokens_per_s"] == pytest.approx(r["batch"] * OUTPUT_LENGTH / total)
        # CUDA peak: the weights and the KV cache are exact parts of it
        assert r["rss_growth_bytes"] is None
        assert r["peak_allocated_bytes"] >= r["weights_bytes"] + r["kv_cache_bytes"]
        assert r["peak_reserved_bytes"] >= r["peak_allocated_bytes"]
        assert r["peak_allocated_bytes"] < 4 * r["memory_est_bytes"] + 2**28
    for (precision, batch, length), r in by.items():
        if batch == 4:
            # decoding one position is launch-bound: 4 sequences cost little more than 1
            assert r["tokens_per_s"] > 1.5 * by[precision, 1, length]["tokens_per_s"]
    for precision in precisions.split(","):
        one, four = by[precision, 1, 128], by[precision, 4, 512]
        record(**{f"{precision}_b1_in128_ttft_s": one["prefill_s"],
                  f"{precision}_b1_in128_tpot_s": one["decode_per_token_s"],
                  f"{precision}_b1_in128_itl_p99_s": one["itl_p99_s"],
                  f"{precision}_b4_in512_ttft_s": four["prefill_s"],
                  f"{precision}_b4_in512_tokens_per_s": four["tokens_per_s"],
                  f"{precision}_b4_in512_peak_allocated_bytes": four["peak_allocated_bytes"]})
    names = [p.name for p in out.iterdir()]
    assert sum(n.endswith("_report.md") for n in names) == 1, names
    for plot in ("latency", "throughput", "memory"):  # one set per precision
        assert sum(n.endswith(f"_{plot}.png") for n in names) == len(by) // 4, names


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
def test_kv_cache_gives_the_logits_of_the_full_forward(gpu, attention, record):
    """fp32 on the device: a prompt, then one token at a time through the cache, against the
    forward pass over the whole sequence (different GEMM shapes, so not bit-equal)."""
    import torch

    from nvtx_model.config import ModelConfig
    from nvtx_model.model import TransformerLM

    cfg = ModelConfig(vocab_size=1000, context_length=64, d_model=256, num_layers=4,
                      num_heads=4, d_ff=1024)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = TransformerLM.from_config(cfg, attention=attention).eval()
        seq = torch.randint(0, cfg.vocab_size, (2, 40))
    prompt = 24
    with torch.inference_mode():
        full = model(seq)  # (2, 40, V)
        cache = model.new_kv_cache(2, 40)
        steps = [model.forward_cached(seq[:, :prompt], cache)]
        for i in range(prompt, 40):
            steps.append(model.forward_cached(seq[:, i:i + 1], cache))
        cached = torch.cat(steps, dim=1)
    assert cache.length == 40 and cached.shape == full.shape
    err = (cached - full).abs().max().item()
    record(max_abs_err=err, logits_scale=full.abs().max().item())
    torch.testing.assert_close(cached, full, rtol=1e-3, atol=1e-3)
