"""Kernels by NVTX range (``nvtx-kernels``): against nsys's nvtxkernsum on every fixture
(one deliberate difference, DUPLICATE_LAUNCHES), and the innermost attribution.

Allowed difference, asserted here: nsys 2022.2 recorded every launch twice
(cudaLaunchKernel and cudaLaunchKernel_v7000, one correlationId); nvtxkernsum joins both and
doubles the kernel time, we count each kernel once."""

from __future__ import annotations

import pytest

from nsys_parsers.errors import MissingData
from nsys_parsers.export import open_export
from reports.pipeline.ask import ask
from tests.conftest import KNOWN
from tests.nsys_stats import close, none, nsys_stats

DUPLICATE_LAUNCHES = {"pipit_saxpy_mpi_a100_nsys2022.2.sqlite"}


@pytest.mark.parametrize("name", KNOWN)
def test_nvtx_kernels_all_match_nvtxkernsum(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    ref = nsys_stats(nsys_bin, export, "nvtxkernsum", tmp_path)
    if ref is None:
        with pytest.raises(MissingData, match="--trace="):
            ask("nvtx-kernels", [export])
        return
    theirs = {}
    for row in ref:
        pid, tid = none(row["PID"]), none(row["TID"])
        key = (none(row["NVTX Range"]), none(row["Style"]),
               None if pid is None else int(pid), None if tid is None else int(tid),
               row["Kernel Name"])
        theirs[key] = row
    ours = {(r["range"], r["style"], r["pid"], r["tid"], r["kernel"]): r
            for r in ask("nvtx-kernels", [export], attribution="all").rows}
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        o = ours[key]
        assert o["range_instances"] == int(row["NVTX Inst"]), key
        assert o["kernel_instances"] == int(row["Kern Inst"]), key
        assert (o["min_ns"], o["max_ns"]) == (int(row["Min (ns)"]), int(row["Max (ns)"])), key
        assert close(o["avg_ns"], row["Avg (ns)"]) and close(o["med_ns"], row["Med (ns)"]), key
        if name in DUPLICATE_LAUNCHES:
            # nsys joined each kernel to both launch rows: twice the time, same instances
            assert int(row["Total Time (ns)"]) == 2 * o["total_ns"], key
        else:
            assert o["total_ns"] == int(row["Total Time (ns)"]), key
            assert close(o["stddev_ns"], row["StdDev (ns)"]), key


def test_duplicate_launch_fixture_really_has_duplicates(fx):
    """The named difference is real: every saxpy launch is recorded twice in RUNTIME."""
    import sqlite3

    conn = sqlite3.connect(f"file:{fx('pipit_saxpy_mpi_a100_nsys2022.2.sqlite')}?mode=ro",
                           uri=True)
    rows = conn.execute(
        "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN CUPTI_ACTIVITY_KIND_KERNEL k "
        "ON r.correlationId = k.correlationId").fetchone()[0]
    assert rows == 10  # 5 kernels x 2 launch rows


def test_nvfuser_mostly_unattributed(fx):
    export = fx("nvfuser_h100_nsys2024.6.sqlite")
    rows = ask("nvtx-kernels", [export]).rows
    inside = sum(r["kernel_instances"] for r in rows if r["range"] is not None and
                 r["range"] == "KernelExecutor::runFusion")
    outside = sum(r["kernel_instances"] for r in rows if r["range"] is None)
    assert (inside, outside) == (2, 17)


@pytest.mark.parametrize("name", KNOWN)
def test_innermost_exclusive_plus_unattributed_is_total(name, fx):
    export = fx(name)
    with open_export(export) as ex:
        if not (ex.has_table("CUPTI_ACTIVITY_KIND_KERNEL") and ex.has_table("NVTX_EVENTS")):
            pytest.skip("needs kernels and NVTX")
    total = sum(r["total_ns"] for r in ask("kernels", [export]).rows)
    inner = ask("nvtx-kernels", [export], attribution="innermost").rows
    assert sum(r["total_ns"] for r in inner) == total
    ranges = ask("ranges", [export]).rows
    unattributed = sum(r["total_ns"] for r in inner if r["range"] is None)
    assert sum(r["gpu_exclusive_ns"] for r in ranges) + unattributed == total


def _nsys_rows(ref):
    return {(none(r["NVTX Range"]), int(r["PID"]), int(r["TID"]), r["Kernel Name"]): (
        int(r["NVTX Inst"]), int(r["Kern Inst"]), int(r["Total Time (ns)"]), int(r["Min (ns)"]),
        int(r["Max (ns)"])) for r in ref}


def _our_rows(rows):
    return {(r["range"], r["pid"], r["tid"], r["kernel"]): (
        r["range_instances"], r["kernel_instances"], r["total_ns"], r["min_ns"], r["max_ns"])
        for r in rows}


def test_graph_node_kernels_are_attributed_as_nvtxkernsum_does(nsys_bin, tmp_path):
    """--cuda-graph-trace=node (a built export): each kernel of the graph carries the
    correlationId of its cudaGraphLaunch and counts in the ranges around that call."""
    from tests.synth import compiled_run

    export = compiled_run(tmp_path / "node.sqlite")
    report = ask("nvtx-kernels", [export])
    assert _our_rows(report.rows) == _nsys_rows(nsys_stats(nsys_bin, export, "nvtxkernsum",
                                                           tmp_path))
    assert _our_rows(report.rows)[("forward", 1, 1, "triton_tem_fused_mm_2")] == (
        2, 2, 120_000, 60_000, 60_000)
    assert not any(r["range"] in ("attention", "ffn") for r in report.rows)
    assert any(n.startswith("8 kernels ran as nodes of CUDA graphs") for n in report.notes)


def test_whole_graph_launches_are_attributed_like_their_launch(nsys_bin, tmp_path):
    """--cuda-graph-trace=graph (a built export): nvtxkernsum's rows, plus one row per range
    around the cudaGraphLaunch calls for the graph (which nsys leaves out)."""
    from tests.synth import compiled_run

    export = compiled_run(tmp_path / "graph.sqlite", graphs="graph")
    ours = _our_rows(ask("nvtx-kernels", [export]).rows)
    theirs = _nsys_rows(nsys_stats(nsys_bin, export, "nvtxkernsum", tmp_path))
    graph_rows = {key: ours.pop(key) for key in list(ours) if key[3] == "CUDA graph 1"}
    assert ours == theirs
    assert graph_rows == {(r, 1, 1, "CUDA graph 1"): (i, 2, 248_000, 124_000, 124_000)
                          for r, i in (("forward", 2), ("step", 2), ("measure", 1))}


def test_capture_attribution_of_graph_nodes(tmp_path):
    """--graph-attribution capture (a built export): each node kernel counts in the ranges
    open when the node it was cloned from was captured (attention or ffn of the warmup
    step), the eager optimizer kernels where they were launched."""
    from tests.synth import compiled_run

    export = compiled_run(tmp_path / "node.sqlite")
    report = ask("nvtx-kernels", [export], graph_attribution="capture")
    rows = _our_rows(report.rows)
    assert {k[0] for k in rows if k[3].startswith("triton")} == {
        "warmup", "step", "forward", "attention", "ffn"}
    assert rows[("attention", 1, 1, "triton_per_fused__softmax_1")] == (1, 2, 60_000, 30_000,
                                                                       30_000)
    assert rows[("ffn", 1, 1, "triton_tem_fused_mm_2")] == (1, 2, 120_000, 60_000, 60_000)
    assert ("measure", 1, 1, "triton_tem_fused_mm_2") not in rows
    assert rows[("optimizer", 1, 1, "void at::native::multi_tensor_apply_kernel<"
                 "FusedAdamMathFunctor<float, 4>>")][:2] == (3, 3)
    assert report.notes[-1] == (
        "--graph-attribution capture: 8 kernels recorded as graph nodes count in the NVTX "
        "ranges that were open when their node was captured, not where the graph was "
        "launched.")


def test_innermost_a_few_pairs_at_a_time_equals_plain_python(fx, monkeypatch):
    """``innermost`` passes the pairs a block at a time (blocks of 5 here, a kernel's pairs
    spread over several): for each kernel, of its ranges, the latest start, then the
    earliest end, then the highest index, as a loop over the pairs in plain Python says."""
    from nsys_parsers import attribution
    from reports.pipeline.session import Session

    with Session(fx("cs336_lizhieffe_ddp53_profile.sqlite")) as s:
        s.load("kernels", "launches", "ranges")
        r = s.trace.ranges
        every = attribution.pairs(s.trace.kernels, r)
        monkeypatch.setattr(attribution, "ROWS", 5)
        got = attribution.innermost(every, r)
        starts, ends = r.start.tolist(), r.end.tolist()
    best: dict[int, tuple[int, int, int]] = {}
    for ri, ki in zip(every.range_idx.tolist(), every.kernel_idx.tolist()):
        key = (starts[ri], -ends[ri], ri)
        if ki not in best or key > best[ki]:
            best[ki] = key
    want = sorted((ki, key[2]) for ki, key in best.items())
    assert len(want) > 700 and len(set(every.kernel_idx.tolist())) == len(want)
    assert list(zip(got.kernel_idx.tolist(), got.range_idx.tolist())) == want
