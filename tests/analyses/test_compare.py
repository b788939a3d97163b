"""``compare``: kernel mixes of two ranges or two exports, side by side."""

from __future__ import annotations

import json

import pytest

from reports.families import kernel_family

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
NVFUSER = "nvfuser_h100_nsys2024.6.sqlite"
CENTERFORMER = "centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"


def test_kernel_families():
    assert kernel_family("ampere_sgemm_128x64_nn") == kernel_family("ampere_sgemm_64x64_nn")
    assert kernel_family("void at::native::vectorized_elementwise_kernel<4, at::native::"
                         "CUDAFunctor_add<float>, at::detail::Array<char *, 3>>(int, T2, T3)") \
        == "at::native::vectorized_elementwise_kernel"
    assert kernel_family("triton_poi_fused_add_0") == "triton_poi_fused_add"
    assert kernel_family("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32") != \
        kernel_family("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8")


def _compare(cli, *args):
    res = cli("compare", *args, "-f", "json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


def test_compare_two_ranges_of_one_export(cli, fx):
    rows = _compare(cli, fx(DLPROF), "--range", "aten::conv2d", "--vs-range", "aten::add_")
    cats = [r for r in rows if r["level"] == "category"]
    assert sum(r["a_share_pct"] or 0 for r in cats) == pytest.approx(100, abs=0.2)
    assert sum(r["b_share_pct"] or 0 for r in cats) == pytest.approx(100, abs=0.2)
    by = {r["key"]: r for r in cats}
    assert by["gemm"]["a_share_pct"] == 98.0 and by["gemm"]["only_in"] == "a"
    assert by["elementwise"]["b_share_pct"] == 100.0 and by["elementwise"]["ratio"] == 1.0
    kern = {r["key"]: r for r in rows if r["level"] == "kernel"}
    sgemm = kern["cudnn::detail::implicit_convolve_sgemm"]
    assert sgemm["a_total_ns"] == 51_840 and sgemm["a_per_instance"] == 3.0  # 6 calls / 2
    assert sgemm["a_name"].startswith("void cudnn::detail::implicit_convolve_sgemm<")
    assert set(rows[0]) >= {"level", "key", "a_share_pct", "b_share_pct", "a_total_ns",
                            "b_total_ns", "a_per_instance", "b_per_instance",
                            "delta_share_pct", "ratio"}


def test_compare_two_exports_and_the_whole_export(cli, fx, tmp_path):
    same = _compare(cli, fx(FASTVIDEO), fx(FASTVIDEO), "--range", "aten::mm")
    assert all(r["delta_share_pct"] == 0 and r["only_in"] is None for r in same)
    assert {r["ratio"] for r in same if r["ratio"] is not None} == {1.0}
    # a whole export with NVTX ranges: kernels launched outside every range are their own row
    whole = _compare(cli, fx(NVFUSER), fx(NVFUSER))
    cats = {r["key"]: r for r in whole if r["level"] == "category"}
    assert "(no range)" in cats and cats["(no range)"]["a_share_pct"] > 50
    assert sum(r["a_share_pct"] for r in cats.values()) == pytest.approx(100, abs=0.3)


def test_compare_cpu_only_captures_by_range_time(cli, fx, cpu_profile):
    rows = _compare(cli, fx(CENTERFORMER), "--range", "transformer_forward", "--vs-range",
                    "find_centers")
    assert {r["level"] for r in rows} == {"range"}
    res = cli("compare", cpu_profile, "--range", "forward", "--vs-range", "step")
    assert res.exit_code == 0 and "CPU-only" in res.stdout.replace("\n", " ")
    rows = _compare(cli, cpu_profile, "--range", "forward", "--vs-range", "step")
    by = {r["key"]: r for r in rows}
    assert by["forward"]["a_share_pct"] > 0 and by["backward"]["only_in"] == "b"
    assert by["step"]["b_per_instance"] == 1.0 and by["attention"]["a_per_instance"] == 2.0


def test_compare_needs_two_sides(cli, fx):
    res = cli("compare", fx(DLPROF))
    assert res.exit_code == 1 and res.stderr.startswith("Error: compare needs two sides")
