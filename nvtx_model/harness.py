"""One workload: a model, its optimizer and a random batch, stepped with synchronized timing.

A step of mode ``forward`` runs the model under ``torch.no_grad()``; ``forward-backward`` adds
the loss and ``loss.backward()`` (gradients are set to None at the end of each step, untimed);
``train`` adds the AdamW step and ``zero_grad(set_to_none=True)``. The device is synchronized at
the end of every phase, so phase times come from synchronized boundaries and the step time is
the sum of its phases (plus a few microseconds of Python between them).

With ``--compile MODE`` the model is ``torch.compile``d (``compile_model``): the first steps
compile it (warmup steps keep that out of the measurement), and in ``reduce-overhead`` and
``max-autotune`` modes on a GPU later steps replay CUDA graphs. NVTX ranges inside the
model are Python calls that torch.compile does not trace: it runs them between the compiled
pieces, so they are still emitted (at the cost of graph breaks at level ``fine``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from timeit import default_timer as timer
from typing import Callable

import torch

from nsys_parsers.errors import BadOption
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import RunConfig
from nvtx_model.errors import CompileUnavailable
from nvtx_model.model import TransformerLM, cross_entropy
from nvtx_model.runtime import Runtime


@dataclass
class StepTiming:
    total_s: float
    phases: dict[str, float] = field(default_factory=dict)


class Workload:
    """Everything one RunConfig needs, built on ``runtime.device`` with ``cfg.seed``."""

    def __init__(self, cfg: RunConfig, runtime: Runtime,
                 instrumentation: nv.Instrumentation = nv.OFF) -> None:
        self.cfg = cfg
        self.runtime = runtime
        self.instrumentation = instrumentation
        torch.manual_seed(cfg.seed)
        with torch.device(runtime.device):
            self.model: torch.nn.Module = TransformerLM.from_config(cfg.model,
                                                                   attention=cfg.attention)
            shape = (cfg.batch, cfg.model.context_length)
            self.inputs = torch.randint(0, cfg.model.vocab_size, shape)
            self.targets = torch.randint(0, cfg.model.vocab_size, shape)
        self.optimizer = (make_optimizer(self.model, cfg.adamw, runtime) if cfg.mode == "train"
                          else None)
        if cfg.compiled:
            self.model = compile_model(self.model, cfg.compile, runtime)
        runtime.synchronize()

    def step(self) -> StepTiming:
        """One synchronized step with NVTX ranges ``step`` > ``forward``, ``loss``, ``backward``,
        ``optimizer``; returns its total and per-phase wall-clock seconds."""
        sync = self.runtime.synchronize
        mode = self.cfg.mode
        phases: dict[str, float] = {}
        with nv.nvtx_range(nv.STEP):
            start = timer()
            with nv.nvtx_range(nv.FORWARD):
                grad = torch.no_grad() if mode == "forward" else contextlib.nullcontext()
                with grad, self.runtime.autocast(self.cfg.precision):
                    logits = self.model(self.inputs)
                sync()
            mark = timer()
            phases["forward"] = mark - start
            if mode != "forward":
                with nv.nvtx_range(nv.LOSS):
                    with self.runtime.autocast(self.cfg.precision):
                        loss = cross_entropy(logits, self.targets)
                    sync()
                mark = _lap(phases, "loss", mark)
                with nv.nvtx_range(nv.BACKWARD):
                    loss.backward()
                    sync()
                mark = _lap(phases, "backward", mark)
            if self.optimizer is not None:
                with nv.nvtx_range(nv.OPTIMIZER):
                    self.optimizer.step()
                    self.optimizer.zero_grad(set_to_none=True)
                    sync()
                mark = _lap(phases, "optimizer", mark)
            elif mode == "forward-backward":
                # free the gradients as train's zero_grad does (not timed: bookkeeping)
                self.model.zero_grad(set_to_none=True)
        return StepTiming(mark - start, phases)

    def run(self, before_measure: Callable[[], None] | None = None) -> list[StepTiming]:
        """Warmup steps (range ``warmup``, not returned), then the measured ones (``measure``).

        ``before_measure`` runs between the two (memory profiling resets peaks there)."""
        try:
            with nv.activated(self.instrumentation):
                if self.cfg.warmup:
                    with nv.nvtx_range(nv.WARMUP):
                        for _ in range(self.cfg.warmup):
                            self.step()
                if before_measure is not None:
                    before_measure()
                with nv.nvtx_range(nv.MEASURE):
                    return [self.step() for _ in range(self.cfg.steps)]
        except Exception as exc:
            if self.cfg.compiled and is_compile_error(exc) and not self.runtime.is_oom(exc):
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
                raise CompileUnavailable(
                    f"torch.compile(mode={self.cfg.compile!r}) failed on "
                    f"{self.runtime.device.type} ({type(exc).__name__}: {first}); run without "
                    f"--compile, or with --compile default") from exc
            raise


def _lap(phases: dict[str, float], name: str, since: float) -> float:
    now = timer()
    phases[name] = now - since
    return now


def make_optimizer(model: torch.nn.Module, impl: str, runtime: Runtime) -> torch.optim.Optimizer:
    """AdamW with the --adamw implementation; a clear error where the device lacks it."""
    kwargs = runtime.adamw_kwargs(impl)
    try:
        return torch.optim.AdamW(model.parameters(), lr=1e-4, **kwargs)
    except (RuntimeError, ValueError) as exc:
        raise BadOption(f"--adamw {impl} is not supported on {runtime.device.type} by torch "
                        f"{torch.__version__} ({exc}); use --adamw auto") from exc


def compile_model(model: torch.nn.Module, mode: str, runtime: Runtime) -> torch.nn.Module:
    """``torch.compile(model, mode=...)`` (``default``: torch's default mode), after checking
    that the device can compile: a C++ compiler on CPU, Triton on CUDA."""
    device = runtime.device.type
    if device == "cpu":
        compilers = [os.environ.get("CXX") or "", "g++", "c++", "clang++"]
        if not any(c and shutil.which(c) for c in compilers):
            raise CompileUnavailable(
                f"--compile {mode} on CPU needs a C++ compiler (torch.compile builds its CPU "
                f"kernels with one) and none was found ($CXX, g++, c++, clang++): install "
                f"g++ (e.g. apt-get install g++) or run without --compile")
    elif device == "cuda":
        import importlib.util

        if importlib.util.find_spec("triton") is None:
            raise CompileUnavailable(
                f"--compile {mode} on CUDA needs Triton, which torch.compile generates its GPU "
                f"kernels with: install the triton package that matches your torch, or run "
                f"without --compile")
    return torch.compile(model, mode=None if mode == "default" else mode)  # type: ignore


def is_compile_error(exc: BaseException) -> bool:
    """Whether ``exc`` came from torch.compile (Dynamo, AOTAutograd, Inductor)."""
    module = type(exc).__module__
    return module.startswith(("torch._dynamo", "torch._inductor", "torch._functorch")) or (
        "BackendCompilerFailed" in type(exc).__name__)
