"""A stand-in for ``torch.cuda`` on a machine without CUDA: the bench, memory and infer tests
drive the CUDA code paths through it. ``FakeCuda`` builds a real ``CudaRuntime`` whose every
``torch.cuda`` call is a mock that records its arguments; only its ``device`` is the CPU, so
that the model can run here."""

from __future__ import annotations

from pathlib import Path

import torch

from nvtx_model import busy, grid
from nvtx_model.runtime import CudaRuntime

H100 = "NVIDIA H100 80GB HBM3"


class FakeCuda:
    def __init__(self, monkeypatch, tmp_path: Path, bf16: bool = True):
        self.calls: list[tuple] = []
        rec = self.calls.append
        cuda, memory = torch.cuda, torch.cuda.memory
        monkeypatch.setattr(cuda, "is_available", lambda: True)
        monkeypatch.setattr(cuda, "current_device", lambda: 0)
        monkeypatch.setattr(cuda, "get_device_name", lambda index=None: H100)
        monkeypatch.setattr(cuda, "is_bf16_supported", lambda *a, **k: bf16)
        monkeypatch.setattr(cuda, "synchronize", lambda device=None: rec(("synchronize",)))
        monkeypatch.setattr(cuda, "reset_peak_memory_stats",
                            lambda device=None: rec(("reset_peak_memory_stats",)))
        monkeypatch.setattr(cuda, "max_memory_allocated", lambda device=None: 123_000_000)
        monkeypatch.setattr(cuda, "max_memory_reserved", lambda device=None: 456_000_000)
        monkeypatch.setattr(cuda, "empty_cache", lambda: rec(("empty_cache",)))
        monkeypatch.setattr(memory, "_record_memory_history",
                            lambda *a, **k: rec(("_record_memory_history", a, k)))

        def dump(path):
            Path(path).write_bytes(b"snapshot")
            rec(("_dump_snapshot", path))

        monkeypatch.setattr(memory, "_dump_snapshot", dump)
        # torch.profiler: a stand-in that records the profiled steps; its GPU events are
        # ``self.gpu_events`` (name, start ns, end ns), over a step of ``self.span_ns``
        self.gpu_events: list[tuple[str, int, int]] = []
        self.span_ns = 1_000_000
        profiler = torch.profiler
        monkeypatch.setattr(profiler, "supported_activities",
                            lambda: {profiler.ProfilerActivity.CPU, profiler.ProfilerActivity.CUDA})
        fake = self

        class Profile:
            def __init__(self, activities):
                rec(("profile", sorted(a.name for a in activities)))

            def __enter__(self):
                fake.clock = iter((0, fake.span_ns))
                return self

            def __exit__(self, *exc):
                return False

        monkeypatch.setattr(profiler, "profile", Profile)
        monkeypatch.setattr(busy, "perf_counter_ns", lambda: next(self.clock))
        monkeypatch.setattr(busy, "gpu_events", lambda prof: list(self.gpu_events))
        self.runtime = CudaRuntime()
        self.runtime.device = torch.device("cpu")  # tensors stay here; device calls are mocks
        monkeypatch.setattr(grid, "resolve_runtime", lambda device: self.runtime)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]
