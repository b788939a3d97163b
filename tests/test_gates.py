"""compare, diff and check on real exports (shared fixtures, and a CPU export made here under
real nsys), with every exit code, JUnit parsed back and the GitHub step summary."""

from __future__ import annotations

import json
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from reports.analyses.compare import kernel_family
from reports.session import Session
from reports.stats import judge, mann_whitney_p
from tests.synth import Synth

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
NVFUSER = "nvfuser_h100_nsys2024.6.sqlite"
CENTERFORMER = "centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"
SLOW_RANGE = "aten::_softmax"  # its kernel family (softmax_warp_forward) runs nowhere else


# -- the noise model ---------------------------------------------------------------------

def test_mann_whitney_matches_scipy():
    """p-values of scipy.stats.mannwhitneyu(..., method='asymptotic') for these samples."""
    a = np.array([1.0, 2.0, 3.0])
    b = np.array([4.0, 5.0, 6.0])
    assert mann_whitney_p(a, b) == pytest.approx(0.080856, abs=1e-6)
    x = np.arange(20, dtype=float)
    assert mann_whitney_p(x, x + 5) == pytest.approx(0.0185219, abs=1e-6)
    assert mann_whitney_p(np.full(4, 5.0), np.full(4, 5.0)) == 1.0


def test_verdict_rules():
    same = np.full(10, 100.0)
    assert judge(same, same, base_value=100, cand_value=100, threshold_pct=5,
                 alpha=0.05).verdict == "neutral"
    slower = np.linspace(150, 160, 10)
    v = judge(np.linspace(100, 110, 10), slower, base_value=105, cand_value=155,
              threshold_pct=5, alpha=0.05)
    assert v.verdict == "regression" and v.p_value < 0.001
    # past the threshold but lost in the noise
    noisy = judge(np.array([50.0, 150, 100, 60, 140]), np.array([55.0, 160, 110, 70, 150]),
                  base_value=100, cand_value=109, threshold_pct=5, alpha=0.05)
    assert noisy.verdict == "inconclusive" and noisy.p_value > 0.05
    # too few samples: inconclusive, unless 4x past the threshold
    assert judge(np.array([100.0]), np.array([110.0]), base_value=100, cand_value=110,
                 threshold_pct=5, alpha=0.05).verdict == "inconclusive"
    far = judge(np.array([100.0]), np.array([130.0]), base_value=100, cand_value=130,
                threshold_pct=5, alpha=0.05)
    assert far.verdict == "regression" and far.p_value is None
    assert judge(np.array([100.0]), np.array([70.0]), base_value=100, cand_value=70,
                 threshold_pct=5, alpha=0.05).verdict == "improvement"


def test_kernel_families():
    assert kernel_family("ampere_sgemm_128x64_nn") == kernel_family("ampere_sgemm_64x64_nn")
    assert kernel_family("void at::native::vectorized_elementwise_kernel<4, at::native::"
                         "CUDAFunctor_add<float>, at::detail::Array<char *, 3>>(int, T2, T3)") \
        == "at::native::vectorized_elementwise_kernel"
    assert kernel_family("triton_poi_fused_add_0") == "triton_poi_fused_add"
    assert kernel_family("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32") != \
        kernel_family("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8")


# -- compare -------------------------------------------------------------------------------

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


NO_NVTX = "gtls_rtx3060_nsys2023.1.sqlite"  # kernels, no NVTX_EVENTS table


