"""Shared test fixtures: real exports from ../shared/fixtures/nsys, nsys discovery, CLI runner.

Tests that need the real nsys binary use the ``nsys_bin`` fixture: it skips on a developer
machine without nsys, but FAILS when ``NSYS_MINE_REQUIRE_NSYS=1`` (set by ``.ci/run``), so a
broken nsys install cannot pass CI silently.
"""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(os.environ.get("NSYS_MINE_FIXTURES", ROOT.parent / "shared" / "fixtures" / "nsys"))

ALL_SQLITE = sorted(p.name for p in FIXTURES.glob("*.sqlite")) if FIXTURES.is_dir() else []
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


@pytest.fixture
def cli():
    """cli(*args) runs ``nsys-mine`` in-process through its real entry point (error boundary
    included) and returns exit code, stdout and stderr."""
    from profile_cli.app import main

    def run(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        code = 0
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main([str(a) for a in args])
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return CliResult(code, out.getvalue(), err.getvalue())
    return run


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Report exports made by tests go to a temporary user cache, not ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg")))
