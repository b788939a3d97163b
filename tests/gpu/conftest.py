"""The GPU suite (``pytest -m gpu``): fixtures, and the record of what each test measured.

Every test here needs a CUDA device and a CUDA build of torch (the ``gpu`` fixture). Without
them it skips, and the reason names CUDA; with ``NSYS_MINE_REQUIRE_GPU=1`` (set by
``scripts/gpu_check.sh`` once it has seen a CUDA device) that is a failure instead, so a
broken CUDA setup cannot pass as a row of skips.

Tests record their key numbers with ``record`` (``record_property`` underneath). When
``NSYS_MINE_GPU_RESULTS`` names a file, each test's outcome, skip or failure message and
numbers are written there as JSON at the end of the session; ``scripts/gpu_summary.py``
turns that into the JSON and markdown summary of a run.

Nothing here imports torch at module level: on a machine without torch the tests still
collect, and skip with a reason that names CUDA.
"""

from __future__ import annotations

import gc
import glob
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import pytest

ROOT = Path(__file__).resolve().parents[2]


def gpu_required() -> bool:
    return os.environ.get("NSYS_MINE_REQUIRE_GPU", "") not in ("", "0")


def nsys_required() -> bool:
    return os.environ.get("NSYS_MINE_REQUIRE_NSYS", "") not in ("", "0")


# ---- the device ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Gpu:
    """The CUDA device the tests run on (torch's current device) and the torch build."""

    index: int
    name: str
    capability: tuple[int, int]
    total_memory_bytes: int
    sm_count: int
    visible: list[str]  # what CUDA_VISIBLE_DEVICES values a sweep would hand out
    bf16: bool
    torch_version: str
    cuda_version: str

    def peak_tflops(self, precision: str) -> float | None:
        """The datasheet peak of this GPU (``nvtx_model.runtime.PEAK_TFLOPS``), or None."""
        from nvtx_model.runtime import peak_tflops

        return peak_tflops(self.name, precision)


def cuda_problem() -> str | None:
    """Why CUDA cannot be used here, or None when it can."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if torch.version.cuda is None:
        return f"torch {torch.__version__} is a CPU build (torch.version.cuda is None)"
    if not torch.cuda.is_available():
        return (f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no usable CUDA "
                "device (torch.cuda.is_available() is False)")
    return None


def visible_gpus() -> list[str]:
    """The GPUs a sweep hands out: the CUDA_VISIBLE_DEVICES entries up to the first invalid
    one when it is set, else 0..n-1 (the rule docs/CLUSTER.md gives for ``--jobs``)."""
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is None:
        import torch

        return [str(i) for i in range(torch.cuda.device_count())]
    out = []
    for item in (x.strip() for x in env.split(",")):
        if not item or item.startswith("-"):
            break
        out.append(item)
    return out


@pytest.fixture(scope="session")
def gpu() -> Gpu:
    """The CUDA device; skips (fails under NSYS_MINE_REQUIRE_GPU=1) without one."""
    problem = cuda_problem()
    if problem is not None:
        if gpu_required():
            pytest.fail(f"needs a CUDA GPU: {problem}; NSYS_MINE_REQUIRE_GPU is set, so this "
                        "is a failure")
        pytest.skip(f"needs a CUDA GPU: {problem}")
    import torch

    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return Gpu(index=index, name=torch.cuda.get_device_name(index),
               capability=(props.major, props.minor), total_memory_bytes=props.total_memory,
               sm_count=props.multi_processor_count, visible=visible_gpus(),
               bf16=bool(torch.cuda.is_bf16_supported()), torch_version=torch.__version__,
               cuda_version=str(torch.version.cuda))


@pytest.fixture(autouse=True)
def _give_back_cuda_memory():
    """After each test, give the memory it cached back to the device, so that the next test
    (and the command-line processes tests start) find the GPU as free as the first did."""
    yield
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


# ---- key numbers ---------------------------------------------------------------------------
def plain(value: Any) -> Any:
    """A JSON value: numpy/torch scalars as Python numbers, floats to 4 significant digits."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float):
        return float(f"{value:.4g}")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


