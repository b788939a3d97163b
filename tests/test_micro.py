"""Micro-benchmarks: exponent fitting on synthetic timings, config grids, real tiny runs."""

from __future__ import annotations

import math

import pytest

from nsys_parsers.errors import BadOption
from nvtx_model.micro_config import (
    MLP_BASE,
    MLP_PARAMS,
    MatmulConfig,
    MicroSpec,
    fit_exponent,
    mlp_configs,
)


@pytest.mark.parametrize("exponent, coeff", [(3.0, 2e-12), (1.0, 0.5), (2.0, 1e-6), (0.5, 7.0)])
def test_fit_recovers_exact_power_laws(exponent, coeff):
    xs = [256, 512, 1024, 2048, 4096]
    k, c = fit_exponent(xs, [coeff * x**exponent for x in xs])
    assert k == pytest.approx(exponent, abs=1e-12)
    assert c == pytest.approx(coeff, rel=1e-9)


def test_fit_is_least_squares_on_log_log():
    # log2 y = 0, 1, 3 at log2 x = 0, 1, 2: least-squares slope 1.5 (in any log base)
    assert fit_exponent([1, 2, 4], [1, 2, 8])[0] == pytest.approx(1.5)
    assert fit_exponent([5], [1.0]) is None  # one point: no slope
    assert fit_exponent([5, 5], [1.0, 2.0]) is None  # one distinct x
    assert fit_exponent([1, 2, 4], [1.0, 0.0, None])  is None  # non-positive times dropped


def test_annotate_exponents_per_series_only_ok_rows():
    pytest.importorskip("torch")
    from nvtx_model.micro import annotate_exponents

    rows = [{"param": p, "value": v, "mean_s": t, "status": s} for p, v, t, s in [
        ("num_steps", 2, 1.0, "ok"), ("num_steps", 4, 2.0, "ok"), ("num_steps", 8, 4.0, "ok"),
        ("dim", 256, 1.0, "ok"), ("dim", 512, 4.0, "ok"), ("dim", 1024, None, "skipped"),
        ("num_layers", 4, 1.0, "ok")]]
    exps = annotate_exponents(rows, lambda r: r["param"], "value")
    assert exps == {"num_steps": pytest.approx(1.0), "dim": pytest.approx(2.0),
                    "num_layers": None}
    assert [r["exponent"] for r in rows[:3]] == [pytest.approx(1.0)] * 3
    assert rows[5]["exponent"] == pytest.approx(2.0) and rows[5]["local_exponent"] is None
    assert [r["local_exponent"] for r in rows[:5]] == [None, pytest.approx(1.0),
                                                       pytest.approx(1.0), None,
                                                       pytest.approx(2.0)]


def test_mlp_grid_scales_one_parameter_at_a_time():
    configs = mlp_configs(MLP_PARAMS, [1, 2, 3, 4, 5], MLP_BASE, ["fp32"], device="cpu")
    assert len(configs) == 20
    dims = [c for c in configs if c.param == "dim"]
    assert [(c.value, c.dim, c.num_layers, c.batch_size, c.num_steps) for c in dims] == [
        (256 * s, 256 * s, 4, 256, 2) for s in range(1, 6)]
    steps = [c.value for c in configs if c.param == "num_steps"]
    assert steps == [2, 4, 6, 8, 10]
    assert configs[0].flops == 3 * 2 * 256 * 256**2 * 4 * 2


def test_matmul_configs_and_bad_values():
    spec = MicroSpec(precision="fp32,bf16", device="cpu", runs=2)
    configs = spec.matmul_configs("64,128")
    assert [(c.precision, c.dim) for c in configs] == [("fp32", 64), ("fp32", 128),
                                                       ("bf16", 64), ("bf16", 128)]
    assert configs[0].flops == 2 * 64**3 and configs[2].bytes_needed == 3 * 64 * 64 * 2
    with pytest.raises(BadOption, match="--dims: 'x' is not a positive integer"):
        spec.matmul_configs("64,x")
    with pytest.raises(BadOption, match="--params: unknown value 'width'"):
        spec.mlp_configs("width", "1,2", MLP_BASE)
    with pytest.raises(BadOption, match="--runs must be >= 1"):
        MatmulConfig(dim=8, runs=0)


def test_matmul_and_mlp_run_on_cpu(tmp_path):
    pytest.importorskip("torch")
    import sqlite_utils

    from nvtx_model.micro import MATMUL_COLUMNS, MLP_COLUMNS, matmul_benchmark, mlp_benchmark

    spec = MicroSpec(device="cpu", warmup=1, runs=2, threads=1)
    db = tmp_path / "micro.db"
    result = matmul_benchmark(spec.matmul_configs("32,64,128"), db=db)
    assert [r["status"] for r in result.rows] == ["ok"] * 3
    for r in result.rows:
        assert list(r) == MATMUL_COLUMNS
        assert r["mean_s"] > 0 and r["repeats"] >= 1
        assert r["tflops"] == pytest.approx(2 * r["dim"] ** 3 / r["mean_s"] / 1e12)
    exponent = result.rows[0]["exponent"]
    assert math.isfinite(exponent) and {r["exponent"] for r in result.rows} == {exponent}
    stored = sqlite_utils.Database(db)["micro_matmul"]
    assert [r["exponent"] for r in stored.rows] == [pytest.approx(exponent)] * 3

    mlp = mlp_benchmark(spec.mlp_configs("num_layers,batch_size", "1,2",
                                         {"num_steps": 1, "num_layers": 1, "batch_size": 8,
                                          "dim": 16}))
    assert [(r["param"], r["value"], r["status"]) for r in mlp.rows] == [
        ("num_layers", 1, "ok"), ("num_layers", 2, "ok"), ("batch_size", 8, "ok"),
        ("batch_size", 16, "ok")]
    assert list(mlp.rows[0]) == MLP_COLUMNS and all(r["mean_s"] > 0 for r in mlp.rows)


def test_micro_skips_what_does_not_fit():
    pytest.importorskip("torch")
    from nvtx_model.micro import matmul_benchmark

    configs = MicroSpec(device="cpu", warmup=0, runs=1).matmul_configs("16,1024")
    result = matmul_benchmark(configs, memory_limit_bytes=3 * 64 * 64 * 4)
    assert [r["status"] for r in result.rows] == ["ok", "skipped"]
    assert result.rows[1]["note"] == "needs 12.0 MiB > 48.0 KiB (the given limit)"
    assert result.rows[1]["exponent"] is None  # one ok point: no fit
