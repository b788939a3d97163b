"""The NVTX range contract and the one helper that emits ranges.

Reports and CI rules look ranges up by these names, so they are defined here and nowhere
else (docs/MODEL.md lists them too). Nesting, per step::

    warmup                        around all warmup steps (absent with --warmup 0)   coarse
    measure                       around all measured steps                          coarse
      step                        each step                                          coarse
        forward                   the model's forward pass                           coarse
          attention               each block's attention sub-layer (norm included)   fine
            scaled dot product attention                                             fine
              computing attention scores   QK^T, scaling, causal mask (naive only)   fine
              computing softmax            (naive only)                              fine
              final matmul                 probabilities @ V (naive only)            fine
          ffn                     each block's SwiGLU sub-layer (norm included)      fine
        loss                      cross-entropy (not in mode forward)                coarse
        backward                  loss.backward() (not in mode forward)              coarse
        optimizer                 AdamW step + zero_grad (mode train only)           coarse

Inference (``nsys-mine infer``, ``profile --workload infer``), per generate call::

    warmup / measure              around the warmup / measured generate calls        coarse
      prefill                     the prompt's forward pass + first token (TTFT)     coarse
      decode                      every later token (output_length - 1 steps)        coarse
        decode step               one token: forward of one position + sampling      fine

The model's own ranges (``attention``, ``ffn`` and the attention internals) nest inside
``prefill`` and ``decode step`` at level ``fine``.

Backends: ``torch.cuda.nvtx`` when CUDA is available, the PyPI ``nvtx`` package otherwise
(torch's CPU build cannot emit NVTX), a recording backend for tests, and nothing at all when
the level is ``off``. Model code calls ``nvtx_range(NAME)``; which ranges come out depends on
the instrumentation made current with ``activated(...)``. Besides push/pop ranges, which must
nest on their thread, backends open start/end ranges (``start(name)`` returns a handle for
``end``), which need not nest: ``nvtx_model.program_nvtx`` marks backward passes and training
steps of other people's programs with them.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Protocol

# ---- the contract ---------------------------------------------------------------------------
WARMUP = "warmup"
MEASURE = "measure"
STEP = "step"
FORWARD = "forward"
LOSS = "loss"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
ATTENTION = "attention"
FFN = "ffn"
SDPA = "scaled dot product attention"
ATTENTION_SCORES = "computing attention scores"
SOFTMAX = "computing softmax"
FINAL_MATMUL = "final matmul"
PREFILL = "prefill"
DECODE = "decode"
DECODE_STEP = "decode step"

LEVELS = ("off", "coarse", "fine")
COARSE_RANGES = (WARMUP, MEASURE, STEP, FORWARD, LOSS, BACKWARD, OPTIMIZER, PREFILL, DECODE)
FINE_RANGES = (ATTENTION, FFN, SDPA, ATTENTION_SCORES, SOFTMAX, FINAL_MATMUL, DECODE_STEP)
# The phases of a step, in order (bench reports a mean time for each).
PHASES = (FORWARD, LOSS, BACKWARD, OPTIMIZER)
# The phases of a generate call (inference), in order.
INFER_PHASES = (PREFILL, DECODE)
# The ranges reports lead with, outermost first (a step, its phases, the inference phases,
# then attention internals).
HEADLINE_RANGES = (STEP, FORWARD, LOSS, BACKWARD, OPTIMIZER, PREFILL, DECODE, DECODE_STEP, SDPA,
                   ATTENTION_SCORES, SOFTMAX, FINAL_MATMUL, ATTENTION, FFN)
# The lowest level at which each range is emitted.
RANGE_LEVEL: dict[str, int] = {
    **{name: LEVELS.index("coarse") for name in COARSE_RANGES},
    **{name: LEVELS.index("fine") for name in FINE_RANGES},
}


# ---- backends -------------------------------------------------------------------------------
class Backend(Protocol):
    name: str

    def push(self, message: str) -> None: ...

    def pop(self) -> None: ...

    def start(self, message: str) -> Any: ...

    def end(self, handle: Any) -> None: ...


class NoopBackend:
    """Emits nothing (used for level ``off`` and to measure the helper's own cost)."""

    name = "noop"

    def push(self, message: str) -> None:
        pass

    def pop(self) -> None:
        pass

    def start(self, message: str) -> Any:
        return None

    def end(self, handle: Any) -> None:
        pass


class RecordingBackend:
    """Records pushes and pops, for tests: ``events`` is a list of ("push", name)/("pop", name),
    and ("start", name)/("end", name) for start/end ranges (``started`` lists those still
    open)."""

    name = "recording"

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self._stack: list[str] = []
        self._started: dict[int, str] = {}
        self._next = 0

    def push(self, message: str) -> None:
        self._stack.append(message)
        self.events.append(("push", message))

    def pop(self) -> None:
        if not self._stack:
            raise RuntimeError("NVTX pop without a matching push")
        self.events.append(("pop", self._stack.pop()))

    def start(self, message: str) -> int:
        self._next += 1
        self._started[self._next] = message
        self.events.append(("start", message))
        return self._next

    def end(self, handle: Any) -> None:
        if handle not in self._started:
            raise RuntimeError(f"NVTX end of a range that is not open: {handle!r}")
        self.events.append(("end", self._started.pop(handle)))

    @property
    def started(self) -> list[str]:
        """Start/end ranges not ended yet."""
        return list(self._started.values())

    @property
    def open_ranges(self) -> list[str]:
        return list(self._stack)

    def names(self) -> list[str]:
        """Range names in push order."""
        return [name for kind, name in self.events if kind == "push"]

    def tree(self) -> list[tuple[str, list]]:
        """The push/pop ranges as nested ``(name, children)`` tuples."""
        root: list[tuple[str, list]] = []
        stack = [root]
        for kind, name in self.events:
            if kind == "push":
                node: tuple[str, list] = (name, [])
                stack[-1].append(node)
                stack.append(node[1])
            elif kind == "pop":
                stack.pop()
        return root


class TorchCudaBackend:
    """``torch.cuda.nvtx``: what nsys shows for CUDA builds of torch."""

    name = "torch.cuda.nvtx"

    def __init__(self) -> None:
        import torch.cuda.nvtx as tnvtx

        self.push = tnvtx.range_push
        self.pop = tnvtx.range_pop
        self.start = tnvtx.range_start
        self.end = tnvtx.range_end


class PyNvtxBackend:
    """The PyPI ``nvtx`` package in its default domain, so nsys shows the plain names.

    nsys 2022.4 sees ranges only from nvtx <= 0.2.11 (0.2.12+ calls nvtxDomainIsEnabled,
    which that nsys does not implement, and then emits nothing).
    """

    name = "nvtx"

    def __init__(self) -> None:
        try:
            import nvtx
        except ImportError as exc:
            from nvtx_model.errors import NvtxMissing

            raise NvtxMissing() from exc
        self._nvtx = nvtx

    def push(self, message: str) -> None:
        self._nvtx.push_range(message)

    def pop(self) -> None:
        self._nvtx.pop_range()

    def start(self, message: str) -> Any:
        return self._nvtx.start_range(message)

    def end(self, handle: Any) -> None:
        self._nvtx.end_range(handle)


def default_backend() -> Backend:
    """torch.cuda.nvtx when CUDA is available, otherwise the PyPI nvtx package."""
    try:
        import torch
    except ImportError:
        return PyNvtxBackend()
    if torch.cuda.is_available():
        return TorchCudaBackend()
    return PyNvtxBackend()


# ---- the helper -----------------------------------------------------------------------------
class _Range:
    __slots__ = ("_backend", "_name")

    def __init__(self, backend: Backend, name: str) -> None:
        self._backend = backend
        self._name = name

    def __enter__(self) -> None:
        self._backend.push(self._name)

    def __exit__(self, *exc: object) -> None:
        self._backend.pop()


_NULL = contextlib.nullcontext()


class Instrumentation:
    """A level and a backend. ``range(name)`` is a context manager; a no-op below the level."""

    def __init__(self, level: str = "off", backend: Backend | None = None) -> None:
        if level not in LEVELS:
            raise ValueError(f"NVTX level {level!r} is not one of {', '.join(LEVELS)}")
        self.level = level
        self._rank = LEVELS.index(level)
        if backend is None:
            backend = NoopBackend() if level == "off" else default_backend()
        self.backend = backend

    def range(self, name: str) -> contextlib.AbstractContextManager:
        try:
            needed = RANGE_LEVEL[name]
        except KeyError:
            raise ValueError(f"{name!r} is not an NVTX range of the contract; add it to "
                             "nvtx_model/nvtx_ranges.py and docs/MODEL.md first") from None
        if self._rank < needed:
            return _NULL
        return _Range(self.backend, name)

    def __repr__(self) -> str:
        return f"Instrumentation({self.level!r}, {self.backend.name})"


OFF = Instrumentation("off")
_current: Instrumentation = OFF


def nvtx_range(name: str) -> contextlib.AbstractContextManager:
    """A range of the contract under the current instrumentation (a no-op when off)."""
    if _current is OFF:
        return _NULL
    return _current.range(name)


def current() -> Instrumentation:
    return _current


@contextlib.contextmanager
def activated(instrumentation: Instrumentation) -> Iterator[Instrumentation]:
    """Make ``instrumentation`` current for the model code run inside the block."""
    global _current
    previous = _current
    _current = instrumentation
    try:
        yield instrumentation
    finally:
        _current = previous
