"""Run the NVTX-instrumented Transformer under ``nsys profile``.

``profile_config(cfg, out_dir, spec)`` is the library behind ``nsys-mine profile``; ``sweep``
(``profile_cli.runs.sweep``) calls it once per config; ``profile_cli.runs.mining`` mines the result.
A ``CommandConfig`` (your own program, ``profile -- COMMAND``) goes to
``profile_cli.runs.command``; the argv and the result are ``profile_cli.runs.nsys_spec``'s.
Each run of the model:

1. finds nsys (``--nsys``, ``$NSYS``, PATH, CUDA/Nsight install folders, the project's cached
   install, the user cache; ``--install-nsys`` fetches the Debian package into the user cache),
2. launches ``nsys profile --trace=... --sample=none --cpuctxsw=none --export=sqlite -o OUT
   python -m profile_cli.run_workload ...`` as a child in its own process group, with a timeout,
3. classifies the outcome (ok / oom / skipped / failed / timeout) from the exit status and the
   JSON result line the workload prints, ends leftover nsys processes of THIS run by PID (they
   carry a marker environment variable), verifies the export and writes a JSON sidecar,
4. mines the export restricted to the ``measure`` range: warmup steps are left out by filtering
   when mining (reliable on every nsys; nsys's NVTX capture range needs registered strings and
   differs between versions), and the report says so.
"""

from __future__ import annotations

import json
import os
import platform
import random
import re
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsys_parsers.errors import BadOption, NsysMineError
from nsys_parsers.nsys_tool import locate_nsys
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import RunConfig
from nvtx_model.infer_config import InferConfig
from nvtx_model.workload import config_args
from profile_cli.runs.nsys_spec import (
    DEFAULT_TIMEOUT_S,
    TRACE_CPU,
    TRACE_GPU,
    NsysSpec,
    ProfileResult,
    default_trace,
    nsys_argv,
    tail,
)
from profile_cli.runs.process import ProcessOutcome, run_with_timeout

if TYPE_CHECKING:
    import threading

__all__ = ["DEFAULT_TIMEOUT_S", "TRACE_CPU", "TRACE_GPU", "NsysSpec", "ProfileFailed",
           "ProfileResult", "default_trace", "nsys_argv", "profile_config", "tail"]


class ProfileFailed(NsysMineError):
    """The profiled workload crashed, ran out of memory, or nsys hung (profile command only)."""


# --------------------------------------------------------------------------------------------
# argv

def resolve_device(requested: str) -> str:
    """'cpu' or 'cuda' for 'auto', asking torch (the workload needs it anyway)."""
    if requested != "auto":
        return requested
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def workload_argv(cfg: RunConfig | InferConfig) -> list[str]:
    """The child process nsys runs: this Python, ``profile_cli.run_workload``, the config
    (a bench step config, or an inference config: ``--workload infer``)."""
    from nvtx_model.infer_config import infer_config_args

    args = infer_config_args(cfg) if isinstance(cfg, InferConfig) else config_args(cfg)
    return [sys.executable, "-m", "profile_cli.run_workload", *args]


# --------------------------------------------------------------------------------------------
# one profiled config

def _workload_row(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and "status" in row:
                return row
    return None


_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|out of memory|MemoryError",
                  re.IGNORECASE)


def classify(outcome: ProcessOutcome, cfg, row: dict | None) -> tuple[str, str | None]:
    where = f"size {cfg.size} context {cfg.context}"
    if outcome.timed_out:
        extra = (f"; ended leftover nsys processes {outcome.killed_pids}"
                 if outcome.killed_pids else "")
        return "timeout", f"nsys or the workload did not finish within the timeout{extra}"
    if row is not None and row.get("status") in ("oom", "skipped"):
        why = row.get("note") or row.get("status")
        return row["status"], (f"out of memory at {where}: {why}" if row["status"] == "oom"
                               else f"skipped at {where}: {why}")
    if outcome.returncode != 0:
        if _OOM.search(outcome.stderr):
            return "oom", f"out of memory at {where}"
        return "failed", (f"the workload exited with status {outcome.returncode}:\n"
                          f"{tail(outcome.stderr) or '(no stderr)'}")
    if row is None:
        return "failed", ("the workload printed no result line:\n"
                          f"{tail(outcome.stderr) or tail(outcome.stdout) or '(no output)'}")
    return "ok", None


