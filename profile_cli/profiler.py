"""Run the NVTX-instrumented Transformer under ``nsys profile`` and mine what it recorded.

``profile_config(cfg, out_dir, spec)`` is the library behind ``nsys-mine profile``; ``sweep``
(``profile_cli.sweeper``) calls it once per config. Each run:

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
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nsys_parsers.errors import BadOption, NsysMineError, NsysNotFound
from nsys_parsers.nsys_tool import INSTALL_HINT, find_nsys, nsys_version, user_cache_dir
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import RunConfig
from nvtx_model.workload import config_args

TRACE_GPU = "cuda,nvtx,osrt"
TRACE_CPU = "nvtx,osrt"
MARKER_ENV = "NSYS_MINE_RUN_ID"
WINDOW = "measure"
DEFAULT_TIMEOUT_S = 900


class ProfileFailed(NsysMineError):
    """The profiled workload crashed, ran out of memory, or nsys hung (profile command only)."""


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
class ProcessOutcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    killed_pids: list[int]


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


# --------------------------------------------------------------------------------------------
# nsys discovery and installation

def locate_nsys(explicit: str | None = None, *, install: bool = False) -> tuple[Path, str]:
    """The nsys binary to use and its version; installs into the user cache on request."""
    path = find_nsys(explicit)
    if path is None and install:
        path = install_nsys()
    if path is None:
        raise NsysNotFound(f"nsys not found; {INSTALL_HINT}; or pass --install-nsys to fetch "
                           f"nsys 2022.4 into {user_cache_dir() / 'nsys'} (Debian/Ubuntu x86-64).")
    return path, nsys_version(path)


def installer_script() -> Path:
    return Path(__file__).resolve().parent.parent / "nsys_parsers" / "install_nsys.sh"


def install_nsys(root: Path | None = None, timeout_s: float = 900) -> Path:
    """Fetch Nsight Systems 2022.4 from Debian's non-free archive into the user cache."""
    root = root or user_cache_dir() / "nsys"
    script = installer_script()
    try:
        proc = subprocess.run(["bash", str(script), str(root)], capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NsysNotFound(f"installing nsys failed ({exc}); {INSTALL_HINT}.") from None
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise NsysNotFound(f"installing nsys failed ({tail}); {INSTALL_HINT}.")
    return Path(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------------------------
# argv and process handling

def default_trace(device: str) -> str:
    return TRACE_GPU if device == "cuda" else TRACE_CPU


def resolve_device(requested: str) -> str:
    """'cpu' or 'cuda' for 'auto', asking torch (the workload needs it anyway)."""
    if requested != "auto":
        return requested
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def nsys_argv(nsys: str | os.PathLike, out_base: Path, *, trace: str, quiet_sampling: bool,
              extra_args: list[str], child: list[str]) -> list[str]:
    argv = [str(nsys), "profile", f"--trace={trace}"]
    if quiet_sampling:
        argv += ["--sample=none", "--cpuctxsw=none"]
    argv += ["--export=sqlite", "--force-overwrite=true", "--output", str(out_base)]
    return argv + list(extra_args) + list(child)


def workload_argv(cfg: RunConfig) -> list[str]:
    """The child process nsys runs: this Python, ``profile_cli.run_workload``, the config."""
    return [sys.executable, "-m", "profile_cli.run_workload", *config_args(cfg)]


def marked_pids(marker: str) -> list[int]:
    """PIDs of processes whose environment carries this run's marker (nsys and its agents
    inherit it; an agent that hangs is re-parented to PID 1, out of our process group)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_marked_processes(marker: str, grace_s: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL, every leftover process of this run; returns their PIDs."""
    pids = marked_pids(marker)
    if not pids:
        return []
    _kill(pids, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and marked_pids(marker):
        time.sleep(0.1)
    _kill(marked_pids(marker), signal.SIGKILL)
    return pids


def run_with_timeout(argv: list[str], timeout_s: float, *, env: dict[str, str] | None = None,
                     cwd: str | None = None) -> ProcessOutcome:
    """Run argv in its own session; on timeout or Ctrl-C end its process group and every
    process that carries this run's marker, by PID."""
    marker = uuid.uuid4().hex
    env = dict(os.environ if env is None else env)
    env[MARKER_ENV] = marker
    t0 = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", env=env, cwd=cwd, start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        _end_group(proc)
        out, err = proc.communicate()
    except KeyboardInterrupt:
        _end_group(proc)
        proc.communicate()
        end_marked_processes(marker)
        raise
    killed = end_marked_processes(marker)
    return ProcessOutcome(returncode=proc.returncode, stdout=out or "", stderr=err or "",
                          timed_out=timed_out, wall_s=time.monotonic() - t0, killed_pids=killed)


def _end_group(proc: subprocess.Popen) -> None:
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


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


def tail(text: str, lines: int = 12) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


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


def profile_config(cfg, out_dir: Path, spec: NsysSpec, *, force: bool = False,
                   nsys: tuple[Path, str] | None = None) -> ProfileResult:
    """Profile one config under nsys; never raises for workload failures (see ``status``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = cfg.name
    base = out_dir / name
    rep, sqlite, sidecar = (base.with_name(name + ext) for ext in (".nsys-rep", ".sqlite",
                                                                   ".json"))
    existing = [p for p in (rep, sqlite) if p.exists()]
    if existing and not force:
        raise BadOption(f"{existing[0]} exists; pass --force to overwrite it or choose "
                        f"another --out folder.")
    nsys_path, version = nsys or locate_nsys(spec.nsys, install=spec.install)
    device = resolve_device(cfg.device)
    trace = spec.trace or default_trace(device)
    argv = nsys_argv(nsys_path, base, trace=trace, quiet_sampling=spec.quiet_sampling,
                     extra_args=spec.extra_args, child=workload_argv(cfg))
    for p in existing:
        p.unlink()
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    outcome = run_with_timeout(argv, spec.timeout_s)
    row = _workload_row(outcome.stdout)
    status, reason = classify(outcome, cfg, row)
    notes = []
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
        window=f"{WINDOW} (warmup filtered out when mining)", workload_row=row, notes=notes)
    write_sidecar(result, started)
    return result


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


# --------------------------------------------------------------------------------------------
# mining a profiled run

@dataclass
class ProfileReport:
    """What ``nsys-mine profile`` shows: the run, its ranges, dominant kernels, top kernels."""

    export: str | None
    config: dict[str, Any]
    ranges: list[dict[str, Any]]
    dominant: list[dict[str, Any]]
    kernels: list[dict[str, Any]]
    notes: list[str]
    sentences: list[str]
    status: str
    reason: str | None


def mine_profile(result: ProfileResult, *, top: int = 15) -> ProfileReport:
    from reports.analysis import ExportAnalysis

    notes = list(result.notes)
    if result.status != "ok" or result.sqlite is None:
        return ProfileReport(export=result.sqlite, config=result.config, ranges=[], dominant=[],
                             kernels=[], notes=notes, sentences=[], status=result.status,
                             reason=result.reason)
    with ExportAnalysis(result.sqlite, within=WINDOW) as analysis:  # read once, for all three
        rs = analysis.ranges()
        notes += [f"numbers cover the {WINDOW!r} range only: warmup steps are filtered out "
                  f"when mining (not by an nsys capture range)."]
        if analysis.has_kernels:
            wanted = [n for n in nv.HEADLINE_RANGES if any(r["range"] == n for r in rs.rows)]
            dom = analysis.dominant(range_names=wanted or None)
            ks = analysis.kernels(top=top)
            dominant, kernels, sentences = dom.rows, ks.rows, dom.sentences
        else:
            dominant, kernels, sentences = [], [], []
            notes.append(f"no CUDA kernels exist in this run (trace {result.trace}, device "
                         f"{result.config['device']}): the range times are CPU times.")
    order = {n: i for i, n in enumerate(nv.HEADLINE_RANGES)}
    ranges = sorted(rs.rows, key=lambda r: (order.get(r["range"], len(order)), -r["total_ns"]))
    return ProfileReport(export=result.sqlite, config=result.config, ranges=ranges,
                         dominant=dominant, kernels=kernels, notes=notes, sentences=sentences,
                         status=result.status, reason=result.reason)
