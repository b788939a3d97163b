"""Shared test fixtures: real exports from ../shared/fixtures/nsys, nsys discovery, CLI runner.

Tests that need the real nsys binary use the ``nsys_bin`` fixture: it skips on a developer
machine without nsys, but FAILS when ``NSYS_MINE_REQUIRE_NSYS=1`` (set by ``.ci/run``), so a
broken nsys install cannot pass CI silently.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("NSYS_MINE_FIXTURES", ROOT.parent / "shared" / "fixtures" / "nsys"))

ALL_SQLITE = sorted(p.name for p in FIXTURES.glob("*.sqlite")) if FIXTURES.is_dir() else []

# A shell starts a background job (`cmd &` without job control: nohup, a CI step's
# subshell) with SIGINT ignored, and Python then keeps it ignored, in itself and in every child
# it starts. The tests that send Ctrl-C need Python's own handler, as in a terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Fixtures are known by name so that a missing file is a visible skip, not a silent pass.
KNOWN = [
    "centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite",
    "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite",
    "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite",
    "gtls_rtx3060_nsys2023.1.sqlite",
    "kmeans_openacc_rtx3080_hpcsdk21.2.sqlite",
    "nvfuser_h100_nsys2024.6.sqlite",
    "ompoffload_v100_aarch64_pre2021.2.sqlite",
    "pipit_cloverleaf_a100_cap2022.2_exp2024.5.sqlite",
    "pipit_saxpy_mpi_a100_nsys2022.2.sqlite",
    "vecadd_rtx3060_nsys2025.5.sqlite",
    "vecadd_t4_nsys2022.4.sqlite",
]
# The newer fixtures (CS336 captures: DDP on two GPUs, CUDA graphs, a student's forward passes).
CS336 = [
    "cs336_bolongcheng_small_fwd_A100.sqlite",
    "cs336_lizhieffe_ddp53_profile.sqlite",
    "cs336_zx3xyy_result_2_7B_compile_ro.sqlite",
]


@pytest.fixture(autouse=True, scope="session")
def _private_column_cache(tmp_path_factory):
    """The column cache of every test run lives in a fresh folder (never ~/.cache): the first
    question on a fixture reads the export, later ones the cache, as for users."""
    old = os.environ.get("NSYS_MINE_CACHE_DIR")
    os.environ["NSYS_MINE_CACHE_DIR"] = str(tmp_path_factory.mktemp("column-cache"))
    yield
    if old is None:
        os.environ.pop("NSYS_MINE_CACHE_DIR", None)
    else:
        os.environ["NSYS_MINE_CACHE_DIR"] = old


def fixture_path(name: str) -> Path:
    p = FIXTURES / name
    if not p.exists():
        pytest.skip(f"fixture {name} not found in {FIXTURES}")
    return p


@pytest.fixture
def fx():
    """fx(name) -> Path of a real export, skipping when the shared folder is absent."""
    return fixture_path


def nsys_required() -> bool:
    return os.environ.get("NSYS_MINE_REQUIRE_NSYS", "") not in ("", "0")


@pytest.fixture(scope="session")
def nsys_bin() -> Path:
    from nsys_parsers.nsys_tool import find_nsys

    path = find_nsys()
    if path is None:
        msg = ("real nsys not found (run scripts/install_nsys.sh, or set NSYS); "
               "NSYS_MINE_REQUIRE_NSYS is set, so this is a failure")
        if nsys_required():
            pytest.fail(msg)
        pytest.skip("real nsys not installed (scripts/install_nsys.sh installs it)")
    return path


class CliResult:
    def __init__(self, code: int, out: str, err: str):
        self.exit_code, self.stdout, self.stderr = code, out, err


def run_cli(*args) -> CliResult:
    """Run ``nsys-mine`` in-process through its real entry point (error boundary included)."""
    from profile_cli.app import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return CliResult(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli():
    """cli(*args) runs ``nsys-mine`` in-process through its real entry point (error boundary
    included) and returns exit code, stdout and stderr."""
    return run_cli


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Report exports made by tests go to a temporary user cache, not ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))


# --------------------------------------------------------------------------------------------
# a real one-node Slurm cluster (tests/test_slurm.py)

SLURM_SCRIPT = ROOT / "scripts" / "slurm_cluster.sh"
SLURM_BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "squeue", "scancel",
                  "srun")


def slurm_required() -> bool:
    return os.environ.get("NSYS_MINE_REQUIRE_SLURM", "") not in ("", "0")


@pytest.fixture(scope="session")
def slurm_cluster():
    """A private one-node Slurm cluster (``scripts/slurm_cluster.sh``: munged, slurmctld,
    slurmd with everything in a temporary folder), started once per session and stopped, by
    PID, at its end. Returns its slurm.conf (clients find it through $SLURM_CONF). Skips where
    it cannot start (not root, slurm-wlm/munge not installed); with NSYS_MINE_REQUIRE_SLURM=1
    (.ci/run) that is a failure instead."""
    import shutil
    import subprocess
    import tempfile

    def unavailable(why: str):
        if slurm_required():
            pytest.fail(f"{why}; NSYS_MINE_REQUIRE_SLURM is set, so this is a failure")
        pytest.skip(why)

    if os.geteuid() != 0:
        unavailable("a one-node Slurm cluster needs root to start slurmd")
    missing = [b for b in SLURM_BINARIES if shutil.which(b) is None]
    if missing:
        unavailable(f"Slurm is not installed ({', '.join(missing)} not found; "
                    f"`scripts/slurm_cluster.sh install` installs slurm-wlm and munge)")
    # a short folder: munge's socket path must fit in a Unix socket address
    folder = Path(tempfile.mkdtemp(prefix="nsm-slurm-", dir="/tmp"))
    # 4 job slots whatever the core count: several tests' jobs only sleep
    env = dict(os.environ, SLURM_CLUSTER_CPUS=str(max(4, os.cpu_count() or 1)))
    proc = subprocess.run(["bash", str(SLURM_SCRIPT), "start", str(folder)], env=env,
                          capture_output=True, text=True, timeout=120)
    try:
        if proc.returncode != 0:
            unavailable(f"the one-node Slurm cluster did not start: "
                        f"{' | '.join(proc.stderr.strip().splitlines()[-4:])}")
        yield folder / "slurm.conf"
    finally:
        subprocess.run(["bash", str(SLURM_SCRIPT), "stop", str(folder)], capture_output=True,
                       timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


OVER_TIME_SLEEP_S = 607  # a number no other test's stand-in sleeps, to look for leftovers


def sleeping_nsys(folder: Path, seconds: int = 600) -> Path:
    """A stand-in nsys that answers --version and then never finishes a profile (a Slurm job
    that stays put until it is cancelled or reaches its time limit)."""
    import stat

    path = folder / "nsys-sleeps"
    path.write_text('#!/usr/bin/env bash\nif [ "$1" = --version ]; then\n'
                    '  echo "NVIDIA Nsight Systems version 2022.4.2.1-stand-in"; exit 0\nfi\n'
                    f'sleep {seconds} &\nwait $!\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="session")
def slurm_over_time(slurm_cluster, tmp_path_factory):
    """A one-config Slurm sweep whose job sleeps past ``--slurm-time 1``, Slurm's shortest
    limit (Slurm checks limits every 30 s: the job ends 60-90 s after it starts). Submitted with
    --no-wait when the session starts (``_submit_slow_slurm_jobs_first``), so that its minute
    passes while the other tests run; tests/test_slurm.py collects it. Returns its folder."""
    for module in ("torch", "nvtx", "submitit"):
        pytest.importorskip(module)
    folder = tmp_path_factory.mktemp("over-time")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(slurm_cluster))
        res = run_cli("sweep", "--executor", "slurm", "--size", "tiny", "--context", "16",
                      "--mode", "forward", "--device", "cpu", "--warmup", "1", "--steps", "1",
                      "--nsys", sleeping_nsys(folder, OVER_TIME_SLEEP_S), "--slurm-time", "1",
                      "--no-wait",
                      "--out", folder / "out")
    assert res.exit_code == 0, res.stderr
    return folder / "out"


@pytest.fixture(scope="session", autouse=True)
def _submit_slow_slurm_jobs_first(request):
    """When the session includes the time-limit test, start the cluster and submit its job
    before the first test (a skip or failure is kept by pytest for the tests that need it)."""
    if any("slurm_over_time" in getattr(item, "fixturenames", ())
           for item in request.session.items):
        try:
            request.getfixturevalue("slurm_over_time")
        except (Exception, pytest.skip.Exception, pytest.fail.Exception):
            pass
    yield


@pytest.fixture(scope="session")
def cpu_profile(nsys_bin, tmp_path_factory) -> Path:
    """A real export of the project's model made on CPU by `nsys-mine profile` (tiny model,
    NVTX fine, 1 warmup + 3 measured training steps), shared by the tests that need one. The
    command's JSON answer is kept beside it, in ``profile_answer.json``."""
    pytest.importorskip("torch")
    pytest.importorskip("nvtx")
    out = tmp_path_factory.mktemp("cpu_profile")
    res = run_cli("profile", "--size", "tiny", "--context", "32", "--mode", "train", "--nvtx",
                  "fine", "--warmup", "1", "--steps", "3", "--device", "cpu", "--threads", "1",
                  "--out-dir", out, "--nsys", nsys_bin, "--timeout", "300", "-f", "json")
    assert res.exit_code == 0, res.stderr
    (out / "profile_answer.json").write_text(res.stdout)
    return out / "tiny_ctx32_b4_train_fp32_naive_nvtx-fine_w1s3.sqlite"


# -- a server process of the tests' own, on a free loopback port -------------------------------

def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def listening(argv: list[str], port: int, log: Path, env: dict[str, str],
              cwd: str | None = None) -> Iterator[subprocess.Popen]:
    """``argv`` started (its output into ``log``) and waited for until it listens on
    ``port`` (60 s at most, else the test fails with the log's end); ended by its PID
    afterwards."""
    with open(log, "wb") as sink:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            with socket.socket() as sock:
                if sock.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{argv[0]} did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield proc
    finally:
        proc.terminate()  # by its PID: only the process this helper started
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
