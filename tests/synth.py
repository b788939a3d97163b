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
        if self.kernels:
            c.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL,
                end INTEGER NOT NULL, deviceId INTEGER, contextId INTEGER, streamId INTEGER,
                correlationId INTEGER, globalPid INTEGER, demangledName INTEGER,
                shortName INTEGER, mangledName INTEGER, gridX INTEGER, gridY INTEGER,
                gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER)""")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES "
                          "(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", self.kernels)
            c.execute("""CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL,
                end INTEGER NOT NULL, eventClass INTEGER, globalTid INTEGER,
                correlationId INTEGER, nameId INTEGER, returnValue INTEGER,
                callchainId INTEGER)""")
            c.executemany("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?,?,?,?,?,?,?,?)",
                          self.runtime)
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


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3 or sys.argv[1] != "--demo":
        sys.exit("usage: python -m tests.synth --demo OUT.sqlite")
    print(demo(Path(sys.argv[2])))


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
    from reports.session import Session

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
