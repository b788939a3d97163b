"""NCCL collectives (``collectives``): the DDP capture's calls, kernels, exposed time and
bytes, checked against its NVTX payloads and kernel table here; the kinds of kernel names;
exports without collectives."""

from __future__ import annotations

import json
import sqlite3

import pytest

from reports.collective_kinds import collective_kind
from reports.pipeline.ask import ask
from tests.synth import Synth

DDP = "cs336_lizhieffe_ddp53_profile.sqlite"


@pytest.mark.parametrize("name,kind", [
    ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096>)", "AllReduce"),
    ("ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclDevComm *, unsigned long, ncclWork *)",
     "AllGather"),
    ("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL", "ReduceScatter"),
    ("ncclDevKernel_Broadcast_RING_LL", "Broadcast"),
    ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)", "Send/Recv"),
    ("ncclKernel_Reduce_RING_LL_Sum_half", "Reduce"),
    ("void vllm::cross_device_reduce_1stage<half, 2>(...)", "AllReduce"),
    ("ncclAllReduce", "AllReduce"), ("ncclRecv", "Send/Recv"),
    ("ncclCommInitRankConfig", "other"),
])
def test_kinds_from_names(name, kind):
    assert collective_kind(name) == kind


def test_ddp_collectives(fx):
    export = fx(DDP)
    rows = {r["kind"]: r for r in ask("collectives", [export]).rows}
    assert list(rows) == ["Broadcast", "AllReduce"]
    bc, ar = rows["Broadcast"], rows["AllReduce"]
    assert (bc["calls"], bc["kernels"], bc["total_ns"]) == (222, 222, 162325233)
    assert (ar["calls"], ar["kernels"], ar["total_ns"]) == (238, 238, 91077744)
    # nothing computes while the parameters are broadcast; a quarter of the all-reduce hides
    assert (bc["exposed_ns"], bc["exposed_pct"]) == (162325233, 100.0)
    assert (ar["exposed_ns"], ar["exposed_pct"]) == (67012854, 73.6)
    # the kinds never run at once here: their exposed times add up to the devices' (gpus)
    gpus = ask("gpus", [export]).rows
    assert bc["exposed_ns"] + ar["exposed_ns"] == sum(r["exposed_comm_ns"] for r in gpus)
    assert bc["time_pct"] + ar["time_pct"] == 100.0
    # the bytes are the NCCL ranges' payloads, summed per kind
    conn = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    sizes: dict[str, int] = {}
    for text, payload in conn.execute(
            "SELECT coalesce(e.text, s.value), e.jsonText FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON s.id = e.textId WHERE e.domainId = 1 "
            "AND e.jsonText IS NOT NULL"):
        size = json.loads(payload).get("Message size [bytes]")
        if size is not None:
            sizes[text] = sizes.get(text, 0) + size
    conn.close()
    assert bc["total_bytes"] == sizes["ncclBroadcast"] == 514501632
    assert ar["total_bytes"] == sizes["ncclAllReduce"] == 514501896
    # and the kernel time is the kernels summary's
    kernels = ask("kernels", [export]).rows
    assert bc["total_ns"] == sum(r["total_ns"] for r in kernels if "Broadcast" in r["name"])
    assert ar["total_ns"] == sum(r["total_ns"] for r in kernels if "AllReduce" in r["name"])


def test_no_collectives(fx):
    report = ask("collectives", [fx("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite")])
    assert report.rows == [] and "no communication kernels" in report.notes[-1]


def test_kernels_without_nccl_ranges_have_no_calls_or_bytes(tmp_path):
    s = Synth()
    s.kernel("ncclDevKernel_AllGather_RING_LL", 1_000, 5_000)
    s.kernel("gemm", 2_000, 3_000)
    report = ask("collectives", [s.write(tmp_path / "c.sqlite")])
    (row,) = report.rows
    assert (row["kind"], row["calls"], row["total_ns"], row["exposed_ns"]) == (
        "AllGather", 0, 4_000, 3_000)
    assert row["total_bytes"] is None and "no NCCL NVTX ranges" in report.notes[-1]


@pytest.mark.parametrize("width", [80, 120])
def test_collectives_read_at_80_and_120_columns(width, cli, fx, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    res = cli("collectives", fx(DDP))
    assert res.exit_code == 0, res.stderr
    assert all(len(ln) <= width for ln in res.stdout.splitlines())
    assert "162.325 ms" in res.stdout and "490.7 MiB" in res.stdout
