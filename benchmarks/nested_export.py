#!/usr/bin/env python3
"""Make a deeply nested, multi-process PyTorch-like nsys export for benchmarks.

    python benchmarks/nested_export.py DST.sqlite [--steps 4 --layers 16 --seed 0]

The fastvideo fixture is a shallow capture (most kernels sit one or two ranges deep). Real
``emit_nvtx`` captures of training steps nest deeper: a profiler step holds modules, modules
hold ``aten::`` operators, operators call operators, 3 to 6 levels, and most levels launch
kernels of their own. This script writes such a capture, one replica of it (run
``benchmarks/scale_export.py`` to replay it K times, as for the fastvideo file):

* 2 processes (one GPU each), each with a main thread (forward) and an autograd thread
  (backward); correlationIds repeat across the processes, as in real multi-process captures;
* per training step and layer: layer norms, linear layers (``aten::linear`` >
  ``aten::matmul`` > ``aten::mm``), attention (``aten::scaled_dot_product_attention`` >
  ``aten::_scaled_dot_product_efficient_attention`` > ``aten::_efficient_attention_forward``),
  GELU, residual adds, casts (``aten::to`` > ``aten::_to_copy`` > ``aten::copy_``), and their
  backward functions on the autograd thread; outer operators launch kernels too;
* emit_nvtx names (``aten::mm, seq = 12, op_id = 3456``: distinct per call) for the outer
  operators, plain names for the inner ones, module ranges registered as ``textId`` strings;
* every kernel launched by a ``cudaLaunchKernel`` runtime row on its thread, plus
  synchronizations and copies that launch nothing; kernels run one after the other per GPU.

The schema and the non-activity tables (strings, enums, metadata) are copied from the
fastvideo fixture (an nsys 2026.2 export), so ``nsys stats`` 2022.4 reads the result as it
reads that fixture. Everything is deterministic for a given seed. The file is written as
``DST.partial`` and renamed at the end.
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT.parent / "shared" / "fixtures" / "nsys" / \
    "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
ACTIVITY = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS",
            "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET",
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "CUPTI_ACTIVITY_KIND_CUDA_EVENT")
VM = 1 << 48  # nsys sets a high bit in globalTid/globalPid

# Kernel names by kind, and a typical duration (ns) of each.
KERNELS = {
    "gemm": [("ampere_sgemm_128x64_tn", 180_000), ("ampere_sgemm_64x64_nn", 90_000),
             ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8_stage3_warpsize1x4x1"
              "_ffma_aligna4_alignc4_execute_kernel__5x_cublas", 140_000)],
    "elementwise": [("void at::native::vectorized_elementwise_kernel<4, at::native::"
                     "CUDAFunctor_add<float>, at::detail::Array<char *, 3>>(int, T2, T3)",
                     12_000),
                    ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAK"
                     "ernelImpl(at::TensorIteratorBase &, at::native::GeluType)::[lambda() "
                     "(instance 1)]::operator ()() const, at::detail::Array<char *, 2>>(int, "
                     "T2, T3)", 20_000),
                    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_"
                     "kernel_cuda(at::TensorIteratorBase &)>(int, T1, T2)", 8_000)],
    "norm": [("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, "
              "float>(int, T2, const T1 *, const T1 *, const T1 *, T2 *, T2 *, T1 *)", 25_000),
             ("void at::native::(anonymous namespace)::layer_norm_grad_input_kernel<float, "
              "float>(const T1 *, const T1 *, const T2 *, const T2 *, const T1 *, T1 *, int)",
              30_000)],
    "attention": [("fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::"
                   "AttentionKernel<float, cutlass::arch::Sm80, true, 64, 64, 64, true, "
                   "true>::Params)", 300_000)],
    "attention_bwd": [("fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::"
                   "AttentionBackwardKernel<cutlass::arch::Sm80, float, true, false, true, "
                   "64, 64, 64, false>::Params)", 600_000)],
    "reduce": [("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::"
                "native::func_wrapper_t<float, at::native::sum_functor<float, float, float>::"
                "operator ()(at::TensorIterator &)::[lambda(float, float) (instance 1)]>, "
                "unsigned int, float, 4, 4>>(T3)", 15_000)],
}


@dataclass
class Op:
    """An operator range: the kernels it launches itself, and the operators it calls."""

    name: str
    kernels: tuple[str, ...] = ()
    children: tuple[Op, ...] = ()
    ids: bool = True  # emit_nvtx names: ", seq = N, op_id = M"


VIEW = Op("aten::view", ids=False)
RESHAPE = Op("aten::reshape", (), (Op("aten::_reshape_alias", ids=False),), ids=False)


def linear(bias: bool = True) -> Op:
    return Op("aten::linear", ("elementwise",) if bias else (), (
        Op("aten::t", (), (Op("aten::transpose", (), (Op("aten::as_strided", ids=False),),
                              ids=False),), ids=False),
        Op("aten::matmul", (), (RESHAPE, Op("aten::mm", ("gemm",), ids=False), VIEW)),
    ))


def forward_layer() -> list[Op]:
    norm = Op("aten::layer_norm", (), (Op("aten::native_layer_norm", ("norm",), ids=False),))
    cast = Op("aten::to", (), (Op("aten::_to_copy", (), (
        Op("aten::copy_", ("elementwise",), ids=False),)),))
    attention = Op("aten::scaled_dot_product_attention", (), (
        Op("aten::_scaled_dot_product_efficient_attention", (), (
            Op("aten::_efficient_attention_forward", ("attention",),
               (Op("aten::empty", ids=False),), ids=False),)),))
    heads = Op("aten::permute", (), (Op("aten::as_strided", ids=False),))
    return [norm, linear(), VIEW, heads, attention, heads, RESHAPE, linear(),
            Op("aten::add", ("elementwise",)), norm, Op("aten::empty_like", ids=False),
            cast, linear(), Op("aten::gelu", ("elementwise",)), linear(False),
            Op("aten::add", ("elementwise",)), Op("aten::sum", ("reduce",))]


def backward_layer() -> list[Op]:
    def grad(fn: str, *inner: Op, kernels: tuple[str, ...] = ()) -> Op:
        return Op(f"autograd::engine::evaluate_function: {fn}", (), (
            Op(fn, kernels, inner, ids=False),), ids=False)
    mm = Op("aten::mm", ("gemm",), ids=True)
    return [grad("AddmmBackward0", mm, Op("aten::sum", ("reduce",))),
            grad("GeluBackward0", Op("aten::gelu_backward", ("elementwise",))),
            grad("MmBackward0", mm, mm),
            grad("NativeLayerNormBackward0", Op("aten::native_layer_norm_backward",
                                                ("norm",))),
            grad("ScaledDotProductEfficientAttentionBackward0", Op(
                "aten::_scaled_dot_product_efficient_attention_backward", (), (
                    Op("aten::_efficient_attention_backward", ("attention_bwd",), ids=False),))),
            grad("AddmmBackward0", mm, Op("aten::sum", ("reduce",)), kernels=("elementwise",)),
            grad("AddBackward0", kernels=())]


@dataclass
class Capture:
    rng: random.Random
    strings: dict[str, int]
    next_string: int
    kernels: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    nvtx: list[tuple] = field(default_factory=list)
    gpu_free: dict[int, int] = field(default_factory=dict)
    corr: dict[int, int] = field(default_factory=dict)
    op_id: dict[int, int] = field(default_factory=dict)

    def string(self, value: str) -> int:
        if value not in self.strings:
            self.strings[value] = self.next_string
            self.next_string += 1
        return self.strings[value]

    def launch(self, t: int, pid: int, tid: int, kind: str) -> int:
        """A cudaLaunchKernel call at t on (pid, tid) and its kernel; returns the call's end."""
        name, typical = self.rng.choice(KERNELS[kind])
        corr = self.corr[pid] = self.corr.get(pid, 1000) + 1
        end = t + self.rng.randint(3_000, 8_000)
        self.runtime.append((t, end, (VM | pid << 24 | tid), corr,
                             self.string("cudaLaunchKernel_v7000")))
        start = max(self.gpu_free.get(pid, 0), end + self.rng.randint(2_000, 20_000))
        dur = max(1_000, int(typical * self.rng.uniform(0.7, 1.3)))
        self.gpu_free[pid] = start + dur
        self.kernels.append((start, start + dur, pid, corr, self.string(name)))
        return end

    def api(self, t: int, pid: int, tid: int, name: str, dur: int) -> int:
        corr = self.corr[pid] = self.corr.get(pid, 1000) + 1
        self.runtime.append((t, t + dur, (VM | pid << 24 | tid), corr, self.string(name)))
        return t + dur

    def op(self, t: int, pid: int, tid: int, op: Op, seq: int) -> int:
        """Push ``op`` at t, launch its kernels, run its children, pop; returns the pop time."""
        name = op.name
        if op.ids:
            op_id = self.op_id[pid] = self.op_id.get(pid, 300_000) + 1
            name = f"{op.name}, seq = {seq}, op_id = {op_id}"
        start = t
        t += self.rng.randint(1_000, 4_000)
        for kind in op.kernels:
            t = self.launch(t, pid, tid, kind) + self.rng.randint(500, 2_000)
        for child in op.children:
            t = self.op(t, pid, tid, child, seq) + self.rng.randint(500, 2_000)
        t += self.rng.randint(1_000, 3_000)
        self.nvtx.append((start, t, 59, name, None, VM | pid << 24 | tid))
        return t

    def module(self, t: int, pid: int, tid: int, name: str, ops: list[Op], seq: int) -> int:
        start = t
        t += 2_000
        for i, op in enumerate(ops):
            t = self.op(t, pid, tid, op, seq + i) + self.rng.randint(1_000, 5_000)
        self.nvtx.append((start, t, 59, None, self.string(name), VM | pid << 24 | tid))
        return t


