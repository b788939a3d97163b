"""The GPU check's own machinery, on a machine without CUDA: ``scripts/gpu_check.sh`` says
it checked nothing, runs the suite anyway when asked (every test skips, naming CUDA) and
writes its summary; ``scripts/gpu_summary.py`` renders recorded numbers; the stand-in nsys
that the ``--jobs`` GPU tests use runs a sweep's workload. (The GPU tests are tests/gpu/.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.gpu.standin import standin_record, write_standin_nsys

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


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


def tiny_wheel(folder: Path) -> Path:
    """A pure-Python wheel of one module, as gpu_wheels.sh downloads them."""
    folder.mkdir(parents=True)
    wheel = folder / "gpucheck_probe-1.0-py3-none-any.whl"
    info = "gpucheck_probe-1.0.dist-info"
    files = {"gpucheck_probe.py": "VALUE = 42\n",
             f"{info}/METADATA": "Metadata-Version: 2.1\nName: gpucheck-probe\nVersion: 1.0\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                              "Tag: py3-none-any\n"}
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
        "pytest.log"}
    summary = json.loads((out / "gpu_check.json").read_text())
    tests = summary["tests"]
    assert len(tests) >= 20 and summary["pytest_exit"] == 0
    assert summary["counts"]["skipped"] == len(tests)
    assert all(t["test"].startswith("tests/gpu/test_gpu_") for t in tests)
    assert all("CUDA" in t["message"] for t in tests), [t["message"] for t in tests]
    assert summary["environment"]["devices"] == []
    md = (out / "gpu_check.md").read_text()
    assert md.startswith("### GPU check ") and "no CUDA device" in md
    assert f"- result: {len(tests)} skipped (pytest exit status 0)" in md


def test_the_summary_renders_recorded_numbers_by_their_unit(tmp_path):
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import gpu_summary
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    results = {"pytest_exit": 1, "tests": [
        {"test": "tests/gpu/test_gpu_micro.py::test_matmul", "outcome": "passed",
         "duration_s": 3.21, "message": None,
         "properties": {"bf16_tflops": 612.34, "bf16_mfu_pct": 61.9, "bf16_mean_s": 0.01234,
                        "fp32_peak_allocated_bytes": 3 * 1024**3 // 2, "gpus": "0,1"}},
        {"test": "tests/gpu/test_gpu_infer.py::test_infer_grid_on_cuda", "outcome": "failed",
         "duration_s": 10.0, "message": "AssertionError: 1 < 0 | too slow",
         "properties": {"fp32_b1_in128_ttft_s": 4.5e-5}},
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
    assert "fp32_b1_in128_ttft_s 45 µs" in md
    assert ("Headline numbers: micro bf16_tflops 612.3; micro bf16_mfu_pct 61.9 %; micro "
            "fp32_peak_allocated_bytes 1.50 GiB; infer fp32_b1_in128_ttft_s 45 µs.") in md
    assert "- `test_infer_grid_on_cuda` (failed): AssertionError: 1 < 0 \\| too slow" in md
    assert "- `test_profile` (skipped): no nsys found" in md


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