def _verify_export(sqlite: Path) -> str | None:
    from nsys_parsers.export import open_export
    from nsys_parsers.schema import NVTX_TABLE

    if not sqlite.exists():
        return f"nsys wrote no SQLite export ({sqlite.name})"
    try:
        with open_export(sqlite) as ex:
            if not ex.has_table(NVTX_TABLE):
                return ("the export has no NVTX_EVENTS table: nsys recorded no NVTX ranges "
                        "(with the PyPI nvtx package, nsys 2022.4 needs nvtx<=0.2.11)")
    except NsysMineError as exc:
        return f"the export is not usable: {exc}"
    return None


# nsys (2022.4 here) now and then fails for reasons of its own when other nsys runs start or
# end at the same moment on a loaded machine (a job array's tasks on one node, configs run side
# by side): its session does not start, or its processes lose track of each other. The run is
# made again, after a short random pause. Each entry: what nsys prints (all of it), and why.
NSYS_RACES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("Local Endpoint is not available",),
     "could not start its session (Local Endpoint is not available: another nsys was "
     "starting at the same moment)"),
    (("ProcessWaiter", "sem_open"),
     "lost track of the workload's process (its ProcessWaiter's sem_open failed: nsys's own "
     "processes raced each other on a loaded machine)"),
    (("Connection to the Agent lost",),
     "lost its connection to its agent (Connection to the Agent lost)"),
)
START_RETRIES = 2


def nsys_race(stderr: str) -> str | None:
    """Why nsys failed for a reason of its own that a second try does not meet, or None."""
    for needles, why in NSYS_RACES:
        if all(n in stderr for n in needles):
            return why
    return None


def run_nsys(argv: list[str], timeout_s: float, *, env: dict[str, str] | None,
             stop: threading.Event | None, notes: list[str]) -> ProcessOutcome:
    """``run_with_timeout`` of an nsys command line, made again (at most ``START_RETRIES``
    times) when it failed for one of nsys's own races (``NSYS_RACES``); each retry is said
    in ``notes``. Only our own workload runs this way: running it twice is harmless."""
    for attempt in range(START_RETRIES + 1):
        outcome = run_with_timeout(argv, timeout_s, env=env, stop=stop)
        why = None if outcome.timed_out or outcome.returncode == 0 else nsys_race(
            outcome.stderr)
        if why is None or attempt == START_RETRIES:
            return outcome
        notes.append(f"nsys {why}; the run was made again.")
        time.sleep(0.5 + 2 * random.random())
    return outcome


