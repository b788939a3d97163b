"""The NVTX range contract: exact range trees per level and mode, and the backends."""

from __future__ import annotations

import sys
import types

import pytest

from nvtx_model import nvtx_ranges as nv
from tests.range_trees import expected_tree


# ---- contract (no torch needed) ---------------------------------------------------------------
def test_contract_names_are_the_documented_ones():
    assert nv.COARSE_RANGES == ("warmup", "measure", "step", "forward", "loss", "backward",
                                "optimizer", "prefill", "decode")
    assert set(nv.FINE_RANGES) == {"attention", "ffn", "scaled dot product attention",
                                   "computing attention scores", "computing softmax",
                                   "final matmul", "decode step"}
    assert nv.LEVELS == ("off", "coarse", "fine")


def test_every_contract_name_is_documented_in_model_md():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "MODEL.md").read_text()
    for name in nv.COARSE_RANGES + nv.FINE_RANGES:
        assert f"`{name}`" in doc


def test_levels_gate_ranges():
    rec = nv.RecordingBackend()
    coarse = nv.Instrumentation("coarse", rec)
    with coarse.range(nv.STEP), coarse.range(nv.FFN):
        pass
    fine = nv.Instrumentation("fine", rec)
    with fine.range(nv.FFN):
        pass
    assert rec.events == [("push", "step"), ("pop", "step"), ("push", "ffn"), ("pop", "ffn")]


def test_off_never_touches_a_backend():
    class Exploding:
        name = "exploding"

        def push(self, message):
            raise AssertionError("pushed")

        def pop(self):
            raise AssertionError("popped")

    off = nv.Instrumentation("off", Exploding())
    with nv.activated(off), nv.nvtx_range(nv.STEP), off.range(nv.SOFTMAX):
        pass


def test_names_outside_the_contract_are_refused():
    with pytest.raises(ValueError, match="not an NVTX range of the contract"):
        nv.Instrumentation("fine", nv.RecordingBackend()).range("my range")
    with pytest.raises(ValueError, match="NVTX level"):
        nv.Instrumentation("verbose")


def test_activated_restores_the_previous_instrumentation_on_error():
    rec = nv.RecordingBackend()
    with pytest.raises(RuntimeError):
        with nv.activated(nv.Instrumentation("coarse", rec)):
            assert nv.current().backend is rec
            raise RuntimeError("boom")
    assert nv.current() is nv.OFF


def test_recording_backend_tree_and_unbalanced_pop():
    rec = nv.RecordingBackend()
    rec.push("a"), rec.push("b"), rec.pop(), rec.push("c"), rec.pop(), rec.pop()
    assert rec.tree() == [("a", [("b", []), ("c", [])])]
    assert rec.names() == ["a", "b", "c"]
    with pytest.raises(RuntimeError, match="without a matching push"):
        rec.pop()


def test_start_end_ranges_need_not_nest():
    rec = nv.RecordingBackend()
    a = rec.start("a")
    rec.push("p")
    b = rec.start("b")
    rec.end(a)
    rec.pop()
    assert rec.started == ["b"]
    rec.end(b)
    assert rec.events == [("start", "a"), ("push", "p"), ("start", "b"), ("end", "a"),
                          ("pop", "p"), ("end", "b")]
    assert rec.tree() == [("p", [])]
    with pytest.raises(RuntimeError, match="not open"):
        rec.end(a)
    assert nv.NoopBackend().start("x") is None


def test_real_pypi_nvtx_start_end():
    pytest.importorskip("nvtx")
    backend = nv.PyNvtxBackend()
    backend.end(backend.start("step"))