def test_gates_that_name_a_range_of_an_export_without_nvtx(cli, fx, tmp_path):
    """A range named on an export traced without NVTX: one `Error:` line that says how to
    trace NVTX (compare, diff, --within), or a failed rule with that message (check). These
    were Python tracebacks (AssertionError)."""
    export = fx(NO_NVTX)
    for args in (("compare", export, "--range", "aten::mm", "--vs-range", "step"),
                 ("compare", export, fx(DLPROF), "--range", "aten::mm"),
                 ("diff", export, export, "--scope", "aten::mm")):
        res = cli(*args)
        assert res.exit_code == 1, args
        assert res.stderr.startswith("Error: ") and res.stderr.count("\n") == 1, res.stderr
        assert "no NVTX_EVENTS table" in res.stderr and "--trace=nvtx" in res.stderr
    for command in ("kernels", "dominant", "compare"):  # --within a range: the same
        res = cli(command, export, "--within", "step", *(
            ["--range", "x", "--vs-range", "y"] if command == "compare" else []))
        assert res.exit_code == 1, command
        assert res.stderr.startswith("Error: cannot restrict to range 'step': the export has "
                                     "no NVTX ranges") and "--trace=nvtx" in res.stderr
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nrange = "aten::mm"\nmin_instances = 1\n'
                     '[[rule]]\nmax_gpu_ns_per_instance = 1e12\n')
    res = cli("check", export, "--rules", rules, "-f", "json")
    assert res.exit_code == 3, res.stderr
    rows = json.loads(res.stdout)
    assert [r["status"] for r in rows] == ["fail", "pass"]
    assert "no NVTX_EVENTS table" in rows[0]["message"]


def test_diff_note_when_no_range_or_kernel_is_in_both(cli, fx):
    res = cli("diff", fx(NO_NVTX), fx(DLPROF), "-f", "md")
    assert res.exit_code == 0
    assert "overall: " in res.stdout and "rows:  (" not in res.stdout
    assert "no range or kernel in both exports" in res.stdout


# -- diff ------------------------------------------------------------------------------------

def _slowed_copy(src: Path, dst: Path, range_name: str, factor: float = 1.5) -> Path:
    """A copy whose kernels launched (innermost) in ``range_name`` run ``factor`` x longer."""
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


def _diff(cli, *args):
    res = cli("diff", *args, "-f", "json")
    assert res.exit_code in (0, 3), res.stderr
    return res, json.loads(res.stdout)


def test_diff_of_an_export_with_itself_is_neutral(cli, fx, cpu_profile):
    for export in (fx(FASTVIDEO), fx(DLPROF), cpu_profile):
        res, rows = _diff(cli, export, export, "--fail-on", "regression")
        assert res.exit_code == 0
        assert {r["verdict"] for r in rows} == {"neutral"}, export.name
        assert rows[0]["level"] == "overall"
    _, rows = _diff(cli, cpu_profile, cpu_profile)
    assert rows[0]["key"] == "step" and rows[0]["base_instances"] == 4  # CPU time per step
    _, rows = _diff(cli, cpu_profile, cpu_profile, "--within", "measure")
    assert rows[0]["base_instances"] == 3  # the measured steps only


def test_diff_finds_the_slowed_range_and_its_kernels_only(cli, fx, tmp_path):
    slow = _slowed_copy(fx(FASTVIDEO), tmp_path / "slow.sqlite", SLOW_RANGE)
    res, rows = _diff(cli, fx(FASTVIDEO), slow, "--top", "0")
    regressions = {(r["level"], r["key"]) for r in rows if r["verdict"] == "regression"}
    assert regressions == {("range", SLOW_RANGE), ("kernel", "softmax_warp_forward")}
    slow_range = next(r for r in rows if r["key"] == SLOW_RANGE)
    assert slow_range["change_pct"] == pytest.approx(50, abs=0.5)
    assert slow_range["p_value"] < 0.05
    others = [r for r in rows if (r["level"], r["key"]) not in regressions
              and r["level"] != "overall"]
    assert others and {r["verdict"] for r in others} == {"neutral"}
    # the overall row (all kernel time) moved less than the threshold
    assert rows[0]["verdict"] == "neutral" and 0 < rows[0]["change_pct"] < 5
    assert cli("diff", fx(FASTVIDEO), slow, "--fail-on", "regression").exit_code == 0
    # scoped to the slowed range, the overall verdict is a regression: exit 3
    res, rows = _diff(cli, fx(FASTVIDEO), slow, "--scope", SLOW_RANGE, "--fail-on",
                      "regression")
    assert res.exit_code == 3 and rows[0]["key"] == SLOW_RANGE
    assert rows[0]["verdict"] == "regression" and rows[0]["change_pct"] == pytest.approx(50, 0.01)


