"""What bounds a step: the GPU's busy share of one step recorded by torch.profiler (CUPTI).

Host timing alone cannot tell a step that waits on the host from one that waits on the GPU:
when the GPU is the bottleneck, CUDA's launch queue fills and the host blocks inside its launch
calls, so the host looks busy either way. The GPU's own record does tell: one extra step runs
under ``torch.profiler`` with CUDA activity (CUPTI), and the union of its kernel, memcpy and
memset intervals over the step's wall-clock span is the share of the step the GPU was busy.
Below ``HOST_BOUND_BELOW_PCT`` the GPU waited on the host for the rest: a faster kernel (bf16, a
larger GPU) cannot make the step faster; fewer launches (CUDA graphs, ``torch.compile``) or more
work per launch (a larger batch or model) can.

Plain integers: nanoseconds from the profiler's events, their union by
``nsys_parsers.intervals.union_length`` (as the export answers take it); torch is imported by
``profile_step`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from time import perf_counter_ns
from typing import Any, Callable, Iterable

import numpy as np

from nsys_parsers.intervals import union_length

# A step whose GPU is busy less than this share of it is bound by the host issuing its work.
HOST_BOUND_BELOW_PCT = 80.0
HOST, DEVICE = "host", "device"
# GPU activity that is not a kernel (it keeps the GPU busy but is not a launch of one).
NOT_KERNELS = ("Memcpy", "Memset")


@dataclass(frozen=True)
class Busy:
    """One profiled step: its span, the GPU's busy time in it and its kernels."""

    span_ns: int
    busy_ns: int
    kernels: int
    kernel_ns: int

    @property
    def busy_pct(self) -> float:
        return 100.0 * min(self.busy_ns, self.span_ns) / self.span_ns if self.span_ns else 0.0

    @property
    def mean_kernel_us(self) -> float | None:
        return self.kernel_ns / self.kernels / 1e3 if self.kernels else None

    @property
    def bound(self) -> str:
        return HOST if self.busy_pct < HOST_BOUND_BELOW_PCT else DEVICE

    def columns(self) -> dict[str, Any]:
        return {"gpu_busy_pct": self.busy_pct, "kernels": self.kernels,
                "mean_kernel_us": self.mean_kernel_us, "bound": self.bound}


def busy_from_events(events: Iterable[tuple[str, int, int]], span_ns: int) -> Busy:
    """``events``: the GPU's (name, start_ns, end_ns), kernels, memcpy and memset alike."""
    starts, ends, kernels, kernel_ns = [], [], 0, 0
    for name, start, end in events:
        starts.append(start)
        ends.append(end)
        if not name.startswith(NOT_KERNELS):
            kernels += 1
            kernel_ns += end - start
    busy = int(union_length(np.zeros(len(starts), dtype=np.int64),
                            np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64),
                            1)[0])
    return Busy(span_ns=span_ns, busy_ns=busy, kernels=kernels, kernel_ns=kernel_ns)


def gpu_events(prof: Any) -> list[tuple[str, int, int]]:
    """The device-side events of a finished ``torch.profiler.profile`` (name, start, end ns)."""
    from torch.autograd import DeviceType

    out = []
    for evt in prof.profiler.kineto_results.events():
        if evt.device_type() == DeviceType.CUDA and evt.end_ns() > evt.start_ns():
            out.append((evt.name(), int(evt.start_ns()), int(evt.end_ns())))
    return out


class BoundUnavailable(RuntimeError):
    """This torch cannot record the GPU's activity."""


def profile_step(step: Callable[[], Any], synchronize: Callable[[], None], *,
                 with_cpu: bool = False) -> Busy:
    """Run ``step`` once under torch.profiler with CUDA activity; its busy share.

    The span is the step's wall-clock time between two synchronizations, so no earlier work
    is counted and all of its own is. ``with_cpu`` records the host's operators too (more
    overhead on the host: a larger span)."""
    import torch

    if torch.profiler.ProfilerActivity.CUDA not in torch.profiler.supported_activities():
        raise BoundUnavailable(f"torch {torch.__version__} cannot record CUDA activity "
                               "(torch.profiler.supported_activities() has no CUDA)")
    activities = [torch.profiler.ProfilerActivity.CUDA]
    if with_cpu:
        activities.append(torch.profiler.ProfilerActivity.CPU)
    synchronize()
    with torch.profiler.profile(activities=activities) as prof:
        start = perf_counter_ns()
        step()
        synchronize()
        span = perf_counter_ns() - start
    return busy_from_events(gpu_events(prof), span)
