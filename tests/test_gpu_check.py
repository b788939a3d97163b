"""The GPU check's own machinery, on a machine without CUDA: ``scripts/gpu_check.sh`` says
it checked nothing, runs the suite anyway when asked (every test skips, naming CUDA) and
writes its summary; ``scripts/gpu_wheels.py`` picks the wheels the GPU machine lacks;
``scripts/gpu_preflight.py`` and ``scripts/gpu_summary.py`` read and render what a run
found; the nsys probe says why an nsys cannot profile; the stand-in nsys that the ``--jobs``
GPU tests use runs a sweep's workload. (The GPU tests are tests/gpu/; the whole run on a
Python 3.12 model of the GPU machine is scripts/gpu_rehearsal.sh, a step of .ci/run.)"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

from tests.gpu.conftest import probe_nsys
from tests.gpu.standin import standin_record, write_standin_nsys

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def script(name: str) -> ModuleType:
    """A module of scripts/ (they are run as files, not installed)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "scripts"))


def cuda_here() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def gpu_check(*args, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "OUT"}  # the lending tool's folder
    full.update(PYTHON=sys.executable, **(env or {}))
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def no_cuda():
    if cuda_here():
        pytest.skip("CUDA is available here: scripts/gpu_check.sh would run the GPU suite")


def test_without_cuda_it_checks_nothing_and_says_so(no_cuda, tmp_path):
    res = gpu_check(tmp_path / "out")
    assert (res.returncode, res.stdout) == (0, "no CUDA device: nothing checked\n")
    assert sys.executable in res.stderr
    assert not (tmp_path / "out").exists()
    res = gpu_check(tmp_path / "out", "--require-cuda")
    assert res.returncode == 1 and res.stdout == "no CUDA device: nothing checked\n"
    res = gpu_check(env={"OUT": str(tmp_path / "lent")})
    assert res.returncode == 0 and not (tmp_path / "lent").exists()


def test_bad_options_are_usage_errors():
    res = gpu_check("--jobs", "2")
    assert res.returncode == 2 and "unknown option --jobs" in res.stderr
    res = gpu_check("a", "b")
    assert res.returncode == 2 and "one OUT_DIR only" in res.stderr


