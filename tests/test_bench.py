"""nvtx_model.bench on CPU: sane rows, skipped/oom rows, Ctrl-C, the results database."""

from __future__ import annotations

import subprocess

import pytest

torch = pytest.importorskip("torch")

from nvtx_model import harness  # noqa: E402
from nvtx_model.bench import BENCH_COLUMNS, benchmark, warmup_note  # noqa: E402
from nvtx_model.config import step_flops  # noqa: E402
from nvtx_model.workload import WorkloadSpec  # noqa: E402

TINY = dict(size="tiny", vocab=128, context="16", batch=2, device="cpu", threads=1)


def configs(**kwargs):
    return WorkloadSpec(**{**TINY, "warmup": 1, "steps": 3, **kwargs}).configs()


@pytest.fixture(scope="module")
def sweep():
    return benchmark(configs(mode="forward,forward-backward,train", precision="fp32,bf16"))


def test_rows_are_sane(sweep):
    assert len(sweep.rows) == 6 and not sweep.interrupted
    assert sweep.notes == [
        "mfu_pct needs the device's peak TFLOP/s: pass --peak-tflops",
        "gpu_busy_pct, bound: a CPU run has no GPU to wait on the host, so what bounds the step "
        "does not apply; run on a GPU (--device cuda)"]
    for row in sweep.rows:
        assert list(row) == BENCH_COLUMNS
        assert row["status"] == "ok" and row["note"] is None
        # no profiled step on a CPU: nothing to say what bounds it
        assert (row["gpu_busy_pct"], row["kernels"], row["mean_kernel_us"], row["bound"]) == (
            None, None, None, None)
        assert row["device"] == "cpu" and row["steps"] == 3 and row["warmup"] == 1
        assert 0 < row["min_s"] <= row["median_s"] <= row["max_s"]
        assert row["min_s"] <= row["mean_s"] <= row["max_s"]
        assert row["std_s"] >= 0
        assert row["min_s"] <= row["first_step_s"] <= row["max_s"]


def test_phases_partition_the_step(sweep):
    expected = {"forward": ["forward_s"], "forward-backward": ["forward_s", "loss_s", "backward_s"],
                "train": ["forward_s", "loss_s", "backward_s", "optimizer_s"]}
    for row in sweep.rows:
        present = [k for k in ("forward_s", "loss_s", "backward_s", "optimizer_s")
                   if row[k] is not None]
        assert present == expected[row["mode"]]
        # phases are consecutive laps of the same clock: their means add up to the step mean
        assert sum(row[k] for k in present) == pytest.approx(row["mean_s"], rel=1e-9)


def test_flops_and_throughput(sweep):
    for row, cfg in zip(sweep.rows, configs(mode="forward,forward-backward,train",
                                            precision="fp32,bf16"), strict=True):
        assert row["flops_per_step"] == step_flops(cfg.model, cfg.batch, cfg.mode)
        assert row["tflops"] == pytest.approx(row["flops_per_step"] / row["mean_s"] / 1e12)
        assert row["mfu_pct"] is None  # no known peak for a CPU


def test_threads_apply_to_the_run_and_are_restored():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        (row,) = benchmark(configs(mode="forward", steps=1, threads=1)).rows
        assert row["threads"] == 1 and torch.get_num_threads() == 2
        (row,) = benchmark(configs(mode="forward", steps=1, threads=None)).rows
        assert row["threads"] == 2
    finally:
        torch.set_num_threads(before)


def test_peak_tflops_gives_mfu():
    result = benchmark(configs(mode="forward", steps=1), peak_tflops=0.5)
    (row,) = result.rows
    assert row["mfu_pct"] == pytest.approx(100 * row["tflops"] / 0.5)
    assert not any(n.startswith("mfu_pct") for n in result.notes)


def test_warmup_zero_flags_the_first_step():
    (row,) = benchmark(configs(mode="forward", warmup=0, steps=2)).rows
    assert row["status"] == "ok"
    assert row["note"].startswith("warmup 0: first step ")
    assert warmup_note([3.0, 1.0, 1.2]) == (
        "warmup 0: first step 2.7x the median of the others (an outlier, included in mean and std)")
    assert warmup_note([1.0, 1.0]).endswith("(no outlier)")
    assert "only measured step" in warmup_note([1.0])


def test_skipped_when_the_estimate_exceeds_the_limit():
    result = benchmark(configs(mode="forward,train"), memory_limit_bytes=1000)
    assert [r["status"] for r in result.rows] == ["skipped", "skipped"]
    row = result.rows[0]
    assert "exceeds the 0.0 GiB this run may use (given limit)" in row["note"]
    assert list(row) == BENCH_COLUMNS and row["mean_s"] is None
    assert row["flops_per_step"] > 0  # known without running
    assert result.notes == ["2 configs skipped; see the note column"]


def test_skipped_against_mem_available(monkeypatch):
    from nvtx_model import runtime

    monkeypatch.setattr(runtime, "mem_available_bytes", lambda *a: 100 * 1024)
    (row,) = benchmark(configs(mode="train")).rows
    assert row["status"] == "skipped" and "of MemAvailable" in row["note"]


def test_mem_available_parses_proc_meminfo(tmp_path):
    from nvtx_model.runtime import mem_available_bytes

    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   1000 kB\n")
    assert mem_available_bytes(meminfo) == 1000 * 1024
    assert mem_available_bytes(tmp_path / "missing") is None