def test_diff_says_when_exports_are_not_comparable(cli, fx):
    text = cli("diff", fx(DLPROF), fx(NVFUSER)).stdout.replace("\n", " ")
    assert "warning: GPUs differ: NVIDIA GeForce RTX 2070 SUPER vs 8 x NVIDIA H100" in text
    assert "kernel time is in kernels the other export also has" in text
    strict = cli("diff", fx(DLPROF), fx(NVFUSER), "--strict")
    assert strict.exit_code == 1 and "not comparable" in strict.stderr


# -- check -----------------------------------------------------------------------------------

RULES_OK = """
[[rule]]
range = "aten::mm"
min_instances = 100
[[rule]]
range = "aten::mm"
dominant_category = "gemm"
[[rule]]
name = "mm runs cuBLAS"
range = "aten::mm"
dominant_kernel = "^sm80_xmma_gemm"
[[rule]]
range = "aten::mm"
category = "gemm"
min_share_pct = 90
max_share_pct = 100
[[rule]]
range = "aten::mm"
max_gpu_ns_per_instance = 5e6
[[rule]]
max_gpu_ns_per_instance = 1e9
[[rule]]
range = "aten::_softmax"
max_regression_pct = 10
"""

RULES_FAIL = """
[[rule]]
range = "aten::mm"
min_instances = 1000
[[rule]]
range = "aten::mm"
dominant_category = "attention"
[[rule]]
range = "aten::mm"
dominant_kernel = "flash"
[[rule]]
range = "aten::mm"
category = "gemm"
max_share_pct = 10
[[rule]]
range = "aten::mm"
max_gpu_ns_per_instance = 1000
[[rule]]
range = "no such range"
min_instances = 1
[[rule]]
range = "aten::_softmax"
max_regression_pct = 10
"""


