#!/usr/bin/env python3
"""Make a 2-process torchrun DDP training capture with ``emit_nvtx``, for benchmarks.

    python benchmarks/ddp_export.py DST.sqlite [--steps 4 --layers 12 --seed 0]

The third benchmark shape, beside the real shallow capture and the nested one
(``benchmarks/nested_export.py``, whose model this reuses): what ``torchrun
--nproc-per-node 2`` of a DDP training step under ``torch.autograd.profiler.emit_nvtx()``
records.

* 2 processes, one GPU each; each launches from its main thread (forward, optimizer) and its
  autograd thread (backward, and the gradient all-reduces DDP's reducer starts there): four
  launching threads. correlationIds repeat across the processes.
* ``aten::`` operator ranges named inline (``text``), with emit_nvtx's per-call suffixes
  (``aten::mm, seq = 12, op_id = 3456``); module ranges named through ``textId``.
* NCCL's own NVTX ranges in the ``NCCL`` domain (a domain-create row per process, eventType
  75; ``ncclAllReduce``, ``ncclGroupStart``/``ncclGroupEnd`` named through ``textId``), inside
  PyTorch's ``nccl:all_reduce`` and ``record_param_comms`` ranges; each all-reduce launches a
  ``ncclDevKernel_AllReduce_Sum_f32_RING_LL`` kernel on a stream of its own, which overlaps
  the backward kernels.
* About five NVTX ranges enclose each kernel's launch.

The schema and the non-activity tables come from the fastvideo fixture, as for the nested
shape, so ``nsys stats`` 2022.4 reads the result. Deterministic for a given seed; written as
``DST.partial`` and renamed at the end.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nested_export import (  # noqa: E402
    TEMPLATE,
    VM,
    Capture,
    Op,
    backward_layer,
    finish,
    forward_layer,
    open_copy,
    write_calls,
)

NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"
COMPUTE_STREAM, NCCL_STREAM = 7, 20
NCCL_DOMAIN = 1


class DdpCapture(Capture):
    """The nested model's capture, with DDP's all-reduces in the NCCL domain."""

    streams: dict[int, int]

    def nccl_all_reduce(self, t: int, pid: int, tid: int, seq: int) -> int:
        """``record_param_comms`` > ``nccl:all_reduce`` > NCCL ``ncclGroupStart``,
        ``ncclAllReduce`` (launching the kernel on the NCCL stream), ``ncclGroupEnd``."""
        gtid = VM | pid << 24 | tid
        outer = t
        op_id = self.op_id[pid] = self.op_id.get(pid, 300_000) + 1
        t += self.rng.randint(2_000, 5_000)
        inner = t
        t += self.rng.randint(1_000, 3_000)
        for name in ("ncclGroupStart", "ncclAllReduce", "ncclGroupEnd"):
            start = t
            t += self.rng.randint(1_000, 3_000)
            if name == "ncclAllReduce":
                corr = self.corr[pid] = self.corr.get(pid, 1000) + 1
                end = t + self.rng.randint(4_000, 9_000)
                self.runtime.append((t, end, gtid, corr, self.string("cuLaunchKernelEx")))
                key = pid + 100_000  # the NCCL stream: it runs beside the compute kernels
                gpu = max(self.gpu_free.get(key, 0), end + self.rng.randint(5_000, 30_000))
                dur = int(self.rng.uniform(200_000, 900_000))
                self.gpu_free[key] = gpu + dur
                self.kernels.append((gpu, gpu + dur, pid, corr, self.string(NCCL_KERNEL)))
                self.streams[len(self.kernels) - 1] = NCCL_STREAM
                t = end + self.rng.randint(1_000, 3_000)
            self.nvtx.append((start, t, 59, None, self.string(name), gtid, NCCL_DOMAIN))
            t += self.rng.randint(500, 1_500)
        t += self.rng.randint(1_000, 2_000)
        self.nvtx.append((inner, t, 59, f"nccl:all_reduce, seq = {seq}, op_id = {op_id}",
                          None, gtid, 0))
        t += self.rng.randint(1_000, 3_000)
        self.nvtx.append((outer, t, 59, f"record_param_comms, seq = {seq}, op_id = {op_id}",
                          None, gtid, 0))
        return t


def build(dst: Path, *, steps: int, layers: int, seed: int,
          template: Path = TEMPLATE) -> dict[str, int]:
    dst = Path(dst)
    out, tmp, k_template, strings = open_copy(template, dst)
    cap = DdpCapture(random.Random(seed), strings, max(strings.values()) + 1)
    cap.streams = {}
    domains = []

    def ops(t: int, pid: int, tid: int, items: list[Op], seq: int) -> tuple[int, int]:
        for op in items:
            t = cap.op(t, pid, tid, op, seq) + cap.rng.randint(1_000, 4_000)
            seq += 1
        return t, seq

    base = 155_000_000_000
    for p, pid in enumerate((4_001, 4_002)):
        main, autograd = pid, pid + 7
        t = base + p * 150_000
        domains.append((t - 1_000_000, VM | pid << 24 | autograd))
        seq = 0
        for step in range(steps):
            step_start = t
            t += 5_000
            ddp_start = t  # DistributedDataParallel > TransformerLM > blocks
            t += 3_000
            for layer in range(layers):
                t = cap.module(t, pid, main, f"nn.Module: Block_{layer}", forward_layer(),
                               seq) + 3_000
                seq += len(forward_layer())
            for name, start in (("nn.Module: TransformerLM", ddp_start + 1_500),
                                ("nn.Module: DistributedDataParallel", ddp_start)):
                t += 1_500
                cap.nvtx.append((start, t, 59, None, cap.string(name), VM | pid << 24 | main, 0))
            loss_start = t
            t, seq = ops(t + 2_000, pid, main, [Op("aten::cross_entropy_loss", (), (
                Op("aten::log_softmax", ("reduce",)), Op("aten::nll_loss", ("reduce",))))],
                seq)
            cap.nvtx.append((loss_start, t, 59, None, cap.string("nn.Module: CrossEntropyLoss"),
                             VM | pid << 24 | main, 0))
            t = cap.api(t, pid, main, "cudaStreamSynchronize_v3020", 40_000)
            # backward on the autograd thread; DDP all-reduces a bucket every 3 layers
            b = b_start = t + 10_000
            for layer in range(layers):
                b, seq = ops(b, pid, autograd, backward_layer(), seq)
                if layer % 3 == 2 or layer == layers - 1:
                    b = cap.nccl_all_reduce(b, pid, autograd, seq) + cap.rng.randint(1_000, 4_000)
                    seq += 1
            cap.nvtx.append((b_start, b, 59, None, cap.string("autograd::engine::backward"),
                             VM | pid << 24 | autograd, 0))
            t = max(t, b) + 20_000
            opt_start = t
            t, seq = ops(t + 2_000, pid, main, [Op("aten::_foreach_add_", ("elementwise",)),
                                                Op("aten::_foreach_mul_", ("elementwise",))],
                         seq)
            cap.nvtx.append((opt_start, t, 59, None, cap.string("Optimizer.step#AdamW.step"),
                             VM | pid << 24 | main, 0))
            cap.nvtx.append((step_start, t, 59, f"ProfilerStep#{step}", None,
                             VM | pid << 24 | main, 0))
            t = max(t, cap.gpu_free.get(pid, 0)) + 50_000

    write_calls(out, cap, k_template, first_pid=4_001, streams={
        i: cap.streams.get(i, COMPUTE_STREAM) for i in range(len(cap.kernels))})
    nvtx = [r if len(r) == 7 else (*r, 0) for r in cap.nvtx]  # the model's ranges: no domain
    nvtx += [(t, None, 75, "NCCL", None, gtid, NCCL_DOMAIN) for t, gtid in domains]
    out.executemany("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, textId, "
                    "globalTid, domainId) VALUES (?, ?, ?, ?, ?, ?, ?)", sorted(
                        nvtx, key=lambda r: (r[0], r[2])))
    return finish(out, tmp, dst, cap, {
        "NCCL-domain ranges": ("SELECT count(*) FROM NVTX_EVENTS WHERE domainId = ? "
                               "AND eventType = 59", (NCCL_DOMAIN,)),
        "launching threads": ("SELECT count(DISTINCT globalTid) FROM "
                              "CUPTI_ACTIVITY_KIND_RUNTIME", ())})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dst", type=Path)
    ap.add_argument("--steps", type=int, default=4, help="training steps per process")
    ap.add_argument("--layers", type=int, default=12, help="transformer blocks")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--template", type=Path, default=TEMPLATE,
                    help="nsys export whose schema and tables are copied")
    a = ap.parse_args(argv)
    if not a.template.is_file():
        print(f"error: template export {a.template} not found", file=sys.stderr)
        return 2
    counts = build(a.dst, steps=a.steps, layers=a.layers, seed=a.seed, template=a.template)
    for k, v in counts.items():
        print(f"{k:32s} {v:>10,}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
