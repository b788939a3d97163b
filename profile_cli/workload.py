"""Workload options: one contract for ``bench``, ``memory`` and ``python -m nvtx_model.run``
(and later ``profile``, ``sweep``, ``infer``).

Commands get the options by decorating themselves with ``@workload_options()`` and taking a
``workload: WorkloadSpec`` parameter; ``WorkloadSpec.configs()`` validates the comma lists and
returns one ``RunConfig`` per size x context x mode x precision x attention. ``config_args``
turns one ``RunConfig`` back into these options, for a child process (``nsys profile python
-m nvtx_model.run ...``). No torch here: options are checked before torch is imported.
"""

from __future__ import annotations

import difflib
import enum
import inspect
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from nsys_parsers.errors import BadOption
from nvtx_model.config import (ATTENTIONS, CUSTOM, DEFAULT_BATCH, DEFAULT_CONTEXTS, DEFAULT_VOCAB,
                               MODES, PRECISIONS, PRESETS, ModelConfig, RunConfig, Shape,
                               preset_name)

PANEL = "Workload"


class NvtxLevel(str, enum.Enum):
    off = "off"
    coarse = "coarse"
    fine = "fine"


class DeviceChoice(str, enum.Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class AdamwImpl(str, enum.Enum):
    auto = "auto"
    for_loop = "for-loop"
    foreach = "foreach"
    fused = "fused"


SizeOpt = Annotated[Optional[str], typer.Option(
    "--size", rich_help_panel=PANEL, show_default=False,
    help=f"Size preset or comma list: {', '.join(PRESETS)} (default: small). With "
         "--d-model/--d-ff/--layers/--heads: one preset to start from, or 'custom'.")]
DModelOpt = Annotated[Optional[int], typer.Option(
    "--d-model", min=2, rich_help_panel=PANEL, help="Custom shape: model width.")]
DffOpt = Annotated[Optional[int], typer.Option(
    "--d-ff", min=1, rich_help_panel=PANEL,
    help="Custom shape: SwiGLU hidden width (default: the preset's, or 4 x d-model).")]
LayersOpt = Annotated[Optional[int], typer.Option(
    "--layers", min=1, rich_help_panel=PANEL, help="Custom shape: number of blocks.")]
HeadsOpt = Annotated[Optional[int], typer.Option(
    "--heads", min=1, rich_help_panel=PANEL,
    help="Custom shape: attention heads (must divide d-model into an even head size).")]
VocabOpt = Annotated[int, typer.Option("--vocab", min=2, rich_help_panel=PANEL,
                                       help="Vocabulary size.")]
ContextOpt = Annotated[str, typer.Option(
    "--context", rich_help_panel=PANEL, help="Context length(s), comma list.")]
BatchOpt = Annotated[int, typer.Option("--batch", min=1, rich_help_panel=PANEL,
                                       help="Batch size.")]
ModeOpt = Annotated[str, typer.Option(
    "--mode", rich_help_panel=PANEL,
    help="Comma list of forward (no_grad), forward-backward, train (+ AdamW step).")]
PrecisionOpt = Annotated[str, typer.Option(
    "--precision", rich_help_panel=PANEL,
    help="Comma list of fp32, bf16 (torch.autocast; parameters stay fp32).")]
AttentionOpt = Annotated[str, typer.Option(
    "--attention", rich_help_panel=PANEL,
    help="Comma list of naive (written-out softmax, CS336 reference) and sdpa "
         "(torch.nn.functional.scaled_dot_product_attention).")]
NvtxOpt = Annotated[NvtxLevel, typer.Option(
    "--nvtx", rich_help_panel=PANEL,
    help="NVTX ranges: off, coarse (warmup/measure/step/phases), fine (+ per block and "
         "attention internals). See docs/MODEL.md.")]
DeviceOpt = Annotated[DeviceChoice, typer.Option(
    "--device", rich_help_panel=PANEL, help="auto: cuda when available, else cpu.")]
WarmupOpt = Annotated[int, typer.Option(
    "--warmup", min=0, rich_help_panel=PANEL,
    help="Steps run first and excluded from the results (0 is allowed and flagged).")]
StepsOpt = Annotated[int, typer.Option("--steps", min=1, rich_help_panel=PANEL,
                                       help="Measured steps.")]
AdamwOpt = Annotated[AdamwImpl, typer.Option(
    "--adamw", rich_help_panel=PANEL,
    help="AdamW implementation (train mode): auto (torch's choice), for-loop, foreach, fused.")]
SeedOpt = Annotated[int, typer.Option("--seed", rich_help_panel=PANEL,
                                      help="Seed for the weights and the random batch.")]
ThreadsOpt = Annotated[Optional[int], typer.Option(
    "--threads", min=1, rich_help_panel=PANEL, show_default=False,
    help="CPU threads for torch (torch.set_num_threads) during each run (default: torch's "
         "choice). 1 gives steadier CPU timings on a busy machine.")]
DbOpt = Annotated[Optional[Path], typer.Option(
    "--db", dir_okay=False,
    help="Append the rows and the run's metadata (torch, device, git commit, time) to this "
         "SQLite results database; created if missing.")]


@dataclass(frozen=True)
class WorkloadSpec:
    """The workload options as given (comma lists unparsed). ``configs()`` validates them."""

    size: Optional[str] = None
    d_model: Optional[int] = None
    d_ff: Optional[int] = None
    layers: Optional[int] = None
    heads: Optional[int] = None
    vocab: int = DEFAULT_VOCAB
    context: str = ",".join(map(str, DEFAULT_CONTEXTS))
    batch: int = DEFAULT_BATCH
    mode: str = "forward,train"
    precision: str = "fp32"
    attention: str = "naive"
    nvtx: str = "off"
    device: str = "auto"
    warmup: int = 5
    steps: int = 10
    adamw: str = "auto"
    seed: int = 0
    threads: Optional[int] = None

    def configs(self) -> list[RunConfig]:
        return expand_workload(self)


# The annotation of each WorkloadSpec field as a command-line option, in --help order.
OPTION_TYPES: dict[str, Any] = {
    "size": SizeOpt, "d_model": DModelOpt, "d_ff": DffOpt, "layers": LayersOpt,
    "heads": HeadsOpt, "vocab": VocabOpt, "context": ContextOpt, "batch": BatchOpt,
    "mode": ModeOpt, "precision": PrecisionOpt, "attention": AttentionOpt, "nvtx": NvtxOpt,
    "device": DeviceOpt, "warmup": WarmupOpt, "steps": StepsOpt, "adamw": AdamwOpt,
    "seed": SeedOpt, "threads": ThreadsOpt,
}
_ENUMS = {"nvtx": NvtxLevel, "device": DeviceChoice, "adamw": AdamwImpl}


def parse_choices(text: str, choices: tuple[str, ...], option: str) -> list[str]:
    """A comma list of known values, in order, without duplicates."""
    values: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if item not in choices:
            close = difflib.get_close_matches(item, choices, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise BadOption(f"{option}: unknown value {item!r}{hint}; use one or more of "
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


def resolve_shapes(spec: WorkloadSpec) -> list[tuple[str, Shape]]:
    """(label, shape) per size: presets by name, or one custom shape from the shape flags."""
    names = [n.strip() for n in (spec.size or "").split(",") if n.strip()]
    overrides = {"d_model": spec.d_model, "d_ff": spec.d_ff, "num_layers": spec.layers,
                 "num_heads": spec.heads}
    custom = {k: v for k, v in overrides.items() if v is not None}
    if not custom:
        if CUSTOM in names:
            raise BadOption("--size custom needs --d-model, --layers and --heads "
                            "(and optionally --d-ff)")
        shapes = []
        for name in names or ["small"]:
            canonical = preset_name(name)
            inline = parse_custom_label(name) if canonical is None else None
            if inline is not None:
                if (custom_label(inline), inline) not in shapes:
                    shapes.append((custom_label(inline), inline))
                continue
            if canonical is None:
                close = difflib.get_close_matches(name, list(PRESETS), n=1)
                hint = f" (did you mean {close[0]}?)" if close else ""
                raise BadOption(f"--size: unknown preset {name!r}{hint}; use one or more of "
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
        values = {"d_ff": 4 * spec.d_model, **custom}
    shape = Shape(**values)
    if any(shape == preset for preset in PRESETS.values()):
        return [(next(n for n, p in PRESETS.items() if p == shape), shape)]
    return [(custom_label(shape), shape)]


def expand_workload(spec: WorkloadSpec) -> list[RunConfig]:
    """One RunConfig per size x context x mode x precision x attention (in that nesting).

    Raises BadOption for unknown values, empty lists and impossible shapes."""
    shapes = resolve_shapes(spec)
    contexts = parse_ints(spec.context, "--context")
    modes = parse_choices(spec.mode, MODES, "--mode")
    precisions = parse_choices(spec.precision, PRECISIONS, "--precision")
    attentions = parse_choices(spec.attention, ATTENTIONS, "--attention")
    configs = []
    for label, shape in shapes:
        for context in contexts:
            model = ModelConfig.from_shape(shape, vocab_size=spec.vocab, context_length=context)
            for mode in modes:
                for precision in precisions:
                    for attention in attentions:
                        configs.append(RunConfig(
                            size=label, model=model, batch=spec.batch, mode=mode,
                            precision=precision, attention=attention, nvtx=spec.nvtx,
                            device=spec.device, warmup=spec.warmup, steps=spec.steps,
                            adamw=spec.adamw, seed=spec.seed, threads=spec.threads))
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
    return args + (["--threads", str(cfg.threads)] if cfg.threads is not None else [])


def workload_options(**defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a Typer command every workload option; it receives them as ``workload: WorkloadSpec``.

    ``defaults`` changes a default for this command only, e.g. ``@workload_options(warmup=1,
    steps=1)``. The command's own options follow the workload options in ``--help``.
    """
    names = [f.name for f in fields(WorkloadSpec)]
    unknown = set(defaults) - set(names)
    if unknown:
        raise TypeError(f"not workload options: {', '.join(sorted(unknown))}")
    spec_defaults = {f.name: f.default for f in fields(WorkloadSpec)}

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
               for p in inspect.signature(fn, eval_str=True).parameters.values()
               if p.name != "workload"]
        params = []
        for name in names:
            default = defaults.get(name, spec_defaults[name])
            if name in _ENUMS:
                default = _ENUMS[name](default)
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                            default=default, annotation=OPTION_TYPES[name]))

        def command(**kwargs: Any) -> Any:
            values = {n: kwargs.pop(n) for n in names}
            values = {k: v.value if isinstance(v, enum.Enum) else v for k, v in values.items()}
            return fn(workload=WorkloadSpec(**values), **kwargs)

        all_params = params + own
        command.__signature__ = inspect.Signature(all_params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in all_params}
        command.__name__ = fn.__name__
        command.__qualname__ = fn.__qualname__
        command.__doc__ = fn.__doc__
        command.__module__ = fn.__module__
        return command

    return decorate