def profile_config(cfg, out_dir: Path, spec: NsysSpec, *, force: bool = False,
                   nsys: tuple[Path, str] | None = None, gpu: str | None = None,
                   stop: threading.Event | None = None) -> ProfileResult:
    """Profile one config under nsys; never raises for workload failures (see ``status``).
    ``gpu`` pins the run to that CUDA device (CUDA_VISIBLE_DEVICES); ``stop`` lets another
    thread end the run (it then raises KeyboardInterrupt, like Ctrl-C). A ``CommandConfig``
    (your own program) runs through ``profile_cli.runs.command.profile_command``."""
    from profile_cli.runs.command import CommandConfig, profile_command

    if isinstance(cfg, CommandConfig):
        return profile_command(cfg, out_dir, spec, force=force, nsys=nsys, gpu=gpu, stop=stop)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = cfg.name
    base = out_dir / name
    rep, sqlite, sidecar = (base.with_name(name + ext) for ext in (".nsys-rep", ".sqlite",
                                                                   ".json"))
    existing = [p for p in (rep, sqlite) if p.exists()]
    if existing and not force:
        raise BadOption(f"{existing[0]} exists; pass --force to overwrite it or choose "
                        f"another --out-dir folder.")
    nsys_path, version = nsys or locate_nsys(spec.nsys, install=spec.install)
    device = resolve_device(cfg.device)
    trace = spec.trace or default_trace(device)
    graph_args, notes = compile_trace_args(cfg, nsys_path, version, trace, device,
                                           spec.extra_args)
    argv = nsys_argv(nsys_path, base, trace=trace, quiet_sampling=spec.quiet_sampling,
                     extra_args=spec.extra_args + graph_args, child=workload_argv(cfg))
    for p in existing:
        p.unlink()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    env = None
    if gpu is not None:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
    outcome = run_nsys(argv, spec.timeout_s, env=env, stop=stop, notes=notes)
    row = _workload_row(outcome.stdout)
    status, reason = classify(outcome, cfg, row)
    if status == "ok":
        problem = _verify_export(sqlite)
        if problem:
            status, reason = "failed", problem
    if outcome.killed_pids and status != "timeout":
        notes.append(f"ended {len(outcome.killed_pids)} leftover nsys process(es) of this run "
                     f"(PIDs {outcome.killed_pids}).")
    result = ProfileResult(
        name=name, config=cfg.to_dict(device), status=status, reason=reason,
        sqlite=str(sqlite) if sqlite.exists() else None,
        nsys_rep=str(rep) if rep.exists() else None, sidecar=str(sidecar),
        wall_s=round(outcome.wall_s, 3), command=argv, nsys_version=version, trace=trace,
        window=f"{nv.MEASURE} (warmup filtered out when mining)", workload_row=row, notes=notes,
        gpu=gpu if gpu is not None else (os.environ.get("CUDA_VISIBLE_DEVICES")
                                         if device == "cuda" else None))
    write_sidecar(result, started)
    return result


GRAPH_TRACE_OPTION = "--cuda-graph-trace"
_GRAPH_TRACE_SUPPORT: dict[str, bool] = {}


def supports_graph_trace(nsys: Path) -> bool:
    """Whether this nsys takes ``--cuda-graph-trace`` (2021.x on; its ``profile --help``)."""
    key = str(nsys)
    if key not in _GRAPH_TRACE_SUPPORT:
        import subprocess

        try:
            out = subprocess.run([key, "profile", "--help"], capture_output=True, text=True,
                                 timeout=120)
            _GRAPH_TRACE_SUPPORT[key] = GRAPH_TRACE_OPTION in out.stdout + out.stderr
        except (OSError, subprocess.TimeoutExpired):
            _GRAPH_TRACE_SUPPORT[key] = False
    return _GRAPH_TRACE_SUPPORT[key]


def compile_trace_args(cfg: Any, nsys: Path, version: str, trace: str, device: str,
                       extra_args: list[str]) -> tuple[list[str], list[str]]:
    """(nsys options, notes) for a compiled model: node-level CUDA graph traces, so that the
    kernels of the graphs that reduce-overhead and max-autotune replay are recorded (nsys's
    default traces each graph launch as a whole), where this nsys can and the run traces CUDA."""
    if not isinstance(cfg, RunConfig) or not cfg.compiled:
        return [], []
    if "cuda" not in trace.split(","):
        if cfg.compile in ("reduce-overhead", "max-autotune") and device != "cuda":
            return [], [f"--compile {cfg.compile} on {device}: no CUDA graphs there (torch "
                        f"compiles as in mode default)."]
        return [], []
    if any(a.split("=")[0] == GRAPH_TRACE_OPTION for a in extra_args):
        return [], []  # the user chose
    if supports_graph_trace(nsys):
        return [f"{GRAPH_TRACE_OPTION}=node"], [
            "asked nsys for node-level CUDA graph traces (--cuda-graph-trace=node): the "
            "kernels of the compiled model's CUDA graphs are recorded one by one."]
    return [], [f"nsys {version} has no {GRAPH_TRACE_OPTION} option: CUDA graphs are traced "
                f"as whole launches (`CUDA graph <id>` rows; their kernels are not recorded)."]


def write_sidecar(result: ProfileResult, started: str) -> None:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    data = asdict(result)
    data.update({"started_utc": started, "python": platform.python_version(),
                 "torch": torch_version, "host": platform.node()})
    Path(result.sidecar).write_text(json.dumps(data, indent=2, default=str) + "\n")