def _rules(tmp_path: Path, text: str, name: str = "rules.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_check_every_rule_type_passes(cli, fx, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    junit = tmp_path / "check.xml"
    res = cli("check", fx(FASTVIDEO), "--rules", _rules(tmp_path, RULES_OK), "--baseline",
              fx(FASTVIDEO), "--junit", junit, "-f", "json")
    assert res.exit_code == 0, res.stdout + res.stderr
    rows = json.loads(res.stdout)
    assert [r["status"] for r in rows] == ["pass"] * 7
    assert rows[2]["rule"] == "mm runs cuBLAS"
    assert rows[0]["observed"] == 280 and rows[3]["observed"] == 100.0
    assert set(rows[0]) == {"rule", "range", "status", "observed", "expected", "message"}
    suite = ET.parse(junit).getroot()
    assert suite.get("tests") == "7" and suite.get("failures") == "0"
    assert len(suite.findall(".//testcase")) == 7 and not suite.findall(".//failure")
    assert "**PASS**: all 7 rules passed" in summary.read_text()


def test_check_every_rule_type_fails(cli, fx, tmp_path, monkeypatch):
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    slow = _slowed_copy(fx(FASTVIDEO), tmp_path / "slow.sqlite", SLOW_RANGE)
    junit = tmp_path / "check.xml"
    res = cli("check", slow, "--rules", _rules(tmp_path, RULES_FAIL), "--baseline",
              fx(FASTVIDEO), "--junit", junit, "-f", "json")
    assert res.exit_code == 3
    rows = json.loads(res.stdout)
    assert [r["status"] for r in rows] == ["fail"] * 7
    assert "no NVTX range named 'no such range'" in rows[5]["message"]
    assert rows[6]["observed"] == pytest.approx(50, abs=0.5) and "regression" in rows[6]["message"]
    failures = ET.parse(junit).getroot().findall(".//failure")
    assert len(failures) == 7 and "attention" in ET.parse(junit).getroot().findall(
        ".//testcase")[1].get("name")
    text = summary.read_text()
    assert text.startswith("earlier step\n")  # appended, not overwritten
    assert "**FAIL**: 7 of 7 rules failed" in text


def test_check_on_a_cpu_export(cli, cpu_profile, tmp_path):
    rules = _rules(tmp_path, """
[[rule]]
range = "forward"
min_instances = 3
[[rule]]
range = "step"
max_cpu_ns_per_instance = 60e9
[[rule]]
range = "step"
max_regression_pct = 10
""")
    res = cli("check", cpu_profile, "--rules", rules, "--baseline", cpu_profile, "-f", "json")
    assert res.exit_code == 0, res.stdout + res.stderr
    assert [r["observed"] for r in json.loads(res.stdout)][0] == 4  # 1 warmup + 3 steps
    res = cli("check", cpu_profile, "--rules", rules, "--baseline", cpu_profile, "--within",
              "measure", "-f", "json")
    assert json.loads(res.stdout)[0]["observed"] == 3  # measured steps only


def test_step_summary_escapes_names(cli, tmp_path, monkeypatch):
    s = Synth()
    s.range("a|b`c <b>x</b>", 0, 1000)
    s.kernel("gemm_kernel", 100, 200, launch=(10, 20))
    export = s.write(tmp_path / "odd.sqlite")
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    rules = _rules(tmp_path, '[[rule]]\nrange = "a|b`c <b>x</b>"\nmin_instances = 2\n')
    assert cli("check", export, "--rules", rules).exit_code == 3
    text = summary.read_text()
    table_rows = [ln for ln in text.splitlines() if ln.startswith("| ❌")]
    assert len(table_rows) == 1
    row = table_rows[0]
    assert row.count("|") - row.count("\\|") == 5  # four cells, nothing broken out
    assert "a\\|b\\`c &lt;b&gt;x&lt;/b&gt;" in row


@pytest.mark.parametrize("text,fragment", [
    ("[[rule]]\nrange = 'forward'\nmin_instance = 3\n",
     "rule 1: unknown key 'min_instance' (did you mean min_instances?)"),
    ("[[rule]]\nrange = 'forward'\nmin_instances = 'three'\n",
     "rule 1: min_instances must be a whole number"),
    ("[[rule]]\nrange = 'forward'\ndominant_category = 'gemms'\n",
     "rule 1: unknown category 'gemms'"),
    ("[[rule]]\nrange = 'forward'\nmin_instances = 1\n[[rule]]\ndominant_kernel = '(('\n",
     "rule 2: dominant_kernel '((' is not a valid regular expression"),
    ("[[rule]]\nrange = 'forward'\nmin_instances = 1\ndominant_category = 'gemm'\n",
     "rule 1: one assertion per rule, found min_instances, dominant_category"),
    ("[[rule]]\nrange = 'forward'\n", "rule 1: no assertion"),
    ("[[rule]]\nmin_share_pct = 40\n", "rule 1: min_share_pct/max_share_pct need a category"),
    ("[[rule]]\ncategory = 'gemm'\nmin_share_pct = 140\n",
     "rule 1: min_share_pct must be between 0 and 100"),
    ("[[rule]\nrange = 'x'\n", "not valid TOML"),
    ("rule = 3\n", "no rules"),
    ("[[rule]]\nrange = 'forward'\nmax_regression_pct = 5\n", "needs a baseline"),
])
def test_check_rules_file_mistakes(cli, fx, tmp_path, text, fragment):
    res = cli("check", fx(DLPROF), "--rules", _rules(tmp_path, text))
    assert res.exit_code == 1, res.stdout
    assert res.stderr.startswith("Error: ") and fragment in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_check_exit_codes_for_errors_and_usage(cli, fx, tmp_path):
    ok = _rules(tmp_path, "[[rule]]\nrange = 'aten::conv2d'\nmin_instances = 1\n")
    assert cli("check", fx(DLPROF), "--rules", ok).exit_code == 0
    assert cli("check", fx(DLPROF), "--rules", tmp_path / "missing.toml").exit_code == 1
    assert cli("check", tmp_path / "missing.sqlite", "--rules", ok).exit_code == 1
    assert cli("check", fx(DLPROF)).exit_code == 2  # --rules is required
