"""NVTX on a CUDA build: ranges go through ``torch.cuda.nvtx`` (the default backend when CUDA
is available), nested as the contract says, and nothing is called at level ``off``.

The real ``torch.cuda.nvtx.range_push``/``range_pop`` run in every test here: they are
wrapped, not replaced, to see the calls. Without a profiler attached NVTX tracks no depth, so
``range_push`` then returns a negative value; with one (nsys) it returns the range's depth.
"""

from __future__ import annotations

import pytest

from nvtx_model import nvtx_ranges as nv
from nvtx_model.workload import WorkloadSpec
from tests.range_trees import expected_tree

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("gpu")]


class NvtxCalls:
    """The calls that reach torch.cuda.nvtx, and what range_push returned."""

    def __init__(self, monkeypatch) -> None:
        import torch.cuda.nvtx as tnvtx

        self.events: list[tuple[str, str]] = []
        self.returned: list[tuple[int, int]] = []  # (depth the contract expects, value)
        self._stack: list[str] = []
        push, pop = tnvtx.range_push, tnvtx.range_pop

        def range_push(msg: str):
            value = push(msg)
            self.returned.append((len(self._stack), value))
            self._stack.append(msg)
            self.events.append(("push", msg))
            return value

        def range_pop():
            value = pop()
            self.events.append(("pop", self._stack.pop()))
            return value

        monkeypatch.setattr(tnvtx, "range_push", range_push)
        monkeypatch.setattr(tnvtx, "range_pop", range_pop)

    def tree(self) -> list:
        rec = nv.RecordingBackend()
        rec.events = list(self.events)
        return rec.tree()

    def count(self, name: str) -> int:
        return sum(1 for kind, n in self.events if kind == "push" and n == name)

    def depths_consistent(self) -> bool:
        """With a profiler attached every push returns its depth; without, all are < 0."""
        if all(not isinstance(v, int) or v < 0 for _, v in self.returned):
            return True
        return all(d == v for d, v in self.returned)


def test_the_default_backend_on_cuda_is_torch_cuda_nvtx(gpu, record):
    import torch.cuda.nvtx as tnvtx

    backend = nv.Instrumentation("fine").backend
    record(backend=backend.name)
    assert isinstance(backend, nv.TorchCudaBackend) and backend.name == "torch.cuda.nvtx"
    assert backend.push is tnvtx.range_push and backend.pop is tnvtx.range_pop
    assert isinstance(nv.Instrumentation("off").backend, nv.NoopBackend)


@pytest.mark.parametrize("attention", ["naive", "sdpa"])
def test_a_training_step_nests_its_ranges_through_torch_cuda_nvtx(gpu, attention,
                                                                  monkeypatch, record):
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import CudaRuntime

    calls = NvtxCalls(monkeypatch)
    cfg = WorkloadSpec(size="tiny", context="64", mode="train", attention=attention,
                       nvtx="fine", device="cuda", warmup=1, steps=2).configs()[0]
    Workload(cfg, CudaRuntime(), nv.Instrumentation("fine")).run()
    assert calls.tree() == expected_tree("train", "fine", warmup=1, steps=2,
                                         attention=attention)
    assert calls.depths_consistent(), calls.returned[:5]
    record(ranges=len(calls.returned), push_returned=calls.returned[0][1])


def test_generation_emits_prefill_decode_and_decode_steps(gpu, monkeypatch, record):
    from nvtx_model.infer import run_inference
    from nvtx_model.infer_config import InferSpec, expand_infer

    calls = NvtxCalls(monkeypatch)
    configs, _ = expand_infer(InferSpec(size="tiny", device="cuda", nvtx="fine",
                                        batch_sizes="2", input_lengths="16", output_length=5,
                                        runs=2, warmup=1))
    (row,) = run_inference(configs).rows
    assert row["status"] == "ok" and row["device"] == "cuda"
    calls_ = 1 + 2  # warmup + measured generate calls
    layers = configs[0].model.num_layers
    assert [calls.count(n) for n in ("warmup", "measure", "prefill", "decode", "decode step")
            ] == [1, 1, calls_, calls_, calls_ * 4]
    assert calls.count("attention") == calls.count("ffn") == layers * calls_ * 5
    assert calls.depths_consistent()
    assert calls._stack == []
    record(ranges=len(calls.returned))


def test_level_off_calls_nothing(gpu, monkeypatch, record):
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import CudaRuntime

    calls = NvtxCalls(monkeypatch)
    cfg = WorkloadSpec(size="tiny", context="64", mode="train", nvtx="off", device="cuda",
                       warmup=1, steps=1).configs()[0]
    Workload(cfg, CudaRuntime(), nv.Instrumentation("off")).run()
    assert nv.nvtx_range(nv.STEP) is nv.nvtx_range(nv.FORWARD)  # the shared null context
    assert calls.events == []
    record(ranges=0)


def test_bench_with_nvtx_fine_on_cuda(gpu, nsys_mine, record):
    (row,) = nsys_mine("bench", "--size", "tiny", "--context", "64", "--mode", "train",
                       "--nvtx", "fine", "--device", "cuda", "--warmup", "1", "--steps", "2",
                       "--format", "json").json()
    assert (row["status"], row["nvtx"], row["device"]) == ("ok", "fine", "cuda")
    record(mean_s=row["mean_s"])
