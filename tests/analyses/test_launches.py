"""Kernel launch and execution times (``launches``): against nsys's kernexecsum on every
fixture, every column, with two deliberate differences (DUPLICATE_LAUNCHES, and the launches
of whole CUDA graphs, which kernexecsum leaves out), and the trimmed and synthetic cases.

Allowed difference, asserted here: nsys 2022.2 recorded every launch twice
(cudaLaunchKernel and cudaLaunchKernel_v7000, one correlationId); kernexecsum joins both
rows, so it counts each kernel twice; we count each kernel once, with its narrowest call."""

from __future__ import annotations

import pytest

from nsys_parsers.errors import MissingData
from reports.pipeline.ask import ask
from tests.conftest import CS336, KNOWN
from tests.nsys_stats import close, none, nsys_answer
from tests.synth import Synth

DUPLICATE_LAUNCHES = {"pipit_saxpy_mpi_a100_nsys2022.2.sqlite"}
DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
COMPILE = "cs336_zx3xyy_result_2_7B_compile_ro.sqlite"
# nsys's column prefix of each phase
PHASES = {"launch": "T", "api": "A", "queue": "Q", "kernel": "K"}


def _key(row: dict) -> tuple:
    return (int(row["PID"]), int(row["TID"]), int(row["DevId"]), row["API Name"],
            row["Kernel Name"])


def _same_phase(ours: dict, theirs: dict, phase: str, prefix: str, key: tuple) -> None:
    avg, med = none(theirs[f"{prefix}Avg (ns)"]), none(theirs[f"{prefix}Med (ns)"])
    lo, hi = none(theirs[f"{prefix}Min (ns)"]), none(theirs[f"{prefix}Max (ns)"])
    if avg is None:  # no launch of the group had a queue time
        assert ours[f"{phase}_avg_ns"] is None and ours[f"{phase}_min_ns"] is None, key
        return
    assert (ours[f"{phase}_min_ns"], ours[f"{phase}_max_ns"]) == (int(lo), int(hi)), key
    assert close(ours[f"{phase}_avg_ns"], avg) and close(ours[f"{phase}_med_ns"], med), key
    assert close(ours[f"{phase}_stddev_ns"], theirs[f"{prefix}StdDev (ns)"]), key


@pytest.mark.parametrize("name", KNOWN + CS336)
def test_launches_match_kernexecsum(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    ref, reason = nsys_answer(nsys_bin, export, ["stats", "--report", "kernexecsum"],
                              "kernexecsum", tmp_path)
    if ref is None:
        assert "does not contain CUDA kernel data" in reason
        with pytest.raises(MissingData, match="--trace=cuda"):
            ask("launches", [export])
        return
    ours = {(r["pid"], r["tid"], r["device"], r["api"], r["kernel"]): r
            for r in ask("launches", [export]).rows}
    if name == COMPILE:  # the launches of a whole CUDA graph, which kernexecsum leaves out
        graph = ours.pop((2460631, 2460631, 0, "cudaGraphLaunch_v10000", "CUDA graph 4"))
        assert (graph["count"], graph["kernel_avg_ns"], graph["queue_avg_ns"]) == (
            10, 781114169.5, 3512450296.0)
    theirs = {_key(r): r for r in ref}
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        o = ours[key]
        if name in DUPLICATE_LAUNCHES:  # each kernel joined to both of its launch rows
            assert int(row["Count"]) == 2 * o["count"], key
            assert int(row["KMin (ns)"]) == o["kernel_min_ns"], key
            assert int(row["KMax (ns)"]) == o["kernel_max_ns"], key
            continue
        assert (o["count"], o["queue_count"]) == (int(row["Count"]), int(row["QCount"])), key
        for phase, prefix in PHASES.items():
            _same_phase(o, row, phase, prefix, key)
    # nsys's order: the longest average launch (nsys's "total time") first
    avgs = [r["launch_avg_ns"] for r in ask("launches", [export]).rows]
    assert avgs == sorted(avgs, reverse=True)


def test_ddp_launches(fx):
    """NCCL's broadcast is launched through cuLaunchKernelEx and waits 134 ms in the queue
    behind the other rank on average: the launch is not the problem, the peer is."""
    rows = ask("launches", [fx(DDP)]).rows
    top = rows[0]
    assert (top["pid"], top["tid"], top["device"], top["api"]) == (13096, 13096, 0,
                                                                   "cuLaunchKernelEx")
    assert top["kernel"].startswith("ncclDevKernel_Broadcast_RING_LL")
    assert (top["count"], top["queue_count"]) == (111, 110)
    assert (top["api_avg_ns"], top["queue_avg_ns"], top["kernel_avg_ns"]) == (
        8018.1, 133537032.9, 1333317.2)
    assert top["kernel_total_ns"] == 147998205 and top["api_total_ns"] == 890004
    # nsys strips a six-character version suffix only: `_v11060` stays, as there
    assert len(rows) == 158 and {r["api"] for r in rows} == {
        "cuLaunchKernelEx", "cudaLaunchKernel", "cudaLaunchKernelExC_v11060", "cuLaunchKernel"}


def test_trimmed_export_says_what_is_left_out(fx):
    report = ask("launches", [fx(FASTVIDEO)])
    assert sum(r["count"] for r in report.rows) == 1632
    assert "1,810 of 3,442 kernels have no launch record (trimmed export): left out" in \
        " ".join(report.notes)


def test_queue_time_is_only_for_kernels_that_start_after_the_call(tmp_path):
    s = Synth()
    s.kernel("k", 1_000, 2_000, launch=(100, 400))      # queued 600
    s.kernel("k", 3_000, 4_000, launch=(2_900, 3_200))  # started before the call returned
    s.kernel("k", 5_000, 6_000, launch=(4_000, 5_000))  # queued 0: counts
    (row,) = ask("launches", [s.write(tmp_path / "q.sqlite")]).rows
    assert (row["count"], row["queue_count"]) == (3, 2)
    assert (row["queue_min_ns"], row["queue_max_ns"], row["queue_avg_ns"]) == (0, 600, 300.0)
    assert (row["launch_min_ns"], row["launch_max_ns"]) == (1_100, 2_000)
    assert row["api_total_ns"] == 300 + 300 + 1_000


def test_within_keeps_the_kernels_launched_inside(fx):
    rows = ask("launches", [fx(DDP)], within="forward pass").rows
    # the 730 kernels of each process's forward pass (ranges --instances: 730 launch calls)
    assert sum(r["count"] for r in rows) == 1460 and {r["tid"] for r in rows} == {13096,
                                                                                 13097}
    assert {r["api"] for r in rows} == {"cudaLaunchKernel", "cuLaunchKernel",
                                        "cudaLaunchKernelExC_v11060"}


@pytest.mark.parametrize("width", [80, 120])
def test_launches_read_at_80_and_120_columns(width, cli, fx, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    res = cli("launches", fx(DDP), "--top", "3")
    assert res.exit_code == 0, res.stderr
    assert all(len(ln) <= width for ln in res.stdout.splitlines())
    assert "133.537 ms" in res.stdout and "3 of 158 launch groups" in res.stdout
