"""What differs between CPU and CUDA: synchronizing, autocast, memory statistics, OOM.

``resolve_runtime("auto" | "cpu" | "cuda")`` returns a ``CpuRuntime`` or ``CudaRuntime``; the
harness only talks to that object, which keeps the CUDA paths small and testable with mocks.
"""

from __future__ import annotations

import contextlib
import ctypes
import platform
import re
from pathlib import Path
from typing import Any

import torch

from nvtx_model.errors import CudaUnavailable

MEMINFO = Path("/proc/meminfo")
PROC_STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")

# Dense peak TFLOP/s (no sparsity) from NVIDIA's datasheets, for the MFU column. fp32 is the
# non-tensor-core rate: PyTorch leaves TF32 matmuls off by default. First match wins.
PEAK_TFLOPS: tuple[tuple[str, dict[str, float]], ...] = (
    ("H100 PCIe", {"bf16": 756.0, "fp32": 51.2}),
    ("H100 NVL", {"bf16": 835.5, "fp32": 60.0}),
    ("H100", {"bf16": 989.4, "fp32": 66.9}),
    ("H200", {"bf16": 989.4, "fp32": 66.9}),
    ("GH200", {"bf16": 989.4, "fp32": 66.9}),
    ("H800", {"bf16": 989.4, "fp32": 66.9}),
    ("A100", {"bf16": 312.0, "fp32": 19.5}),
    ("A800", {"bf16": 312.0, "fp32": 19.5}),
    ("L40S", {"bf16": 362.1, "fp32": 91.6}),
    ("L4", {"bf16": 121.0, "fp32": 30.3}),
    ("RTX 4090", {"bf16": 165.2, "fp32": 82.6}),
)


def peak_tflops(device_name: str, precision: str) -> float | None:
    """The dense peak of a known GPU for ``precision``, or None (CPUs, unknown GPUs).

    Keys match whole words of the name: ``L4`` is not the L40, ``A100`` not an A1000."""
    for key, peaks in PEAK_TFLOPS:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", device_name,
                     re.IGNORECASE):
            return peaks.get(precision)
    return None


def mem_available_bytes(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable from /proc/meminfo (what Linux can give without swapping), or None."""
    try:
        text = meminfo.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def _status_kib(field: str) -> int | None:
    try:
        text = PROC_STATUS.read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return None


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


class Runtime:
    """Base: the device, and the operations the harness needs from it."""

    kind = "base"
    memory_measure = ""

    def __init__(self, device: torch.device, name: str) -> None:
        self.device = device
        self.name = name

    def synchronize(self) -> None:
        raise NotImplementedError

    def autocast(self, precision: str) -> contextlib.AbstractContextManager:
        """bf16 autocast on this device type, a null context for fp32."""
        if precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def bf16_supported(self) -> bool:
        return True

    def available_bytes(self) -> int | None:
        """Memory a run may use, for the check before running; None: no check (rely on OOM)."""
        return None

    def free_bytes(self) -> int | None:
        """Memory free on the device now (inference skip rule); None: unknown."""
        return self.available_bytes()

    free_label = "free memory"

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, torch.OutOfMemoryError)

    def adamw_kwargs(self, impl: str) -> dict[str, Any]:
        """Keyword arguments of torch.optim.AdamW for --adamw."""
        return {"auto": {}, "for-loop": {"foreach": False}, "foreach": {"foreach": True},
                "fused": {"fused": True}}[impl]

    # memory measurement around the measured steps
    def reset_peak(self) -> None:
        raise NotImplementedError

    def peak(self) -> dict[str, int | None]:
        raise NotImplementedError

    def start_history(self, max_entries: int) -> bool:
        """Start recording allocator history; False if this device has none."""
        return False

    def dump_snapshot(self, path: Path) -> None:
        raise NotImplementedError

    def stop_history(self) -> None:
        pass

    def release(self) -> None:
        """Give cached memory back after a config (and after an OOM)."""


class CpuRuntime(Runtime):
    kind = "cpu"
    memory_measure = "cpu rss growth"
    free_label = "of MemAvailable"

    def __init__(self) -> None:
        super().__init__(torch.device("cpu"), cpu_name())
        self._baseline: int | None = None
        self._hwm_reset = False

    def synchronize(self) -> None:
        pass  # CPU ops have finished when they return

    def available_bytes(self) -> int | None:
        return mem_available_bytes()

    def is_oom(self, exc: BaseException) -> bool:
        # the CPU allocator raises a plain RuntimeError ("DefaultCPUAllocator: can't allocate")
        return (isinstance(exc, (MemoryError, torch.OutOfMemoryError))
                or (isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)))

    def reset_peak(self) -> None:
        """Return freed heap memory to the OS, take the RSS baseline, reset the peak (VmHWM).

        Without malloc_trim, memory freed by earlier steps stays resident and the next step
        reuses it without raising RSS, hiding its growth; writing 5 to /proc/self/clear_refs
        resets VmHWM (Linux >= 4.0)."""
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        self._baseline = _status_kib("VmRSS")
        try:
            CLEAR_REFS.write_text("5")
            self._hwm_reset = True
        except OSError:
            self._hwm_reset = False

    def peak(self) -> dict[str, int | None]:
        hwm = _status_kib("VmHWM") if self._hwm_reset else None
        growth = None if hwm is None or self._baseline is None else max(0, hwm - self._baseline)
        return {"rss_growth_bytes": growth, "peak_allocated_bytes": None,
                "peak_reserved_bytes": None}


class CudaRuntime(Runtime):
    kind = "cuda"
    memory_measure = "cuda allocator peak"
    free_label = "of free GPU memory"

    def __init__(self, index: int | None = None) -> None:
        index = torch.cuda.current_device() if index is None else index
        super().__init__(torch.device("cuda", index), torch.cuda.get_device_name(index))

    def synchronize(self) -> None:
        torch.cuda.synchronize(self.device)

    def bf16_supported(self) -> bool:
        return bool(torch.cuda.is_bf16_supported())

    def free_bytes(self) -> int | None:
        """Free device memory (``torch.cuda.mem_get_info``), after giving back the cache."""
        torch.cuda.empty_cache()
        return int(torch.cuda.mem_get_info(self.device)[0])

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, torch.cuda.OutOfMemoryError)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> dict[str, int | None]:
        return {"peak_allocated_bytes": int(torch.cuda.max_memory_allocated(self.device)),
                "peak_reserved_bytes": int(torch.cuda.max_memory_reserved(self.device)),
                "rss_growth_bytes": None}

    def start_history(self, max_entries: int) -> bool:
        torch.cuda.memory._record_memory_history(max_entries=max_entries)
        return True

    def dump_snapshot(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(path))

    def stop_history(self) -> None:
        torch.cuda.memory._record_memory_history(enabled=None)

    def release(self) -> None:
        torch.cuda.empty_cache()


def resolve_runtime(device: str) -> Runtime:
    """``auto``: CUDA when available, else CPU. ``cuda`` without CUDA is an error."""
    if device == "cpu":
        return CpuRuntime()
    if torch.cuda.is_available():
        return CudaRuntime()
    if device == "cuda":
        raise CudaUnavailable(
            f"--device cuda, but CUDA is not available (torch {torch.__version__}"
            f"{', a CPU build' if torch.version.cuda is None else ''}); use --device cpu or auto, "
            "or run on a machine with an NVIDIA GPU and a CUDA build of torch"
        )
    return CpuRuntime()

