"""Golden numbers on real exports (cross-checked against nsys stats in test_nsys_compare.py,
and for kmeans against the author's own `nsys --stats` output kept beside the fixture)."""

from __future__ import annotations

import pytest

from nsys_parsers.export import open_export
from reports.ask import ask
from tests.conftest import KNOWN


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


@pytest.mark.parametrize("name,version,schema,gpus,kernels,nvtx", [
    ("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite", "2022.1.3.3", "2.9.1",
     ["NVIDIA GeForce RTX 2070 SUPER"], 46, 82),
    ("fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite", "2026.2.1.210", "3.25.0", [],
     3442, 16782),
    ("nvfuser_h100_nsys2024.6.sqlite", "2024.6.2.25", "3.16.1", ["NVIDIA H100 80GB HBM3"] * 8,
     19, 639),
    ("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite", "2022.4.2.1", "3.0.0",
     ["NVIDIA TITAN RTX"], 0, 1824),
    ("kmeans_openacc_rtx3080_hpcsdk21.2.sqlite", "unknown", None, ["NVIDIA GeForce RTX 3080"],
     9, 0),
    ("ompoffload_v100_aarch64_pre2021.2.sqlite", "unknown", None,
     ["Tesla V100-PCIE-32GB", "Tesla V100-PCIE-32GB"], 2419, 0),
    ("pipit_cloverleaf_a100_cap2022.2_exp2024.5.sqlite", "2024.5.1.113", "3.13.2",
     ["NVIDIA A100-SXM4-80GB"] * 4, 1312, 0),
    ("pipit_saxpy_mpi_a100_nsys2022.2.sqlite", "2022.2.1.31", "2.9.1",
     ["NVIDIA A100-SXM4-40GB"], 5, 22),
    ("vecadd_t4_nsys2022.4.sqlite", "2022.4.2.1", "3.0.0", ["Tesla T4"], 200, 0),
    ("vecadd_rtx3060_nsys2025.5.sqlite", "2025.5.2.266", "3.24.0", ["NVIDIA GeForce RTX 3060"],
     1, 0),
    ("gtls_rtx3060_nsys2023.1.sqlite", "2023.1.2.43", "3.1.2", ["NVIDIA GeForce RTX 3060"],
     23419, 0),
])
def test_info(name, version, schema, gpus, kernels, nvtx, fx):
    info = ask("info", [fx(name)]).obj
    assert (info["nsys_version"], info["schema_version"], info["gpus"]) == (version, schema, gpus)
    assert (info["kernel_count"], info["nvtx_range_count"]) == (kernels, nvtx)


def test_old_exports_say_where_the_version_guess_comes_from(fx):
    info = ask("info", [fx("ompoffload_v100_aarch64_pre2021.2.sqlite")]).obj
    assert "older than 2021.2" in info["version_source"]


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


def test_nvfuser_mostly_unattributed(fx):
    export = fx("nvfuser_h100_nsys2024.6.sqlite")
    rows = ask("nvtx-kernels", [export]).rows
    inside = sum(r["kernel_instances"] for r in rows if r["range"] is not None and
                 r["range"] == "KernelExecutor::runFusion")
    outside = sum(r["kernel_instances"] for r in rows if r["range"] is None)
    assert (inside, outside) == (2, 17)


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


def test_old_schema_truncated_names(fx):
    rows = ask("kernels", [fx("ompoffload_v100_aarch64_pre2021.2.sqlite")]).rows
    assert [r["instances"] for r in rows] == [2404, 15]
    assert rows[0]["name"].endswith("...") and rows[0]["total_ns"] == 2527853625


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


def test_fastvideo_dominant_per_operator(fx):
    export = fx("fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite")
    rows = {r["range"]: r for r in ask("dominant", [export], merge_op_ids=True).rows}
    linear = rows["aten::linear"]
    assert linear["kernel"] == rows[None]["kernel"] and linear["category"] == "gemm"
    ranges = {r["range"]: r for r in ask("ranges", [export], merge_op_ids=True).rows}
    assert ranges["aten::linear"]["instances"] == linear["range_instances"]
    assert linear["share_pct"] == 70.9
