"""`profile` and `sweep` end to end with the real nsys 2022.4 on CPU (the tiny model)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")

EXPECTED = {"forward": 3, "loss": 3, "backward": 3, "optimizer": 3, "step": 3,
            "scaled dot product attention": 6, "computing attention scores": 6,
            "computing softmax": 6, "final matmul": 6, "attention": 6, "ffn": 6, "measure": 1}


def test_profile_tiny_train_fine(cli, cpu_profile):
    """`nsys-mine profile` of the session (conftest: tiny, train, NVTX fine, 1 warmup + 3
    measured steps on CPU, under real nsys): its JSON answer, files and sidecar."""
    out = cpu_profile.parent
    data = json.loads((out / "profile_answer.json").read_text())
    assert set(data) == {"export", "config", "ranges", "dominant", "kernels", "notes"}
    name = "tiny_ctx32_b4_train_fp32_naive_nvtx-fine_w1s3"
    assert data["export"] == str(out / f"{name}.sqlite")
    for ext in (".sqlite", ".nsys-rep", ".json"):
        assert (out / f"{name}{ext}").exists()
    ranges = {r["range"]: r for r in data["ranges"]}
    # measured steps only: 3 steps x 2 layers; the warmup step is filtered out
    assert {k: ranges[k]["instances"] for k in EXPECTED} == EXPECTED
    assert "warmup" not in ranges
    assert data["dominant"] == [] and data["kernels"] == []
    assert any("CPU times" in n for n in data["notes"])
    assert data["config"]["device"] == "cpu" and data["config"]["layers"] == 2
    side = json.loads((out / f"{name}.json").read_text())
    assert side["status"] == "ok" and side["trace"] == "nvtx,osrt"
    assert "--sample=none" in side["command"] and side["nsys_version"].startswith("2022.4")
    # the same export through the miner's own commands: warmup is there without --within
    res = cli("ranges", out / f"{name}.sqlite", "-f", "json")
    assert {r["range"]: r["instances"] for r in json.loads(res.stdout)}["forward"] == 4


def test_sweep_resumes_and_records_failures(tmp_path, cli, nsys_bin):
    args = ["sweep", "--size", "tiny,custom:d30-f64-L1-h4", "--context", "32", "--mode",
            "forward", "--warmup", "1", "--steps", "1", "--device", "cpu", "--out-dir", tmp_path,
            "--nsys", nsys_bin, "--timeout", "300", "--format", "json"]
    first = cli(*args)
    assert first.exit_code == 0, first.stderr
    runs = {r["name"]: r for r in json.loads(first.stdout)["runs"]}
    ok = runs["tiny_ctx32_b4_forward_fp32_naive_nvtx-fine_w1s1"]
    bad = runs["custom-d30-f64-L1-h4_ctx32_b4_forward_fp32_naive_nvtx-fine_w1s1"]
    assert ok["status"] == "ok" and ok["sqlite"].endswith(".sqlite")
    assert bad["status"] == "failed" and "not divisible" in bad["reason"]
    export = tmp_path / "tiny_ctx32_b4_forward_fp32_naive_nvtx-fine_w1s1.sqlite"
    mtime = export.stat().st_mtime_ns
    again = cli(*args)
    assert again.exit_code == 0
    assert "0 config(s) run, 2 already in the index" in json.dumps(json.loads(again.stdout))
    assert export.stat().st_mtime_ns == mtime  # not re-run
    times = json.loads(cli("sweep", "--report", tmp_path, "-f", "json", "--table",
                           "ranges").stdout)["ranges"]
    assert {t["range"]: t["instances"] for t in times}["forward"] == 1


def test_profile_infer_workload_captures_prefill_and_decode(tmp_path, cli, nsys_bin):
    """`profile --workload infer` under the real nsys: the measured generate calls' prefill,
    decode and (fine) decode step ranges, with the model's ranges inside them."""
    res = cli("profile", "--workload", "infer", "--size", "tiny", "--vocab", "256", "--context",
              "16", "--batch", "2", "--output-length", "4", "--nvtx", "fine", "--warmup", "1",
              "--steps", "2", "--device", "cpu", "--threads", "1", "--out-dir", tmp_path,
              "--nsys", nsys_bin, "--timeout", "300", "--format", "json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    name = "tiny_b2_in16_out4_fp32_naive_nvtx-fine_w1r2"
    assert data["export"] == str(tmp_path / f"{name}.sqlite")
    ranges = {r["range"]: r["instances"] for r in data["ranges"]}
    # 2 measured generate calls: 2 prefills, 2 decodes of 3 steps; 2 layers per forward pass
    assert {k: ranges[k] for k in ("measure", "prefill", "decode", "decode step", "attention",
                                   "ffn")} == {"measure": 1, "prefill": 2, "decode": 2,
                                               "decode step": 6, "attention": 16, "ffn": 16}
    assert [r["range"] for r in data["ranges"]][:3] == ["prefill", "decode", "decode step"]
    assert "warmup" not in ranges and "step" not in ranges
    side = json.loads((tmp_path / f"{name}.json").read_text())
    assert side["config"]["mode"] == "infer" and side["config"]["output_length"] == 4
    assert side["workload_row"]["status"] == "ok" and side["workload_row"]["prefill_s"] > 0
    assert "--workload" in side["command"] and "infer" in side["command"]
    assert data["dominant"] == [] and any("CPU times" in n for n in data["notes"])
    # the miner's own commands on that export: the phases by name (kernels per phase need a
    # GPU trace: test_profile.py shows dominant per prefill/decode on an export with kernels)
    res = cli("ranges", tmp_path / f"{name}.sqlite", "--within", "measure", "-f", "json")
    assert {r["range"]: r["instances"] for r in json.loads(res.stdout)}["decode step"] == 6
    dom = cli("dominant", tmp_path / f"{name}.sqlite", "--range", "decode")
    assert dom.exit_code == 1 and "CUDA kernels were not traced" in dom.stderr


@pytest.mark.slow
def test_profile_a_compiled_model_on_cpu(tmp_path, cli, nsys_bin, monkeypatch):
    """`profile --compile default` on CPU under real nsys (one block of the tiny model,
    forward only: torch.compile builds its C++ kernels in ~25 s here, cold). The model's NVTX
    ranges are still emitted (torch.compile runs them between its compiled pieces), and the
    run is named and recorded as compiled."""
    # compile in the workload's own process, into a cache of its own: inductor's pool of
    # compile processes lost its connection when another test compiled at the same time
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "1")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    res = cli("profile", "--size", "tiny", "--layers", "1", "--context", "16", "--batch", "2",
              "--mode", "forward", "--compile", "default", "--warmup", "1", "--steps", "2",
              "--nvtx", "fine", "--device", "cpu", "--out-dir", tmp_path, "--nsys", nsys_bin,
              "--timeout", "400", "--format", "json")
    assert res.exit_code == 0, res.stderr
    data = json.loads(res.stdout)
    assert data["export"].endswith("_ctx16_b2_forward_fp32_naive_nvtx-fine_compile-default_"
                                   "w1s2.sqlite")
    assert data["config"]["compile"] == "default"
    ranges = {r["range"]: r["instances"] for r in data["ranges"]}
    assert {k: ranges[k] for k in ("step", "forward", "attention", "ffn",
                                   "computing softmax")} == {
        "step": 2, "forward": 2, "attention": 2, "ffn": 2, "computing softmax": 2}
