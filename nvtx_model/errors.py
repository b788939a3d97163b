"""Typed errors of the model and the benchmark harness (all subclass ``NsysMineError``).

The CLI turns them into ``Error: ...`` and exit code 1; every message says what to do next.
"""

from __future__ import annotations

from nsys_parsers.errors import BadOption, NsysMineError


class TorchMissing(NsysMineError):
    """The command needs PyTorch, which is an optional extra."""

    def __init__(self, what: str = "this command") -> None:
        super().__init__(
            f"{what} needs PyTorch, which is not installed; install the extra with "
            "pip install 'nsys-mine[torch]' (on a CPU-only machine, pick the CPU build of torch "
            "from https://pytorch.org first)"
        )


class NvtxMissing(NsysMineError):
    """NVTX ranges were asked for on a machine without CUDA and without the PyPI nvtx package."""

    def __init__(self) -> None:
        super().__init__(
            "--nvtx coarse/fine needs the PyPI 'nvtx' package when CUDA is not available; "
            "install it with pip install 'nvtx<=0.2.11' (nsys 2022.4 cannot see ranges from "
            "0.2.12+), or use --nvtx off"
        )


class CudaUnavailable(NsysMineError):
    """``--device cuda`` on a machine or torch build without CUDA."""


class BadShape(BadOption):
    """A model shape that cannot be built (e.g. heads do not divide d_model)."""


def require_torch(what: str) -> None:
    """Raise ``TorchMissing`` unless torch can be imported."""
    try:
        import torch  # noqa: F401
    except ImportError as exc:
        raise TorchMissing(what) from exc


class CompileUnavailable(NsysMineError):
    """``--compile`` where torch.compile cannot work, or where it failed."""
