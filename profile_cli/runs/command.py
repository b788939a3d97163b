"""Your own program under ``nsys profile``: ``nsys-mine profile [OPTIONS] -- COMMAND [ARGS...]``.

``CommandConfig`` is one program run (the command, its working directory, the NVTX ranges to
add); ``profile_command`` runs it under nsys with the project's defaults and safety (the
trace set, ``--sample=none --cpuctxsw=none``, a timeout, Ctrl-C, leftover processes ended by
PID: ``nsys_run`` and ``process``), and writes next to the export:

- ``NAME.log``: the program's stdout and stderr (and nsys's own lines);
- ``NAME.json``: the sidecar (``kind: "command"``; the command, working directory, the
  environment that matters, the nsys command, versions, exit code, what the launcher did).

With ``--nvtx`` (``modules[:DEPTH]``, ``ops``, ``steps``) a Python command (``python SCRIPT``,
``python -m MODULE``, ``python -c CODE``) runs through ``nvtx_model/launch.py``, which adds
the ranges when the program imports torch; the program itself is not changed.

The sweep over a command (``sweep --command "python train.py --bs {bs}" --grid bs=8,16``) plans
one ``CommandConfig`` per combination of the grid (``plan_command_sweep``).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import shlex
import shutil
import sys
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nsys_parsers.errors import BadOption, NsysMineError
from nsys_parsers.nsys_tool import locate_nsys
from nvtx_model.program_nvtx import ProgramNvtx
from profile_cli.runs.nsys_spec import (
    NsysSpec,
    ProfileResult,
    default_trace,
    nsys_argv,
    tail,
)
from profile_cli.runs.process import run_with_timeout

if TYPE_CHECKING:
    import threading

KIND = "command"
LAUNCHER = Path(__file__).resolve().parent.parent.parent / "nvtx_model" / "launch.py"
NAME_MAX = 96
# Environment variables that change what a PyTorch program does on the GPU, kept in the
# sidecar; anything that looks like a secret is left out even when its prefix matches.
ENV_NAMES = ("CUDA_VISIBLE_DEVICES", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS",
             "CUDA_MODULE_LOADING", "NVIDIA_TF32_OVERRIDE", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
             "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT")
ENV_PREFIXES = ("PYTORCH_", "TORCH_", "TORCHINDUCTOR_", "NCCL_", "CUBLAS", "CUDNN_")
SECRET = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE|CERT",
                    re.IGNORECASE)
_PYTHON = re.compile(r"^(python|pypy)(\d+(\.\d+)*)?[tdm]*(\.exe)?$")
# python's own options: no value, or a value (attached, or the next argument)
_PY_FLAGS = set("bBdEiIOPqsSuvx")
_PY_VALUED = set("WX")
_OOM = re.compile(r"OutOfMemoryError|CUDA out of memory|out of memory|MemoryError",
                  re.IGNORECASE)
# nsys's own lines in the program's log (it writes to the same stdout)
_NSYS_LINE = re.compile(r"^(Generating '|\[\d/\d\] |Generated:$|\s+/.*\.(nsys-rep|sqlite)$|"
                        r"Collecting data\.\.\.|WARNING: .*(CPU|sampling|backtrace))")


class ProgramNotFound(NsysMineError):
    """The command to profile does not exist (not a file, not on PATH)."""


@dataclass
class CommandConfig:
    """One run of a command under nsys: ``argv`` as the user gave it, run in ``cwd``, with
    the NVTX ranges of ``nvtx`` added (``ProgramNvtx`` text); ``grid``: the values this run
    took in a command sweep. ``name`` is made from the command when not given."""

    argv: list[str]
    cwd: str = field(default_factory=os.getcwd)
    nvtx: str = "off"
    grid: dict[str, str] | None = None
    device: str = "auto"
    name: str = ""

    def __post_init__(self) -> None:
        self.nvtx = str(ProgramNvtx.parse(self.nvtx))
        if not self.name:
            self.name = command_name(self.argv, self.nvtx)

    @property
    def command_line(self) -> str:
        return shlex.join(self.argv)

    def to_dict(self, device: str | None = None) -> dict[str, Any]:
        return {"kind": KIND, "command": self.command_line, "argv": list(self.argv),
                "cwd": self.cwd, "nvtx": self.nvtx, "grid": self.grid,
                "device": device or self.device}

    def label(self) -> str:
        if self.grid:
            return " ".join(f"{k}={v}" for k, v in self.grid.items())
        return self.command_line


# --------------------------------------------------------------------------------------------
# the command

@dataclass
class PythonCommand:
    """``python [FLAGS] (SCRIPT | -m MODULE | -c CODE) [ARGS]``, taken apart."""

    python: str
    flags: list[str]
    kind: str  # script, module, code
    target: str
    args: list[str]


def is_python(executable: str) -> bool:
    name = os.path.basename(executable)
    if _PYTHON.match(name):
        return True
    found = shutil.which(executable)
    return found is not None and os.path.realpath(found) == os.path.realpath(sys.executable)


def python_command(argv: list[str]) -> PythonCommand | None:
    """The parts of a Python command line; None when ``argv`` does not run Python. A Python
    command that runs no program file, module or code (``python``, ``python -``,
    ``python --version``) is an error: there is nothing to add ranges to."""
    if not argv or not is_python(argv[0]):
        return None
    flags: list[str] = []
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "--check-hash-based-pycs" and i + 1 < len(argv):
            flags += argv[i:i + 2]
            i += 2
            continue
        if arg == "-" or arg.startswith("--") or not arg.startswith("-"):
            break
        letters = arg[1:]  # a cluster of one-letter options: -uB, -Werror, -X dev, -m mod
        for j, ch in enumerate(letters):
            before, value = letters[:j], letters[j + 1:]
            if ch in "mc" or ch in _PY_VALUED:
                if before:
                    flags.append("-" + before)
                taken = 1
                if not value:
                    if i + 1 >= len(argv):
                        raise BadOption(f"`{shlex.join(argv)}`: -{ch} needs a value")
                    value, taken = argv[i + 1], 2
                if ch in "mc":
                    return PythonCommand(argv[0], flags, "module" if ch == "m" else "code",
                                         value, argv[i + taken:])
                flags += [f"-{ch}", value]
                i += taken
                break
            if ch not in _PY_FLAGS:
                raise BadOption(f"`{shlex.join(argv)}` runs no program (python option "
                                f"-{ch}); give a script, -m MODULE or -c CODE")
        else:
            flags.append(arg)
            i += 1
    if i >= len(argv) or argv[i] == "-" or argv[i].startswith("--"):
        raise BadOption(f"`{shlex.join(argv)}` runs no program file; give a script, "
                        f"-m MODULE or -c CODE after the Python options")
    return PythonCommand(argv[0], flags, "script", argv[i], argv[i + 1:])


def launched_argv(argv: list[str], nvtx: str, report: Path) -> list[str]:
    """The command with the launcher between Python and the program, when ranges are asked
    for: ``python [FLAGS] .../nvtx_model/launch.py --nvtx SPEC --report FILE -- SCRIPT ...``."""
    spec = ProgramNvtx.parse(nvtx)
    if spec.off:
        return list(argv)
    py = python_command(argv)
    if py is None:
        raise BadOption(f"--nvtx {spec} adds ranges to Python programs: give the command as "
                        f"`python SCRIPT ...` or `python -m MODULE ...` (got `{argv[0]}`); "
                        f"for another launcher, run `python -m nvtx_model.launch --nvtx {spec} "
                        f"SCRIPT ...` inside it, or profile without --nvtx.")
    target = {"script": ["--", py.target], "module": ["-m", py.target],
              "code": ["-c", py.target]}[py.kind]
    return [py.python, *py.flags, str(LAUNCHER), "--nvtx", str(spec), "--report", str(report),
            *target, *py.args]


def check_program(argv: list[str], cwd: str) -> str:
    """The program's path; ProgramNotFound when it does not exist (before nsys runs: nsys
    would only say "Program not found" after starting). A Python script that is missing is
    an error too."""
    if not argv:
        raise BadOption("no command given after `--`; e.g. `nsys-mine profile -- python "
                        "train.py`")
    exe = argv[0]
    if os.sep in exe:
        path = exe if os.path.isabs(exe) else os.path.join(cwd, exe)
        if not os.path.isfile(path):
            raise ProgramNotFound(f"command not found: {exe} (no such file in {cwd})")
        if not os.access(path, os.X_OK):
            raise ProgramNotFound(f"{exe} is not executable: run it with its interpreter "
                                  f"(e.g. `bash {exe}`), or chmod +x it")
        found = path
    else:
        found = shutil.which(exe) or ""
        if not found:
            raise ProgramNotFound(f"command not found: {exe} (not on PATH); give its path, "
                                  f"or the interpreter that runs it (`python script.py`)")
    py = python_command(argv)
    if py is not None and py.kind == "script":
        script = py.target if os.path.isabs(py.target) else os.path.join(cwd, py.target)
        if not os.path.exists(script):
            raise ProgramNotFound(f"{py.target}: no such file (in {cwd}); the command was "
                                  f"`{shlex.join(argv)}`")
    return found


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "-", text).strip("-._")


def _is_value(arg: str) -> bool:
    return not arg.startswith("-") or bool(re.match(r"^-\d", arg))


def command_name(argv: list[str], nvtx: str = "off") -> str:
    """A file name from a command: the program's name, then its arguments (``--bs 8`` ->
    ``bs-8``), then the NVTX ranges added: ``python train.py --bs 8 --seq 512`` with
    ``--nvtx modules:2,steps`` -> ``train_bs-8_seq-512_nvtx-modules2+steps``. Long commands
    end in a hash of the whole command."""
    try:
        py = python_command(argv)
    except BadOption:
        py = None
    if py is not None:
        head = {"script": Path(py.target).stem, "module": py.target,
                "code": "python-c"}[py.kind]
        args = py.args
    else:
        head = Path(argv[0]).stem if argv else "command"
        args = argv[1:]
    parts = [_slug(head) or "program"]
    i = 0
    while i < len(args):
        arg = args[i]
        if not _is_value(arg):
            key, eq, value = arg.lstrip("-").partition("=")
            if not eq and i + 1 < len(args) and _is_value(args[i + 1]):
                value, eq = args[i + 1], "="
                i += 1
            shown = _slug(Path(value).name or value)
            if re.match(r"^-\d", value):
                shown = "-" + shown  # a negative number keeps its sign
            parts.append(_slug(key) + (f"-{shown}" if eq else ""))
        else:
            parts.append(_slug(Path(arg).name or arg))
        i += 1
    name = "_".join(p for p in parts if p)
    spec = ProgramNvtx.parse(nvtx)
    if not spec.off:
        name += "_nvtx-" + str(spec).replace(":", "").replace(",", "+")
    if len(name) > NAME_MAX:
        digest = hashlib.sha1(f"{shlex.join(argv)} {nvtx}".encode()).hexdigest()[:8]
        name = f"{name[:NAME_MAX - 9].rstrip('_-.')}_{digest}"
    return name


def program_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment variables that matter to a PyTorch program's performance (devices,
    PyTorch, NCCL, threads), never one that looks like a secret."""
    env = dict(os.environ if env is None else env)
    keep = {k: v for k, v in env.items()
            if (k in ENV_NAMES or k.startswith(ENV_PREFIXES)) and not SECRET.search(k)}
    return dict(sorted(keep.items()))