def tiny_wheel(folder: Path, tag: str = "py3-none-any") -> Path:
    """A wheel of one module, as gpu_wheels.sh downloads them (pure Python by default)."""
    folder.mkdir(parents=True)
    wheel = folder / f"gpucheck_probe-1.0-{tag}.whl"
    info = "gpucheck_probe-1.0.dist-info"
    files = {"gpucheck_probe.py": "VALUE = 42\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: gpucheck-probe\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              f"Tag: {tag}\n"}
    files[f"{info}/RECORD"] = "".join(f"{name},,\n" for name in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return folder


@pytest.mark.slow
def test_run_without_cuda_skips_every_test_naming_cuda_and_writes_the_summary(no_cuda,
                                                                              tmp_path):
    out = tmp_path / "out"
    res = gpu_check(out, "--run-without-cuda", "--wheels", tiny_wheel(tmp_path / "wheels"))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "installed 1 wheels" in res.stderr
    assert {p.name for p in out.iterdir()} == {
        "gpu_check.json", "gpu_check.md", "gpu_check_junit.xml", "gpu_results.json",
        "pytest.log", "preflight.json", "collect.log"}
    summary = json.loads((out / "gpu_check.json").read_text())
    tests = summary["tests"]
    assert len(tests) >= 20 and summary["pytest_exit"] == 0
    assert summary["counts"]["skipped"] == len(tests)
    assert all(t["test"].startswith("tests/gpu/test_gpu_") for t in tests)
    assert all("CUDA" in t["message"] for t in tests), [t["message"] for t in tests]
    assert summary["environment"]["devices"] == []
    # the preflight: nsys-mine imports with the wheel folder on PYTHONPATH, the whole suite
    # collects (more than the GPU suite), the probe wheel was taken from the carried folder
    pre = summary["preflight"]
    assert pre["imports"]["ok"] and pre["imports"]["imported"] > 50 and pre["cli"]["ok"]
    assert pre["collect"]["ok"] and pre["collect"]["collected"] > 20 * len(tests)
    assert {"name": "gpucheck-probe", "version": "1.0", "origin": "carried"} in pre["packages"]
    assert f"{pre['collect']['collected']} tests collected" in (out / "collect.log").read_text()
    md = (out / "gpu_check.md").read_text()
    assert md.startswith("### GPU check ") and "no CUDA device" in md
    assert f"- result: {len(tests)} skipped (pytest exit status 0)" in md
    assert (f"whole suite collects: {pre['collect']['collected']} tests, 0 errors" in md
            and "- from the wheels: gpucheck-probe 1.0" in md)


def test_a_compiled_wheel_pip_cannot_install_is_an_error_not_unzipped(no_cuda, tmp_path):
    # pip here (CPython 3.11) refuses a CPython 3.9 build: gpu_check.sh must not unpack it
    wheels = tiny_wheel(tmp_path / "wheels", tag="cp39-cp39-manylinux_2_17_x86_64")
    res = gpu_check(tmp_path / "out", "--run-without-cuda", "--wheels", wheels)
    assert res.returncode == 2, res.stderr[-2000:]
    assert ("gpucheck_probe-1.0-cp39-cp39-manylinux_2_17_x86_64.whl is compiled (only pip "
            "installs it)") in res.stderr
    assert "unpacking" not in res.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_time_limit_interrupts_the_suite_and_still_writes_the_summary(no_cuda, tmp_path):
    # a plugin holds the GPU suite once collected, as a long test would
    (tmp_path / "hold_suite.py").write_text(
        "import time\n\ndef pytest_collection_finish(session):\n    time.sleep(120)\n")
    out = tmp_path / "out"
    res = gpu_check(out, "--run-without-cuda", "--time-limit", "10", "--wheels",
                    tmp_path / "none", "--", "-p", "hold_suite",
                    env={"PYTHONPATH": str(tmp_path),  # the collection: the other test's
                         "NSYS_MINE_PREFLIGHT_COLLECT": "0"})
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "KeyboardInterrupt" in (out / "pytest.log").read_text()
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["pytest_exit"] == 2 and summary["preflight"]["imports"]["ok"]
    assert "(pytest exit status 2)" in (out / "gpu_check.md").read_text()
    res = gpu_check(out, "--time-limit", "soon")
    assert res.returncode == 2 and "--time-limit needs seconds" in res.stderr


# ---- gpu_wheels.py: what is carried -----------------------------------------------------------
def test_the_wheels_carry_the_core_dependencies_the_image_lacks_with_their_needs():
    wheels = script("gpu_wheels")
    pyproject = (ROOT / "pyproject.toml").read_text()
    asked = [wheels.requirement_name(r) for r in wheels.requests(pyproject)]
    # typer and rich are carried although the image has some version of them; numpy, pandas
    # and matplotlib are the image's (built with its torch); tomli is for Python < 3.11 only
    assert {"typer", "rich", "platformdirs", "sqlite-utils"} <= set(asked)
    assert not {"numpy", "pandas", "matplotlib", "tomli"} & set(asked)
    # a new core dependency is picked up by itself, its marker read for CPython 3.12 on Linux
    grown = pyproject.replace('dependencies = [\n', 'dependencies = [\n    "dask>=2024.1",\n'
                              '    "uvloop; sys_platform == \'win32\'",\n'
                              '    "exceptiongroup; python_version < \'3.13\'",\n', 1)
    assert wheels.requests(grown)[:2] == ["dask>=2024.1", "exceptiongroup"]
    # what pip resolved that the image has is dropped: sqlite-utils' python-dateutil, pluggy
    carried, dropped = wheels.select([
        "sqlite_utils-4.2.1-py3-none-any.whl", "python_dateutil-4.0.0-py3-none-any.whl",
        "Pluggy-1.7.0-py3-none-any.whl", "pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64"
        ".manylinux_2_17_x86_64.whl", "pip-26.3-py3-none-any.whl"])
    assert [wheels.wheel_name(f) for f in carried] == ["pydantic-core", "sqlite-utils"]
    assert [wheels.wheel_name(f) for f in dropped] == ["pip", "pluggy", "python-dateutil"]


def test_gpu_wheels_lists_what_it_would_resolve_pinned_to_the_venv():
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_wheels.sh"), "--list"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHON": sys.executable})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "sqlite-utils>=3.35" in lines and any(x.startswith("typer>=") for x in lines)
    assert not [line for line in lines if line.startswith(("numpy", "pandas", "tomli"))]
    assert "# the image's own, never carried: " in res.stdout
    pinned = [line for line in lines if line.startswith("# pinned from ")]
    if (ROOT / ".venv" / "bin" / "python").exists():
        assert pinned and int(pinned[0].split(": ")[1].split()[0]) > 10, res.stdout