def _failing_step(monkeypatch, exc, fail_on_config: int):
    """Make Workload.step raise ``exc`` in the ``fail_on_config``-th workload built (0-based)."""
    built = []
    real_init, real_step = harness.Workload.__init__, harness.Workload.step

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        self._index = len(built)
        built.append(self)

    def step(self):
        if self._index == fail_on_config:
            raise exc
        return real_step(self)

    monkeypatch.setattr(harness.Workload, "__init__", init)
    monkeypatch.setattr(harness.Workload, "step", step)


def test_out_of_memory_becomes_a_row_and_the_sweep_goes_on(monkeypatch):
    oom = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                       "can't allocate memory: you tried to allocate 99999999999 bytes.")
    _failing_step(monkeypatch, oom, fail_on_config=0)
    result = benchmark(configs(mode="forward,train"))
    assert [r["status"] for r in result.rows] == ["oom", "ok"]
    assert result.rows[0]["note"].startswith("out of memory: [enforce fail")
    assert result.rows[0]["mean_s"] is None
    assert result.notes[0] == "1 config ran out of memory; see the note column"


def test_other_errors_are_not_swallowed(monkeypatch):
    _failing_step(monkeypatch, ValueError("a bug"), fail_on_config=0)
    with pytest.raises(ValueError, match="a bug"):
        benchmark(configs(mode="forward"))


def test_ctrl_c_keeps_the_finished_rows(monkeypatch):
    _failing_step(monkeypatch, KeyboardInterrupt(), fail_on_config=1)
    seen = []
    result = benchmark(configs(mode="forward,forward-backward,train"),
                       progress=lambda done, total, cfg: seen.append((done, total)))
    assert result.interrupted and result.planned == 3
    assert [r["mode"] for r in result.rows] == ["forward"]
    assert result.notes[0].startswith("interrupted: 1 of 3 configs finished")
    assert seen == [(0, 3), (1, 3)]


def test_progress_is_reported_per_config():
    seen = []
    benchmark(configs(mode="forward", steps=1, precision="fp32,bf16"),
              progress=lambda done, total, label: seen.append(
                  (done, total, label and label.split()[5])))
    assert seen == [(0, 2, "fp32"), (1, 2, "bf16"), (2, 2, None)]


def test_results_database_accumulates_runs(tmp_path):
    import sqlite_utils

    db_path = tmp_path / "results.db"
    # the first run has only skipped rows: numeric columns must still be numeric
    benchmark(configs(mode="forward"), db=db_path, memory_limit_bytes=1)
    result = benchmark(configs(mode="forward,train", steps=1), db=db_path)
    assert result.run_id == 2
    db = sqlite_utils.Database(db_path)
    runs = list(db["runs"].rows)
    assert [r["id"] for r in runs] == [1, 2]
    assert runs[1]["torch_version"] == torch.__version__
    assert runs[1]["command"] == "bench" and runs[1]["device_name"]
    assert runs[1]["created_utc"].endswith("+00:00")
    rows = list(db["bench"].rows)
    assert [(r["run_id"], r["mode"], r["status"]) for r in rows] == [
        (1, "forward", "skipped"), (2, "forward", "ok"), (2, "train", "ok")]
    assert db["bench"].columns_dict["mean_s"] is float
    assert rows[1]["mean_s"] == pytest.approx(result.rows[0]["mean_s"])
    assert db["bench"].foreign_keys[0].other_table == "runs"


def test_git_commit_of_the_working_directory(tmp_path):
    from nvtx_model.results_db import git_commit

    assert git_commit(tmp_path) == (None, None)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(tmp_path)]
    try:
        subprocess.run(git + ["init", "-q"], check=True)
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("git is not usable here")
    (tmp_path / "f.txt").write_text("a")
    subprocess.run(git + ["add", "f.txt"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    commit, dirty = git_commit(tmp_path)
    assert len(commit) == 40 and dirty is False
    (tmp_path / "f.txt").write_text("b")
    assert git_commit(tmp_path) == (commit, True)


def test_adamw_implementations(monkeypatch):
    from nsys_parsers.errors import BadOption
    from nvtx_model.model import TransformerLM
    from nvtx_model.runtime import CpuRuntime

    model = TransformerLM(vocab_size=8, context_length=4, d_model=8, num_layers=1, num_heads=2,
                          d_ff=8)
    rt = CpuRuntime()
    assert harness.make_optimizer(model, "foreach", rt).defaults["foreach"] is True
    assert harness.make_optimizer(model, "for-loop", rt).defaults["foreach"] is False

    def unsupported(*args, **kwargs):
        raise RuntimeError("`fused=True` requires all the params to be floating point Tensors "
                           "of supported devices")

    monkeypatch.setattr(torch.optim, "AdamW", unsupported)
    with pytest.raises(BadOption, match="--adamw fused is not supported on cpu .* --adamw auto"):
        harness.make_optimizer(model, "fused", rt)


def test_missing_nvtx_package_fails_before_any_run(monkeypatch):
    import sys

    from nvtx_model.errors import NvtxMissing

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setitem(sys.modules, "nvtx", None)
    progress = []
    with pytest.raises(NvtxMissing):
        benchmark(configs(mode="forward", nvtx="fine"), progress=lambda *a: progress.append(a))
    assert progress == []
