"""The kernel summary (``kernels``): against nsys's gpukernsum on every fixture, golden
numbers of real exports, CUDA graph launches as kernels, and ``--by``."""

from __future__ import annotations

from collections import defaultdict

import pytest

from nsys_parsers.errors import MissingData
from reports.pipeline.ask import ask
from tests.conftest import KNOWN
from tests.nsys_stats import close, nsys_stats


@pytest.mark.parametrize("name", KNOWN)
def test_kernels_match_gpukernsum(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    ref = nsys_stats(nsys_bin, export, "gpukernsum", tmp_path)
    if ref is None:  # nsys skips the report; we explain why instead
        with pytest.raises(MissingData, match="--trace=cuda"):
            ask("kernels", [export])
        return
    by_name = defaultdict(lambda: {"instances": 0, "total": 0, "min": None, "max": None})
    for row in ref:  # nsys splits by grid/block: aggregate by name
        agg = by_name[row["Name"]]
        agg["instances"] += int(row["Instances"])
        agg["total"] += int(row["Total Time (ns)"])
        mn, mx = int(row["Min (ns)"]), int(row["Max (ns)"])
        agg["min"] = mn if agg["min"] is None else min(agg["min"], mn)
        agg["max"] = mx if agg["max"] is None else max(agg["max"], mx)
    ours = {r["name"]: r for r in ask("kernels", [export]).rows}
    assert set(ours) == set(by_name)
    for kname, agg in by_name.items():
        o = ours[kname]
        assert (o["instances"], o["total_ns"], o["min_ns"], o["max_ns"]) == (
            agg["instances"], agg["total"], agg["min"], agg["max"]), kname
    # where nsys has one row per name, every statistic matches
    singles = [r for r in ref if sum(x["Name"] == r["Name"] for x in ref) == 1]
    for row in singles:
        o = ours[row["Name"]]
        assert close(o["avg_ns"], row["Avg (ns)"]) and close(o["med_ns"], row["Med (ns)"])
        assert close(o["stddev_ns"], row["StdDev (ns)"])


def test_kmeans_matches_authors_stats_output(fx):
    export = fx("kmeans_openacc_rtx3080_hpcsdk21.2.sqlite")
    (row,) = ask("kernels", [export]).rows
    assert (row["name"], row["instances"], row["total_ns"]) == ("kmeans_235_gpu", 9, 744226)
    stats = fx("kmeans_openacc_rtx3080_hpcsdk21.2.stats.txt").read_text(errors="replace")
    # the author's locale writes 744,226 ns as "744.226": "100,0  744.226  9  82.691,0 ..."
    line = next(ln for ln in stats.splitlines() if ln.rstrip().endswith("kmeans_235_gpu"))
    fields = line.split()
    assert fields[1].replace(".", "") == str(row["total_ns"]) and int(fields[2]) == 9
    assert (int(fields[4].replace(".", "")), int(fields[5].replace(".", ""))) == (
        row["min_ns"], row["max_ns"])


def test_fastvideo_two_processes_trimmed(fx):
    export = fx("fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite")
    rows = ask("nvtx-kernels", [export]).rows
    unlaunched = sum(r["kernel_instances"] for r in rows if r["pid"] is None)
    assert unlaunched == 3442 - 1632  # only 1632 kernels keep their launch row
    assert {r["pid"] for r in rows if r["pid"] is not None} == {111, 112}
    top = ask("kernels", [export]).rows[0]
    assert top["name"].startswith("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x256x8")
    assert (top["instances"], top["total_ns"], top["category"]) == (248, 31121662, "gemm")
    assert top["time_pct"] == 69.4
    dom = ask("dominant", [export], merge_op_ids="off")
    assert dom.rows[0]["range"] is None and dom.rows[0]["share_pct"] == 69.4


def test_old_schema_truncated_names(fx):
    rows = ask("kernels", [fx("ompoffload_v100_aarch64_pre2021.2.sqlite")]).rows
    assert [r["instances"] for r in rows] == [2404, 15]
    assert rows[0]["name"].endswith("...") and rows[0]["total_ns"] == 2527853625


COMPILE = "cs336_zx3xyy_result_2_7B_compile_ro.sqlite"


def _by_name(ref):
    out = defaultdict(lambda: [0, 0])
    for row in ref:
        out[row["Name"]][0] += int(row["Instances"])
        out[row["Name"]][1] += int(row["Total Time (ns)"])
    return {k: tuple(v) for k, v in out.items()}


def test_compile_fixture_answer_is_the_graph(fx, nsys_bin, tmp_path):
    """torch.compile(mode="reduce-overhead") at graph level: the 10 launches of graph 4 are
    about all the GPU time; the eager kernels are gpukernsum's rows exactly (nsys leaves the
    graph trace out of its kernel summary)."""
    export = fx(COMPILE)
    report = ask("kernels", [export])
    top = report.rows[0]
    assert (top["name"], top["category"], top["instances"], top["total_ns"], top["time_pct"]) == (
        "CUDA graph 4", "cuda graph", 10, 7_811_141_695, 100.0)
    assert (top["min_ns"], top["max_ns"]) == (781_031_802, 781_620_938)
    rest = {r["name"]: (r["instances"], r["total_ns"]) for r in report.rows[1:]}
    assert rest == _by_name(nsys_stats(nsys_bin, export, "gpukernsum", tmp_path))
    assert sum(rest.values(), ())[1::2] == (49_502, 28_768)
    assert any("--cuda-graph-trace=node" in n for n in report.notes)


@pytest.mark.parametrize("graphs", ["node", "graph"])
def test_compiled_runs_against_gpukernsum(graphs, nsys_bin, tmp_path):
    """Built exports of a compiled model: kernels recorded as graph nodes are rows as nsys
    counts them; a whole-graph launch is a row of its own that nsys leaves out."""
    from tests.synth import compiled_run

    export = compiled_run(tmp_path / f"{graphs}.sqlite", graphs=graphs)
    theirs = _by_name(nsys_stats(nsys_bin, export, "gpukernsum", tmp_path))
    ours = {r["name"]: (r["instances"], r["total_ns"]) for r in ask("kernels", [export]).rows}
    if graphs == "node":
        assert ours == theirs and len(ours) == 5
    else:
        assert ours == {**theirs, "CUDA graph 1": (2, 248_000)}


@pytest.mark.parametrize("by,keys", [("device", ["device"]), ("process", ["pid"]),
                                     ("stream", ["device", "stream"])])
def test_kernels_by_key_add_up_to_the_whole(by, keys, fx):
    export = fx("cs336_lizhieffe_ddp53_profile.sqlite")
    whole = {r["name"]: r for r in ask("kernels", [export]).rows}
    rows = ask("kernels", [export], by=by).rows
    assert all(list(r)[:len(keys)] == keys for r in rows)
    for name, row in whole.items():
        mine = [r for r in rows if r["name"] == name]
        assert sum(r["instances"] for r in mine) == row["instances"], name
        assert sum(r["total_ns"] for r in mine) == row["total_ns"], name
        assert min(r["min_ns"] for r in mine) == row["min_ns"], name
    for value in {tuple(r[k] for k in keys) for r in rows}:  # shares per key value
        share = sum(r["time_pct"] for r in rows if tuple(r[k] for k in keys) == value)
        assert abs(share - 100) < 0.1 * len(rows)
    expected = {"device": {(0,), (1,)}, "process": {(13096,), (13097,)},
                "stream": {(0, 7), (0, 17), (1, 7), (1, 17)}}[by]
    assert {tuple(r[k] for k in keys) for r in rows} == expected


def test_kernels_by_device_in_csv_has_the_key_column(cli, fx):
    res = cli("kernels", fx("cs336_lizhieffe_ddp53_profile.sqlite"), "--by", "device",
              "--top", "2", "-f", "csv")
    assert res.exit_code == 0, res.stderr
    header, first, _ = res.stdout.splitlines()
    assert header.startswith("device,name,category,instances") and first.startswith("0,nccl")
