"""A decoder-only Transformer language model, written from the math (CS336 "basics" model).

token ids (B, T) -> embedding -> L x [pre-norm block] -> RMSNorm -> LM head -> logits (B, T, V)

    block(x) = x + MHA(RMSNorm(x));  then  x + SwiGLU(RMSNorm(x))

Attention is causal multi-head self-attention with rotary position embeddings (RoPE) on q and k.
No biases anywhere; the LM head is not tied to the embedding. Parameter names follow the CS336
reference (``token_embeddings``, ``layers.{i}.attn.q_proj``, ``ln1``, ``ffn.w1`` ...).

Shapes in signatures use: B batch, T sequence, d d_model, h heads, dh = d / h, f d_ff, V vocab,
S positions in a KV cache. NVTX ranges (``nvtx_model.nvtx_ranges``) cost nothing unless
instrumentation is activated.

Incremental decoding: ``TransformerLM.forward_cached(token_ids, cache)`` runs only the new
positions, appending their keys and values to a ``KVCache`` (``model.new_kv_cache(batch,
max_length)``); RoPE rotates them at their absolute positions and they attend to every cached
position up to their own, so the logits equal those of ``forward`` on the whole sequence.
Training calls ``forward`` and never touches a cache.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import ATTENTIONS, PARAM_COMPONENTS, ModelConfig


class Linear(nn.Module):
    """y = x W^T, W: (out, in), initialised N(0, 2/(in+out)) truncated at 3 sigma."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        std = math.sqrt(2.0 / (in_features + out_features))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=std, a=-3 * std, b=3 * std)

    def forward(self, x: Tensor) -> Tensor:  # (..., in) -> (..., out)
        # F.linear(x, W) = x @ W^T in one GEMM; passing W itself (not the view W.T) lets
        # autocast cache its bf16 copy for the rest of the forward pass
        return F.linear(x, self.weight)


class Embedding(nn.Module):
    """Rows of a (V, d) table, initialised N(0, 1) truncated at 3."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))
        nn.init.trunc_normal_(self.weight, mean=0.0, std=1.0, a=-3.0, b=3.0)

    def forward(self, token_ids: Tensor) -> Tensor:  # (B, T) int -> (B, T, d)
        return self.weight[token_ids]


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g, computed in fp32, returned in x's dtype."""

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:  # (..., d) -> (..., d)
        dtype = x.dtype
        x = x.float()
        rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (x * rms * self.weight).to(dtype)


class RotaryEmbedding(nn.Module):
    cos: Tensor  # buffers, (T_max, dh/2)
    sin: Tensor

    """RoPE: rotate each pair (x[2k], x[2k+1]) at position i by the angle i * theta^(-2k/dh).

    Equivalently, with z_k = x[2k] + i x[2k+1], RoPE(x)_k = z_k * exp(i * pos * theta^(-2k/dh)).
    """

    def __init__(self, d_head: int, context_length: int, theta: float = 10_000.0) -> None:
        super().__init__()
        inv_freq = theta ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        angles = torch.outer(torch.arange(context_length, dtype=torch.float64), inv_freq)
        self.register_buffer("cos", angles.cos().float(), persistent=False)  # (T_max, dh/2)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:  # (..., T, dh), (T,) -> (..., T, dh)
        cos = self.cos[positions].to(x.dtype)
        sin = self.sin[positions].to(x.dtype)
        x_even, x_odd = x[..., 0::2], x[..., 1::2]
        rotated = torch.stack((x_even * cos - x_odd * sin, x_even * sin + x_odd * cos), dim=-1)
        return rotated.flatten(-2)


def softmax(x: Tensor, dim: int) -> Tensor:
    """exp(x - max) / sum(exp(x - max)), written out like the CS336 reference."""
    shifted = x - x.amax(dim=dim, keepdim=True)
    exp = shifted.exp()
    return exp / exp.sum(dim=dim, keepdim=True)


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """softmax(Q K^T / sqrt(dh), masked) V.

    q, k, v: (B, h, T, dh); mask: (T, T) bool, True where a query may attend to a key.
    Returns (B, h, T, dh).
    """
    with nv.nvtx_range(nv.SDPA):
        with nv.nvtx_range(nv.ATTENTION_SCORES):
            scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, h, T, T)
            scores = scores.masked_fill(~mask, float("-inf"))
        with nv.nvtx_range(nv.SOFTMAX):
            probs = softmax(scores, dim=-1)
        with nv.nvtx_range(nv.FINAL_MATMUL):
            return probs @ v


def fused_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None) -> Tensor:
    """Causal attention by ``torch.nn.functional.scaled_dot_product_attention`` (flash,
    memory-efficient or math kernel, as torch picks). Same shapes as the naive version.

    Without ``mask`` the causal mask is implied (queries and keys at the same positions);
    with a KV cache the queries are the last T of S positions, so the (T, S) mask is given."""
    with nv.nvtx_range(nv.SDPA):
        if mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


