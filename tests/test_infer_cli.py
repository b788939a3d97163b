"""``nsys-mine infer``, ``micro matmul`` and ``micro mlp`` through the CLI on CPU: rows, files,
plots that are not blank, the results database, and bad input as ``Error: ...`` exit 1."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

INFER = ["infer", "--size", "tiny", "--vocab", "128", "--device", "cpu", "--threads", "1",
         "--batch-sizes", "1,2", "--input-lengths", "8,24", "--output-length", "4", "--runs",
         "2", "--warmup", "1"]


def assert_png_not_blank(path: Path) -> None:
    """A real plot: many colours, and a visible share of non-white pixels."""
    import numpy as np
    from matplotlib.image import imread

    img = imread(path)[..., :3]
    rgb = (img * 255).astype(np.uint32)
    colours = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    ink = (img.min(axis=-1) < 0.9).mean()
    assert len(colours) > 20, f"{path.name}: {len(colours)} colours"
    assert 0.03 < ink < 0.97 and img.std() > 0.05, f"{path.name}: ink {ink:.3f}"


def test_infer_json_files_plots_and_db(tmp_path, cli):
    out = tmp_path / "res"
    db = tmp_path / "results.db"
    res = cli(*INFER, "--max-batch-input-product", "40", "--out-dir", out, "--db", db,
              "--format", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["batch"], r["input_length"], r["output_length"], r["status"]) for r in rows] == [
        (1, 8, 4, "ok"), (1, 24, 4, "ok"), (2, 8, 4, "ok"), (2, 24, 4, "skipped")]
    assert rows[3]["note"] == "batch 2 x input 24 = 48 tokens > --max-batch-input-product 40"
    for key in ("prefill_s", "decode_s", "decode_per_token_s", "itl_p50_s", "itl_p90_s",
                "itl_p99_s", "total_s", "tokens_per_s", "prefill_std_s", "rss_growth_bytes"):
        assert rows[0][key] is not None and rows[0][key] >= 0, key
    names = sorted(p.name for p in out.iterdir())
    stamp = names[0].split(".")[0]
    assert names == sorted(f"{stamp}{s}" for s in (
        ".json", ".csv", "_latency.png", "_throughput.png", "_batch_scaling.png",
        "_input_scaling.png", "_breakdown.png", "_memory.png", "_report.md"))
    assert json.loads((out / f"{stamp}.json").read_text()) == rows
    with (out / f"{stamp}.csv").open() as fh:
        assert [r["status"] for r in csv.DictReader(fh)] == ["ok", "ok", "ok", "skipped"]
    for png in out.glob("*.png"):
        assert_png_not_blank(png)
    report = (out / f"{stamp}_report.md").read_text()
    assert report.startswith("# Inference latency report")
    assert "3 of 4 configs ran, 1 skipped." in report
    assert ("- batch 2, input 24 (tiny, fp32): skipped: batch 2 x input 24 = 48 tokens > "
            "--max-batch-input-product 40\n") in report
    assert f"![Latency over the grid (tiny, fp32, naive attention, greedy)]({stamp}_latency.png)" \
        in report
    assert "**TPOT** (`decode_per_token_s`)" in report and "## Findings" in report
    import sqlite_utils

    stored = sqlite_utils.Database(db)["infer"]
    assert stored.count == 4 and {r["status"] for r in stored.rows} == {"ok", "skipped"}


def test_infer_markdown_table_and_no_save(tmp_path, cli, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = cli(*INFER, "--no-save", "--format", "md", "--temperature", "0.7", "--top-p", "0.9")
    assert res.exit_code == 0, res.stderr
    text = res.stdout
    assert text.startswith("### Inference latency per config\n\nsize tiny, precision fp32, "
                           "attention naive, sampling temperature 0.7, top-p 0.9, "
                           "output_length 4, device cpu, threads 1, nvtx off, warmup 1, runs 2 (")
    assert "grid: preset quick_test with --batch-sizes, --input-lengths, --output-length; " \
           "max_batch_input_product 131072" in text
    header = next(line for line in text.splitlines() if line.startswith("| batch"))
    assert [c.strip() for c in header.strip("|").split("|")][:5] == [
        "batch", "input_length", "prefill_s", "decode_per_token_s", "itl_p50_s"]
    assert " ms |" in text or " µs |" in text
    row = next(line for line in text.splitlines() if line.startswith("| 1 | 8 |"))
    tokens_per_s = row.split("|")[9].strip()
    assert tokens_per_s.replace(",", "").replace(".", "").isdigit()  # a rate, not "12 s"
    assert not (tmp_path / "infer_results").exists()


def test_micro_matmul_cli(tmp_path, cli):
    res = cli("micro", "matmul", "--device", "cpu", "--dims", "16,32,64", "--runs", "2",
              "--warmup", "1", "--threads", "1", "--out-dir", tmp_path, "--format", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["dim"] for r in rows] == [16, 32, 64]
    assert all(set(r) >= {"dim", "mean_s", "std_s", "tflops", "exponent"} for r in rows)
    assert len({r["exponent"] for r in rows}) == 1 and rows[0]["exponent"] is not None
    pngs = list(tmp_path.glob("matmul_*.png"))
    assert len(pngs) == 1 and len(list(tmp_path.glob("matmul_*.json"))) == 1
    assert_png_not_blank(pngs[0])
    table = cli("micro", "matmul", "--device", "cpu", "--dims", "16,32", "--runs", "1",
                "--no-save", "--format", "md")
    assert "fitted exponent k of time ~ dim^k (least squares on log-log): fp32 " in table.stdout
    assert "| dim | repeats | mean_s |" in table.stdout


def test_micro_mlp_cli_a_plot_per_parameter(tmp_path, cli):
    res = cli("micro", "mlp", "--device", "cpu", "--base-dim", "16", "--base-batch", "8",
              "--base-layers", "1", "--base-steps", "1", "--scales", "1,3", "--runs", "2",
              "--warmup", "1", "--threads", "1", "--out-dir", tmp_path, "--format", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["param"], r["value"]) for r in rows] == [
        (p, b * s) for p, b in (("num_steps", 1), ("num_layers", 1), ("batch_size", 8),
                                ("dim", 16)) for s in (1, 3)]
    assert all({"param", "value", "mean_s", "std_s", "exponent"} <= set(r) for r in rows)
    for param in ("num_steps", "num_layers", "batch_size", "dim"):
        exps = {r["exponent"] for r in rows if r["param"] == param}
        assert len(exps) == 1 and None not in exps
        (png,) = tmp_path.glob(f"mlp_*_{param}.png")
        assert_png_not_blank(png)


@pytest.mark.parametrize("args, message", [
    (["infer", "--preset", "huge"], "unknown preset 'huge'"),
    (["infer", "--grid", "missing.json"], "grid file missing.json does not exist"),
    (["infer", "--preset", "quick_test", "--grid", "g.toml"], "either --preset or --grid"),
    (["infer", "--top-p", "0.5"], "--top-p samples from the top tokens"),
    (["infer", "--size", "tiny", "--model", "hf:/no/such/model"], "--model hf:PATH brings"),
    (["micro", "matmul", "--dims", "0"], "--dims: '0' is not a positive integer"),
    (["micro", "mlp", "--params", "depth"], "--params: unknown value 'depth'"),
    (["micro", "mlp", "--precision", "fp8"], "--precision: unknown value 'fp8'"),
])
def test_bad_input_is_one_error_line(tmp_path, cli, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    res = cli(*args)
    assert res.exit_code == 1
    assert res.stderr.startswith("Error: ") and message in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_bad_grid_file_contents(tmp_path, cli):
    grid = tmp_path / "grid.toml"
    grid.write_text("batch_sizes = 4\ninput_lengths = [16]\noutput_length = 'x'\n")
    res = cli("infer", "--grid", grid, "--size", "tiny")
    assert res.exit_code == 1
    assert res.stderr == (f"Error: grid file {grid}: output_length must be an integer >= 1, "
                          "got 'x'\n")


def test_help_lists_the_new_commands(cli):
    top = cli("--help").stdout
    assert "infer" in top and "micro" in top
    micro = cli("micro", "--help").stdout
    assert "matmul" in micro and "mlp" in micro
    infer = cli("infer", "--help").stdout
    for option in ("--preset", "--grid", "--batch-sizes", "--input-lengths", "--output-length",
                   "--runs", "--warmup", "--max-batch-input-product", "--temperature",
                   "--top-p", "--out-dir", "--db", "--size", "--precision", "--device"):
        assert option in infer, option


def test_ctrl_c_keeps_finished_rows_and_their_files(tmp_path, cli, monkeypatch):
    import nvtx_model.infer as infer

    real, calls = infer.measure_inference, []

    def interrupted_on_the_third(cfg, *args):
        calls.append(cfg)
        if len(calls) == 3:
            raise KeyboardInterrupt
        real(cfg, *args)

    monkeypatch.setattr(infer, "measure_inference", interrupted_on_the_third)
    res = cli(*INFER, "--out-dir", tmp_path, "--format", "json")
    assert res.exit_code == 130
    rows = json.loads(res.stdout)
    assert [(r["batch"], r["input_length"]) for r in rows] == [(1, 8), (1, 24)]
    (saved,) = tmp_path.glob("infer_*.json")
    assert json.loads(saved.read_text()) == rows
    assert ("2 of 4 configs ran. Interrupted (Ctrl-C) after 2 configs: the rest did not run."
            in next(tmp_path.glob("*_report.md")).read_text())


def test_edge_grids_one_output_token_and_nothing_that_fits(tmp_path, cli):
    res = cli(*INFER[:-6], "--output-length", "1", "--runs", "1", "--warmup", "0",
              "--out-dir", tmp_path / "one", "--format", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert all(r["decode_per_token_s"] is None and r["itl_p99_s"] is None for r in rows)
    assert all("no decode phase" in r["note"] for r in rows)
    assert len(list((tmp_path / "one").glob("*.png"))) >= 4
    res = cli(*INFER, "--max-batch-input-product", "4", "--out-dir", tmp_path / "none")
    assert res.exit_code == 0, res.stderr
    files = sorted(p.name.split("_", 2)[-1] for p in (tmp_path / "none").iterdir())
    assert [f for f in files if f.endswith(".png")] == []  # nothing ran: nothing to plot
    report = next((tmp_path / "none").glob("*_report.md")).read_text()
    assert "0 of 4 configs ran, 4 skipped." in report
