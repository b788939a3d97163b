"""How nsys runs (``NsysSpec`` and its argv) and what one run leaves (``ProfileResult``): shared
by runs of the built-in model (``nsys_run``) and of your own command (``command``)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TRACE_GPU = "cuda,nvtx,osrt"
TRACE_CPU = "nvtx,osrt"
DEFAULT_TIMEOUT_S = 900


@dataclass
class NsysSpec:
    """How to run nsys. ``trace=None`` picks cuda,nvtx,osrt with a GPU, nvtx,osrt without."""

    nsys: str | None = None
    trace: str | None = None
    quiet_sampling: bool = True  # --sample=none --cpuctxsw=none (avoids the agent hang)
    extra_args: list[str] = field(default_factory=list)
    timeout_s: float = DEFAULT_TIMEOUT_S
    install: bool = False


@dataclass
class ProfileResult:
    name: str
    config: dict[str, Any]
    status: str
    reason: str | None
    sqlite: str | None
    nsys_rep: str | None
    sidecar: str
    wall_s: float
    command: list[str]
    nsys_version: str
    trace: str
    window: str
    workload_row: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    gpu: str | None = None  # CUDA_VISIBLE_DEVICES the run was pinned to, when it was
    # a run of your own command (profile_cli.runs.command) instead of the built-in model
    kind: str = "model"
    exit_code: int | None = None  # the program's exit status (commands)
    log: str | None = None  # the program's output (commands)
    launcher: dict[str, Any] | None = None  # what nvtx_model.launch reported (commands)

    @property
    def minable(self) -> bool:
        """Whether the export is worth mining: a model run that ended ok, or a command whose
        export exists, also when the program failed (its ranges and kernels tell why)."""
        if self.kind == "command":
            return self.sqlite is not None and self.status in ("ok", "failed", "oom")
        return self.status == "ok"


def default_trace(device: str) -> str:
    return TRACE_GPU if device == "cuda" else TRACE_CPU


def nsys_argv(nsys: str | os.PathLike, out_base: Path, *, trace: str, quiet_sampling: bool,
              extra_args: list[str], child: list[str]) -> list[str]:
    argv = [str(nsys), "profile", f"--trace={trace}"]
    if quiet_sampling:
        argv += ["--sample=none", "--cpuctxsw=none"]
    argv += ["--export=sqlite", "--force-overwrite=true", "--output", str(out_base)]
    return argv + list(extra_args) + list(child)


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
