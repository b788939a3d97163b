"""Build small synthetic nsys-shaped exports for the traps real fixtures do not show.

The tables have the columns nsys writes (a subset), so that both our readers and, in CI,
``nsys stats`` can read them. Timestamps are plain integers in nanoseconds.
"""

from __future__ import annotations

import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

VM = 1 << 48  # nsys sets a high bit in globalTid/globalPid


def gtid(pid: int, tid: int) -> int:
    return VM | (pid << 24) | tid


def gpid(pid: int) -> int:
    return VM | (pid << 24)


@dataclass
class Synth:
    strings: list[bytes] = field(default_factory=list)
    kernels: list[tuple] = field(default_factory=list)
    runtime: list[tuple] = field(default_factory=list)
    nvtx: list[tuple] = field(default_factory=list)
    memcpy: list[tuple] = field(default_factory=list)
    next_corr: int = 100
    meta: bool = True
    # CUDA graphs, with the columns of NVIDIA's schema reference: whole-graph launches
    # (CUPTI_ACTIVITY_KIND_GRAPH_TRACE), graph node creations (CUDA_GRAPH_NODE_EVENTS; before
    # nsys 2023 in CUDA_GRAPH_EVENTS: ``old_graph_schema``) and graph creations
    # (CUDA_GRAPH_EVENTS). ``graph_tables``: write these tables even when empty.
    graph_trace: list[tuple] = field(default_factory=list)
    graph_nodes: list[tuple] = field(default_factory=list)
    graph_events: list[tuple] = field(default_factory=list)
    graph_tables: bool = False
    old_graph_schema: bool = False
    kernel_table: bool = True

    def string(self, value: str | bytes) -> int:
        raw = value.encode() if isinstance(value, str) else value
        if raw in self.strings:
            return self.strings.index(raw)
        self.strings.append(raw)
        return len(self.strings) - 1

    def range(self, name: str, start: int, end: int | None, *, pid: int = 1, tid: int = 1,
              inline: bool = False, etype: int = 59, domain: int | None = None,
              end_tid: int | None = None) -> None:
        text, text_id = (name, None) if inline else (None, self.string(name))
        self.nvtx.append((start, end, etype, text, gtid(pid, tid),
                          gtid(pid, end_tid) if end_tid is not None else None, text_id, domain))

    def domain(self, domain_id: int, name: str, *, pid: int = 1, tid: int = 1,
               start: int = 0) -> None:
        self.nvtx.append((start, None, 75, name, gtid(pid, tid), None, None, domain_id))

    def kernel(self, name: str | bytes, start: int, end: int, *,
               launch: tuple[int, int] | None = (0, 1), pid: int = 1, tid: int = 1,
               corr: int | None = None, duplicate: bool = False,
               api: str = "cudaLaunchKernel", device: int = 0, stream: int = 7) -> int:
        if corr is None:
            corr = self.next_corr
            self.next_corr += 1
        nid = self.string(name)
        self.kernels.append((start, end, device, 1, stream, corr, gpid(pid), nid, nid, nid, 1,
                             1, 1, 128, 1, 1))
        if launch is not None:
            ls, le = launch
            self.runtime.append((ls, le, 1, gtid(pid, tid), corr, self.string(api), 0, None))
            if duplicate:  # nsys 2022.2: the same launch again, nested, with the same corrId
                self.runtime.append((ls + 1, le - 1, 1, gtid(pid, tid), corr,
                                     self.string(api + "_v7000"), 0, None))
        return corr

    def graph_launch(self, graph: int, start: int, end: int, *,
                     launch: tuple[int, int] | None = (0, 1), pid: int = 1, tid: int = 1,
                     graph_exec: int | None = None, corr: int | None = None,
                     api: str = "cudaGraphLaunch_v10000") -> int:
        """A launch of a whole graph (nsys --cuda-graph-trace=graph): one graph trace row and
        its ``cudaGraphLaunch`` call (``launch=None``: the call is missing, as in trimmed
        exports). Returns the correlationId."""
        if corr is None:
            corr = self.next_corr
            self.next_corr += 1
        self.graph_trace.append((start, end, 0, 1, 0, 7, corr, gpid(pid), graph,
                                 graph_exec if graph_exec is not None else graph + 1))
        if launch is not None:
            self.runtime.append((launch[0], launch[1], 1, gtid(pid, tid), corr,
                                 self.string(api), 0, None))
        return corr

    def graph_kernel(self, name: str, start: int, end: int, *, node: int, corr: int,
                     pid: int = 1) -> None:
        """A kernel recorded as a graph node (nsys --cuda-graph-trace=node): its graphNodeId
        and the correlationId of the graph's launch (``graph_launch_call``)."""
        nid = self.string(name)
        self.kernels.append((start, end, 0, 1, 7, corr, gpid(pid), nid, nid, nid, 1, 1, 1, 128,
                             1, 1, node))

    def graph_launch_call(self, start: int, end: int, *, pid: int = 1, tid: int = 1,
                          api: str = "cudaGraphLaunch_v10000") -> int:
        """A ``cudaGraphLaunch`` call of a node-level trace (no graph trace row); returns its
        correlationId for the kernels of ``graph_kernel``."""
        corr = self.next_corr
        self.next_corr += 1
        self.runtime.append((start, end, 1, gtid(pid, tid), corr, self.string(api), 0, None))
        return corr

    def node_created(self, node: int, at: int, *, pid: int = 1, tid: int = 1,
                     original: int | None = None) -> None:
        """A graph node created at ``at`` (captured or added; ``original``: a clone of that
        node, made when a graph is instantiated or cloned)."""
        self.graph_nodes.append((at, at, 77, gtid(pid, tid), self.string("Graph Node Creation"),
                                 node, original))

    def graph_created(self, graph: int, at: int, *, pid: int = 1, tid: int = 1,
                      original: int | None = None, graph_exec: int | None = None) -> None:
        """A graph created at ``at`` (``original``: cloned from that graph; ``graph_exec``:
        the executable graph instantiated from ``graph``)."""
        cls, name = ((94, "GraphExec Creation") if graph_exec is not None else
                     (96, "Graph Clone") if original is not None else (95, "Graph Creation"))
        self.graph_events.append((at, at, cls, gtid(pid, tid), self.string(name), graph,
                                  original, graph_exec))

    def call(self, name: str, start: int, end: int, *, pid: int = 1, tid: int = 1) -> int:
        """A CUDA runtime call that launches nothing (a synchronize, an allocation...)."""
        corr = self.next_corr
        self.next_corr += 1
        self.runtime.append((start, end, 1, gtid(pid, tid), corr, self.string(name), 0, None))
        return corr

    def write(self, path: Path) -> Path:
        path.unlink(missing_ok=True)
        conn = sqlite3.connect(path)
        c = conn.cursor()
        c.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL)")
        c.executemany("INSERT INTO StringIds VALUES (?, CAST(? AS TEXT))",
                      list(enumerate(self.strings)))
        c.execute("CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER)")
        c.execute("CREATE TABLE TARGET_INFO_GPU (id INTEGER, name TEXT)")
        c.execute("INSERT INTO TARGET_INFO_GPU VALUES (0, 'Synthetic GPU')")
        if self.meta:
            c.execute("CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT)")
            c.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)", [
                ("EXPORT_PRODUCT_VERSION", "2022.4.2.1"), ("EXPORT_SCHEMA_VERSION", "3.0.0")])
        nodes = any(len(k) > 16 for k in self.kernels)
        if self.kernels and self.kernel_table:
            c.execute(f"""CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL,
                end INTEGER NOT NULL, deviceId INTEGER, contextId INTEGER, streamId INTEGER,
                correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
                shortName INTEGER, mangledName INTEGER, gridX INTEGER, gridY INTEGER,
                gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER
                {", graphNodeId INTEGER" if nodes else ""})""")
            width = 17 if nodes else 16
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                          f"({','.join('?' * width)})",
                          [(k + (None,))[:width] if len(k) < width else k for k in self.kernels])
        if self.kernels or self.runtime:
            c.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL,
                end INTEGER NOT NULL, eventClass INTEGER, globalTid INTEGER,
                correlationId INTEGER, nameId INTEGER, returnValue INTEGER,
                callchainId INTEGER)""")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)",
                          self.runtime)
        self._write_graphs(c)
        if self.nvtx:
            c.execute("""CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER,
                eventType INTEGER NOT NULL, rangeId INTEGER, category INTEGER, color INTEGER,
                text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
                domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL,
                uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER,
                jsonText TEXT)""")
            c.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, "
                          "endGlobalTid, textId, domainId) VALUES (?,?,?,?,?,?,?,?)", self.nvtx)
        if self.memcpy:
            c.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER, end INTEGER,
                correlationId INTEGER, globalPid INTEGER, bytes INTEGER, copyKind INTEGER)""")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES (?,?,?,?,?,?)",
                          self.memcpy)
        conn.commit()
        conn.close()
        return path

    def _write_graphs(self, c: sqlite3.Cursor) -> None:
        if self.graph_trace or self.graph_tables:
            c.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE (start INTEGER NOT NULL,
                end INTEGER NOT NULL, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
                greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
                globalPid INTEGER, graphId INTEGER NOT NULL, graphExecId INTEGER NOT NULL)""")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_GRAPH_TRACE VALUES "
                          "(?,?,?,?,?,?,?,?,?,?)", self.graph_trace)
        node_table = "CUDA_GRAPH_EVENTS" if self.old_graph_schema else "CUDA_GRAPH_NODE_EVENTS"
        if self.graph_nodes or self.graph_tables:
            c.execute(f"""CREATE TABLE {node_table} (start INTEGER NOT NULL,
                end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
                nameId INTEGER NOT NULL, graphNodeId INTEGER NOT NULL,
                originalGraphNodeId INTEGER)""")
            c.executemany(f"INSERT INTO {node_table} VALUES (?,?,?,?,?,?,?)", self.graph_nodes)
        if (self.graph_events or self.graph_tables) and not self.old_graph_schema:
            c.execute("""CREATE TABLE CUDA_GRAPH_EVENTS (start INTEGER NOT NULL,
                end INTEGER NOT NULL, eventClass INTEGER NOT NULL, globalTid INTEGER,
                nameId INTEGER NOT NULL, graphId INTEGER, originalGraphId INTEGER,
                graphExecId INTEGER)""")
            c.executemany("INSERT INTO CUDA_GRAPH_EVENTS VALUES (?,?,?,?,?,?,?,?)",
                          self.graph_events)
        if self.graph_nodes or self.graph_events:
            c.execute("CREATE TABLE ENUM_NSYS_EVENT_CLASS (id INTEGER PRIMARY KEY, name TEXT, "
                      "label TEXT)")
            c.executemany("INSERT INTO ENUM_NSYS_EVENT_CLASS VALUES (?,?,?)", [
                (77, "TRACE_PROCESS_EVENT_CUDA_GRAPH_NODE_CREATION", "CUDA graph node creation"),
                (94, "TRACE_PROCESS_EVENT_CUDA_GRAPHEXEC_CREATION", "CUDA graph exec creation"),
                (95, "TRACE_PROCESS_EVENT_CUDA_GRAPH_CREATION", "CUDA graph creation"),
                (96, "TRACE_PROCESS_EVENT_CUDA_GRAPH_CLONE", "CUDA graph clone")])


def compiled_run(path: Path, *, graphs: str = "node", steps: int = 2) -> Path:
    """A GPU profile shaped like a model under ``torch.compile(mode="reduce-overhead")``: a
    warmup step captures the forward pass into a CUDA graph (its nodes created inside the
    ``attention`` and ``ffn`` ranges open during the capture, then cloned when the graph is
    instantiated), later steps replay it with one ``cudaGraphLaunch`` inside ``forward``, and
    the optimizer runs eagerly. ``graphs``: ``node`` (nsys --cuda-graph-trace=node: the
    graph's kernels are recorded, with the launch's correlationId) or ``graph`` (one graph
    trace row per launch)."""
    s = Synth()
    nodes = [("triton_poi_fused_add_mul_0", "attention", 20_000),
             ("triton_per_fused__softmax_1", "attention", 30_000),
             ("triton_tem_fused_mm_2", "ffn", 60_000),
             ("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_3", "ffn", 10_000)]
    t = 1_000_000
    s.range("warmup", t - 500, t + 990_000)
    # the capturing step: the nodes are created inside the ranges open at the time
    s.range("step", t, t + 900_000)
    s.range("forward", t + 1_000, t + 500_000)
    s.range("attention", t + 20_000, t + 200_000)
    s.range("ffn", t + 250_000, t + 450_000)
    s.graph_created(1, t + 10_000)
    for i, (_, where, _) in enumerate(nodes):
        at = t + (30_000 if where == "attention" else 260_000) + i * 10_000
        s.node_created(i + 1, at)
    s.graph_created(1, t + 470_000, graph_exec=2)  # instantiated: the nodes are cloned
    for i in range(len(nodes)):
        s.node_created(101 + i, t + 471_000 + i, original=i + 1)
    s.range("optimizer", t + 600_000, t + 890_000)
    s.kernel("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>",
             t + 620_000, t + 660_000, launch=(t + 610_000, t + 611_000))
    m0 = t + 1_000_000
    s.range("measure", m0 - 500, m0 + steps * 1_000_000)
    for step in range(steps):
        b = m0 + step * 1_000_000
        s.range("step", b, b + 900_000)
        s.range("forward", b + 1_000, b + 500_000)
        at = b + 100_000
        if graphs == "node":
            corr = s.graph_launch_call(b + 10_000, b + 20_000)
            for i, (name, _, dur) in enumerate(nodes):
                s.graph_kernel(name, at, at + dur, node=101 + i, corr=corr)
                at += dur + 1_000
        else:
            total = sum(d + 1_000 for _, _, d in nodes)
            s.graph_launch(1, at, at + total, launch=(b + 10_000, b + 20_000), graph_exec=2)
        s.range("optimizer", b + 600_000, b + 890_000)
        s.kernel("void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor<float, 4>>",
                 b + 620_000, b + 660_000, launch=(b + 610_000, b + 611_000))
    return s.write(path)


def demo(path: Path) -> Path:
    """A small export shaped like a Transformer training step (used when no real one exists)."""
    s = Synth()
    t = 1_000_000
    s.range("warmup", t - 10, t + 999_000)
    s.range("measure", t + 1_000_000 - 10, t + 3_000_000)
    for _ in range(3):  # one warmup step, then two measured steps
        s.range("step", t, t + 900_000)
        s.range("forward", t + 1_000, t + 300_000)
        for layer in range(2):
            base = t + 2_000 + layer * 140_000
            s.range("scaled dot product attention", base, base + 60_000)
            s.range("computing attention scores", base + 1_000, base + 20_000)
            s.kernel("ampere_sgemm_128x64_tn", base + 30_000, base + 52_000,
                     launch=(base + 2_000, base + 2_500))
            s.range("computing softmax", base + 21_000, base + 40_000)
            s.kernel("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
                     base + 52_000, base + 61_000, launch=(base + 22_000, base + 22_400))
            s.range("final matmul", base + 41_000, base + 59_000)
            s.kernel("ampere_sgemm_64x64_nn", base + 61_000, base + 75_000,
                     launch=(base + 42_000, base + 42_500))
            s.kernel("ampere_sgemm_128x128_nn", base + 75_000, base + 120_000,
                     launch=(base + 70_000, base + 70_500))
        s.range("backward", t + 310_000, t + 700_000)
        for i in range(6):
            b = t + 320_000 + i * 60_000
            s.kernel("ampere_sgemm_128x64_nt", b + 20_000, b + 70_000, launch=(b, b + 500))
        s.range("optimizer", t + 710_000, t + 890_000)
        s.kernel("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
                 "FusedAdamMathFunctor<float, 4>>", t + 720_000, t + 760_000,
                 launch=(t + 712_000, t + 712_500))
        t += 1_000_000
    return s.write(path)


# (module, kernels of its forward as (name, ns), submodules): a small language model
GEMM = "ampere_sgemm_128x64_tn"
GEMM_BACKWARD = "ampere_sgemm_64x64_nt"
SOFTMAX = "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>"
SOFTMAX_BACKWARD = "void at::native::(anonymous namespace)::cunn_SoftMaxBackward<4, float>"
GELU = "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"
EMBED = "void at::native::indexSelectLargeIndex<float, long, unsigned int, 2, 2, -2, true>"
EMBED_BACKWARD = "void at::native::embedding_backward_feature_kernel<float, float, long>"
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
        "FusedAdamMathFunctor<float, 4>>")


def _block(q: str) -> tuple:
    return (f"{q} (Block)", [], [
        (f"{q}.attn (Attention)", [(GEMM, 30_000), (SOFTMAX, 12_000), (GEMM, 18_000)], []),
        (f"{q}.mlp (Mlp)", [], [(f"{q}.mlp.fc (Linear)", [(GEMM, 40_000)], []),
                                (f"{q}.mlp.act (GELU)", [(GELU, 8_000)], [])])])


MODULE_MODEL = ("TinyLM", [], [("embed (Embedding)", [(EMBED, 6_000)], []),
                               _block("layers.0"), _block("layers.1"),
                               ("head (Linear)", [(GEMM, 90_000)], [])])
BACKWARD_OF = {GEMM: [(GEMM_BACKWARD, 2)], SOFTMAX: [(SOFTMAX_BACKWARD, 1)],
               GELU: [(GELU, 1)], EMBED: [(EMBED_BACKWARD, 3)]}


def module_run(path: Path, *, steps: int = 2, model: tuple = MODULE_MODEL) -> Path:
    """A GPU run of a small language model with the ranges ``nsys-mine profile --nvtx
    modules,steps`` adds, as the launcher names them (SYNTHETIC: made here, not measured):
    ``step`` and ``optimizer (AdamW)`` start/end ranges and the model's push/pop forward
    ranges on the main thread, the modules' ``... backward`` start/end ranges on autograd's
    thread (tid 2), kernels launched inside them. The ``layers`` ModuleList is never called,
    so it has no range (``layers.0 (Block)`` hangs from the model). Backward kernels take
    a multiple of their forward ones (``BACKWARD_OF``)."""
    s = Synth()
    clock = {"cpu": 1_000_000, "gpu": 1_000_000}

    def launch(kname: str, dur: int, tid: int) -> None:
        ls = clock["cpu"]
        clock["cpu"] += 4_000
        g = max(clock["gpu"], ls + 2_000)
        s.kernel(kname, g, g + dur, launch=(ls, ls + 3_000), tid=tid)
        clock["gpu"] = g + dur

    def forward(node: tuple) -> None:
        name, kernels, children = node
        start = clock["cpu"]
        clock["cpu"] += 1_000
        for child in children:
            forward(child)
        for kname, dur in kernels:
            launch(kname, dur, 1)
        clock["cpu"] += 1_000
        s.range(name, start, clock["cpu"], tid=1)

    def backward(node: tuple) -> None:
        name, kernels, children = node
        start = clock["cpu"]
        clock["cpu"] += 1_000
        for kname, dur in reversed(kernels):
            for bname, times in BACKWARD_OF[kname]:
                launch(bname, dur * times, 2)
        for child in reversed(children):
            backward(child)
        clock["cpu"] += 1_000
        s.range(name + " backward", start, clock["cpu"], tid=2, etype=60)

    for _ in range(steps):
        step = clock["cpu"]
        forward(model)
        clock["cpu"] = max(clock["cpu"], clock["gpu"]) + 5_000  # the loss waits for the GPU
        backward(model)
        clock["cpu"] = max(clock["cpu"], clock["gpu"]) + 5_000
        opt = clock["cpu"]
        launch(ADAM, 50_000, 1)
        s.range("optimizer (AdamW)", opt, clock["cpu"] + 1_000, tid=1, etype=60)
        clock["cpu"] = max(clock["cpu"], clock["gpu"]) + 2_000
        s.range("step", step - 500, clock["cpu"], tid=1, etype=60)
        clock["cpu"] += 20_000
    return s.write(path)


if __name__ == "__main__":
    import sys

    makers = {"--demo": demo, "--modules": module_run}
    if len(sys.argv) != 3 or sys.argv[1] not in makers:
        sys.exit("usage: python -m tests.synth --demo|--modules OUT.sqlite")
    print(makers[sys.argv[1]](Path(sys.argv[2])))


def model_run(path: Path, *, context: int = 128, width: float = 1.0, layers: int = 2,
              warmup: int = 1, steps: int = 2, names: dict[str, str] | None = None) -> Path:
    """A GPU profile of this project's model, shaped like ``nsys-mine profile`` writes it
    (warmup > measure > step > forward/loss/backward/optimizer, attention sub-ranges), with
    kernel times that grow like the real ones: attention with context^2, GEMMs with
    context x width. Each range ends when its kernels have (the harness synchronizes at
    phase ends), so range times are wall-clock times. ``names`` renames ranges (traps)."""
    rename = names or {}
    s = Synth()
    scale = context / 128
    t = 1_000_000

    def rng(name: str, start: int, end: int) -> None:
        s.range(rename.get(name, name), start, end)

    def kernel(name: str, at: int, dur: int) -> int:
        s.kernel(name, at + 2_000, at + 2_000 + dur, launch=(at, at + 500))
        return at + 2_000 + dur

    def step(t: int) -> int:
        start = t
        fwd = t
        for _ in range(layers):
            a = t
            sc = kernel("ampere_sgemm_128x64_tn", t + 1_000, int(20_000 * scale * scale))
            rng("computing attention scores", t + 500, sc + 100)
            sm = kernel("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
                        sc + 1_000, int(14_000 * scale * scale))
            rng("computing softmax", sc + 500, sm + 100)
            fm = kernel("ampere_sgemm_64x64_nn", sm + 1_000, int(16_000 * scale * scale))
            rng("final matmul", sm + 500, fm + 100)
            rng("scaled dot product attention", a + 200, fm + 300)
            rng("attention", a, fm + 500)
            f = kernel("ampere_sgemm_128x128_nn", fm + 1_000, int(40_000 * scale * width))
            rng("ffn", fm + 600, f + 100)
            t = f + 1_000
        rng("forward", fwd - 100, t)
        lo = kernel("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>",
                    t + 1_000, int(5_000 * scale))
        rng("loss", t + 500, lo + 100)
        b = lo + 1_000
        for _ in range(3 * layers):
            b = kernel("ampere_sgemm_128x64_nt", b + 500, int(30_000 * scale * width))
        rng("backward", lo + 500, b + 100)
        o = kernel("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
                   "FusedAdamMathFunctor<float, 4>>", b + 1_000, 40_000)
        rng("optimizer", b + 500, o + 100)
        rng("step", start - 200, o + 200)
        return o + 10_000

    w0 = t
    for _ in range(warmup):
        t = step(t)
    if warmup:
        rng("warmup", w0 - 500, t)
    m0 = t
    for _ in range(steps):
        t = step(t + 1_000)
    rng("measure", m0, t + 500)
    return s.write(path)

def slowed_copy(src: Path, dst: Path, range_name: str, factor: float = 1.5) -> Path:
    """A copy whose kernels launched (innermost) in ``range_name`` run ``factor`` x longer."""
    from reports.pipeline.session import Session

    shutil.copy(src, dst)
    with Session(src, merge_op_ids="on") as a:
        a.load("kernels", "kernel_ids", "launches", "ranges", "names")
        k = a.kernels
        assert k is not None and k.pid is not None
        inst = set(a.instances_of(range_name).tolist())
        p = a.pairs("innermost")
        rows = sorted({int(ki) for ri, ki in zip(p.range_idx, p.kernel_idx) if int(ri) in inst})
        keys = [(int(k.start[i]), int(k.pid[i])) for i in rows]
    conn = sqlite3.connect(dst)
    with conn:
        conn.executemany(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST((end - start) * ? AS INT) "
            "WHERE start = ? AND globalPid = ?", [(factor, s, g) for s, g in keys])
    conn.close()
    assert rows
    return dst