def command_device(requested: str = "auto") -> str:
    """cuda when this machine has an NVIDIA GPU that programs may use, else cpu: decided
    without importing torch (nsys-mine may run from a Python without it)."""
    if requested != "auto":
        return requested
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (not visible.strip() or visible.strip().startswith("-")):
        return "cpu"
    gpus = Path("/proc/driver/nvidia/gpus")
    if gpus.is_dir() and any(gpus.iterdir()):
        return "cuda"
    return "cuda" if shutil.which("nvidia-smi") else "cpu"


# --------------------------------------------------------------------------------------------
# one run

def log_tail(log: Path | None, lines: int = 12) -> str:
    """The last lines the program wrote (nsys's own lines left out)."""
    if log is None:
        return ""
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 65536))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    kept = [ln for ln in text.replace("\r", "\n").splitlines()
            if ln.strip() and not _NSYS_LINE.match(ln)]
    return tail("\n".join(kept), lines)


def _read_launch_report(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    finally:
        path.unlink(missing_ok=True)
    return data if isinstance(data, dict) else None


def export_problem(sqlite: Path) -> str | None:
    """Why the export cannot be mined (None: it can). A program without NVTX ranges or
    kernels still gives a usable export."""
    from nsys_parsers.export import open_export

    if not sqlite.exists():
        return f"nsys wrote no SQLite export ({sqlite.name})"
    try:
        with open_export(sqlite):
            pass
    except NsysMineError as exc:
        return f"the export is not usable: {exc}"
    return None


def launch_notes(spec: ProgramNvtx, launch: dict[str, Any] | None) -> list[str]:
    """What people should know about the ranges that were (not) added."""
    if spec.off:
        return []
    if launch is None:
        return [f"--nvtx {spec}: the launcher left no report (the program ended with "
                f"os._exit, or was killed): the ranges it added may be incomplete."]
    notes = [str(n) for n in launch.get("notes") or []]
    if launch.get("torch_imported") and spec.modules:
        roots = ", ".join(launch.get("roots") or []) or "none"
        notes.append(f"--nvtx {spec}: {launch.get('modules_named', 0)} modules named "
                     f"(models: {roots}); {launch.get('forward_ranges', 0)} forward and "
                     f"{launch.get('backward_ranges', 0)} backward module ranges; backend "
                     f"{launch.get('backend')}.")
        if not launch.get("module_calls"):
            notes.append("the program imported torch but called no nn.Module: no module "
                         "ranges.")
    if launch.get("torch_imported") and spec.steps:
        notes.append(f"{launch.get('step_ranges', 0)} `step` ranges "
                     f"({launch.get('optimizer_steps', 0)} optimizer steps): --within step "
                     f"leaves out start-up and what follows the last step.")
    return notes


def profile_command(cfg: CommandConfig, out_dir: Path, spec: NsysSpec, *, force: bool = False,
                    nsys: tuple[Path, str] | None = None, gpu: str | None = None,
                    stop: threading.Event | None = None) -> ProfileResult:
    """Run ``cfg``'s command under nsys; never raises for the program's own failure (see
    ``status``, ``exit_code``): a program that fails still gets its export mined when nsys
    wrote one. Raises before nsys runs when the command does not exist or NAME's files exist
    (without ``force``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    name = cfg.name
    rep, sqlite, sidecar, log = (out_dir / f"{name}{ext}" for ext in (".nsys-rep", ".sqlite",
                                                                      ".json", ".log"))
    existing = [p for p in (rep, sqlite) if p.exists()]
    if existing and not force:
        raise BadOption(f"{existing[0]} exists; pass --force to overwrite it or choose "
                        f"another --out-dir folder.")
    check_program(cfg.argv, cfg.cwd)
    nvtx = ProgramNvtx.parse(cfg.nvtx)
    report_path = out_dir.resolve() / f".{name}.launch.json"
    child = launched_argv(cfg.argv, cfg.nvtx, report_path)
    nsys_path, version = nsys or locate_nsys(spec.nsys, install=spec.install)
    device = command_device(cfg.device)
    trace = spec.trace or default_trace(device)
    argv = nsys_argv(nsys_path, out_dir.resolve() / name, trace=trace,
                     quiet_sampling=spec.quiet_sampling, extra_args=spec.extra_args,
                     child=child)
    for p in [*existing, report_path]:
        p.unlink(missing_ok=True)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    outcome = run_with_timeout(argv, spec.timeout_s, env=env, cwd=cfg.cwd, stop=stop, log=log)
    launch = _read_launch_report(report_path)
    exit_code = outcome.returncode
    if launch is not None and isinstance(launch.get("exit_code"), int):
        exit_code = launch["exit_code"]
    status, reason = "ok", None
    program_tail = log_tail(log)
    if outcome.timed_out:
        extra = (f"; ended leftover nsys processes {outcome.killed_pids}"
                 if outcome.killed_pids else "")
        status, reason = "timeout", (f"the program or nsys did not finish within "
                                     f"{spec.timeout_s:g} s{extra}")
    else:
        problem = export_problem(sqlite)
        said = program_tail or "(no output)"
        if exit_code and _OOM.search(program_tail):
            status, reason = "oom", (f"the program ran out of memory (exit code "
                                     f"{exit_code}):\n{said}")
        elif exit_code:
            status, reason = "failed", f"the program exited with status {exit_code}:\n{said}"
        if problem:
            status = "failed" if status == "ok" else status
            reason = f"{problem}" + (f"; {reason}" if reason else f":\n{said}")
    notes = launch_notes(nvtx, launch)
    if outcome.killed_pids and status != "timeout":
        notes.append(f"ended {len(outcome.killed_pids)} leftover nsys process(es) of this run "
                     f"(PIDs {outcome.killed_pids}).")
    result = ProfileResult(
        name=name, config=cfg.to_dict(device), status=status, reason=reason,
        sqlite=str(sqlite) if sqlite.exists() else None,
        nsys_rep=str(rep) if rep.exists() else None, sidecar=str(sidecar),
        wall_s=round(outcome.wall_s, 3), command=argv, nsys_version=version, trace=trace,
        window="the whole run", workload_row=None, notes=notes,
        gpu=gpu if gpu is not None else (os.environ.get("CUDA_VISIBLE_DEVICES")
                                         if device == "cuda" else None),
        kind=KIND, exit_code=exit_code, log=str(log), launcher=launch)
    write_command_sidecar(result, cfg, started)
    return result


def write_command_sidecar(result: ProfileResult, cfg: CommandConfig, started: str) -> None:
    """``NAME.json`` of a command run. It has no ``config`` object (reports read that as a
    run of the built-in model); the run is under ``program``."""
    from importlib import metadata

    def version(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    launch = result.launcher or {}
    data = {
        "kind": KIND, "name": result.name, "status": result.status, "reason": result.reason,
        "exit_code": result.exit_code,
        "program": {"command": cfg.command_line, "argv": list(cfg.argv), "cwd": cfg.cwd,
                    "nvtx": cfg.nvtx, "grid": cfg.grid, "device": result.config["device"],
                    "env": program_env()},
        "sqlite": result.sqlite, "nsys_rep": result.nsys_rep, "log": result.log,
        "sidecar": result.sidecar, "wall_s": result.wall_s, "started_utc": started,
        "nsys_command": result.command, "nsys_version": result.nsys_version,
        "trace": result.trace, "gpu": result.gpu, "notes": result.notes,
        "launcher": result.launcher,
        "versions": {"nsys": result.nsys_version, "nsys_mine": version("nsys-mine"),
                     "python": launch.get("python"), "torch": launch.get("torch_version"),
                     "nsys_mine_python": sys.version.split()[0]},
        "host": os.uname().nodename,
    }
    Path(result.sidecar).write_text(json.dumps(data, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------------------------
# sweeps over a command

_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def parse_grid(items: list[str]) -> dict[str, list[str]]:
    """``--grid bs=8,16 --grid seq=512,1024`` -> {"bs": ["8", "16"], "seq": [...]}."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, eq, values = item.partition("=")
        key = key.strip()
        if not eq or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise BadOption(f"--grid {item!r}: give NAME=V1,V2,... with NAME a placeholder of "
                            f"--command, e.g. --grid bs=8,16")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not vals:
            raise BadOption(f"--grid {item!r}: no values after {key}=")
        if key in grid:
            raise BadOption(f"--grid {key} is given twice; put all its values in one: "
                            f"--grid {key}={','.join(grid[key] + vals)}")
        grid[key] = list(dict.fromkeys(vals))
    return grid


def fill_command(template: str, values: dict[str, str]) -> list[str]:
    """The command of one combination: ``template`` split as a shell would (``shlex``), each
    ``{name}`` replaced by its value (``{{``, ``}}``: literal braces)."""
    try:
        words = shlex.split(template)
    except ValueError as exc:
        raise BadOption(f"--command {template!r}: {exc} (quote it as a shell would)") from None

    def one(m: re.Match) -> str:
        if m.group(0) in ("{{", "}}"):
            return m.group(0)[0]
        return values[m.group(1)]

    return [_PLACEHOLDER.sub(one, w) for w in words]


def plan_command_sweep(template: str, grid_items: list[str], nvtx: str, *,
                       cwd: str | None = None, device: str = "auto") -> list[CommandConfig]:
    """One CommandConfig per combination of the grid, in the order of the --grid options and
    their values. Every placeholder needs a --grid and every --grid a placeholder."""
    grid = parse_grid(grid_items)
    used = {m.group(1) for m in _PLACEHOLDER.finditer(template) if m.group(1)}
    missing = sorted(used - set(grid))
    if missing:
        raise BadOption(f"--command uses {{{missing[0]}}} but no --grid {missing[0]}=V1,V2 "
                        f"gives its values (write {{{{ and }}}} for literal braces)")
    unused = [k for k in grid if k not in used]
    if unused:
        raise BadOption(f"--grid {unused[0]} is not used in --command: put {{{unused[0]}}} "
                        f"where its value goes")
    keys = list(grid)
    configs: list[CommandConfig] = []
    names: dict[str, int] = {}
    for combo in itertools.product(*(grid[k] for k in keys)):
        values = dict(zip(keys, combo))
        argv = fill_command(template, values)
        if not argv:
            raise BadOption("--command is empty")
        cfg = CommandConfig(argv=argv, cwd=cwd or os.getcwd(), nvtx=nvtx, grid=values or None,
                            device=device)
        count = names.get(cfg.name, 0)
        names[cfg.name] = count + 1
        if count:  # two combinations that read alike as file names
            cfg.name = f"{cfg.name}_{count + 1}"
        configs.append(cfg)
    return configs


@dataclass(frozen=True)
class CommandSweep:
    """``sweep --command TEMPLATE --grid NAME=V1,V2 ...``: what ``run_sweep`` plans from."""

    template: str
    grid: tuple[str, ...] = ()
    nvtx: str = "off"
    cwd: str = field(default_factory=os.getcwd)
    device: str = "auto"

    def configs(self) -> list[CommandConfig]:
        """One config per combination; the program must exist (checked once, here)."""
        configs = plan_command_sweep(self.template, list(self.grid), self.nvtx, cwd=self.cwd,
                                     device=self.device)
        for cfg in configs:
            check_program(cfg.argv, cfg.cwd)
        return configs
