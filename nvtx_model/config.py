"""Model shapes, size presets, run configurations and the closed-form numbers for them.

Everything here is plain Python (no torch), so that parameter counts, FLOPs and memory
estimates are available for every preset without allocating a model, and so that the CLI
can validate options before importing torch.

Notation used in the formulas: ``B`` batch, ``T`` context length, ``N = B*T`` tokens, ``d``
d_model, ``f`` d_ff, ``h`` heads, ``L`` layers, ``V`` vocabulary size, ``P`` parameters.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from nsys_parsers.errors import BadOption
from nvtx_model.errors import BadShape
from nvtx_model.nvtx_ranges import LEVELS

DEFAULT_VOCAB = 10_000
DEFAULT_BATCH = 4
DEFAULT_CONTEXTS = (128, 256, 512, 1024)
DEFAULT_WARMUP = 5
DEFAULT_STEPS = 10
DEFAULT_SEED = 0
DEFAULT_ADAMW = "auto"
ROPE_THETA = 10_000.0

MODES = ("forward", "forward-backward", "train")
PRECISIONS = ("fp32", "bf16")
ATTENTIONS = ("naive", "sdpa")
DEVICES = ("auto", "cpu", "cuda")
# AdamW implementation: torch's default choice, the per-parameter loop, foreach, or fused.
ADAMW_IMPLS = ("auto", "for-loop", "foreach", "fused")
# torch.compile of the model: none (eager) or one of torch.compile's modes (reduce-overhead
# and max-autotune replay CUDA graphs on a GPU).
COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune")
CUSTOM = "custom"


@dataclass(frozen=True)
class Shape:
    """The part of a model that a size preset fixes."""

    d_model: int
    d_ff: int
    num_layers: int
    num_heads: int


# The CS336 assignment-2 table, plus ``tiny`` for CPU tests and smoke runs.
PRESETS: dict[str, Shape] = {
    "tiny": Shape(d_model=64, d_ff=256, num_layers=2, num_heads=4),
    "small": Shape(d_model=768, d_ff=3072, num_layers=12, num_heads=12),
    "medium": Shape(d_model=1024, d_ff=4096, num_layers=24, num_heads=16),
    "large": Shape(d_model=1280, d_ff=5120, num_layers=36, num_heads=20),
    "xl": Shape(d_model=1600, d_ff=6400, num_layers=48, num_heads=25),
    "2.7B": Shape(d_model=2560, d_ff=10240, num_layers=32, num_heads=32),
}


def preset_name(name: str) -> str | None:
    """The canonical spelling of a preset (``2.7b`` -> ``2.7B``), or None if there is none."""
    for key in PRESETS:
        if key.lower() == name.strip().lower():
            return key
    return None


@dataclass(frozen=True)
class ModelConfig:
    """Constructor arguments of ``TransformerLM``."""

    vocab_size: int = DEFAULT_VOCAB
    context_length: int = 128
    d_model: int = 768
    num_layers: int = 12
    num_heads: int = 12
    d_ff: int = 3072
    rope_theta: float = ROPE_THETA

    def __post_init__(self) -> None:
        for name in ("vocab_size", "context_length", "d_model", "num_layers", "num_heads", "d_ff"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise BadShape(f"{name} must be a positive integer, got {value!r}")
        if self.d_model % self.num_heads:
            raise BadShape(
                f"d_model {self.d_model} is not divisible by {self.num_heads} heads; "
                "pick --heads so that d_model / heads is an even integer"
            )
        if self.d_head % 2:
            raise BadShape(
                f"head dimension d_model/heads = {self.d_head} is odd; RoPE rotates pairs of "
                "dimensions, so pick --d-model/--heads giving an even head dimension"
            )
        if self.rope_theta <= 0:
            raise BadShape(f"rope_theta must be positive, got {self.rope_theta}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @classmethod
    def from_shape(cls, shape: Shape, *, vocab_size: int = DEFAULT_VOCAB,
                   context_length: int = 128, rope_theta: float = ROPE_THETA) -> ModelConfig:
        return cls(vocab_size=vocab_size, context_length=context_length, d_model=shape.d_model,
                   num_layers=shape.num_layers, num_heads=shape.num_heads, d_ff=shape.d_ff,
                   rope_theta=rope_theta)


@dataclass(frozen=True)
class RunConfig:
    """One benchmark/profiling run: a model, its input, and how to run and measure it."""

    size: str  # preset name, or "custom"
    model: ModelConfig
    batch: int = DEFAULT_BATCH
    mode: str = "train"
    precision: str = "fp32"
    attention: str = "naive"
    nvtx: str = "off"
    device: str = "auto"
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    adamw: str = DEFAULT_ADAMW
    seed: int = DEFAULT_SEED
    threads: int | None = None  # torch.set_num_threads for the run; None: torch's choice
    compile: str = "none"  # torch.compile mode of the model (COMPILE_MODES)

    def __post_init__(self) -> None:
        checks = (("mode", MODES), ("precision", PRECISIONS), ("attention", ATTENTIONS),
                  ("nvtx", LEVELS), ("device", DEVICES), ("adamw", ADAMW_IMPLS),
                  ("compile", COMPILE_MODES))
        for name, choices in checks:
            if getattr(self, name) not in choices:
                raise BadOption(f"--{name} {getattr(self, name)!r} is not one of: "
                                f"{', '.join(choices)}")
        if self.threads is not None and self.threads < 1:
            raise BadOption(f"--threads must be >= 1, got {self.threads}")
        if self.batch < 1 or self.steps < 1 or self.warmup < 0:
            raise BadOption("--batch and --steps must be >= 1 and --warmup >= 0 "
                            f"(got batch {self.batch}, steps {self.steps}, warmup {self.warmup})")

    @property
    def context(self) -> int:
        return self.model.context_length

    def label(self) -> str:
        return (f"{self.size} ctx {self.context} b{self.batch} {self.mode} {self.precision} "
                f"{self.attention}" + (f" compile {self.compile}" if self.compiled else ""))

    @property
    def compiled(self) -> bool:
        return self.compile != "none"

    def with_(self, **changes: Any) -> RunConfig:
        return replace(self, **changes)

    @property
    def name(self) -> str:
        """A file name that encodes the config, e.g.
        ``tiny_ctx128_b4_train_fp32_naive_nvtx-fine_w2s3``."""
        return run_name(self.size, self.context, self.batch, self.mode, self.precision,
                        self.attention, self.nvtx, self.warmup, self.steps, self.compile)

    def to_dict(self, device: str | None = None) -> dict[str, Any]:
        """The config as plain values (sidecars, sweep index, JSON output); ``device`` is the
        resolved device when known (``auto`` -> ``cpu``/``cuda``)."""
        m = self.model
        return {"size": self.size, "d_model": m.d_model, "d_ff": m.d_ff,
                "layers": m.num_layers, "heads": m.num_heads, "vocab": m.vocab_size,
                "context": self.context, "batch": self.batch, "mode": self.mode,
                "precision": self.precision, "attention": self.attention, "nvtx": self.nvtx,
                "device": device or self.device, "warmup": self.warmup, "steps": self.steps,
                "adamw": self.adamw, "seed": self.seed, "threads": self.threads,
                "compile": self.compile}


_UNSAFE_IN_NAME = re.compile(r"[^A-Za-z0-9._-]+")


def run_name(size: str, context: int, batch: int, mode: str, precision: str, attention: str,
             nvtx: str, warmup: int, steps: int, compile: str = "none") -> str:
    """The file name of a run (``RunConfig.name``); also for configs that could not be built.
    A compiled run says its mode (``..._nvtx-fine_compile-default_w2s3``)."""
    parts = [size or CUSTOM, f"ctx{context}", f"b{batch}", mode, precision, attention,
             f"nvtx-{nvtx}", *([f"compile-{compile}"] if compile != "none" else []),
             f"w{warmup}s{steps}"]
    return _UNSAFE_IN_NAME.sub("-", "_".join(str(p) for p in parts)).strip("-")


# --------------------------------------------------------------------------------------------
# Parameters
# --------------------------------------------------------------------------------------------

PARAM_COMPONENTS = ("embedding", "attention", "ffn", "norms", "lm_head")


def param_counts(cfg: ModelConfig) -> dict[str, int]:
    """Exact parameter counts per component, from the closed form (no biases, untied head).

    embedding V*d; attention L*4*d^2 (q, k, v, output projections); ffn L*3*d*f (SwiGLU w1, w2,
    w3); norms (2L + 1)*d (two RMSNorm gains per block and the final one); lm_head V*d.
    """
    d, f, L, V = cfg.d_model, cfg.d_ff, cfg.num_layers, cfg.vocab_size
    counts = {
        "embedding": V * d,
        "attention": L * 4 * d * d,
        "ffn": L * 3 * d * f,
        "norms": (2 * L + 1) * d,
        "lm_head": V * d,
    }
    counts["total"] = sum(counts.values())
    return counts


# --------------------------------------------------------------------------------------------
# FLOPs
# --------------------------------------------------------------------------------------------

# max, subtract, exp, sum, divide: one floating-point operation per score element each.
SOFTMAX_FLOPS_PER_ELEMENT = 5


def forward_flops(cfg: ModelConfig, batch: int, context: int | None = None) -> dict[str, int]:
    """FLOPs of one forward pass (a multiply-add counts 2), per component and ``total``.

    Matmuls: q/k/v projections 6*N*d^2, attention scores QK^T 2*B*T^2*d, value matmul
    2*B*T^2*d, output projection 2*N*d^2, SwiGLU 6*N*d*f per layer; LM head 2*N*d*V. Softmax
    5*B*h*T^2 per layer. The full T x T score matrix is counted (the naive implementation
    computes it, masked or not). Norms, RoPE, residual adds and the loss are left out (< 1%).
    """
    T = cfg.context_length if context is None else context
    B, d, f, h, L, V = batch, cfg.d_model, cfg.d_ff, cfg.num_heads, cfg.num_layers, cfg.vocab_size
    N = B * T
    flops = {
        "qkv_proj": L * 2 * N * d * 3 * d,
        "attn_scores": L * 2 * B * T * T * d,
        "softmax": L * SOFTMAX_FLOPS_PER_ELEMENT * B * h * T * T,
        "attn_value": L * 2 * B * T * T * d,
        "out_proj": L * 2 * N * d * d,
        "ffn": L * 3 * 2 * N * d * f,
        "lm_head": 2 * N * d * V,
    }
    flops["total"] = sum(flops.values())
    return flops


def step_flops(cfg: ModelConfig, batch: int, mode: str) -> int:
    """FLOPs of one step of ``mode``: the forward pass, and 2x that for the backward pass.

    The backward pass of a matmul costs two matmuls of the same size (gradients of both inputs),
    so forward-backward and train count 3x the forward FLOPs. AdamW's ~15 FLOPs per parameter
    are left out (they are memory-bound and < 0.5% of a step here).
    """
    fwd = forward_flops(cfg, batch)["total"]
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    return fwd if mode == "forward" else 3 * fwd


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------

FP32 = 4
BF16 = 2


def format_bytes(n: float) -> str:
    """Bytes for a message: ``1.23 GiB``, ``45.6 MiB``, ``12.0 KiB``, ``512 B``."""
    for scale, unit in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
        if abs(n) >= scale:
            return f"{n / scale:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n:.0f} B"


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes a step needs: exact for parameters, gradients, optimizer state and AdamW's
    temporary; an estimate for activations.

    A step's peak is at one of two moments: the end of the forward pass (activations saved,
    no gradient yet: ``zero_grad(set_to_none=True)`` freed them) or the end of the backward
    pass and the optimizer step (every gradient, plus the temporary the foreach AdamW makes:
    one fp32 copy of every parameter). Parameters and optimizer state are there at both."""

    params_bytes: int
    grads_bytes: int
    optimizer_bytes: int
    activations_bytes: int
    optimizer_temp_bytes: int = 0

    @property
    def peak_at(self) -> str:
        """Which moment the peak is at: ``forward end`` or ``optimizer step``."""
        after = self.grads_bytes + self.optimizer_temp_bytes
        if self.activations_bytes >= after:
            return "forward end"
        return "optimizer step" if self.optimizer_bytes else "backward end"

    @property
    def total_bytes(self) -> int:
        return (self.params_bytes + self.optimizer_bytes
                + max(self.activations_bytes, self.grads_bytes + self.optimizer_temp_bytes))