def test_pypi_nvtx_backend_uses_the_default_domain(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(push_range=lambda *a, **k: calls.append(("push", a, k)),
                                 pop_range=lambda *a, **k: calls.append(("pop", a, k)))
    monkeypatch.setitem(sys.modules, "nvtx", fake)
    backend = nv.PyNvtxBackend()
    with nv.Instrumentation("coarse", backend).range(nv.STEP):
        pass
    assert calls == [("push", ("step",), {}), ("pop", (), {})]  # no domain: plain names in nsys


def test_missing_pypi_nvtx_is_a_typed_error(monkeypatch):
    from nvtx_model.errors import NvtxMissing

    monkeypatch.setitem(sys.modules, "nvtx", None)
    with pytest.raises(NvtxMissing, match=r"pip install 'nvtx<=0.2.11'"):
        nv.PyNvtxBackend()


def test_real_pypi_nvtx_package_accepts_the_calls():
    pytest.importorskip("nvtx")
    backend = nv.PyNvtxBackend()
    backend.push(nv.STEP)
    backend.pop()


# ---- the training step, through the harness and the benchmark --------------------------------
torch_needed = pytest.mark.skipif(
    __import__("importlib").util.find_spec("torch") is None, reason="torch not installed")


def _config(mode="train", level="fine", warmup=1, steps=1, attention="naive"):
    from nvtx_model.config import PRESETS, ModelConfig, RunConfig

    model = ModelConfig.from_shape(PRESETS["tiny"], vocab_size=64, context_length=8)
    return RunConfig(size="tiny", model=model, batch=2, mode=mode, nvtx=level, device="cpu",
                     warmup=warmup, steps=steps, attention=attention)


@torch_needed
@pytest.mark.parametrize("level", ["off", "coarse", "fine"])
def test_training_step_range_tree_at_each_level(level):
    from nvtx_model.bench import benchmark

    rec = nv.RecordingBackend()
    result = benchmark([_config(level=level)], nvtx_backend=rec)
    assert result.rows[0]["status"] == "ok"
    assert rec.tree() == expected_tree("train", level, warmup=1, steps=1)
    assert rec.open_ranges == []


@torch_needed
def test_fine_training_step_exact_sequence():
    from nvtx_model.bench import benchmark

    rec = nv.RecordingBackend()
    benchmark([_config(level="fine", warmup=0, steps=1)], nvtx_backend=rec)
    block = ["attention", "scaled dot product attention", "computing attention scores",
             "computing softmax", "final matmul", "ffn"]
    assert rec.names() == ["measure", "step", "forward", *block, *block, "loss", "backward",
                           "optimizer"]


@torch_needed
@pytest.mark.parametrize("mode", ["forward", "forward-backward"])
def test_range_tree_of_the_other_modes(mode):
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import CpuRuntime

    rec = nv.RecordingBackend()
    cfg = _config(mode=mode, warmup=2, steps=3)
    Workload(cfg, CpuRuntime(), nv.Instrumentation("fine", rec)).run()
    assert rec.tree() == expected_tree(mode, "fine", warmup=2, steps=3)


@torch_needed
def test_sdpa_has_the_outer_attention_range_only():
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import CpuRuntime

    rec = nv.RecordingBackend()
    cfg = _config(mode="forward", warmup=0, steps=1, attention="sdpa")
    Workload(cfg, CpuRuntime(), nv.Instrumentation("fine", rec)).run()
    assert rec.tree() == expected_tree("forward", "fine", 0, 1, attention="sdpa")


@torch_needed
def test_default_backend_is_torch_cuda_nvtx_when_cuda_is_available(monkeypatch):
    import torch
    import torch.cuda.nvtx as tnvtx

    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(tnvtx, "range_push", lambda msg: calls.append(("push", msg)))
    monkeypatch.setattr(tnvtx, "range_pop", lambda: calls.append(("pop",)))
    backend = nv.default_backend()
    assert backend.name == "torch.cuda.nvtx"
    with nv.Instrumentation("coarse", backend).range(nv.FORWARD):
        pass
    assert calls == [("push", "forward"), ("pop",)]


@torch_needed
def test_default_backend_is_pypi_nvtx_without_cuda(monkeypatch):
    import torch

    pytest.importorskip("nvtx")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert nv.default_backend().name == "nvtx"
    assert nv.Instrumentation("fine").backend.name == "nvtx"
    assert nv.Instrumentation("off").backend.name == "noop"