def test_the_wheels_are_pinned_to_the_tested_versions_but_local_builds():
    wheels = script("gpu_wheels")
    pins = wheels.pins({"Typer": "0.29.2", "pydantic_core": "2.50.5", "torch": "2.13.0+cpu",
                        "nsys-mine": "0.1.0", "numpy": "2.4.6", "nvtx": "0.2.11+local"})
    assert pins == ["pydantic-core==2.50.5", "typer==0.29.2"]


@pytest.mark.parametrize(("filename", "fits"), [
    ("typer-0.29.2-py3-none-any.whl", True),
    ("shellingham-1.5.4-py2.py3-none-any.whl", True),
    ("pydantic_core-2.50.5-cp312-cp312-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", True),
    ("pyyaml-6.0.3-cp312-cp312-manylinux_2_28_x86_64.whl", True),
    ("cryptography-46.0.0-cp311-abi3-manylinux_2_28_x86_64.whl", True),
    ("pydantic_core-2.50.5-cp311-cp311-manylinux_2_17_x86_64.whl", False),
    ("pydantic_core-2.50.5-cp312-cp312-musllinux_1_2_x86_64.whl", False),
    ("pydantic_core-2.50.5-cp312-cp312-manylinux_2_17_aarch64.whl", False),
    ("pydantic_core-2.50.5-cp312-cp312-manylinux_2_34_x86_64.whl", False),
    ("cryptography-46.0.0-cp313-abi3-manylinux_2_28_x86_64.whl", False),
    ("not-a-wheel.tar.gz", False),
])
def test_only_wheels_for_cpython_312_manylinux_x86_64_are_carried(filename, fits):
    assert script("gpu_wheels").fits_target(filename) is fits


# ---- the preflight and the nsys probe ---------------------------------------------------------
def test_the_preflight_reads_collection_counts_errors_and_skipped_modules():
    preflight = script("gpu_preflight")
    ok = ("tests/test_a.py::test_x\n\nSKIPPED [1] tests/test_dask.py:5: could not import 'dask': "
          "No module named 'dask'\n1269 tests collected in 10.96s\n")
    assert preflight.parse_collect(ok) == {
        "collected": 1269, "errors": 0, "error_modules": [],
        "skipped_modules": {"tests/test_dask.py": "could not import 'dask': No module named "
                                                  "'dask'"}}
    broken = ("ERROR tests/test_mcp.py - ModuleNotFoundError: No module named 'mcp'\n"
              "!!! Interrupted: 1 error during collection !!!\n1200 tests collected, 1 error in 9s")
    assert preflight.parse_collect(broken)["errors"] == 1
    assert preflight.parse_collect(broken)["error_modules"] == ["tests/test_mcp.py"]
    assert {"nvtx", "transformers", "submitit"} <= preflight.optional_modules(
        {"optional-dependencies": {"torch": ["nvtx<=0.2.11"], "hf": ["transformers>=4.40"],
                                   "slurm": ["submitit>=1.5"]}})


def test_an_nsys_that_writes_only_a_qdstrm_is_said_to_make_no_report(tmp_path):
    # what the nsys bundled with Nsight Compute does: a raw capture, then no report
    nsys = tmp_path / "nsys"
    nsys.write_text("#!/bin/sh\nwhile [ \"$1\" != --output ]; do shift; done\n"
                    "touch \"$2.qdstrm\"\necho 'QdstrmImporter not found' >&2\nexit 1\n")
    nsys.chmod(0o755)
    why = probe_nsys(nsys, tmp_path)
    assert why is not None and why.startswith("nsys profile wrote only probe-0.qdstrm, no report")
    assert "Nsight Compute" in why and "set NSYS" in why


