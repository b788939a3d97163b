"""``diff``: run-to-run verdicts per range and kernel, the noise model behind them, and
comparability checks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from reports.stats import judge, mann_whitney_p
from tests.synth import slowed_copy

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
NVFUSER = "nvfuser_h100_nsys2024.6.sqlite"
NO_NVTX = "gtls_rtx3060_nsys2023.1.sqlite"  # kernels, no NVTX_EVENTS table


SLOW_RANGE = "aten::_softmax"  # its kernel family (softmax_warp_forward) runs nowhere else


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


def test_diff_note_when_no_range_or_kernel_is_in_both(cli, fx):
    res = cli("diff", fx(NO_NVTX), fx(DLPROF), "-f", "md")
    assert res.exit_code == 0
    assert "overall: " in res.stdout and "rows:  (" not in res.stdout
    assert "no range or kernel in both exports" in res.stdout




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
    slow = slowed_copy(fx(FASTVIDEO), tmp_path / "slow.sqlite", SLOW_RANGE)
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
    text = " ".join(cli("diff", fx(DLPROF), fx(NVFUSER)).stdout.split())  # at any width
    assert "warning: GPUs differ: NVIDIA GeForce RTX 2070 SUPER vs 8 x NVIDIA H100" in text
    assert "kernel time is in kernels the other export also has" in text
    strict = cli("diff", fx(DLPROF), fx(NVFUSER), "--strict")
    assert strict.exit_code == 1 and "not comparable" in strict.stderr