@pytest.fixture
def record(record_property) -> Callable[..., None]:
    """record(name=value, ...): the test's key numbers, for the run's summary. Names carry
    their unit (``_s``, ``_bytes``, ``_pct``, ``tflops``), as the project's columns do."""

    def rec(**numbers: Any) -> None:
        for name, value in numbers.items():
            record_property(name, plain(value))

    return rec


_RESULTS: dict[str, dict[str, Any]] = {}


def _message(report) -> str:
    longrepr = report.longrepr
    if report.skipped and isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    return str(longrepr).strip().splitlines()[-1] if longrepr else ""


def pytest_runtest_logreport(report) -> None:
    """Collect the outcome, message, duration and recorded numbers of each GPU test."""
    entry = _RESULTS.setdefault(report.nodeid, {
        "test": report.nodeid, "outcome": "unfinished", "duration_s": 0.0, "properties": {},
        "message": UNFINISHED})
    entry["duration_s"] = round(entry["duration_s"] + report.duration, 3)
    entry["properties"].update(dict(report.user_properties))
    if report.failed and entry["outcome"] not in ("failed", "error"):
        entry["outcome"] = "failed" if report.when == "call" else "error"  # error: a fixture
        entry["message"] = _message(report)
    elif report.skipped and entry["outcome"] in ("unfinished", "passed"):
        entry["outcome"] = "skipped"
        entry["message"] = _message(report)
    elif report.when == "call" and report.passed and entry["outcome"] == "unfinished":
        entry["outcome"], entry["message"] = "passed", None  # its body ran to the end


# A test set up whose body never reported: the run was stopped in it (--time-limit's SIGINT).
# It had read as passed, in 0.0 s (the 2026-11-30 run).
UNFINISHED = "the run was stopped (gpu_check.sh --time-limit) before this test finished"


def pytest_sessionfinish(session, exitstatus) -> None:
    target = os.environ.get("NSYS_MINE_GPU_RESULTS")
    if not target:
        return
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    Path(target).write_text(json.dumps(
        {"pytest_exit": int(exitstatus), "tests": list(_RESULTS.values())}, indent=1) + "\n")


# ---- the command line, as a child process ---------------------------------------------------
@dataclass
class CliRun:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def ok(self) -> CliRun:
        assert self.returncode == 0, (
            f"exit {self.returncode}: {' '.join(self.argv[2:])}\n{self.stderr[-3000:]}")
        return self

    def json(self) -> Any:
        return json.loads(self.ok().stdout)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment with the project first on PYTHONPATH (the GPU machine runs
    from a checkout, not an install) and a wide terminal for tables."""
    path = os.environ.get("PYTHONPATH")
    env = dict(os.environ, PYTHONPATH=str(ROOT) + (os.pathsep + path if path else ""),
               COLUMNS="200")
    return {**env, **(extra or {})}


def run_nsys_mine(*args: Any, cwd: Path, timeout: float = 900,
                  env: dict[str, str] | None = None) -> CliRun:
    """``python -m profile_cli ARGS`` with this interpreter, in ``cwd``."""
    argv = [sys.executable, "-m", "profile_cli", *(str(a) for a in args)]
    proc = subprocess.run(argv, cwd=cwd, env=child_env(env), capture_output=True, text=True,
                          timeout=timeout)
    return CliRun(argv, proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def nsys_mine(tmp_path) -> Callable[..., CliRun]:
    """nsys_mine(*args, **kw): run ``python -m profile_cli`` as a child process in a
    temporary folder (nothing lands in the checkout) and return its exit code and output."""

    def run(*args: Any, **kw: Any) -> CliRun:
        kw.setdefault("cwd", tmp_path)
        return run_nsys_mine(*args, **kw)

    return run


# ---- nsys --------------------------------------------------------------------------------------
NSYS_PATTERNS = ("/usr/local/cuda/bin/nsys", "/usr/local/cuda-*/bin/nsys",
                 "/opt/nvidia/nsight-systems/*/bin/nsys",
                 "/opt/nvidia/nsight-systems-cli/*/bin/nsys", "/usr/lib/nsight-systems/bin/nsys",
                 "/opt/nvidia/hpc_sdk/*/*/*/profilers/Nsight_Systems/bin/nsys")
# What the probe profiles: one NVTX range around one CUDA kernel.
PROBE = ("import torch; torch.cuda.nvtx.range_push('probe'); "
         "x = torch.ones(1 << 20, device='cuda'); (x * 2).sum().item(); "
         "torch.cuda.synchronize(); torch.cuda.nvtx.range_pop()")


def nsys_candidates() -> list[Path]:
    """nsys binaries worth trying: $NSYS, PATH, the usual install folders, the project's."""
    found = [os.environ.get("NSYS"), shutil.which("nsys")]
    for pattern in NSYS_PATTERNS:
        found += sorted(glob.glob(pattern), reverse=True)
    found.append(str(ROOT / ".cache" / "nsys" / "usr" / "bin" / "nsys"))
    out: list[Path] = []
    for item in found:
        if item and os.path.isfile(item) and os.access(item, os.X_OK):
            path = Path(item)
            if path.resolve() not in [p.resolve() for p in out]:
                out.append(path)
    return out