def activation_bytes(cfg: ModelConfig, batch: int, mode: str, precision: str,
                     attention: str) -> int:
    """Peak bytes of activations (and autocast copies) for one step.

    With a backward pass, the tensors autograd saves: per block the two RMSNorm inputs and
    outputs (fp32), q, k, v and the rotated q, k, the attention output, four d_ff-wide SwiGLU
    tensors, and for ``naive`` attention three B*h*T^2 tensors: the masked scores (``amax``
    saves its input), exp and the probabilities, 12 bytes an element in fp32; under bf16
    autocast the scores and the probabilities' copy for ``P V`` are bf16 and exp is fp32
    (autocast runs exp in fp32): 8 bytes (``sdpa`` keeps no T^2 tensor). Then the final norm,
    the logits, their fp32 log-softmax and the logits' gradient. Under bf16 autocast matmul
    outputs take 2 bytes, and autocast adds bf16 copies of the matmul inputs and of the
    weights. ``forward`` runs under ``torch.no_grad()``: the peak is one block's working set
    (for ``naive`` the softmax's input, x - max, exp and the quotient alive at once: 16 bytes an
    element in fp32, 12 in bf16) plus the logits. Checked on an H200 against the measured
    peak of every preset at contexts 128 to 1024 (docs/GPU.md, tests/test_model.py).
    """
    B, T = batch, cfg.context_length
    d, f, h, L, V = cfg.d_model, cfg.d_ff, cfg.num_heads, cfg.num_layers, cfg.vocab_size
    N = B * T
    bf16 = precision == "bf16"
    lin = BF16 if bf16 else FP32  # bytes of a matmul output
    scores = B * h * T * T
    counts = param_counts(cfg)
    # autocast caches a bf16 copy of every matmul weight while the forward pass runs
    weight_copies = (counts["attention"] + counts["ffn"] + counts["lm_head"]) * BF16 if bf16 else 0

    if mode == "forward":
        if attention == "naive":
            attn_work = scores * (BF16 + BF16 + FP32 + FP32 if bf16 else 4 * FP32)
        else:
            attn_work = 4 * N * d * lin
        ffn_work = 3 * N * f * lin
        block = 6 * N * d * FP32 + max(attn_work, ffn_work)
        return block + N * V * lin + weight_copies

    per_layer = (
        4 * N * d * FP32  # two RMSNorms: input and normalized output
        + 5 * N * d * lin  # q, k, v, rotated q, rotated k
        + N * d * lin  # attention output (input of the output projection)
        + 4 * N * f * lin  # SwiGLU: w1 x, w3 x, silu(w1 x), product
        + (5 * N * d * BF16 if bf16 else 0)  # autocast copies of the matmul inputs
    )
    if attention == "naive":
        per_layer += scores * (BF16 + FP32 + BF16 if bf16 else 3 * FP32)
    final = 2 * N * d * FP32 + N * V * (lin + FP32 + (FP32 if bf16 else 0))
    logits_grad = N * V * FP32
    return L * per_layer + final + logits_grad + weight_copies


