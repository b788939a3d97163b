"""``longest``: the longest kernel runs of real exports, with their launching range."""

from __future__ import annotations

from reports.pipeline.ask import ask


def test_the_longest_runs_of_a_two_gpu_capture(fx):
    rows = ask("longest", [fx("cs336_lizhieffe_ddp53_profile.sqlite")], count=3).rows
    assert [r["duration_ns"] for r in rows] == sorted((r["duration_ns"] for r in rows),
                                                      reverse=True)
    top = rows[0]
    assert top["kernel"].startswith("ncclDevKernel_Broadcast")
    # launched inside distributed_training > NCCL's own ncclBroadcast: the innermost one
    assert (top["device"], top["stream"], top["range"]) == (0, 7, "NCCL:ncclBroadcast")
    assert top["duration_ns"] == 132338285
    assert 0 < top["share_pct"] < 100


def test_runs_outside_every_range_and_the_count(fx):
    export = fx("nvfuser_h100_nsys2024.6.sqlite")
    rows = ask("longest", [export]).rows
    assert len(rows) == 19  # every kernel run when there are fewer than --count
    assert sum(r["range"] is None for r in rows) == 17  # as nvtx-kernels counts them
    kernels = {r["name"]: r for r in ask("kernels", [export]).rows}
    for r in rows:  # each run lies within its kernel's min and max
        k = kernels[r["kernel"]]
        assert k["min_ns"] <= r["duration_ns"] <= k["max_ns"]
    assert abs(sum(r["share_pct"] for r in rows) - 100.0) <= 0.05 * len(rows)


def test_a_cpu_export_says_what_to_trace(cli, fx):
    res = cli("longest", fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"))
    assert res.exit_code == 1 and "--trace=cuda" in res.stderr