class LayerKVCache:
    """One layer's keys and values for incremental decoding: (B, h, max_length, dh) each,
    allocated once and filled up to ``length`` (positions 0 .. length - 1)."""

    def __init__(self, keys: Tensor, values: Tensor) -> None:
        self.keys = keys
        self.values = values
        self.length = 0

    @property
    def max_length(self) -> int:
        return self.keys.shape[-2]

    def update(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the T new positions' k, v (B, h, T, dh); return all S = length + T so far."""
        end = self.length + k.shape[-2]
        if end > self.max_length:
            raise ValueError(f"KV cache holds {self.max_length} positions; {end} needed")
        self.keys[:, :, self.length:end] = k
        self.values[:, :, self.length:end] = v
        self.length = end
        return self.keys[:, :, :end], self.values[:, :, :end]


class KVCache:
    """The keys and values of every layer (``layers[i]`` belongs to block i)."""

    def __init__(self, layers: list[LayerKVCache]) -> None:
        self.layers = layers

    @classmethod
    def allocate(cls, num_layers: int, batch: int, num_heads: int, max_length: int,
                 d_head: int, *, dtype: torch.dtype, device: torch.device | str) -> KVCache:
        shape = (batch, num_heads, max_length, d_head)
        return cls([LayerKVCache(torch.empty(shape, dtype=dtype, device=device),
                                 torch.empty(shape, dtype=dtype, device=device))
                    for _ in range(num_layers)])

    @property
    def length(self) -> int:
        """Positions already cached (the next token's position)."""
        return self.layers[0].length

    @property
    def max_length(self) -> int:
        return self.layers[0].max_length

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for c in self.layers for t in (c.keys, c.values))


