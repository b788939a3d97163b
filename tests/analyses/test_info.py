"""``info``: versions, GPUs and counts of every real export."""

from __future__ import annotations

import pytest

from reports.pipeline.ask import ask


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