def test_the_summary_renders_recorded_numbers_by_their_unit(tmp_path):
    gpu_summary = script("gpu_summary")
    results = {"pytest_exit": 1, "tests": [
        {"test": "tests/gpu/test_gpu_micro.py::test_matmul", "outcome": "passed",
         "duration_s": 3.21, "message": None,
         "properties": {"bf16_tflops": 612.34, "bf16_mfu_pct": 61.9, "bf16_mean_s": 0.01234,
                        "fp32_peak_allocated_bytes": 3 * 1024**3 // 2, "gpus": "0,1"}},
        {"test": "tests/gpu/test_gpu_infer.py::test_infer_grid_on_cuda", "outcome": "failed",
         "duration_s": 10.0, "message": "AssertionError: 1 < 0 | too slow",
         "properties": {"fp32_b1_in128_ttft_s": 4.5e-5, "fp32_b4_tokens_per_s": 425.3}},
        {"test": "tests/gpu/test_gpu_profile.py::test_profile", "outcome": "skipped",
         "duration_s": 0.0, "message": "no nsys found", "properties": {}}]}
    env = {"python": "3.12.3", "torch": "2.11.0+cu130", "cuda": "13.0", "cudnn": 91000,
           "driver": "580.65.06", "host": "gpu1", "git_commit": "0123456789abcdef",
           "git_dirty": False, "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                                            "capability": "9.0", "memory_bytes": 85 * 10**9,
                                            "sms": 132}]}
    md = gpu_summary.markdown(gpu_summary.summarize(results, None, env))
    assert "### GPU check " in md and ": NVIDIA H100 80GB HBM3 (compute capability 9.0" in md
    assert "- result: 1 passed, 1 failed, 1 skipped (pytest exit status 1)" in md
    assert "driver 580.65.06" in md and "torch 2.11.0+cu130, CUDA 13.0" in md
    assert ("| micro: test_matmul | passed | 3.2 s | bf16_tflops 612.3; bf16_mfu_pct 61.9 %; "
            "bf16_mean_s 12.3 ms; fp32_peak_allocated_bytes 1.50 GiB; gpus 0,1 |") in md
    assert "fp32_b1_in128_ttft_s 45 µs; fp32_b4_tokens_per_s 425.3/s" in md  # a rate
    assert ("Headline numbers: micro bf16_tflops 612.3; micro bf16_mfu_pct 61.9 %; micro "
            "fp32_peak_allocated_bytes 1.50 GiB; infer fp32_b1_in128_ttft_s 45 µs.") in md
    assert "- `test_infer_grid_on_cuda` (failed): AssertionError: 1 < 0 \\| too slow" in md
    assert "- `test_profile` (skipped): no nsys found" in md


def test_the_summary_tells_the_preflight_and_which_python_each_package_came_from():
    gpu_summary = script("gpu_summary")
    pre = {"python": "3.12.3",
           "imports": {"ok": True, "imported": 112, "failed": {},
                       "needs_optional": {"nvtx_model.hf_model": "transformers"}},
           "cli": {"ok": True},
           "collect": {"collected": 1269, "errors": 0,
                       "skipped_modules": {"tests/test_slurm.py": "could not import 'nvtx'"}},
           "packages": [{"name": "typer", "version": "0.29.2", "origin": "carried"},
                        {"name": "tabulate", "version": "0.10.0", "origin": "carried"},
                        {"name": "numpy", "version": "2.4.4", "origin": "image"},
                        {"name": "tomli", "version": None, "origin": "missing"}],
           "image": {"typer": "0.20.0", "tabulate": "0.10.0", "numpy": "2.4.4"}}
    summary = gpu_summary.summarize(None, 0, {"devices": []}, pre)
    md = gpu_summary.markdown(summary)
    assert summary["preflight"] is pre
    assert ("- preflight (Python 3.12.3): 112 modules import, 1 need a missing optional extra; "
            "`--help` ok; whole suite collects: 1269 tests, 0 errors, 1 modules skipped "
            "(tests/test_slurm.py: could not import 'nvtx')") in md
    # shadowed only where the machine's version differs
    assert ("- from the wheels: typer 0.29.2, tabulate 0.10.0 (first on PYTHONPATH, over the "
            "machine's typer 0.20.0)") in md
    assert "- from the machine's python: numpy 2.4.4, tomli MISSING" in md


