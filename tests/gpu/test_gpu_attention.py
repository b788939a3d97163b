"""``--attention sdpa`` against the written-out attention on the GPU, where sdpa picks fused
kernels (flash for bf16, memory-efficient for fp32 on recent GPUs): the same output within
what each precision allows, judged against a float64 reference, alone and inside the model."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("gpu")]

# max |error| vs float64, and the mean |error| below which rounding noise sits
TOLERANCE = {"float32": (1e-4, 1e-5), "bfloat16": (5e-2, 5e-3)}


def sdpa_backends() -> str:
    import torch

    enabled = {"flash": torch.backends.cuda.flash_sdp_enabled(),
               "mem_efficient": torch.backends.cuda.mem_efficient_sdp_enabled(),
               "math": torch.backends.cuda.math_sdp_enabled()}
    return ",".join(name for name, on in enabled.items() if on)


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_sdpa_equals_naive_attention(gpu, dtype_name, record):
    import torch

    from nvtx_model.model import fused_attention, scaled_dot_product_attention

    if dtype_name == "bfloat16" and not gpu.bf16:
        pytest.skip(f"{gpu.name} has no bf16 (torch.cuda.is_bf16_supported() is False)")
    dtype = getattr(torch, dtype_name)
    B, h, T, dh = 2, 8, 512, 64
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(B, h, T, dh, generator=gen, device="cuda", dtype=dtype)
               for _ in range(3))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool, device="cuda"))
    naive = scaled_dot_product_attention(q, k, v, mask)
    fused = fused_attention(q, k, v)
    assert naive.shape == fused.shape == (B, h, T, dh)
    assert naive.dtype == fused.dtype == dtype
    reference = scaled_dot_product_attention(q.double(), k.double(), v.double(), mask)
    max_tol, mean_tol = TOLERANCE[dtype_name]
    numbers = {"sdpa_backends": sdpa_backends()}
    for name, out in (("naive", naive), ("sdpa", fused)):
        err = (out.double() - reference).abs()
        numbers[f"{name}_max_abs_err"] = err.max().item()
        numbers[f"{name}_mean_abs_err"] = err.mean().item()
    record(**numbers)
    for name in ("naive", "sdpa"):
        assert numbers[f"{name}_max_abs_err"] < max_tol, numbers
        assert numbers[f"{name}_mean_abs_err"] < mean_tol, numbers
    torch.testing.assert_close(fused, naive, rtol=max_tol, atol=max_tol)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_naive_and_sdpa_models_agree_on_the_gpu(gpu, precision, record):
    """Same weights, both attentions, the model's logits: tight in fp32; in bf16 autocast the
    two roundings differ, so the logits agree in direction and within 5% of their scale."""
    import torch

    from nvtx_model.config import ModelConfig
    from nvtx_model.model import TransformerLM
    from nvtx_model.runtime import CudaRuntime

    if precision == "bf16" and not gpu.bf16:
        pytest.skip(f"{gpu.name} has no bf16 (torch.cuda.is_bf16_supported() is False)")
    cfg = ModelConfig(vocab_size=1000, context_length=256, d_model=256, num_layers=4,
                      num_heads=4, d_ff=1024)
    torch.manual_seed(0)
    with torch.device("cuda"):
        naive = TransformerLM.from_config(cfg, attention="naive").eval()
        sdpa = TransformerLM.from_config(cfg, attention="sdpa").eval()
        ids = torch.randint(0, cfg.vocab_size, (4, 256))
    sdpa.load_state_dict(naive.state_dict())
    runtime = CudaRuntime()
    with torch.inference_mode():
        reference = naive(ids).double()  # fp32
        with runtime.autocast(precision):
            a, b = naive(ids), sdpa(ids)
    scale = reference.abs().max().item()
    diff = (a.double() - b.double()).abs().max().item()
    cosine = torch.nn.functional.cosine_similarity(
        a.double().flatten(), b.double().flatten(), dim=0).item()
    record(max_abs_diff=diff, logits_scale=scale, cosine=cosine)
    if precision == "fp32":
        assert a.dtype == b.dtype == torch.float32
        torch.testing.assert_close(b, a, rtol=1e-3, atol=1e-3)
    else:
        assert a.dtype == b.dtype == torch.bfloat16
        assert cosine > 0.999 and diff < 0.05 * scale, (cosine, diff, scale)
