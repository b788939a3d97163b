"""The workload contract: which model configs a set of options means (no Typer, no torch).

``WorkloadSpec`` holds the workload options as given (comma lists unparsed);
``WorkloadSpec.configs()`` validates them and returns one ``RunConfig`` per
size x context x mode x precision x attention. ``config_args`` turns one ``RunConfig`` back into
these options, for a child process (``nsys profile python -m profile_cli.run_workload ...``).
The command-line declarations of these options live in ``profile_cli.commands.workload``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from typing import Optional

from nsys_parsers.errors import BadOption, closest_names
from nvtx_model.config import (
    ATTENTIONS,
    COMPILE_MODES,
    CUSTOM,
    DEFAULT_ADAMW,
    DEFAULT_BATCH,
    DEFAULT_CONTEXTS,
    DEFAULT_SEED,
    DEFAULT_STEPS,
    DEFAULT_VOCAB,
    DEFAULT_WARMUP,
    MODES,
    PRECISIONS,
    PRESETS,
    ModelConfig,
    RunConfig,
    Shape,
    preset_name,
)

DEFAULT_SIZE = "small"


@dataclass(frozen=True)
class ShapeOptions:
    """The model-shape options every workload takes, as given: ``--size`` (presets, a comma
    list) or one custom shape from ``--d-model``/``--d-ff``/``--layers``/``--heads``
    (``resolve_shapes``), and ``--vocab``."""

    size: Optional[str] = None  # None: default_size
    d_model: Optional[int] = None
    d_ff: Optional[int] = None
    layers: Optional[int] = None
    heads: Optional[int] = None
    vocab: int = DEFAULT_VOCAB
    # not an option: the command's size when neither --size nor a shape flag is given (a
    # custom shape from the flags alone starts from nothing, whatever this is)
    default_size: str = DEFAULT_SIZE

    @property
    def has_custom_shape(self) -> bool:
        return any(v is not None for v in (self.d_model, self.d_ff, self.layers, self.heads))


@dataclass(frozen=True)
class WorkloadSpec(ShapeOptions):
    """The workload options as given (comma lists unparsed). ``configs()`` validates them."""

    context: str = ",".join(map(str, DEFAULT_CONTEXTS))
    batch: int = DEFAULT_BATCH
    mode: str = "forward,train"
    precision: str = "fp32"
    attention: str = "naive"
    nvtx: str = "off"
    device: str = "auto"
    warmup: int = DEFAULT_WARMUP
    steps: int = DEFAULT_STEPS
    adamw: str = DEFAULT_ADAMW
    seed: int = DEFAULT_SEED
    threads: Optional[int] = None
    compile: str = "none"

    def size_tokens(self) -> list[str]:
        """The sizes asked for, one token each (the default size when none is given)."""
        return [n.strip() for n in (self.size or self.default_size).split(",") if n.strip()]

    def configs(self) -> list[RunConfig]:
        return expand_workload(self)


def _did_you_mean(item: str, choices: list[str] | tuple[str, ...]) -> str:
    close = closest_names(item, choices, n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def parse_choices(text: str, choices: tuple[str, ...], option: str) -> list[str]:
    """A comma list of known values, in order, without duplicates."""
    values: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item not in choices:
            raise BadOption(f"{option}: unknown value {item!r}{_did_you_mean(item, choices)}; "
                            f"use one or more of "
                            f"{', '.join(choices)}, separated by commas")
        if item not in values:
            values.append(item)
    if not values:
        raise BadOption(f"{option} is empty; use one or more of {', '.join(choices)}")
    return values


def parse_ints(text: str, option: str) -> list[int]:
    values: list[int] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        try:
            value = int(item)
        except ValueError:
            value = 0
        if value < 1:
            raise BadOption(f"{option}: {item!r} is not a positive integer; give a comma list "
                            "such as 128,256")
        if value not in values:
            values.append(value)
    if not values:
        raise BadOption(f"{option} is empty; give a comma list such as 128,256")
    return values


def custom_label(shape: Shape) -> str:
    return f"{CUSTOM}:d{shape.d_model}-f{shape.d_ff}-L{shape.num_layers}-h{shape.num_heads}"


_CUSTOM_LABEL = re.compile(r"^custom:d(\d+)-f(\d+)-L(\d+)-h(\d+)$", re.IGNORECASE)


def parse_custom_label(name: str) -> Shape | None:
    """``custom:d64-f256-L2-h4`` (the label runs carry) as a Shape, so that a sweep's --size
    list can mix presets and custom shapes."""
    m = _CUSTOM_LABEL.match(name.strip())
    if not m:
        return None
    d, f, layers, heads = (int(x) for x in m.groups())
    return Shape(d_model=d, d_ff=f, num_layers=layers, num_heads=heads)


def resolve_shapes(spec: ShapeOptions) -> list[tuple[str, Shape]]:
    """(label, shape) per size: presets by name (``spec.default_size`` when none is given), or
    one custom shape from the shape flags (starting from the ``--size`` preset when one is
    given, else from nothing: ``d_ff`` is then 4 x ``d_model`` unless given)."""
    names = [n.strip() for n in (spec.size or "").split(",") if n.strip()]
    overrides = {"d_model": spec.d_model, "d_ff": spec.d_ff, "num_layers": spec.layers,
                 "num_heads": spec.heads}
    custom = {k: v for k, v in overrides.items() if v is not None}
    if not custom:
        if CUSTOM in names:
            raise BadOption("--size custom needs --d-model, --layers and --heads "
                            "(and optionally --d-ff)")
        shapes = []
        for name in names or [spec.default_size]:
            canonical = preset_name(name)
            inline = parse_custom_label(name) if canonical is None else None
            if inline is not None:
                if (custom_label(inline), inline) not in shapes:
                    shapes.append((custom_label(inline), inline))
                continue
            if canonical is None:
                raise BadOption(f"--size: unknown preset {name!r}"
                                f"{_did_you_mean(name, list(PRESETS))}; use one or more of "
                                f"{', '.join(PRESETS)}, custom:dD-fF-LL-hH, or a custom shape "
                                "with --d-model, --layers, --heads")
            if (canonical, PRESETS[canonical]) not in shapes:
                shapes.append((canonical, PRESETS[canonical]))
        return shapes
    if len(names) > 1:
        raise BadOption("--d-model/--d-ff/--layers/--heads describe one custom shape; give at most "
                        f"one --size to start from (got {', '.join(names)})")
    if names and names[0] != CUSTOM:
        base = preset_name(names[0])
        if base is None:
            raise BadOption(f"--size: unknown preset {names[0]!r}; use one of "
                            f"{', '.join(PRESETS)} or custom")
        values = {**PRESETS[base].__dict__, **custom}
    else:
        missing = [f"--{k}" for k, v in (("d-model", spec.d_model), ("layers", spec.layers),
                                         ("heads", spec.heads)) if v is None]
        if missing:
            raise BadOption(f"a custom shape needs {', '.join(missing)} (or --size PRESET to "
                            "start from)")
        assert spec.d_model is not None  # checked just above
        values = {"d_ff": 4 * spec.d_model, **custom}
    shape = Shape(**values)
    if any(shape == preset for preset in PRESETS.values()):
        return [(next(n for n, p in PRESETS.items() if p == shape), shape)]
    return [(custom_label(shape), shape)]


def expand_workload(spec: WorkloadSpec) -> list[RunConfig]:
    """One RunConfig per size x context x mode x precision x attention x compile (in that
    nesting).

    Raises BadOption for unknown values, empty lists and impossible shapes."""
    shapes = resolve_shapes(spec)
    contexts = parse_ints(spec.context, "--context")
    modes = parse_choices(spec.mode, MODES, "--mode")
    precisions = parse_choices(spec.precision, PRECISIONS, "--precision")
    attentions = parse_choices(spec.attention, ATTENTIONS, "--attention")
    compiles = parse_choices(spec.compile, COMPILE_MODES, "--compile")
    configs = []
    for label, shape in shapes:
        for context in contexts:
            model = ModelConfig.from_shape(shape, vocab_size=spec.vocab, context_length=context)
            for mode, precision, attention, compile in itertools.product(
                    modes, precisions, attentions, compiles):
                configs.append(RunConfig(
                    size=label, model=model, batch=spec.batch, mode=mode,
                    precision=precision, attention=attention, nvtx=spec.nvtx,
                    device=spec.device, warmup=spec.warmup, steps=spec.steps,
                    adamw=spec.adamw, seed=spec.seed, threads=spec.threads,
                    compile=compile))
    return configs


def config_args(cfg: RunConfig) -> list[str]:
    """The workload options that select exactly ``cfg`` (for a child process)."""
    m = cfg.model
    if PRESETS.get(cfg.size) == Shape(m.d_model, m.d_ff, m.num_layers, m.num_heads):
        args = ["--size", cfg.size]
    else:
        args = ["--d-model", str(m.d_model), "--d-ff", str(m.d_ff), "--layers",
                str(m.num_layers), "--heads", str(m.num_heads)]
    args += [
        "--vocab", str(m.vocab_size), "--context", str(m.context_length),
        "--batch", str(cfg.batch), "--mode", cfg.mode, "--precision", cfg.precision,
        "--attention", cfg.attention, "--nvtx", cfg.nvtx, "--device", cfg.device,
        "--warmup", str(cfg.warmup), "--steps", str(cfg.steps), "--adamw", cfg.adamw,
        "--seed", str(cfg.seed),
    ]
    args += ["--threads", str(cfg.threads)] if cfg.threads is not None else []
    return args + (["--compile", cfg.compile] if cfg.compiled else [])