@pytest.mark.slow
def test_the_standin_nsys_runs_a_sweeps_workload_and_records_its_environment(tmp_path, cli):
    pytest.importorskip("torch")
    standin = write_standin_nsys(tmp_path / "bin")
    out = tmp_path / "sweep"
    res = cli("sweep", "--size", "tiny", "--context", "16", "--mode", "forward", "--device",
              "cpu", "--nvtx", "off", "--warmup", "1", "--steps", "1", "--threads", "1",
              "--nsys", standin, "--out-dir", out, "--format", "json")
    assert res.exit_code == 0, res.stderr
    (run,) = json.loads(res.stdout)["runs"]
    assert run["status"] == "failed" and "no SQLite export" in run["reason"]
    sidecar = out / f"{run['name']}.json"
    seen = standin_record(sidecar)
    assert seen["returncode"] == 0 and seen["child"][1:3] == ["-m", "profile_cli.run_workload"]
    assert seen["CUDA_VISIBLE_DEVICES"] == os.environ.get("CUDA_VISIBLE_DEVICES")
    workload = json.loads(sidecar.read_text())["workload_row"]
    assert (workload["status"], workload["device"], workload["context"]) == ("ok", "cpu", 16)


def test_a_test_the_time_limit_stopped_is_unfinished_not_passed(monkeypatch):
    """The 2026-11-30 run: --time-limit's SIGINT stopped the suite inside a test whose setup
    had passed; the record had it passed in 0.0 s. Only a body that ran to the end passes."""
    from types import SimpleNamespace

    import tests.gpu.conftest as gpu_conftest

    monkeypatch.setattr(gpu_conftest, "_RESULTS", {})

    def report(test, when, outcome, longrepr=None):
        gpu_conftest.pytest_runtest_logreport(SimpleNamespace(
            nodeid=f"tests/gpu/test_gpu_sweep.py::{test}", when=when, duration=0.5,
            passed=outcome == "passed", failed=outcome == "failed",
            skipped=outcome == "skipped", user_properties=[], longrepr=longrepr))

    for when in ("setup", "call", "teardown"):
        report("test_ok", when, "passed")
    report("test_stopped", "setup", "passed")  # then SIGINT: no call, no teardown report
    report("test_skip", "setup", "skipped", ("f.py", 1, "Skipped: no nsys found"))
    report("test_skip", "teardown", "passed")
    report("test_bad", "setup", "passed")
    report("test_bad", "call", "failed", "AssertionError: 2 != 3")
    report("test_teardown", "setup", "passed")
    report("test_teardown", "call", "passed")
    report("test_teardown", "teardown", "failed", "RuntimeError: leaked a process")
    got = {t["test"].split("::")[1]: (t["outcome"], t["message"])
           for t in gpu_conftest._RESULTS.values()}
    assert got == {"test_ok": ("passed", None),
                   "test_stopped": ("unfinished", gpu_conftest.UNFINISHED),
                   "test_skip": ("skipped", "no nsys found"),
                   "test_bad": ("failed", "AssertionError: 2 != 3"),
                   "test_teardown": ("error", "RuntimeError: leaked a process")}
    gpu_summary = script("gpu_summary")
    results = {"pytest_exit": 2, "tests": list(gpu_conftest._RESULTS.values())}
    md = gpu_summary.markdown(gpu_summary.summarize(results, None, {"devices": []}))
    assert ("- result: 1 passed, 1 failed, 1 error, 1 skipped, 1 unfinished (pytest exit "
            "status 2)") in md
    assert ("- `test_stopped` (unfinished): the run was stopped (gpu_check.sh --time-limit) "
            "before this test finished") in md