def optimizer_temp_bytes(cfg: ModelConfig, adamw: str) -> int:
    """The temporary of one AdamW step: the foreach implementation (torch's choice on a GPU,
    ``auto``) makes one fp32 tensor per parameter (sqrt of the second moment); the for-loop one
    per parameter in turn (the largest, the embedding or the head); fused none."""
    counts = param_counts(cfg)
    if adamw == "fused":
        return 0
    if adamw == "for-loop":
        return max(counts["embedding"], counts["lm_head"], cfg.d_ff * cfg.d_model) * FP32
    return counts["total"] * FP32


def memory_estimate(cfg: ModelConfig, batch: int, mode: str, precision: str,
                    attention: str, adamw: str = DEFAULT_ADAMW) -> MemoryEstimate:
    """Parameters (fp32), gradients (fp32, with a backward pass), AdamW state (two fp32
    moments) and its temporary (``train`` only), and the activations of ``activation_bytes``."""
    params = param_counts(cfg)["total"]
    train = mode == "train"
    return MemoryEstimate(
        params_bytes=params * FP32,
        grads_bytes=params * FP32 if mode != "forward" else 0,
        optimizer_bytes=2 * params * FP32 if train else 0,
        activations_bytes=activation_bytes(cfg, batch, mode, precision, attention),
        optimizer_temp_bytes=optimizer_temp_bytes(cfg, adamw) if train else 0,
    )
