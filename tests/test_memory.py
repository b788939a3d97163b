"""``nsys-mine memory`` on CPU: peak RSS growth, the estimate columns, skipped rows."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from nvtx_model import runtime as runtime_mod  # noqa: E402
from nvtx_model.config import param_counts  # noqa: E402
from nvtx_model.memory import MEMORY_COLUMNS, profile_memory  # noqa: E402
from nvtx_model.runtime import CpuRuntime  # noqa: E402
from nvtx_model.workload import WorkloadSpec  # noqa: E402

MIB = 1024**2



def configs(**kwargs):
    base = dict(size="tiny", context="64", batch=4, warmup=1, steps=1, device="cpu", threads=1)
    return WorkloadSpec(**{**base, **kwargs}).configs()


def test_cpu_peak_rss_growth_sees_a_new_allocation():
    rt = CpuRuntime()
    rt.reset_peak()
    block = torch.ones(16 * MIB // 4 * 4)  # 64 MiB, touched
    peak = rt.peak()
    del block
    assert peak["rss_growth_bytes"] >= 60 * MIB
    assert peak["peak_allocated_bytes"] is None and peak["peak_reserved_bytes"] is None


def test_memory_rows_on_cpu():
    result = profile_memory(configs(mode="forward,train"))
    fwd, train = result.rows
    cfg = configs(mode="train")[0]
    params = param_counts(cfg.model)["total"]
    for row in (fwd, train):
        assert list(row) == MEMORY_COLUMNS
        assert row["status"] == "ok" and row["measured"] == "cpu rss growth"
        assert row["params_bytes"] == 4 * params
        assert row["snapshot"] is None and row["peak_allocated_bytes"] is None
        # the peak: the end of the forward pass, or the optimizer step (with AdamW's temporary)
        assert row["total_est_bytes"] == row["params_bytes"] + row["optimizer_bytes"] + max(
            row["activations_est_bytes"], row["grads_bytes"] + row["optimizer_temp_bytes"])
    assert fwd["grads_bytes"] == fwd["optimizer_bytes"] == fwd["optimizer_temp_bytes"] == 0
    assert fwd["est_peak_at"] == "forward end"
    assert train["grads_bytes"] == 4 * params and train["optimizer_bytes"] == 8 * params
    assert train["optimizer_temp_bytes"] == 4 * params  # adamw auto: foreach on a GPU
    assert train["est_peak_at"] == "forward end"  # tiny: the logits outweigh the parameters
    # a training step allocates gradients and saves activations (tens of MiB here), and the
    # measured growth is of the order of the estimate (gradients + activations)
    expected = train["grads_bytes"] + train["activations_est_bytes"]
    assert 0.5 * expected < train["rss_growth_bytes"] < 3 * expected
    assert fwd["rss_growth_bytes"] < train["rss_growth_bytes"]


def test_skipped_rows_keep_the_estimate(monkeypatch):
    monkeypatch.setattr(runtime_mod, "mem_available_bytes", lambda *a: 1024)
    (row,) = profile_memory(configs(mode="train")).rows
    assert row["status"] == "skipped" and "estimated footprint" in row["note"]
    assert row["optimizer_bytes"] > 0 and row["total_est_bytes"] > 1024
    assert row["rss_growth_bytes"] is None and row["measured"] is None


def test_rss_unavailable_is_said(monkeypatch, tmp_path):
    monkeypatch.setattr(runtime_mod, "CLEAR_REFS", tmp_path / "missing" / "clear_refs")
    (row,) = profile_memory(configs(mode="forward", context="16")).rows
    assert row["status"] == "ok" and row["rss_growth_bytes"] is None
    assert row["note"].startswith("peak RSS unavailable")


def test_memory_command_json_and_table(cli, tmp_path):
    out = cli("memory", "--size", "tiny", "--context", "32", "--mode", "forward,train",
              "--device", "cpu", "--format", "json")
    assert out.exit_code == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["mode"] for r in rows] == ["forward", "train"]
    assert set(rows[0]) == set(MEMORY_COLUMNS)
    assert all(r["rss_growth_bytes"] > 0 for r in rows)

    out = cli("memory", "--size", "tiny", "--context", "32", "--mode", "train", "--device", "cpu",
              "--db", str(tmp_path / "r.db"))
    assert out.exit_code == 0, out.stderr
    assert "MiB" in out.stdout and "Peak memory per config" in out.stdout
    assert "cpu: rss_growth is the peak RSS growth" in out.stdout
    assert "rows appended to the results database as run 1" in out.stdout
    import sqlite_utils

    db = sqlite_utils.Database(tmp_path / "r.db")
    assert db["memory"].count == 1 and db["runs"].count == 1
    assert db["memory"].columns_dict["rss_growth_bytes"] is int
