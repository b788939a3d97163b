"""What an inference-latency run means, without torch: grids, configs, skip rules, memory.

``InferSpec`` holds the options of ``nsys-mine infer`` as given; ``InferSpec.configs()``
validates them and returns one ``InferConfig`` per size x precision x attention x batch size x
input length, all with the same output length. The grid of batch sizes x input lengths comes
from a preset (``INFER_PRESETS``), from a JSON or TOML file (``load_grid_file``), and from
``--batch-sizes``/``--input-lengths``/``--output-length``, which override single fields.

``skip_reason`` says why a config should not run: its batch x input length exceeds
``max_batch_input_product`` (default 131072), or ``inference_memory`` (weights + KV cache +
activations) exceeds the memory free on the device. ``nvtx_model.infer`` runs the rest.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from nsys_parsers.errors import BadOption
from nvtx_model.config import (
    ATTENTIONS,
    BF16,
    DEFAULT_SEED,
    DEVICES,
    FP32,
    PRECISIONS,
    ModelConfig,
    format_bytes,
    param_counts,
)
from nvtx_model.nvtx_ranges import LEVELS
from nvtx_model.workload import (
    ShapeOptions,
    WorkloadSpec,
    _did_you_mean,
    parse_choices,
    parse_ints,
    resolve_shapes,
)

DEFAULT_MAX_BATCH_INPUT_PRODUCT = 131_072
DEFAULT_RUNS = 3
DEFAULT_WARMUP = 1
DEFAULT_INFER_SIZE = "small"


@dataclass(frozen=True)
class Grid:
    """Batch sizes x input lengths, generating ``output_length`` tokens each."""

    batch_sizes: tuple[int, ...]
    input_lengths: tuple[int, ...]
    output_length: int

    @property
    def size(self) -> int:
        return len(self.batch_sizes) * len(self.input_lengths)


# Named grids (the output length is fixed within a grid). The large end of large_scale,
# batch_size_study and input_length_study exceeds the default max_batch_input_product or a
# small device's memory on purpose: those configs are skipped with the reason, not crashed on.
INFER_PRESETS: dict[str, Grid] = {
    "quick_test": Grid((1, 4), (64, 128), 32),
    "small_scale": Grid((1, 2, 4, 8), (128, 256, 512), 64),
    "medium_scale": Grid((1, 4, 8, 16, 32), (256, 512, 1024, 2048), 128),
    "large_scale": Grid((1, 8, 16, 32, 64, 128), (512, 1024, 2048, 4096, 8192), 256),
    "batch_size_study": Grid((1, 2, 4, 8, 16, 32, 64, 128, 256), (512,), 128),
    "input_length_study": Grid((1,), (64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384), 128),
}
DEFAULT_PRESET = "quick_test"
GRID_KEYS = ("batch_sizes", "input_lengths", "output_length", "max_batch_input_product")


# ---- sampling -------------------------------------------------------------------------------
def sampling_label(temperature: float, top_p: float) -> str:
    if temperature == 0:
        return "greedy"
    return f"temperature {temperature:g}" + (f", top-p {top_p:g}" if top_p < 1 else "")


def check_sampling(temperature: float, top_p: float) -> None:
    if not (temperature >= 0 and math.isfinite(temperature)):
        raise BadOption(f"--temperature must be >= 0 (0: greedy), got {temperature}")
    if not 0 < top_p <= 1:
        raise BadOption(f"--top-p must be in (0, 1], got {top_p}")
    if temperature == 0 and top_p < 1:
        raise BadOption("--top-p samples from the top tokens, but --temperature 0 is greedy "
                        "decoding; give --temperature > 0 (e.g. 0.8) with --top-p")


# ---- one config -----------------------------------------------------------------------------
@dataclass(frozen=True)
class InferConfig:
    """One point of the grid: a model, a batch of prompts and how to generate and measure.

    ``model.context_length`` is ``input_length + output_length`` (RoPE table and mask)."""

    size: str
    model: ModelConfig
    batch: int
    input_length: int
    output_length: int
    precision: str = "fp32"
    attention: str = "naive"
    nvtx: str = "off"
    device: str = "auto"
    warmup: int = DEFAULT_WARMUP
    runs: int = DEFAULT_RUNS
    seed: int = DEFAULT_SEED
    threads: int | None = None
    temperature: float = 0.0
    top_p: float = 1.0
    hf_path: str | None = None  # a local Hugging Face causal LM instead of the own model

    def __post_init__(self) -> None:
        checks = (("precision", PRECISIONS), ("attention", ATTENTIONS), ("nvtx", LEVELS),
                  ("device", DEVICES))
        for name, choices in checks:
            if getattr(self, name) not in choices:
                raise BadOption(f"--{name} {getattr(self, name)!r} is not one of: "
                                f"{', '.join(choices)}")
        if min(self.batch, self.input_length, self.output_length, self.runs) < 1 \
                or self.warmup < 0:
            raise BadOption("batch sizes, input lengths, --output-length and --runs must be "
                            f">= 1 and --warmup >= 0 (got batch {self.batch}, input "
                            f"{self.input_length}, output {self.output_length}, runs "
                            f"{self.runs}, warmup {self.warmup})")
        if self.threads is not None and self.threads < 1:
            raise BadOption(f"--threads must be >= 1, got {self.threads}")
        check_sampling(self.temperature, self.top_p)

    # the names RunConfig users (profile, sweep loop) look for
    mode = "infer"

    @property
    def context(self) -> int:
        return self.input_length

    @property
    def steps(self) -> int:
        return self.runs

    @property
    def sampling(self) -> str:
        return sampling_label(self.temperature, self.top_p)

    @property
    def tokens(self) -> int:
        """Positions a sequence reaches: the prompt and every generated token but the last
        (which is sampled, never fed back): the KV cache length."""
        return self.input_length + self.output_length - 1

    def label(self) -> str:
        return (f"{self.size} b{self.batch} in {self.input_length} out {self.output_length} "
                f"{self.precision} {self.attention}")

    @property
    def name(self) -> str:
        """A file name for the config: ``tiny_b4_in128_out32_fp32_naive_nvtx-fine_w1r3``."""
        import re

        parts = [self.size, f"b{self.batch}", f"in{self.input_length}",
                 f"out{self.output_length}", self.precision, self.attention,
                 f"nvtx-{self.nvtx}", f"w{self.warmup}r{self.runs}"]
        return re.sub(r"[^A-Za-z0-9._-]+", "-", "_".join(parts)).strip("-")

    def with_(self, **changes: Any) -> InferConfig:
        return replace(self, **changes)

    def to_dict(self, device: str | None = None) -> dict[str, Any]:
        """Plain values (sidecars, JSON); the keys of ``RunConfig.to_dict`` plus the
        inference ones (``context`` is the input length, ``steps`` the runs)."""
        m = self.model
        return {"size": self.size, "d_model": m.d_model, "d_ff": m.d_ff,
                "layers": m.num_layers, "heads": m.num_heads, "vocab": m.vocab_size,
                "context": self.input_length, "batch": self.batch, "mode": self.mode,
                "input_length": self.input_length, "output_length": self.output_length,
                "precision": self.precision, "attention": self.attention, "nvtx": self.nvtx,
                "device": device or self.device, "warmup": self.warmup, "steps": self.runs,
                "runs": self.runs, "seed": self.seed, "threads": self.threads,
                "temperature": self.temperature, "top_p": self.top_p, "model": self.hf_path}


def infer_config_args(cfg: InferConfig) -> list[str]:
    """The options of ``python -m profile_cli.run_workload --workload infer`` that select
    exactly ``cfg`` (for the child process ``nsys-mine profile`` runs under nsys; greedy
    decoding of the own model, as ``infer_configs_from_workload`` makes)."""
    from nvtx_model.config import PRESETS, Shape

    m = cfg.model
    if PRESETS.get(cfg.size) == Shape(m.d_model, m.d_ff, m.num_layers, m.num_heads):
        args = ["--size", cfg.size]
    else:
        args = ["--d-model", str(m.d_model), "--d-ff", str(m.d_ff), "--layers",
                str(m.num_layers), "--heads", str(m.num_heads)]
    if cfg.temperature or cfg.hf_path:
        raise BadOption("profile --workload infer runs the own model with greedy decoding")
    args += ["--workload", "infer", "--vocab", str(m.vocab_size),
             "--context", str(cfg.input_length), "--output-length", str(cfg.output_length),
             "--batch", str(cfg.batch), "--precision", cfg.precision,
             "--attention", cfg.attention, "--nvtx", cfg.nvtx, "--device", cfg.device,
             "--warmup", str(cfg.warmup), "--steps", str(cfg.runs), "--seed", str(cfg.seed)]
    return args + (["--threads", str(cfg.threads)] if cfg.threads is not None else [])


# ---- grids ----------------------------------------------------------------------------------
def _int_list(value: Any, key: str, source: str) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not value or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value):
        raise BadOption(f"{source}: {key} must be a non-empty list of positive integers, "
                        f"got {value!r}")
    return tuple(dict.fromkeys(value))


def load_grid_file(path: Path) -> tuple[dict[str, Any], str]:
    """The fields a JSON or TOML grid file sets (keys of ``GRID_KEYS``), and its name::

        batch_sizes = [1, 4, 16]          {"batch_sizes": [1, 4, 16],
        input_lengths = [128, 512]         "input_lengths": [128, 512],
        output_length = 64                 "output_length": 64}

    Every key is optional (missing ones come from the preset); unknown keys are errors."""
    source = f"grid file {path}"
    if not path.is_file():
        raise BadOption(f"{source} does not exist; give a .json or .toml file with "
                        "batch_sizes, input_lengths and output_length")
    suffix = path.suffix.lower()
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        if suffix == ".json":
            data = json.loads(text)
        elif suffix == ".toml":
            try:
                import tomllib
            except ImportError:  # Python 3.10
                import tomli as tomllib  # type: ignore[no-redef]
            data = tomllib.loads(text)
        else:
            raise BadOption(f"{source}: unknown format {suffix or '(no suffix)'}; name it "
                            "*.json or *.toml")
    except (ValueError, UnicodeError) as exc:  # JSONDecodeError and TOMLDecodeError
        kind = "JSON" if suffix == ".json" else "TOML"
        raise BadOption(f"{source} is not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise BadOption(f"{source} must hold an object/table with {', '.join(GRID_KEYS)}")
    unknown = [k for k in data if k not in GRID_KEYS]
    if unknown:
        raise BadOption(f"{source}: unknown key {unknown[0]!r}"
                        f"{_did_you_mean(unknown[0], GRID_KEYS)}; the keys are "
                        f"{', '.join(GRID_KEYS)}")
    fields: dict[str, Any] = {}
    for key in ("batch_sizes", "input_lengths"):
        if key in data:
            fields[key] = _int_list(data[key], key, source)
    for key in ("output_length", "max_batch_input_product"):
        if key in data:
            value = data[key]
            low = 0 if key == "max_batch_input_product" else 1
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise BadOption(f"{source}: {key} must be an integer >= {low}, got {value!r}")
            fields[key] = value
    return fields, path.name


def preset_grid(name: str) -> Grid:
    key = name.strip().lower()
    if key not in INFER_PRESETS:
        raise BadOption(f"--preset: unknown preset {name!r}"
                        f"{_did_you_mean(key, list(INFER_PRESETS))}; use one of "
                        f"{', '.join(INFER_PRESETS)}, or a grid file with --grid")
    return INFER_PRESETS[key]


# ---- the options ----------------------------------------------------------------------------
@dataclass(frozen=True)
class InferSpec(ShapeOptions):
    """The options of ``nsys-mine infer`` as given (comma lists unparsed)."""

    default_size: str = DEFAULT_INFER_SIZE
    precision: str = "fp32"
    attention: str = "naive"
    nvtx: str = "off"
    device: str = "auto"
    seed: int = DEFAULT_SEED
    threads: Optional[int] = None
    preset: Optional[str] = None
    grid_file: Optional[Path] = None
    batch_sizes: Optional[str] = None
    input_lengths: Optional[str] = None
    output_length: Optional[int] = None
    runs: int = DEFAULT_RUNS
    warmup: int = DEFAULT_WARMUP
    max_batch_input_product: Optional[int] = None  # None: the grid file's, else the default
    temperature: float = 0.0
    top_p: float = 1.0
    model: Optional[str] = None  # "hf:/path" for a local Hugging Face model

    def grid(self) -> tuple[Grid, str, int]:
        """The grid, where it came from (for the report), and the max_batch_input_product."""
        if self.preset is not None and self.grid_file is not None:
            raise BadOption("give either --preset or --grid, not both")
        limit = DEFAULT_MAX_BATCH_INPUT_PRODUCT
        if self.grid_file is not None:
            fields, source = load_grid_file(Path(self.grid_file))
            base = INFER_PRESETS[DEFAULT_PRESET]
            missing = [k for k in ("batch_sizes", "input_lengths", "output_length")
                       if k not in fields]
            if missing:
                source += f" ({', '.join(missing)} from preset {DEFAULT_PRESET})"
            limit = fields.pop("max_batch_input_product", limit)
            grid = replace(base, **fields)
        else:
            name = self.preset or DEFAULT_PRESET
            grid = preset_grid(name)
            source = f"preset {name.strip().lower()}"
        changed = []
        if self.batch_sizes is not None:
            grid = replace(grid, batch_sizes=tuple(parse_ints(self.batch_sizes,
                                                               "--batch-sizes")))
            changed.append("--batch-sizes")
        if self.input_lengths is not None:
            grid = replace(grid, input_lengths=tuple(parse_ints(self.input_lengths,
                                                                 "--input-lengths")))
            changed.append("--input-lengths")
        if self.output_length is not None:
            if self.output_length < 1:
                raise BadOption(f"--output-length must be >= 1, got {self.output_length}")
            grid = replace(grid, output_length=self.output_length)
            changed.append("--output-length")
        if changed:
            source += f" with {', '.join(changed)}"
        if self.max_batch_input_product is not None:
            if self.max_batch_input_product < 0:
                raise BadOption("--max-batch-input-product must be >= 0 (0: no limit)")
            limit = self.max_batch_input_product
        return grid, source, limit

    def hf_path(self) -> str | None:
        if self.model is None or self.model.strip() in ("", "own"):
            return None
        if not self.model.startswith("hf:") or len(self.model) == 3:
            raise BadOption(f"--model {self.model!r}: give hf:/path/to/a/local/model (a "
                            "Hugging Face causal LM folder), or leave it out for the own model")
        return self.model[3:]

    def configs(self) -> list[InferConfig]:
        return expand_infer(self)[0]


@dataclass
class InferPlan:
    """The configs of a spec and what the report says about where they came from."""

    configs: list[InferConfig]
    grid: Grid
    grid_source: str
    max_batch_input_product: int
    notes: list[str] = field(default_factory=list)


def expand_infer(spec: InferSpec) -> tuple[list[InferConfig], InferPlan]:
    """One InferConfig per size x precision x attention x batch size x input length.

    Raises BadOption for unknown values, empty lists, impossible shapes, bad grid files."""
    grid, source, limit = spec.grid()
    check_sampling(spec.temperature, spec.top_p)
    hf = spec.hf_path()
    vocab = spec.vocab
    if hf is None:
        shapes = resolve_shapes(spec)
    else:
        if spec.size is not None or spec.d_model is not None:
            raise BadOption("--model hf:PATH brings its own shape; leave out --size and "
                            "--d-model/--d-ff/--layers/--heads")
        from nvtx_model.hf_model import hf_shape, require_transformers

        require_transformers()
        shape, vocab, max_positions = hf_shape(hf)
        longest = max(grid.input_lengths) + grid.output_length
        if max_positions is not None and longest > max_positions:
            raise BadOption(f"--model hf:{hf} takes at most {max_positions} positions; the "
                            f"grid needs {longest} (input + output length)")
        shapes = [(f"hf:{Path(hf).name}", shape)]
    precisions = parse_choices(spec.precision, PRECISIONS, "--precision")
    attentions = parse_choices(spec.attention, ATTENTIONS, "--attention")
    configs = []
    for label, shape in shapes:
        for precision in precisions:
            for attention in attentions:
                for batch in grid.batch_sizes:
                    for input_length in grid.input_lengths:
                        model = ModelConfig.from_shape(
                            shape, vocab_size=vocab,
                            context_length=input_length + grid.output_length)
                        configs.append(InferConfig(
                            size=label, model=model, batch=batch,
                            input_length=input_length, output_length=grid.output_length,
                            precision=precision, attention=attention, nvtx=spec.nvtx,
                            device=spec.device, warmup=spec.warmup, runs=spec.runs,
                            seed=spec.seed, threads=spec.threads,
                            temperature=spec.temperature, top_p=spec.top_p, hf_path=hf))
    return configs, InferPlan(configs, grid, source, limit)


# ---- memory and skip rules ------------------------------------------------------------------
@dataclass(frozen=True)
class InferenceMemory:
    """Bytes one config needs: weights and KV cache exactly, activations roughly."""

    weights_bytes: int
    kv_cache_bytes: int
    activations_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_cache_bytes + self.activations_bytes


def inference_memory(cfg: ModelConfig, batch: int, input_length: int, output_length: int,
                     precision: str, attention: str) -> InferenceMemory:
    """Weights, KV cache and peak activations of generating ``output_length`` tokens.

    - weights: ``P`` parameters x 2 bytes (bf16: the weights are cast) or 4 (fp32);
    - KV cache: ``2 L B S d`` values with ``S = input_length + output_length - 1``;
    - activations, the prefill's peak (decoding one position needs far less): the residual
      stream and RMSNorm's fp32 copies ``4 N d`` x 4 bytes with ``N = B input_length``, plus
      the larger of one block's attention (q, k, v and their rotations ``6 N d``, and for
      ``naive`` four ``B h T^2`` score-sized tensors: scores, shifted, exp, probabilities) and
      its SwiGLU (``3 N f``), plus the last position's logits ``B V`` in fp32, plus the causal
      mask (``context^2`` bools) and the RoPE tables.
    """
    b = BF16 if precision == "bf16" else FP32
    B, T = batch, input_length
    d, f, h, L, V = cfg.d_model, cfg.d_ff, cfg.num_heads, cfg.num_layers, cfg.vocab_size
    N = B * T
    S = input_length + output_length - 1
    weights = param_counts(cfg)["total"] * b
    kv = 2 * L * B * S * d * b
    attn = 6 * N * d * b + (4 * B * h * T * T * b if attention == "naive" else 0)
    ffn = 3 * N * f * b
    context = cfg.context_length
    buffers = context * context + context * cfg.d_head * FP32  # mask (bool) + cos/sin
    activations = 4 * N * d * FP32 + max(attn, ffn) + B * V * FP32 + buffers
    return InferenceMemory(weights, kv, activations)


def memory_of(cfg: InferConfig) -> InferenceMemory:
    return inference_memory(cfg.model, cfg.batch, cfg.input_length, cfg.output_length,
                            cfg.precision, cfg.attention)


def skip_reason(cfg: InferConfig, *, max_batch_input_product: int,
                free_bytes: int | None, free_label: str = "free memory") -> str | None:
    """Why ``cfg`` should not run (the note of a ``skipped`` row, short enough for a table
    cell), or None.

    ``max_batch_input_product`` 0 means no limit; ``free_bytes`` None means no memory check
    (the device could not say); ``free_label`` says what ``free_bytes`` is."""
    product = cfg.batch * cfg.input_length
    if max_batch_input_product and product > max_batch_input_product:
        return (f"batch {cfg.batch} x input {cfg.input_length} = {product:,} tokens > "
                f"--max-batch-input-product {max_batch_input_product:,}")
    if free_bytes is not None:
        need = memory_of(cfg)
        if need.total_bytes > free_bytes:
            return (f"est. {format_bytes(need.total_bytes)} (weights "
                    f"{format_bytes(need.weights_bytes)} + KV "
                    f"{format_bytes(need.kv_cache_bytes)} + activations "
                    f"{format_bytes(need.activations_bytes)}) > {format_bytes(free_bytes)} "
                    f"{free_label}")
    return None


# ---- the profile workload -------------------------------------------------------------------
# What ``nsys-mine profile --workload`` runs: the bench harness's steps of --mode, or generation.
WORKLOAD_KINDS = ("bench", "infer")
DEFAULT_PROFILE_OUTPUT_LENGTH = 16


def infer_configs_from_workload(spec: WorkloadSpec, output_length: int) -> list[InferConfig]:
    """The inference configs the shared workload options mean under ``--workload infer``:
    ``--batch`` prompts of ``--context`` tokens, ``output_length`` new tokens, ``--steps``
    measured generate calls after ``--warmup`` (``--mode`` and ``--adamw`` do not apply)."""
    if output_length < 1:
        raise BadOption(f"--output-length must be >= 1, got {output_length}")
    if spec.compile.strip() not in ("", "none"):
        raise BadOption("--compile applies to --workload bench (training and forward steps); "
                        "--workload infer runs the model eagerly: leave --compile out")
    infer_spec = InferSpec(size=spec.size, d_model=spec.d_model, d_ff=spec.d_ff,
                           layers=spec.layers, heads=spec.heads, vocab=spec.vocab,
                           default_size=spec.default_size,
                           precision=spec.precision, attention=spec.attention, nvtx=spec.nvtx,
                           device=spec.device, seed=spec.seed, threads=spec.threads,
                           batch_sizes=str(spec.batch), input_lengths=spec.context,
                           output_length=output_length, runs=spec.steps, warmup=spec.warmup)
    return expand_infer(infer_spec)[0]
