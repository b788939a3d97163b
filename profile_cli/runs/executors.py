"""Where a sweep's configs run: this machine (``--jobs N`` at once, one GPU each on a CUDA
machine) or a Slurm cluster (``--executor slurm``, through submitit).

No heavy imports here: the CLI builds its options from this module at start-up. The local pool
is in ``profile_cli.runs.sweep``, the Slurm side in ``profile_cli.runs.slurm``.
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Optional

from nsys_parsers.errors import BadOption

EXECUTORS = ("local", "slurm")
DEFAULT_POLL_S = 10.0
# What Slurm needs beyond the nsys run itself: queueing on the node, Python start-up, mining.
SLURM_TIME_MARGIN_MIN = 5


@dataclass
class ExecutorSpec:
    """How a sweep runs its configs (the sweep's executor options, as given)."""

    executor: str = "local"
    jobs: Optional[int] = None  # local: configs at once; slurm: array tasks running at once
    slurm_partition: Optional[str] = None
    slurm_time: Optional[str] = None  # minutes or a Slurm time; default: nsys timeout + margin
    slurm_gpus_per_task: Optional[int] = None
    slurm_mem: Optional[str] = None
    slurm_args: list[str] = field(default_factory=list)  # KEY=VALUE -> #SBATCH --KEY=VALUE
    slurm_setup: list[str] = field(default_factory=list)  # shell lines run before each job
    slurm_poll_s: float = DEFAULT_POLL_S
    wait: bool = True
    cancel_on_exit: Optional[bool] = None  # None: ask on a terminal, keep the jobs otherwise

    def check(self) -> None:
        """Reject option mixes that cannot mean anything, before anything runs."""
        if self.executor not in EXECUTORS:
            raise BadOption(f"--executor: unknown value {self.executor!r}; use "
                            f"{' or '.join(EXECUTORS)}")
        if self.jobs is not None and self.jobs < 1:
            raise BadOption("--jobs must be 1 or more")
        if self.executor == "local":
            given = [opt for opt, value in (
                ("--slurm-partition", self.slurm_partition), ("--slurm-time", self.slurm_time),
                ("--slurm-gpus-per-task", self.slurm_gpus_per_task),
                ("--slurm-mem", self.slurm_mem), ("--slurm-arg", self.slurm_args),
                ("--slurm-setup", self.slurm_setup), ("--no-wait", not self.wait),
                ("--cancel-on-exit/--keep-on-exit", self.cancel_on_exit is not None))
                if value]
            if given:
                raise BadOption(f"{', '.join(given)} only apply to Slurm sweeps; add "
                                f"--executor slurm (or leave them out to run here).")
        else:
            if self.slurm_time is not None:
                slurm_minutes(self.slurm_time)
            if self.slurm_mem is not None:
                slurm_mem(self.slurm_mem)
            slurm_extra_args(self.slurm_args)


# --------------------------------------------------------------------------------------------
# local: how many configs at once, and which GPU each gets

@dataclass
class LocalPlan:
    """``workers`` configs at once; ``gpus`` the CUDA devices they are pinned to (empty on
    CPU); ``warnings`` what the user should know before it starts."""

    workers: int
    gpus: list[str]
    warnings: list[str]


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES values: the driver's own
    CUDA_VISIBLE_DEVICES list when set (ids or UUIDs), else 0..n-1 from torch."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        items = [x.strip() for x in env.split(",") if x.strip()]
        # CUDA stops at the first invalid entry; "-1" is the usual way to hide every GPU
        out = []
        for item in items:
            if item.startswith("-"):
                break
            out.append(item)
        return out
    try:
        import torch
    except ImportError:
        return []
    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def local_plan(jobs: int | None, device: str, gpus: list[str], *,
               threads: int | None = None, cores: int | None = None) -> LocalPlan:
    """How a local sweep runs: on ``cuda``, one config per GPU (``jobs`` defaults to the GPU
    count); on ``cpu``, one at a time unless ``jobs`` asks for more, with a warning."""
    cores = cores or os.cpu_count() or 1
    if device == "cuda" and gpus:
        workers = jobs or len(gpus)
        warnings = []
        if workers > len(gpus):
            warnings.append(f"--jobs {workers} with {len(gpus)} GPU(s): configs share GPUs "
                            f"and disturb each other's timings; --jobs {len(gpus)} gives each "
                            f"config its own GPU.")
        return LocalPlan(workers=workers, gpus=list(gpus), warnings=warnings)
    workers = jobs or 1
    warnings = []
    if device == "cuda":
        warnings.append("no GPU is visible (CUDA_VISIBLE_DEVICES / torch): the configs are "
                        "not pinned to GPUs.")
    elif workers > 1:
        hint = ("" if threads else f"; pass --threads {max(1, cores // workers)} so that "
                f"{workers} runs x threads fit the {cores} cores")
        warnings.append(f"--jobs {workers} on CPU: concurrent CPU runs disturb each other's "
                        f"timings (they share {cores} cores); use --jobs 1 for timings you "
                        f"report{hint}.")
    return LocalPlan(workers=workers, gpus=[], warnings=warnings)


class GpuPool:
    """Hands each running config a GPU: the least busy one, lowest index first, so that with
    as many workers as GPUs every config has a GPU of its own."""

    def __init__(self, gpus: list[str]):
        if not gpus:
            raise ValueError("GpuPool needs at least one GPU")
        self._users = {g: 0 for g in gpus}
        self._lock = threading.Lock()

    def acquire(self) -> str:
        with self._lock:
            gpu = min(self._users, key=lambda g: self._users[g])  # dicts keep the given order
            self._users[gpu] += 1
            return gpu

    def release(self, gpu: str) -> None:
        with self._lock:
            self._users[gpu] -= 1

    def busy(self) -> dict[str, int]:
        with self._lock:
            return dict(self._users)


# --------------------------------------------------------------------------------------------
# Slurm option values

_TIME = re.compile(r"^(?:(?P<d>\d+)-)?(?P<rest>\d+(?::\d+){0,2})$")


def slurm_minutes(text: str) -> int:
    """A Slurm time limit in whole minutes (rounded up): ``90``, ``1:30:00``, ``2-00:00:00``,
    ``45:00`` (minutes:seconds), ``1-12`` (days-hours), as ``sbatch --time`` reads them."""
    value = str(text).strip()
    m = _TIME.match(value)
    if not m:
        raise BadOption(f"--slurm-time: {text!r} is not a Slurm time; use minutes (90), "
                        "HH:MM:SS (1:30:00) or D-HH:MM:SS (2-00:00:00)")
    parts = [int(p) for p in m.group("rest").split(":")]
    days = int(m.group("d") or 0)
    if m.group("d") is not None:
        hours, minutes, seconds = (parts + [0, 0])[:3]
    elif len(parts) == 1:
        hours, minutes, seconds = 0, parts[0], 0
    elif len(parts) == 2:
        hours, minutes, seconds = 0, parts[0], parts[1]
    else:
        hours, minutes, seconds = parts
    total_s = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    if total_s <= 0:
        raise BadOption(f"--slurm-time: {text!r} is no time at all; give at least 1 minute")
    return -(-total_s // 60)


def default_slurm_minutes(nsys_timeout_s: float) -> int:
    """A job's time limit when --slurm-time is not given: the nsys --timeout plus a margin."""
    return int(-(-nsys_timeout_s // 60)) + SLURM_TIME_MARGIN_MIN


_MEM = re.compile(r"^\d+(?:\.\d+)?[KMGT]?B?$", re.IGNORECASE)


def slurm_mem(text: str) -> str:
    value = str(text).strip()
    if not _MEM.match(value):
        raise BadOption(f"--slurm-mem: {text!r} is not a Slurm memory size; use e.g. 16G or "
                        "64000M (sbatch --mem)")
    return value.upper().removesuffix("B") if value[-1] in "bB" else value.upper()


# sbatch options that submitit writes itself, or that have their own nsys-mine option
_OWN = {"array": None, "output": None, "error": None, "job-name": None, "open-mode": None,
        "signal": None, "wrap": None, "partition": "--slurm-partition", "p": "--slurm-partition",
        "time": "--slurm-time", "t": "--slurm-time", "gpus-per-task": "--slurm-gpus-per-task",
        "mem": "--slurm-mem"}
_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")


def slurm_extra_args(args: list[str]) -> dict[str, str | bool]:
    """``--slurm-arg KEY=VALUE`` (or a bare ``KEY`` flag) -> ``#SBATCH --KEY=VALUE`` lines."""
    out: dict[str, str | bool] = {}
    for arg in args:
        key, eq, value = str(arg).partition("=")
        key = key.strip().lstrip("-").lower().replace("_", "-")
        if not _KEY.match(key):
            raise BadOption(f"--slurm-arg {arg!r}: give KEY=VALUE with an sbatch option name, "
                            "e.g. --slurm-arg account=myproj or --slurm-arg exclusive")
        if key in _OWN:
            instead = _OWN[key]
            raise BadOption(f"--slurm-arg {arg!r}: " + (
                f"use {instead} instead" if instead else
                f"nsys-mine sets --{key} itself (one array task per config, logs under "
                f"OUT/slurm/)"))
        out[key] = value.strip() if eq else True
    return out