class CausalMultiHeadSelfAttention(nn.Module):
    """Multi-head self-attention with RoPE on q and k. ``rope`` is shared by all blocks."""

    def __init__(self, d_model: int, num_heads: int, rope: RotaryEmbedding,
                 attention: str = "naive") -> None:
        super().__init__()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention must be one of {ATTENTIONS}, got {attention!r}")
        self.num_heads = num_heads
        self.attention = attention
        self.q_proj = Linear(d_model, d_model)
        self.k_proj = Linear(d_model, d_model)
        self.v_proj = Linear(d_model, d_model)
        self.output_proj = Linear(d_model, d_model)
        self.rope = rope

    def _heads(self, x: Tensor) -> Tensor:  # (B, T, d) -> (B, h, T, dh)
        B, T, d = x.shape
        return x.view(B, T, self.num_heads, d // self.num_heads).transpose(1, 2)

    def forward(self, x: Tensor, mask: Tensor,
                cache: LayerKVCache | None = None) -> Tensor:  # (B, T, d), (T, S) -> (B, T, d)
        """Without ``cache``: positions 0..T-1, S = T. With one: x holds the T positions after
        the ``cache.length`` cached ones; their k, v join the cache and S = cache.length + T."""
        B, T, d = x.shape
        start = 0 if cache is None else cache.length
        positions = torch.arange(start, start + T, device=x.device)
        q = self.rope(self._heads(self.q_proj(x)), positions)
        k = self.rope(self._heads(self.k_proj(x)), positions)
        v = self._heads(self.v_proj(x))
        if cache is not None:
            k, v = cache.update(k, v)  # (B, h, S, dh)
        if self.attention == "naive":
            out = scaled_dot_product_attention(q, k, v, mask)
        else:
            out = fused_attention(q, k, v, None if cache is None else mask)
        return self.output_proj(out.transpose(1, 2).reshape(B, T, d))


class SwiGLU(nn.Module):
    """FFN(x) = W2 (SiLU(W1 x) * W3 x), SiLU(a) = a * sigmoid(a)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.w1 = Linear(d_model, d_ff)
        self.w2 = Linear(d_ff, d_model)
        self.w3 = Linear(d_model, d_ff)

    def forward(self, x: Tensor) -> Tensor:  # (..., d) -> (..., d)
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, d_model: int, num_heads: int, d_ff: int, rope: RotaryEmbedding,
                 attention: str = "naive") -> None:
        super().__init__()
        self.ln1 = RMSNorm(d_model)
        self.attn = CausalMultiHeadSelfAttention(d_model, num_heads, rope, attention)
        self.ln2 = RMSNorm(d_model)
        self.ffn = SwiGLU(d_model, d_ff)

    def forward(self, x: Tensor, mask: Tensor,
                cache: LayerKVCache | None = None) -> Tensor:  # (B, T, d), (T, S) -> (B, T, d)
        with nv.nvtx_range(nv.ATTENTION):
            x = x + self.attn(self.ln1(x), mask, cache)
        with nv.nvtx_range(nv.FFN):
            x = x + self.ffn(self.ln2(x))
        return x


class TransformerLM(nn.Module):
    causal_mask: Tensor  # buffer, (T_max, T_max)

    def __init__(self, vocab_size: int, context_length: int, d_model: int, num_layers: int,
                 num_heads: int, d_ff: int, rope_theta: float = 10_000.0,
                 attention: str = "naive") -> None:
        super().__init__()
        # validates the shape (heads divide d_model, even head dimension) with a clear error
        self.config = ModelConfig(vocab_size=vocab_size, context_length=context_length,
                                  d_model=d_model, num_layers=num_layers, num_heads=num_heads,
                                  d_ff=d_ff, rope_theta=rope_theta)
        self.context_length = context_length
        self.token_embeddings = Embedding(vocab_size, d_model)
        rope = RotaryEmbedding(d_model // num_heads, context_length, rope_theta)
        self.layers = nn.ModuleList(
            TransformerBlock(d_model, num_heads, d_ff, rope, attention) for _ in range(num_layers)
        )
        self.ln_final = RMSNorm(d_model)
        self.lm_head = Linear(d_model, vocab_size)
        # True where query i may attend to key j (j <= i); one buffer shared by all blocks
        causal = torch.tril(torch.ones(context_length, context_length, dtype=torch.bool))
        self.register_buffer("causal_mask", causal, persistent=False)

    @classmethod
    def from_config(cls, cfg: ModelConfig, attention: str = "naive") -> TransformerLM:
        return cls(cfg.vocab_size, cfg.context_length, cfg.d_model, cfg.num_layers,
                   cfg.num_heads, cfg.d_ff, cfg.rope_theta, attention)

    def forward(self, token_ids: Tensor) -> Tensor:  # (B, T) int -> (B, T, V)
        T = token_ids.shape[-1]
        if T > self.context_length:
            raise ValueError(f"sequence length {T} exceeds context_length {self.context_length}")
        mask = self.causal_mask[:T, :T]
        x = self.token_embeddings(token_ids)
        for layer in self.layers:
            x = layer(x, mask)
        return self.lm_head(self.ln_final(x))

    def new_kv_cache(self, batch: int, max_length: int | None = None,
                     dtype: torch.dtype | None = None) -> KVCache:
        """An empty cache for ``batch`` sequences of up to ``max_length`` (default: the
        context length) positions, in the dtype of the weights unless given."""
        max_length = self.context_length if max_length is None else max_length
        if not 1 <= max_length <= self.context_length:
            raise ValueError(f"KV cache length {max_length} must be 1..context_length "
                             f"{self.context_length}")
        weight = self.lm_head.weight
        c = self.config
        return KVCache.allocate(c.num_layers, batch, c.num_heads, max_length, c.d_head,
                                dtype=dtype or weight.dtype, device=weight.device)

    def forward_cached(self, token_ids: Tensor, cache: KVCache, *,
                       last_only: bool = False) -> Tensor:  # (B, T) int -> (B, T or 1, V)
        """Incremental forward pass: ``token_ids`` are the T positions after the
        ``cache.length`` already cached (the whole prompt first, then one token at a time).

        Their keys and values are appended to ``cache``; query i attends to cached positions
        0..start+i (mask rows start..start+T-1 of the causal mask). ``last_only`` computes the
        logits of the last position only (what generation needs after a prompt)."""
        start, T = cache.length, token_ids.shape[-1]
        end = start + T
        if end > min(self.context_length, cache.max_length):
            raise ValueError(f"position {end - 1} is beyond the context length "
                             f"{self.context_length} or the cache ({cache.max_length})")
        mask = self.causal_mask[start:end, :end]  # (T, S)
        x = self.token_embeddings(token_ids)
        for layer, layer_cache in zip(self.layers, cache.layers):
            x = layer(x, mask, layer_cache)
        if last_only:
            x = x[:, -1:]
        return self.lm_head(self.ln_final(x))

    def param_counts(self) -> dict[str, int]:
        """Parameters per component, counted on the module (compare ``config.param_counts``)."""
        counts = dict.fromkeys(PARAM_COMPONENTS, 0)
        for name, p in self.named_parameters():
            if name.startswith("token_embeddings."):
                key = "embedding"
            elif name.startswith("lm_head."):
                key = "lm_head"
            elif ".attn." in name:
                key = "attention"
            elif ".ffn." in name:
                key = "ffn"
            elif name.startswith("ln_final.") or ".ln1." in name or ".ln2." in name:
                key = "norms"
            else:
                raise AssertionError(f"parameter {name} belongs to no component")
            counts[key] += p.numel()
        counts["total"] = sum(counts.values())
        return counts


def cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross-entropy in fp32. logits (B, T, V), targets (B, T) -> scalar."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))