def probe_nsys(nsys: Path, folder: Path) -> str | None:
    """None when ``nsys`` records CUDA kernels and NVTX ranges of a CUDA process here and
    exports them to SQLite; else why not."""
    base = folder / f"probe-{len(list(folder.glob('probe-*')))}"
    argv = [str(nsys), "profile", "--trace=cuda,nvtx", "--sample=none", "--cpuctxsw=none",
            "--export=sqlite", "--force-overwrite=true", "--output", str(base),
            sys.executable, "-c", PROBE]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=180,
                              env=child_env())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{type(exc).__name__}: {exc}"
    export = base.with_name(base.name + ".sqlite")
    raw = sorted(p.name for p in folder.glob(base.name + "*.qdstrm"))
    if raw and not export.exists():
        # nsys records a raw .qdstrm first and turns it into a report with its QdstrmImporter;
        # an nsys without one (the one bundled with Nsight Compute) stops there.
        return (f"nsys profile wrote only {raw[0]}, no report: this nsys cannot turn its "
                "capture into a report (no QdstrmImporter, as with the nsys bundled with "
                "Nsight Compute); install Nsight Systems or set NSYS to its nsys")
    if proc.returncode != 0:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return f"nsys profile exited with {proc.returncode}: {tail}"
    if not export.exists():
        return "nsys profile wrote no SQLite export"
    conn = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        conn.close()
    missing = [t for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "NVTX_EVENTS") if t not in tables]
    if missing:
        return f"its export has no {' or '.join(missing)} table (no CUDA or NVTX trace here)"
    return None


@pytest.fixture(scope="session")
def working_nsys(gpu, tmp_path_factory) -> Path:
    """An nsys that profiles a CUDA process here (probed once); skips without one (fails
    under NSYS_MINE_REQUIRE_NSYS=1)."""
    folder = tmp_path_factory.mktemp("nsys-probe")
    problems = []
    for nsys in nsys_candidates():
        why = probe_nsys(nsys, folder)
        if why is None:
            return nsys
        problems.append(f"{nsys}: {why}")
    reason = ("no working nsys: " + "; ".join(problems) if problems else
              f"no nsys found (looked at NSYS={os.environ.get('NSYS') or '(unset)'}, PATH, "
              + ", ".join(NSYS_PATTERNS) + "): install Nsight Systems, or set NSYS=/path/to/nsys")
    if nsys_required():
        pytest.fail(f"{reason}; NSYS_MINE_REQUIRE_NSYS is set, so this is a failure")
    pytest.skip(reason)
