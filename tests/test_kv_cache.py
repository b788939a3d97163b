"""Incremental decoding with a KV cache gives the logits of the full forward pass."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from nvtx_model.infer import generate  # noqa: E402
from nvtx_model.model import TransformerLM  # noqa: E402

V, CTX = 97, 48


def tiny(attention: str = "naive", seed: int = 0) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(V, CTX, d_model=32, num_layers=2, num_heads=4, d_ff=64,
                         attention=attention).eval()


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
@pytest.mark.parametrize("prompt", [1, 7, 20])
def test_cached_logits_equal_the_full_forward(attention, prompt):
    """A prompt, then one token at a time: every position's logits match forward() on the
    whole sequence (fp32: differences are rounding only)."""
    model = tiny(attention)
    ids = torch.randint(0, V, (3, 30), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_kv_cache(3, 30)
        parts = [model.forward_cached(ids[:, :prompt], cache)]
        for t in range(prompt, 30):
            parts.append(model.forward_cached(ids[:, t:t + 1], cache))
    cached = torch.cat(parts, dim=1)
    assert cache.length == 30
    assert cached.shape == full.shape == (3, 30, V)
    torch.testing.assert_close(cached, full, rtol=1e-4, atol=1e-5)


def test_chunks_of_several_tokens_and_last_only():
    """Chunked prefill (8 + 5 + 1 positions) attends to the cache with the right mask rows;
    last_only returns just the last position."""
    model = tiny()
    ids = torch.randint(0, V, (2, 14), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        full = model(ids)
        cache = model.new_kv_cache(2, 14)
        a = model.forward_cached(ids[:, :8], cache)
        b = model.forward_cached(ids[:, 8:13], cache, last_only=True)
        c = model.forward_cached(ids[:, 13:], cache)
    torch.testing.assert_close(a, full[:, :8], rtol=1e-4, atol=1e-5)
    assert b.shape == (2, 1, V)
    torch.testing.assert_close(b[:, 0], full[:, 12], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(c[:, 0], full[:, 13], rtol=1e-4, atol=1e-5)


def test_rope_positions_matter_for_cached_steps():
    """Cached keys are rotated at their absolute positions: token 3 at position 0 and again at
    position 5 has the same raw key in layer 0 (same embedding, same norm), so the cached keys
    differ only by RoPE, exactly by the rotation for position 5."""
    model = tiny()
    ids = torch.tensor([[3, 8, 1, 4, 6, 3]])
    with torch.no_grad():
        cache = model.new_kv_cache(1, 8)
        model.forward_cached(ids[:, :5], cache)
        step = model.forward_cached(ids[:, 5:], cache)
        reference = model(ids)[:, -1]
        attn = model.layers[0].attn
        raw = attn._heads(attn.k_proj(model.layers[0].ln1(model.token_embeddings(ids[:, :1]))))
        at5 = attn.rope(raw, torch.tensor([5]))
    torch.testing.assert_close(step[:, 0], reference, rtol=1e-4, atol=1e-5)
    keys = cache.layers[0].keys[0]  # (h, S, dh)
    assert not torch.allclose(keys[:, 0], keys[:, 5], atol=1e-3)
    torch.testing.assert_close(keys[:, 5], at5[0, :, 0], rtol=1e-5, atol=1e-6)


def test_greedy_generation_equals_recomputing_the_whole_sequence():
    model = tiny("sdpa", seed=3)
    prompt = torch.randint(0, V, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.inference_mode():
        out = generate(model, prompt, 12)
        seq = prompt
        for _ in range(12):  # no cache: the full forward pass every token
            nxt = model(seq)[:, -1].argmax(dim=-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    assert torch.equal(out.tokens, seq[:, 9:])
    t = out.timing
    assert len(t.step_s) == 11 and t.prefill_s > 0
    assert t.total_s == pytest.approx(t.prefill_s + sum(t.step_s))


def test_cache_size_and_limits():
    model = tiny()
    cache = model.new_kv_cache(2, 10)
    assert cache.max_length == 10 and cache.length == 0
    assert cache.nbytes() == 2 * 2 * (2 * 4 * 10 * 8) * 4  # layers x (k, v) x B h S dh x fp32
    with torch.no_grad():
        model.forward_cached(torch.zeros(2, 10, dtype=torch.long), cache)
        with pytest.raises(ValueError, match="beyond the context length"):
            model.forward_cached(torch.zeros(2, 1, dtype=torch.long), cache)
    with pytest.raises(ValueError, match="must be 1..context_length"):
        model.new_kv_cache(1, CTX + 1)
    bf16 = tiny().to(torch.bfloat16).new_kv_cache(1, 4)
    assert bf16.layers[0].keys.dtype == torch.bfloat16


def test_training_forward_is_unchanged_by_the_cache_path():
    """forward() never touches a cache: same logits before and after cached calls, and
    gradients flow as before."""
    model = tiny()
    ids = torch.randint(0, V, (2, 16), generator=torch.Generator().manual_seed(5))
    before = model(ids).detach()
    with torch.no_grad():
        model.forward_cached(ids, model.new_kv_cache(2, 16))
    after = model(ids)
    assert torch.equal(before, after.detach())
    after.sum().backward()
    assert model.layers[0].attn.q_proj.weight.grad is not None