def open_copy(template: Path, dst: Path) -> tuple[sqlite3.Connection, Path, dict[str, Any],
                                                 dict[str, int]]:
    """``DST.partial``: a copy of ``template`` with its activity tables emptied, in an open
    transaction. Returns it, its path, a kernel row of the template (column -> value) and the
    template's strings (value -> id)."""
    tmp = dst.with_name(dst.name + ".partial")
    tmp.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{quote(str(template.resolve()))}?mode=ro", uri=True)
    out = sqlite3.connect(tmp, isolation_level=None)
    src.backup(out)
    src.close()
    out.execute("PRAGMA journal_mode = OFF")
    out.execute("PRAGMA synchronous = OFF")
    out.execute("BEGIN")
    tables = {r[0] for r in out.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    k_template = dict(zip([d[1] for d in out.execute(
        "PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")], out.execute(
        "SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone(), strict=True))
    for t in ACTIVITY:
        if t in tables:
            out.execute(f"DELETE FROM {t}")
    strings = {v: i for i, v in out.execute("SELECT id, value FROM StringIds")}
    return out, tmp, k_template, strings


def write_calls(out: sqlite3.Connection, cap: Capture, k_template: dict[str, Any],
                first_pid: int, streams: dict[int, int] | None = None) -> None:
    """The capture's kernels (on device ``pid - first_pid``; on stream ``streams[i]`` of the
    i-th kernel where given, else the template's) and its runtime calls."""
    kcols = list(k_template)
    rows = []
    by_id = {i: v for v, i in cap.strings.items()}
    for i, (start, end, pid, corr, nid) in enumerate(cap.kernels):
        row = dict(k_template, start=start, end=end, correlationId=corr,
                   globalPid=VM | pid << 24, deviceId=pid - first_pid, demangledName=nid,
                   shortName=cap.string(_short(by_id[nid])), mangledName=nid)
        if streams is not None:
            row["streamId"] = streams[i]
        for c in ("qmdBulkReleaseDone", "qmdPreexitDone", "qmdLastCtaDone"):
            if c in row:
                row[c] = None
        rows.append(tuple(row[c] for c in kcols))
    out.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(kcols)}) "
                    f"VALUES ({', '.join('?' * len(kcols))})", rows)
    out.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME (start, \"end\", eventClass, "
                    "globalTid, correlationId, nameId, returnValue) VALUES (?, ?, 0, ?, ?, ?, 0)",
                    cap.runtime)


def finish(out: sqlite3.Connection, tmp: Path, dst: Path, cap: Capture,
           extra: dict[str, tuple[str, tuple[Any, ...]]]) -> dict[str, int]:
    """Write the strings, commit, compact and rename to ``dst``. Returns the row counts of the
    activity tables and of ``extra`` (label -> a counting query and its parameters)."""
    out.execute("DELETE FROM StringIds")
    out.executemany("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                    [(i, v) for v, i in cap.strings.items()])
    out.execute("COMMIT")
    out.execute("VACUUM")
    counts = {t: out.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
              for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                        "NVTX_EVENTS")}
    for label, (sql, params) in extra.items():
        counts[label] = out.execute(sql, params).fetchone()[0]
    out.close()
    os.replace(tmp, dst)
    return counts


def build(dst: Path, *, steps: int, layers: int, seed: int,
          template: Path = TEMPLATE) -> dict[str, int]:
    dst = Path(dst)
    out, tmp, k_template, strings = open_copy(template, dst)
    cap = Capture(random.Random(seed), strings, max(strings.values()) + 1)

    base = 155_000_000_000
    for p, pid in enumerate((3_001, 3_002)):
        main, autograd = pid, pid + 7
        t = base + p * 150_000
        seq = 0
        for step in range(steps):
            step_start = t
            t += 5_000
            for layer in range(layers):
                t = cap.module(t, pid, main, f"nn.Module: TransformerBlock_{layer}",
                               forward_layer(), seq) + 3_000
                seq += len(forward_layer())
            t = cap.api(t, pid, main, "cudaStreamSynchronize_v3020", 40_000)
            # backward on the autograd thread, while the main thread waits
            b = t + 10_000
            b_start = b
            for _layer in range(layers):
                for op in backward_layer():
                    b = cap.op(b, pid, autograd, op, seq) + cap.rng.randint(1_000, 4_000)
                    seq += 1
            cap.nvtx.append((b_start, b, 59, None, cap.string("autograd::engine::backward"),
                             VM | pid << 24 | autograd))
            t = max(t, b) + 20_000
            t = cap.api(t, pid, main, "cudaMemcpyAsync_v3020", 15_000) + 5_000
            cap.nvtx.append((step_start, t, 59, f"ProfilerStep#{step}", None,
                             VM | pid << 24 | main))
            t = max(t, cap.gpu_free.get(pid, 0)) + 50_000

    write_calls(out, cap, k_template, first_pid=3_001)
    out.executemany("INSERT INTO NVTX_EVENTS (start, \"end\", eventType, text, textId, "
                    "globalTid) VALUES (?, ?, ?, ?, ?, ?)", sorted(cap.nvtx))
    return finish(out, tmp, dst, cap, {"distinct NVTX names": (
        "SELECT count(DISTINCT ifnull(text, textId)) FROM NVTX_EVENTS", ())})


def _short(name: str) -> str:
    """A kernel's short name as nsys writes it: the function name without its signature."""
    head = name.split("(", 1)[0].split("<", 1)[0]
    return head.split()[-1].split("::")[-1] if head else name


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dst", type=Path)
    ap.add_argument("--steps", type=int, default=4, help="training steps per process")
    ap.add_argument("--layers", type=int, default=20, help="transformer blocks")
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
