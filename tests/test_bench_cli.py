"""``nsys-mine bench`` through the CLI: every format, --output, --db, errors, Ctrl-C."""

from __future__ import annotations

import csv
import io
import json
import sys

import pytest
from typer.testing import CliRunner

from profile_cli.app import app

torch = pytest.importorskip("torch")

FAST = ["--size", "tiny", "--vocab", "128", "--context", "16", "--batch", "2", "--warmup", "1",
        "--steps", "2", "--device", "cpu", "--threads", "1"]



def bench(*args: str):
    result = CliRunner().invoke(app, ["bench", *FAST, *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_json_rows_have_the_documented_keys():
    rows = json.loads(bench("--mode", "forward,train", "--precision", "fp32,bf16",
                            "--format", "json"))
    assert [(r["mode"], r["precision"]) for r in rows] == [
        ("forward", "fp32"), ("forward", "bf16"), ("train", "fp32"), ("train", "bf16")]
    for key in ("size", "context", "batch", "mode", "precision", "device", "attention", "warmup",
                "steps", "mean_s", "std_s", "median_s", "min_s", "forward_s", "backward_s",
                "optimizer_s", "tflops", "status"):
        assert key in rows[0]
    assert all(r["status"] == "ok" and r["mean_s"] > 0 for r in rows)
    assert rows[0]["backward_s"] is None and rows[2]["backward_s"] > 0


def test_csv_keeps_raw_seconds():
    rows = list(csv.DictReader(io.StringIO(bench("--mode", "train", "--format", "csv"))))
    assert len(rows) == 1 and float(rows[0]["mean_s"]) > 0
    assert rows[0]["mfu_pct"] == ""


def test_markdown_moves_constant_settings_into_a_sentence():
    text = bench("--mode", "forward", "--attention", "naive,sdpa", "--format", "md")
    assert text.startswith("### Step time per config\n\nbatch 2, device cpu, threads 1, "
                           "nvtx off, warmup 1, steps 2, adamw auto (")
    header = next(line for line in text.splitlines() if line.startswith("| size"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[:5] == ["size", "params", "context", "mode", "precision"]
    assert "attention" in cols  # it varies
    assert "batch" not in cols and "optimizer_s" not in cols and "mfu_pct" not in cols
    assert " ms |" in text or " µs |" in text  # seconds shown in human units
    assert "> mfu_pct needs the device's peak TFLOP/s: pass --peak-tflops" in text


def test_latex_and_table():
    latex = bench("--mode", "forward", "--format", "latex")
    assert r"\begin{tabular}" in latex and r"mean\_s" in latex and "tiny" in latex
    table = bench("--mode", "forward")
    assert "Step time per config" in table and "tiny" in table


def test_output_file(tmp_path):
    target = tmp_path / "bench.json"
    assert bench("--mode", "forward", "--format", "json", "--output", str(target)) == ""
    assert json.loads(target.read_text())[0]["size"] == "tiny"


def test_db_accumulates_across_invocations(tmp_path):
    import sqlite_utils

    db_path = tmp_path / "results.db"
    bench("--mode", "forward", "--format", "json", "--db", str(db_path))
    out = bench("--mode", "forward", "--format", "md", "--db", str(db_path))
    assert "rows appended to the results database as run 2" in out
    db = sqlite_utils.Database(db_path)
    assert db["runs"].count == 2 and db["bench"].count == 2


def test_help_lists_the_workload_options():
    for command in ("bench", "memory"):
        result = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"})
        assert result.exit_code == 0
        for option in ("--size", "--d-model", "--d-ff", "--layers", "--heads", "--context",
                       "--batch", "--mode", "--precision", "--attention", "--nvtx", "--device",
                       "--warmup", "--steps", "--format", "--output", "--db"):
            assert option in result.output, (command, option)
    result = CliRunner().invoke(app, ["memory", "--help"], env={"COLUMNS": "200"})
    assert "--snapshot-dir" in result.output and "--max-entries" in result.output


@pytest.mark.parametrize("args, message", [
    (["--mode", "trian"], "Error: --mode: unknown value 'trian' (did you mean train?)"),
    (["--size", "huge"], "Error: --size: unknown preset 'huge'"),
    (["--device", "cuda"], "Error: --device cuda, but CUDA is not available"),
    (["--heads", "3"], "Error: d_model 64 is not divisible by 3 heads"),
])
def test_errors_are_one_line_and_exit_1(cli, monkeypatch, args, message):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = cli("bench", *FAST, *args)
    assert out.exit_code == 1
    assert out.stderr.startswith(message), out.stderr
    assert out.stdout == ""


def test_db_that_is_a_directory_is_a_usage_error(cli, tmp_path):
    out = cli("bench", *FAST, "--mode", "forward", "--db", str(tmp_path))
    assert out.exit_code == 2
    assert "Invalid value for '--db'" in out.stderr


def test_unwritable_db_file_is_a_typed_error(cli, tmp_path):
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_text("this is not sqlite " * 100)
    out = cli("bench", *FAST, "--mode", "forward", "--db", str(bad))
    assert out.exit_code == 1
    assert out.stderr.startswith("Error: cannot write the results database")


def test_torch_missing_says_how_to_install(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    out = cli("bench", "--size", "tiny", "--context", "16")
    assert out.exit_code == 1
    assert out.stderr.startswith("Error: nsys-mine bench needs PyTorch")
    assert "pip install 'nsys-mine[torch]'" in out.stderr


def test_ctrl_c_prints_the_finished_rows_and_exits_130(cli, monkeypatch):
    from nvtx_model import harness

    real_step = harness.Workload.step

    def step(self):
        if self.cfg.mode == "train":
            raise KeyboardInterrupt
        return real_step(self)

    monkeypatch.setattr(harness.Workload, "step", step)
    out = cli("bench", *FAST, "--mode", "forward,train", "--format", "md")
    assert out.exit_code == 130
    assert "| tiny |" in out.stdout and "interrupted: 1 of 2 configs finished" in out.stdout


def test_skipped_rows_render(cli, monkeypatch):
    from nvtx_model import runtime

    monkeypatch.setattr(runtime, "mem_available_bytes", lambda *a: 1024)
    out = cli("bench", *FAST, "--mode", "train", "--format", "md")
    assert out.exit_code == 0
    assert "| skipped |" in out.stdout and "estimated footprint" in out.stdout
    assert "1 config skipped; see the note column" in out.stdout
