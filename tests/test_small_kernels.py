"""The kernel summary of a small export in plain Python (reports.kernel_summary,
nsys_parsers.kernel_groups): the same rows as the numpy path on every fixture, the same
statistics, and an answer that never loads numpy."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import nsys_parsers.kernel_groups as kg
from nsys_parsers.export import open_export
from nsys_parsers.schema import KERNEL_TABLE, NAME_KINDS
from reports.analysis import ExportAnalysis
from reports.common import duration_stats, group_stats, r1, r1_array
from reports.kernel_summary import small_kernel_report, small_kernel_rows
from reports.options import AnalysisOptions
from tests.conftest import ALL_SQLITE

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"


@pytest.mark.parametrize("name", ALL_SQLITE)
def test_small_path_equals_numpy_path(name, fx, monkeypatch):
    """Every fixture with kernels, every name kind: the plain-Python rows and notes equal the
    numpy path's (forced by SMALL_KERNELS = -1) value for value; without the cache too."""
    with open_export(fx(name)) as export:
        if not export.has_table(KERNEL_TABLE):
            pytest.skip("no kernels")
        n = kg.kernel_rows(export)
    assert 0 < n <= kg.SMALL_KERNELS
    for kind in NAME_KINDS:
        with ExportAnalysis(fx(name), name_kind=kind) as a:
            small = a.kernels()
        monkeypatch.setattr(kg, "SMALL_KERNELS", -1)
        with ExportAnalysis(fx(name), name_kind=kind, cache=False) as a:
            big = a.kernels()
        monkeypatch.undo()
        assert small.rows == big.rows and small.notes == big.notes, (name, kind)
        assert sum(r["instances"] for r in small.rows) <= n


def test_small_kernel_report_is_the_analysis_answer(fx, monkeypatch):
    """What the CLI asks first (no analysis module) equals ExportAnalysis.kernels, --top
    included; None for a large export or with --within, so the CLI asks the analysis."""
    path = fx(FASTVIDEO)
    options = AnalysisOptions(name_kind="short")
    with ExportAnalysis(path, options) as a:
        assert small_kernel_report(path, options, top=5).rows == a.kernels(top=5).rows
    assert small_kernel_report(path, AnalysisOptions(within="x")) is None
    monkeypatch.setattr(kg, "SMALL_KERNELS", 40)  # fastvideo has 5,384 kernels
    assert small_kernel_report(path, options) is None
    with open_export(path) as export:
        assert small_kernel_rows(export, "short", None) is None


def test_duration_stats_equal_group_stats():
    """Total, mean, median, min and max are the same float operations as numpy's; the
    variance is exact where numpy's is rounded, so the shown stddev (0.1 ns) is equal."""
    rnd = random.Random(11)
    groups, values = [], []
    for g in range(3000):
        n = rnd.choice([1, 2, 3, 7, 50, 1000])
        lo, hi = rnd.choice([(0, 10), (1000, 1100), (0, 10**6), (10**9, 10**9 + 10**7)])
        groups += [g] * n
        values += [rnd.randint(lo, hi) for _ in range(n)]
    st = group_stats(np.array(groups), np.array(values), 3000)
    by_group: dict[int, list[int]] = {}
    for g, v in zip(groups, values):
        by_group.setdefault(g, []).append(v)
    for g, vs in by_group.items():
        assert duration_stats(sorted(vs)) == st.row(g), (g, vs[:10])


def test_group_stats_with_a_32_bit_key_equal_duration_stats():
    """Groups x value span below 2**32 (kernel durations: the packed key is sorted as
    uint32), with negative values, empty groups and single values: the plain reference."""
    rnd = random.Random(12)
    groups, values = [], []
    for g in range(0, 4000, 2):  # odd groups stay empty
        n = rnd.choice([1, 2, 5, 40])
        groups += [g] * n
        values += [rnd.randint(-500, 200_000) for _ in range(n)]
    assert 4000 * (max(values) - min(values) + 1) < 2**32
    st = group_stats(np.array(groups), np.array(values), 4000)
    by_group: dict[int, list[int]] = {}
    for g, v in zip(groups, values):
        by_group.setdefault(g, []).append(v)
    for g in range(4000):
        if g in by_group:
            assert duration_stats(sorted(by_group[g])) == st.row(g), g
        else:
            assert st.row(g) == dict.fromkeys(st.row(g), 0) and st.count[g] == 0


def test_r1_is_r1_array():
    rnd = random.Random(5)
    xs = [0.0, -0.0, 0.05, -0.05, 0.15, 1.25, -1.25, 2.5, 1e17, 1e300, float("inf"),
          0.04999999999999999] + [rnd.uniform(-1e7, 1e7) for _ in range(20000)] + [
          rnd.randint(0, 10**6) / 20 for _ in range(20000)]
    assert [repr(r1(x)) for x in xs] == [repr(float(v)) for v in r1_array(np.array(xs))]
    assert repr(r1(float("nan"))) == "nan"


def test_small_export_answers_without_numpy(fx):
    """`nsys-mine kernels` on a small export loads neither numpy nor the analysis module
    (numpy's import alone took 0.13 s of a 0.4 s answer)."""
    code = ("import json, sys; from profile_cli.app import main\n"
            f"args = ['kernels', {str(fx(DLPROF))!r}, '--format', 'json']\n"
            "try: main(args)\nexcept SystemExit: pass\n"
            "print(json.dumps(sorted(m for m in ('numpy', 'reports.analysis', "
            "'nsys_parsers.fetch') if m in sys.modules)), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stderr.strip().splitlines()[-1]) == []
    rows = json.loads(proc.stdout)
    assert len(rows) == 26 and rows[0]["category"] == "gemm" and rows[0]["time_pct"] > 0
