"""``check``: CI rules on an export (every rule key the analyses declare), exit codes, JUnit
parsed back and the GitHub step summary; and gates that name a range of an export
without NVTX."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.synth import Synth, slowed_copy

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
NVFUSER = "nvfuser_h100_nsys2024.6.sqlite"
CENTERFORMER = "centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"
SLOW_RANGE = "aten::_softmax"  # its kernel family (softmax_warp_forward) runs nowhere else


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
    for command in ("gpus", "gaps", "ranks"):  # windows of --within (AssertionError before)
        res = cli(command, export, "--within", "step")
        assert res.exit_code == 1, command
        assert res.stderr == (f"Error: {NO_NVTX}: no NVTX_EVENTS table for NVTX range 'step': "
                              "NVTX was not traced (or the program emitted no NVTX ranges): "
                              "profile with `nsys profile --trace=nvtx` and instrument the "
                              "code with NVTX ranges.\n"), (command, res.stderr)
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nrange = "aten::mm"\nmin_instances = 1\n'
                     '[[rule]]\nmax_gpu_ns_per_instance = 1e12\n')
    res = cli("check", export, "--rules", rules, "-f", "json")
    assert res.exit_code == 3, res.stderr
    rows = json.loads(res.stdout)
    assert [r["status"] for r in rows] == ["fail", "pass"]
    assert "no NVTX_EVENTS table" in rows[0]["message"]


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
    slow = slowed_copy(fx(FASTVIDEO), tmp_path / "slow.sqlite", SLOW_RANGE)
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


def test_check_gates_on_cuda_graphs(cli, fx, tmp_path):
    """A CI gate on a compiled model: the graph dominates and holds nearly all GPU time."""
    rules = _rules(tmp_path, """\
[[rule]]
name = "the graph dominates"
dominant_category = "cuda graph"

[[rule]]
category = "cuda graph"
min_share_pct = 99
""")
    res = cli("check", fx("cs336_zx3xyy_result_2_7B_compile_ro.sqlite"), "--rules", rules,
              "-f", "json")
    assert res.exit_code == 0, res.stdout + res.stderr
    rows = json.loads(res.stdout)
    assert [(r["status"], r["observed"]) for r in rows] == [("pass", "cuda graph"),
                                                           ("pass", 100.0)]
    assert rows[0]["message"] == "dominant kernel CUDA graph 4 (cuda graph, 100%)"
