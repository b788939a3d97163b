"""The NVTX range summary (``ranges``): against nsys's nvtxsum on every fixture, and the GPU
columns on real exports."""

from __future__ import annotations

import pytest

from nsys_parsers.errors import MissingData
from reports.ask import ask
from tests.conftest import KNOWN
from tests.nsys_stats import close, nsys_stats


@pytest.mark.parametrize("name", KNOWN)
def test_ranges_match_nvtxsum(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    ref = nsys_stats(nsys_bin, export, "nvtxsum", tmp_path)
    if ref is None:
        with pytest.raises(MissingData, match="--trace=nvtx"):
            ask("ranges", [export])
        return
    theirs = {(row["Range"], row["Style"]): row for row in ref}
    ours = {(r["range"], r["style"]): r for r in ask("ranges", [export]).rows}
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        o = ours[key]
        assert o["instances"] == int(row["Instances"]), key
        assert o["total_ns"] == int(row["Total Time (ns)"]), key
        assert (o["min_ns"], o["max_ns"]) == (int(row["Min (ns)"]), int(row["Max (ns)"])), key
        assert close(o["avg_ns"], row["Avg (ns)"]) and close(o["med_ns"], row["Med (ns)"]), key
        assert close(o["stddev_ns"], row["StdDev (ns)"]), key


def test_saxpy_domains_and_counts(fx):
    export = fx("pipit_saxpy_mpi_a100_nsys2022.2.sqlite")
    ranges = {r["range"]: r for r in ask("ranges", [export]).rows}
    assert set(ranges) == {"MPI:MPI_Init", "MPI:MPI_Send", "MPI:MPI_Recv", "MPI:MPI_Finalize",
                           "saxpy"}
    assert ranges["MPI:MPI_Send"]["instances"] == 10
    assert ranges["saxpy"]["kernel_instances"] == 5
    assert ranges["saxpy"]["gpu_inclusive_ns"] == 88573480


def test_centerformer_ranges_without_kernels(fx):
    rep = ask("ranges", [fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite")])
    top = rep.rows[0]
    assert (top["range"], top["instances"], top["total_ns"]) == ("find_centers", 304, 20566757184)
    assert all(r["kernel_instances"] == 0 for r in rep.rows)
    assert any("--trace=cuda" in n for n in rep.notes)


def test_module_ranges_in_tree_order_match_nvtxsum(nsys_bin, tmp_path, cli, monkeypatch):
    """Module ranges (``--nvtx modules``, synthetic GPU run) come as the module tree, each
    with its depth and parent, and their numbers are still nsys's; the table indents them."""
    from tests.synth import module_run

    export = module_run(tmp_path / "modules.sqlite")
    rows = ask("ranges", [export]).rows
    assert [(r["range"], r["depth"]) for r in rows[:6]] == [
        ("TinyLM", 1), ("TinyLM backward", 1), ("layers.0 (Block)", 3),
        ("layers.0 (Block) backward", 3), ("layers.0.attn (Attention)", 4),
        ("layers.0.attn (Attention) backward", 4)]
    assert [r["range"] for r in rows[-4:]] == ["embed (Embedding)", "embed (Embedding) backward",
                                               "step", "optimizer (AdamW)"]
    theirs = {(row["Range"], row["Style"]): row for row in
              nsys_stats(nsys_bin, export, "nvtxsum", tmp_path) or []}
    ours = {(r["range"], r["style"]): r for r in rows}
    assert set(ours) == set(theirs) and len(ours) == 28
    for key, row in theirs.items():
        assert ours[key]["instances"] == int(row["Instances"]), key
        assert ours[key]["total_ns"] == int(row["Total Time (ns)"]), key
    monkeypatch.setenv("COLUMNS", "120")
    out = [line.rstrip() for line in cli("ranges", export, "--top", "4").stdout.splitlines()]
    assert out[3].endswith("PushPop   TinyLM") and out[4].endswith("StartEnd  TinyLM backward")
    assert out[5].endswith("PushPop       layers.0 (Block)")
    assert "4 of 28 ranges" in out[7]
