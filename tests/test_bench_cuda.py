"""The CUDA paths of bench and memory, run on the CPU against mocked ``torch.cuda`` calls.

``fake_cuda`` builds a real ``CudaRuntime`` whose every ``torch.cuda`` call is a mock that
records its arguments; only its ``device`` is the CPU, so that the model can run here.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

from nvtx_model import harness  # noqa: E402
from nvtx_model.bench import benchmark  # noqa: E402
from nvtx_model.memory import profile_memory  # noqa: E402
from nvtx_model.runtime import CpuRuntime, CudaRuntime, peak_tflops, resolve_runtime  # noqa: E402
from nvtx_model.workload import WorkloadSpec  # noqa: E402
from tests.fake_cuda import H100, FakeCuda  # noqa: E402


@pytest.fixture
def fake_cuda(monkeypatch, tmp_path):
    return FakeCuda(monkeypatch, tmp_path)


def configs(**kwargs):
    base = dict(size="tiny", vocab=128, context="16", batch=2, warmup=1, steps=2, device="cuda",
                threads=1)
    return WorkloadSpec(**{**base, **kwargs}).configs()


def test_resolve_runtime(monkeypatch):
    from nvtx_model.errors import CudaUnavailable

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert isinstance(resolve_runtime("auto"), CpuRuntime)
    assert isinstance(resolve_runtime("cpu"), CpuRuntime)
    with pytest.raises(CudaUnavailable, match="use --device cpu or auto"):
        resolve_runtime("cuda")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index=None: H100)
    rt = resolve_runtime("auto")
    assert isinstance(rt, CudaRuntime) and rt.device == torch.device("cuda", 0)
    assert rt.name == H100
    assert isinstance(resolve_runtime("cpu"), CpuRuntime)


def test_bench_synchronizes_after_every_phase(fake_cuda):
    (row,) = benchmark(configs(mode="train")).rows
    assert row["status"] == "ok" and row["device"] == "cuda" and row["device_name"] == H100
    # one after building the workload, one per phase of every (warmup + measured) step, then
    # the profiled step: one before it, its four, one after it
    assert fake_cuda.names().count("synchronize") == 1 + 4 * (1 + 2) + 1 + 4 + 1
    assert fake_cuda.names()[-1] == "empty_cache"  # cached memory released after the config
    assert fake_cuda.names().index("profile") == 1 + 4 * (1 + 2) + 1  # after the measured steps


def test_the_profiled_step_says_what_bounds_it(fake_cuda):
    # 1 ms step: two overlapping kernels over 0-150 us, a memcpy over 200-300 us -> 25% busy
    fake_cuda.gpu_events = [("ampere_sgemm_128x64_nn", 0, 100_000),
                            ("vectorized_elementwise_kernel", 50_000, 150_000),
                            ("Memcpy HtoD (Pageable -> Device)", 200_000, 300_000)]
    result = benchmark(configs(mode="train", precision="bf16"))
    (row,) = result.rows
    assert ("profile", ["CUDA"]) in fake_cuda.calls
    assert (row["gpu_busy_pct"], row["kernels"], row["mean_kernel_us"], row["bound"]) == (
        25.0, 2, 100.0, "host")
    assert row["note"] is None
    assert result.notes[-1] == (
        "tiny ctx 16 b2 train bf16: the GPU is busy 25% of the step; the step is bound by the "
        "host launching 2 kernels (mean 100.0 µs each), so bf16 or a faster GPU cannot shorten "
        "it; CUDA graphs (--compile reduce-overhead) or a larger batch are what help")
    # busy 80% or more: the device bounds the step, and nothing needs saying
    fake_cuda.gpu_events = [("ampere_sgemm_128x64_nn", 100_000, 900_000)]
    result = benchmark(configs(mode="train"))
    assert (result.rows[0]["gpu_busy_pct"], result.rows[0]["bound"]) == (80.0, "device")
    assert not any("is busy" in n for n in result.notes)


def test_no_kernel_recorded_leaves_the_bound_empty_and_says_why(fake_cuda):
    (row,) = benchmark(configs(mode="forward")).rows
    assert row["status"] == "ok" and row["gpu_busy_pct"] is None and row["bound"] is None
    assert row["note"] == ("gpu_busy_pct not measured: torch.profiler recorded no kernel (is "
                           "another profiler, such as nsys, holding CUPTI?)")


def test_bound_false_runs_no_profiled_step(fake_cuda):
    (row,) = benchmark(configs(mode="forward"), bound=False).rows
    assert "profile" not in fake_cuda.names() and row["bound"] is None and row["note"] is None


def test_bench_mfu_uses_the_gpu_peak(fake_cuda):
    fp32, bf16 = benchmark(configs(mode="forward", precision="fp32,bf16")).rows
    assert fp32["mfu_pct"] == pytest.approx(100 * fp32["tflops"] / 66.9)
    assert bf16["mfu_pct"] == pytest.approx(100 * bf16["tflops"] / 989.4)


def test_peak_table():
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops(H100, "fp32") == 66.9
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "bf16") == 312.0
    assert peak_tflops("AMD EPYC", "fp32") is None


def test_cuda_oom_becomes_a_row_and_memory_is_released(fake_cuda, monkeypatch):
    real_step = harness.Workload.step
    state = {"n": 0}

    def step(self):
        if self.cfg.mode == "forward":
            raise torch.cuda.OutOfMemoryError(
                "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                "79.11 GiB\nmore details")
        state["n"] += 1
        return real_step(self)

    monkeypatch.setattr(harness.Workload, "step", step)
    rows = benchmark(configs(mode="forward,train")).rows
    assert [r["status"] for r in rows] == ["oom", "ok"]
    assert rows[0]["note"] == ("out of memory: CUDA out of memory. Tried to allocate 2.00 GiB. "
                               "GPU 0 has a total capacity of 79.11 GiB")
    # the train config's steps: 1 warmup, 2 measured, 1 under the profiler
    assert fake_cuda.names().count("empty_cache") == 2 and state["n"] == 4


def test_bf16_unsupported_is_skipped(monkeypatch, tmp_path):
    fake = FakeCuda(monkeypatch, tmp_path, bf16=False)
    rows = benchmark(configs(mode="forward", precision="fp32,bf16")).rows
    assert [r["status"] for r in rows] == ["ok", "skipped"]
    assert rows[1]["note"] == f"bf16 is not supported on {H100}; use --precision fp32"
    assert fake.runtime.bf16_supported() is False


def test_cuda_autocast_and_adamw_kwargs():
    rt = CudaRuntime.__new__(CudaRuntime)
    rt.device, rt.name = torch.device("cuda", 0), H100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available, disabling autocast"
        ctx = rt.autocast("bf16")
    assert isinstance(ctx, torch.autocast)
    assert ctx.device == "cuda" and ctx.fast_dtype == torch.bfloat16
    assert not isinstance(rt.autocast("fp32"), torch.autocast)
    assert rt.adamw_kwargs("fused") == {"fused": True}
    assert rt.adamw_kwargs("foreach") == {"foreach": True}
    assert rt.adamw_kwargs("auto") == {}


def test_memory_records_history_dumps_a_snapshot_and_stops(fake_cuda, tmp_path):
    (row,) = profile_memory(configs(mode="train"), snapshot_dir=tmp_path / "snaps",
                            max_entries=1234).rows
    assert row["status"] == "ok" and row["measured"] == "cuda allocator peak"
    assert (row["peak_allocated_bytes"], row["peak_reserved_bytes"]) == (123_000_000, 456_000_000)
    assert row["rss_growth_bytes"] is None
    path = tmp_path / "snaps" / "tiny_ctx16_b2_train_fp32_naive_nvtx-off_w1s2.pickle"
    assert row["snapshot"] == str(path) and path.read_bytes() == b"snapshot"
    memory_calls = [c for c in fake_cuda.calls if c[0] != "synchronize"]
    assert memory_calls == [
        ("reset_peak_memory_stats",),  # after the warmup step
        ("_record_memory_history", (), {"max_entries": 1234}),
        ("_dump_snapshot", str(path)),
        ("_record_memory_history", (), {"enabled": None}),
        ("empty_cache",),
    ]
    # the warmup step ran before recording started: 1 + 4 syncs before reset_peak_memory_stats
    assert fake_cuda.names().index("reset_peak_memory_stats") == 1 + 4


def test_memory_oom_still_dumps_the_snapshot_and_stops_recording(fake_cuda, tmp_path,
                                                                 monkeypatch):
    real_step = harness.Workload.step
    steps = {"n": 0}

    def step(self):
        steps["n"] += 1
        if steps["n"] == 2:  # the measured step, after one warmup step
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
        return real_step(self)

    monkeypatch.setattr(harness.Workload, "step", step)
    (row,) = profile_memory(configs(mode="train", steps=1), snapshot_dir=tmp_path).rows
    path = tmp_path / "tiny_ctx16_b2_train_fp32_naive_nvtx-off_w1s1_oom.pickle"
    assert row["status"] == "oom" and row["snapshot"] == str(path) and path.exists()
    assert row["note"] == ("out of memory: CUDA out of memory. Tried to allocate 8.00 GiB; "
                           f"snapshot of the OOM in {path}")
    assert row["peak_allocated_bytes"] == 123_000_000
    assert row["params_bytes"] > 0  # the estimate is kept
    assert fake_cuda.calls[-2:] == [("_record_memory_history", (), {"enabled": None}),
                                    ("empty_cache",)]


def test_the_table_on_a_gpu_leads_with_what_bounds_each_step(fake_cuda, cli, monkeypatch):
    """Through the command line at 80 columns: the busy share and the bound are kept (the
    phases give way first); several host-bound steps get a line each and what helps once."""
    fake_cuda.gpu_events = [("ampere_sgemm_128x64_nn", 0, 100_000),
                            ("Memcpy HtoD (Pageable -> Device)", 200_000, 300_000)]
    monkeypatch.setenv("COLUMNS", "80")
    res = cli("bench", "--size", "tiny", "--vocab", "128", "--context", "16", "--batch", "2",
              "--warmup", "1", "--steps", "2", "--device", "cuda", "--threads", "1",
              "--mode", "forward,train")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    header = next(i for i, x in enumerate(lines) if x.startswith("size"))
    assert "bound" in lines[header] and "busy" in lines[header - 1]
    rows = [x.split() for x in lines[header + 2:header + 4]]
    assert [r[:4] for r in rows] == [["tiny", "16", "forward", "fp32"],
                                     ["tiny", "16", "train", "fp32"]]
    assert all(r[6:8] == ["20.0", "host"] for r in rows)  # 200 of 1,000 us busy
    text = " ".join(res.stdout.split())
    assert ("tiny ctx 16 b2 forward fp32: the GPU is busy 20% of the step; the step is bound "
            "by the host launching 1 kernel (mean 100.0 µs each)") in text
    assert ("the 2 steps above wait on the host: bf16 or a faster GPU cannot shorten them; "
            "CUDA graphs (--compile reduce-overhead) or a larger batch are what help") in text
