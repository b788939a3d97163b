"""``attention``: analytic FLOPs next to measured time per attention sub-range."""

from __future__ import annotations

import json

from tests.synth import model_run

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
VECADD = "vecadd_t4_nsys2022.4.sqlite"
TINY = ["--size", "tiny", "--context", "128", "--batch", "4"]  # d_model 64, 4 heads


def test_attention_flops_and_gpu_times_exact(tmp_path, cli):
    export = model_run(tmp_path / "m.sqlite", context=128)
    res = cli("attention", export, *TINY, "--within", "measure", "-f", "json")
    assert res.exit_code == 0, res.stderr
    rows = {r["range"]: r for r in json.loads(res.stdout)}
    assert list(rows) == ["computing attention scores", "computing softmax", "final matmul",
                          "scaled dot product attention"]
    scores, soft, final, sdpa = rows.values()
    # 2 B T^2 d = 2*4*128*128*64; softmax 5 B h T^2 = 5*4*4*128*128
    assert (scores["flop"], soft["flop"], final["flop"]) == (8_388_608, 1_310_720, 8_388_608)
    assert sdpa["flop"] == 8_388_608 * 2 + 1_310_720
    # kernel time per instance: 20, 14 and 16 µs (2 layers x 2 measured steps = 4 instances)
    assert [r["instances"] for r in rows.values()] == [4, 4, 4, 4]
    assert (scores["time_per_instance_ns"], soft["time_per_instance_ns"],
            final["time_per_instance_ns"], sdpa["time_per_instance_ns"]) == (
        20_000.0, 14_000.0, 16_000.0, 50_000.0)
    assert {r["time_source"] for r in rows.values()} == {"gpu"}
    assert scores["achieved_gflops"] == round(8_388_608 / 20_000, 3)
    assert (soft["flop_pct"], soft["time_pct"]) == (7.2, 28.0)
    assert (soft["flop_ratio"], soft["time_ratio"]) == (0.156, 0.7)
    assert (scores["flop_ratio"], scores["time_ratio"]) == (1.0, 1.0)
    assert sdpa["flop_pct"] is None and sdpa["flop_ratio"] is None
    text = cli("attention", export, *TINY, "--within", "measure", "-f", "text").stdout
    assert ("computing softmax: 1.31 MFLOP and 14.000 µs per instance (GPU time); 7.2% of the "
            "attention FLOPs, 28% of its time; 0.156x the FLOPs of computing attention scores "
            "and 0.7x its time") in text
    for fmt in ("table", "md", "csv", "latex"):
        out = cli("attention", export, *TINY, "--within", "measure", "-f", fmt)
        assert out.exit_code == 0 and "computing softmax" in out.stdout, fmt


def test_attention_context_scaling_and_sidecar(tmp_path, cli):
    """The shape comes from the profile sidecar (options win); a profile export counts its
    measured steps only; the quadratic terms grow 4x with 2x the context."""
    export = model_run(tmp_path / "run.sqlite", context=256)
    config = {"size": "tiny", "d_model": 64, "heads": 4, "layers": 2, "context": 256,
              "batch": 4, "mode": "train"}
    (tmp_path / "run.json").write_text(json.dumps({"config": config}))
    rows = {r["range"]: r for r in json.loads(cli("attention", export, "-f", "json").stdout)}
    assert rows["computing attention scores"]["flop"] == 4 * 8_388_608
    assert rows["computing softmax"]["instances"] == 4  # warmup step left out
    assert rows["computing softmax"]["time_per_instance_ns"] == 56_000.0
    res = cli("attention", export, "--batch", "8", "-f", "json")
    assert json.loads(res.stdout)[0]["flop"] == 8 * 8_388_608
    notes = cli("attention", export).stdout
    assert "only the measured steps count" in notes.replace("\n", " ")


def test_attention_errors_say_what_to_do(tmp_path, cli, fx):
    export = model_run(tmp_path / "m.sqlite")
    res = cli("attention", export)
    assert res.exit_code == 1
    assert "pass --d-model, --heads, --context, --batch" in res.stderr
    res = cli("attention", fx(DLPROF), *TINY)
    assert res.exit_code == 1 and "no attention ranges" in res.stderr
    assert "--nvtx fine" in res.stderr
    res = cli("attention", fx(VECADD), *TINY)
    assert res.exit_code == 1 and "NVTX" in res.stderr
    res = cli("attention", export, "--size", "huge", "--context", "8", "--batch", "1")
    assert res.exit_code == 1 and "not a preset" in res.stderr


def test_attention_cpu_times_when_no_kernels(tmp_path):
    """Without kernels the CPU time of the ranges is used, and the rows say so."""
    from reports.analyses.attention import AttentionShape, attention_rows

    rows = [{"range": "computing attention scores", "instances": 2, "avg_ns": 4000.0,
             "gpu_inclusive_ns": 0},
            {"range": "computing softmax", "instances": 2, "avg_ns": 6000.0,
             "gpu_inclusive_ns": 0}]
    shape = AttentionShape(d_model=8, heads=2, context=4, batch=1)
    rep = attention_rows(rows, shape, gpu=False)
    assert [r["time_source"] for r in rep.rows] == ["cpu", "cpu"]
    assert [r["time_per_instance_ns"] for r in rep.rows] == [4000.0, 6000.0]
    assert [r["flop"] for r in rep.rows] == [2 * 16 * 8, 5 * 2 * 16]
    assert rep.rows[1]["time_ratio"] == 1.5 and rep.rows[1]["flop_ratio"] == 0.625
    assert "CPU time of the ranges" in rep.notes[0]
