"""Workload options on the command line: one declaration for ``bench``, ``memory``,
``profile``, ``sweep`` and the child process ``python -m profile_cli.run_workload``.

Commands take the options with ``cls=grouped(WORKLOAD())`` and read them as one
``WorkloadSpec`` (``WORKLOAD.of(ctx)``; ``nvtx_model.workload``: what the options mean). No
torch here: options are checked before torch is imported.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nvtx_model.config import ADAMW_IMPLS, COMPILE_MODES, DEVICES, PRESETS
from nvtx_model.nvtx_ranges import LEVELS
from nvtx_model.workload import DEFAULT_SIZE, WorkloadSpec
from profile_cli.commands.groups import OptionGroup, choice, dataclass_defaults

PANEL = "Workload"



def _size_option(default: str | None) -> Any:
    return Annotated[Optional[str], typer.Option(
        "--size", rich_help_panel=PANEL, show_default=default or DEFAULT_SIZE,
        help=f"Size preset or comma list: {', '.join(PRESETS)}, custom:dD-fF-LL-hH. With "
             "--d-model, --d-ff, --layers or --heads: one preset to start from, or 'custom'.")]


SizeOpt = _size_option(None)
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
         "(the fused scaled_dot_product_attention of PyTorch).")]
NvtxOpt = Annotated[str, typer.Option(
    "--nvtx", rich_help_panel=PANEL, **choice(LEVELS),
    help="NVTX ranges: off, coarse (warmup, measure, step, phases), fine (+ per block and "
         "attention internals). See docs/MODEL.md.")]
DeviceOpt = Annotated[str, typer.Option(
    "--device", rich_help_panel=PANEL, **choice(DEVICES),
    help="auto: cuda when available, else cpu.")]
WarmupOpt = Annotated[int, typer.Option(
    "--warmup", min=0, rich_help_panel=PANEL,
    help="Steps run first and excluded from the results (0 is allowed and flagged).")]
StepsOpt = Annotated[int, typer.Option("--steps", min=1, rich_help_panel=PANEL,
                                       help="Measured steps.")]
AdamwOpt = Annotated[str, typer.Option(
    "--adamw", rich_help_panel=PANEL, **choice(ADAMW_IMPLS),
    help="AdamW implementation (train mode): auto (torch's choice), for-loop, foreach, fused.")]
SeedOpt = Annotated[int, typer.Option("--seed", rich_help_panel=PANEL,
                                      help="Seed for the weights and the random batch.")]
ThreadsOpt = Annotated[Optional[int], typer.Option(
    "--threads", min=1, rich_help_panel=PANEL, show_default=False,
    help="CPU threads for torch (torch.set_num_threads) during each run (default: torch's "
         "choice). 1 gives steadier CPU timings on a busy machine.")]
CompileOpt = Annotated[str, typer.Option(
    "--compile", rich_help_panel=PANEL, metavar="MODE",
    help=f"torch.compile the model: comma list of {', '.join(COMPILE_MODES)} (none: eager; "
         "reduce-overhead and max-autotune replay CUDA graphs on a GPU). On CPU it needs a "
         "C++ compiler; the first steps compile (keep --warmup).")]
DbOpt = Annotated[Optional[Path], typer.Option(
    "--db", dir_okay=False,
    help="Append the rows and the run's metadata (torch, device, git commit, time) to this "
         "SQLite results database; created if missing.")]


# The annotation of each WorkloadSpec field as a command-line option, in --help order.
OPTION_TYPES: dict[str, Any] = {
    "size": SizeOpt, "d_model": DModelOpt, "d_ff": DffOpt, "layers": LayersOpt,
    "heads": HeadsOpt, "vocab": VocabOpt, "context": ContextOpt, "batch": BatchOpt,
    "mode": ModeOpt, "precision": PrecisionOpt, "attention": AttentionOpt, "nvtx": NvtxOpt,
    "device": DeviceOpt, "warmup": WarmupOpt, "steps": StepsOpt, "adamw": AdamwOpt,
    "seed": SeedOpt, "threads": ThreadsOpt, "compile": CompileOpt,
}


def _annotate(name: str, defaults: dict[str, Any]) -> Any:
    """--size of one command: its help shows the size the command starts from."""
    if name == "size":
        return _size_option(defaults["size"] or defaults["default_size"])
    return None


# Every workload option -> ``WorkloadSpec``; a command takes them with
# ``cls=grouped(WORKLOAD(...))`` and reads ``WORKLOAD.of(ctx)``. ``WORKLOAD(warmup=1, steps=1)``
# changes defaults for one command; ``default_size="tiny"`` its size when neither --size nor a
# shape flag is given (--size itself stays unset, so --d-model & co. alone describe a shape from
# nothing, as in every command). ``annotations={"nvtx": ...}`` declares an option differently
# for one command (profile and sweep take program range kinds in --nvtx too).
WORKLOAD = OptionGroup("workload", WorkloadSpec, OPTION_TYPES, dataclass_defaults(WorkloadSpec),
                       hidden=("default_size",), annotate=_annotate)
