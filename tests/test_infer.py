"""The inference suite's library: grids (presets, JSON, TOML), skip rules, memory estimate,
metric definitions, sampling, NVTX ranges, and a real run of the tiny model on CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nsys_parsers.errors import BadOption
from nvtx_model.config import PRESETS, ModelConfig, param_counts
from nvtx_model.infer_config import (
    DEFAULT_MAX_BATCH_INPUT_PRODUCT,
    INFER_PRESETS,
    InferSpec,
    expand_infer,
    infer_config_args,
    infer_configs_from_workload,
    inference_memory,
    skip_reason,
)
from nvtx_model.workload import WorkloadSpec


# ---- grids (no torch) -----------------------------------------------------------------------
def test_default_grid_is_quick_test_with_the_small_model():
    configs, plan = expand_infer(InferSpec())
    assert plan.grid_source == "preset quick_test"
    assert plan.max_batch_input_product == DEFAULT_MAX_BATCH_INPUT_PRODUCT == 131072
    assert [(c.batch, c.input_length, c.output_length) for c in configs] == [
        (1, 64, 32), (1, 128, 32), (4, 64, 32), (4, 128, 32)]
    c = configs[-1]
    assert c.size == "small" and c.model.d_model == PRESETS["small"].d_model
    assert c.model.context_length == 128 + 32 and c.tokens == 128 + 31
    assert (c.runs, c.warmup, c.sampling) == (3, 1, "greedy")


@pytest.mark.parametrize("name", sorted(INFER_PRESETS))
def test_every_preset_expands_to_its_grid(name):
    grid = INFER_PRESETS[name]
    configs, plan = expand_infer(InferSpec(size="tiny", preset=name))
    assert [(c.batch, c.input_length) for c in configs] == [
        (b, i) for b in grid.batch_sizes for i in grid.input_lengths]
    assert {c.output_length for c in configs} == {grid.output_length}
    assert plan.grid_source == f"preset {name}"


def test_options_override_single_fields_and_lists_multiply():
    configs, plan = expand_infer(InferSpec(
        size="tiny", preset="small_scale", input_lengths="32,16,32", output_length=5,
        precision="fp32,bf16", attention="naive,sdpa"))
    assert plan.grid_source == "preset small_scale with --input-lengths, --output-length"
    assert len(configs) == 2 * 2 * 4 * 2  # precisions x attentions x batches x inputs
    assert [c.input_length for c in configs[:2]] == [32, 16]
    first = configs[0]
    assert (first.precision, first.attention, first.batch, first.output_length) == (
        "fp32", "naive", 1, 5)
    assert configs[-1].label() == "tiny b8 in 16 out 5 bf16 sdpa"


def test_grid_from_json_and_toml(tmp_path):
    js = tmp_path / "grid.json"
    js.write_text(json.dumps({"batch_sizes": [2, 8], "input_lengths": [100],
                              "output_length": 7, "max_batch_input_product": 500}))
    configs, plan = expand_infer(InferSpec(size="tiny", grid_file=js))
    assert [(c.batch, c.input_length, c.output_length) for c in configs] == [
        (2, 100, 7), (8, 100, 7)]
    assert plan.max_batch_input_product == 500 and plan.grid_source == "grid.json"
    toml = tmp_path / "grid.toml"
    toml.write_text("batch_sizes = [1, 3]\ninput_lengths = [16, 48]\n")
    configs, plan = expand_infer(InferSpec(size="tiny", grid_file=toml, output_length=4,
                                           max_batch_input_product=0))
    assert [(c.batch, c.input_length, c.output_length) for c in configs] == [
        (1, 16, 4), (1, 48, 4), (3, 16, 4), (3, 48, 4)]
    assert plan.max_batch_input_product == 0  # the option beats the default
    assert plan.grid_source == ("grid.toml (output_length from preset quick_test) with "
                                "--output-length")


@pytest.mark.parametrize("name, text, message", [
    ("g.json", "{not json", "is not valid JSON"),
    ("g.toml", "batch_sizes = [1,", "is not valid TOML"),
    ("g.yaml", "batch_sizes: [1]", "unknown format .yaml"),
    ("g.json", '{"batch_size": [1]}', "unknown key 'batch_size' (did you mean batch_sizes?)"),
    ("g.json", '{"batch_sizes": [1, 0]}', "batch_sizes must be a non-empty list of positive"),
    ("g.json", '{"input_lengths": []}', "input_lengths must be a non-empty list"),
    ("g.json", '{"output_length": "16"}', "output_length must be an integer >= 1"),
    ("g.json", "[1, 2]", "must hold an object/table"),
])
def test_bad_grid_files(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BadOption, match="grid file") as err:
        expand_infer(InferSpec(grid_file=path))
    assert message in str(err.value)


@pytest.mark.parametrize("spec, message", [
    (InferSpec(preset="quick"), "unknown preset 'quick' (did you mean quick_test?)"),
    (InferSpec(preset="quick_test", grid_file=Path("g.json")), "either --preset or --grid"),
    (InferSpec(grid_file=Path("/nonexistent/g.json")), "does not exist"),
    (InferSpec(batch_sizes="1,x"), "--batch-sizes: 'x' is not a positive integer"),
    (InferSpec(output_length=0), "--output-length must be >= 1"),
    (InferSpec(top_p=0.9), "--top-p samples from the top tokens"),
    (InferSpec(temperature=-1.0), "--temperature must be >= 0"),
    (InferSpec(temperature=1.0, top_p=1.5), "--top-p must be in (0, 1]"),
    (InferSpec(size="nano"), "--size: unknown preset 'nano'"),
    (InferSpec(precision="fp16"), "--precision: unknown value 'fp16'"),
    (InferSpec(max_batch_input_product=-1), "--max-batch-input-product must be >= 0"),
    (InferSpec(model="/path/model"), "give hf:/path/to/a/local/model"),
])
def test_bad_options_are_typed_errors(spec, message):
    with pytest.raises(BadOption) as err:
        expand_infer(spec)
    assert message in str(err.value)


# ---- skip rules and the memory estimate (no torch) ------------------------------------------
def _cfg(batch: int, input_length: int, output: int = 8, size: str = "tiny", **kw):
    return expand_infer(InferSpec(size=size, batch_sizes=str(batch),
                                  input_lengths=str(input_length), output_length=output,
                                  **kw))[0][0]


def test_inference_memory_formula():
    m = ModelConfig.from_shape(PRESETS["tiny"], vocab_size=1000, context_length=40)
    est = inference_memory(m, batch=2, input_length=32, output_length=8, precision="fp32",
                           attention="naive")
    P = param_counts(m)["total"]
    assert est.weights_bytes == P * 4
    assert est.kv_cache_bytes == 2 * 2 * 2 * (32 + 7) * 64 * 4  # 2 L B S d x 4 bytes
    N, h = 2 * 32, 4
    attn = 6 * N * 64 * 4 + 4 * 2 * h * 32 * 32 * 4
    ffn = 3 * N * 256 * 4
    buffers = 40 * 40 + 40 * 16 * 4
    assert est.activations_bytes == 4 * N * 64 * 4 + max(attn, ffn) + 2 * 1000 * 4 + buffers
    half = inference_memory(m, 2, 32, 8, "bf16", "sdpa")
    assert half.weights_bytes == P * 2 and half.kv_cache_bytes == est.kv_cache_bytes // 2
    assert est.total_bytes == est.weights_bytes + est.kv_cache_bytes + est.activations_bytes


def test_skip_rule_batch_input_product():
    big = _cfg(128, 2048)
    reason = skip_reason(big, max_batch_input_product=131072, free_bytes=None)
    assert reason == "batch 128 x input 2048 = 262,144 tokens > --max-batch-input-product 131,072"
    assert skip_reason(_cfg(64, 2048), max_batch_input_product=131072, free_bytes=None) is None
    assert skip_reason(big, max_batch_input_product=0, free_bytes=None) is None  # no limit


def test_skip_rule_memory_estimate():
    cfg = _cfg(4, 512, size="small")
    est = inference_memory(cfg.model, 4, 512, 8, "fp32", "naive")
    assert est.kv_cache_bytes == 2 * 12 * 4 * (512 + 7) * 768 * 4  # 2 L B S d x fp32
    need = est.total_bytes
    assert skip_reason(cfg, max_batch_input_product=0, free_bytes=need) is None
    reason = skip_reason(cfg, max_batch_input_product=0, free_bytes=need - 1,
                         free_label="given memory limit")
    assert reason == ("est. 889.2 MiB (weights 490.7 MiB + KV 146.0 MiB + activations "
                      "252.5 MiB) > 889.2 MiB given memory limit")


def test_profile_workload_maps_the_shared_options():
    spec = WorkloadSpec(size="tiny", context="24", batch=3, mode="train", nvtx="fine",
                        warmup=1, steps=2, device="cpu", threads=1)
    (cfg,) = infer_configs_from_workload(spec, output_length=5)
    assert (cfg.batch, cfg.input_length, cfg.output_length, cfg.runs, cfg.warmup, cfg.nvtx) == (
        3, 24, 5, 2, 1, "fine")
    assert cfg.name == "tiny_b3_in24_out5_fp32_naive_nvtx-fine_w1r2"
    assert infer_config_args(cfg) == [
        "--size", "tiny", "--workload", "infer", "--vocab", "10000", "--context", "24",
        "--output-length", "5", "--batch", "3", "--precision", "fp32", "--attention", "naive",
        "--nvtx", "fine", "--device", "cpu", "--warmup", "1", "--steps", "2", "--seed", "0",
        "--threads", "1"]
    d = cfg.to_dict("cpu")
    assert (d["mode"], d["input_length"], d["output_length"], d["steps"]) == ("infer", 24, 5, 2)


# ---- metrics (pure) -------------------------------------------------------------------------
def test_metric_definitions_on_synthetic_timings():
    pytest.importorskip("torch")
    import numpy as np

    from nvtx_model.infer import GenerationTiming, latency_metrics

    runs = [GenerationTiming(0.10, [0.01, 0.02, 0.03], 0.16),
            GenerationTiming(0.20, [0.02, 0.02, 0.06], 0.30)]
    m = latency_metrics(runs, batch=4, input_length=50, output_length=4)
    assert m["prefill_s"] == pytest.approx(0.15)  # TTFT
    assert m["prefill_std_s"] == pytest.approx(np.std([0.1, 0.2], ddof=1))
    assert m["total_s"] == pytest.approx(0.23)
    assert m["decode_s"] == pytest.approx(0.08)  # mean of (0.06, 0.10)
    assert m["decode_per_token_s"] == pytest.approx(0.08 / 3)  # TPOT = (total - TTFT) / (4 - 1)
    itl = [0.01, 0.02, 0.03, 0.02, 0.02, 0.06]
    for q in (50, 90, 99):
        assert m[f"itl_p{q}_s"] == pytest.approx(np.percentile(itl, q))
    assert m["tokens_per_s"] == pytest.approx(4 * 4 / 0.23)
    assert m["prefill_tokens_per_s"] == pytest.approx(4 * 50 / 0.15)
    assert m["decode_tokens_per_s"] == pytest.approx(4 * 3 / 0.08)
    one = latency_metrics([GenerationTiming(0.1, [], 0.1)], 2, 10, 1)
    assert one["decode_per_token_s"] is None and one["itl_p50_s"] is None
    assert one["decode_s"] == 0.0 and one["prefill_std_s"] is None
    assert one["tokens_per_s"] == pytest.approx(20.0)


def test_sampling():
    torch = pytest.importorskip("torch")
    from nvtx_model.infer import sample_next

    logits = torch.tensor([[0.0, 3.0, 1.0, 2.9], [5.0, 0.0, 0.0, 0.0]])
    assert sample_next(logits).tolist() == [1, 0]  # greedy
    # top-p so small that only the most likely token stays: sampling becomes argmax
    g = torch.Generator().manual_seed(0)
    assert sample_next(logits, 1.0, 0.01, g).tolist() == [1, 0]
    # top-p 0.6 keeps tokens 1 and 3 of the first row (0.41 + 0.37 of the mass), never 0 or 2
    draws = {sample_next(logits, 1.0, 0.6, g)[0].item() for _ in range(200)}
    assert draws == {1, 3}
    a = [sample_next(logits, 0.7, 1.0, torch.Generator().manual_seed(9)).tolist()
         for _ in range(2)]
    assert a[0] == a[1]  # seeded: reproducible


# ---- running (torch) ------------------------------------------------------------------------
def test_generate_emits_the_inference_ranges():
    torch = pytest.importorskip("torch")
    from nvtx_model import nvtx_ranges as nv
    from nvtx_model.infer import generate
    from nvtx_model.model import TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(50, 16, 16, 1, 2, 32).eval()
    rec = nv.RecordingBackend()
    with nv.activated(nv.Instrumentation("fine", rec)), torch.inference_mode():
        generate(model, torch.zeros(1, 4, dtype=torch.long), 3)
    top = [name for name, _ in rec.tree()]
    assert top == ["prefill", "decode"]
    decode = rec.tree()[1][1]
    assert [name for name, _ in decode] == ["decode step", "decode step"]
    assert [name for name, _ in decode[0][1]] == ["attention", "ffn"]
    rec = nv.RecordingBackend()
    with nv.activated(nv.Instrumentation("coarse", rec)), torch.inference_mode():
        generate(model, torch.zeros(1, 4, dtype=torch.long), 3)
    assert rec.tree() == [("prefill", []), ("decode", [])]


def test_run_inference_rows_skips_and_db(tmp_path):
    pytest.importorskip("torch")
    import sqlite_utils

    from nvtx_model.infer import INFER_COLUMNS, run_inference

    configs, _ = expand_infer(InferSpec(size="tiny", vocab=256, device="cpu", threads=1,
                                        batch_sizes="1,2", input_lengths="8,32",
                                        output_length=4, runs=2, warmup=1))
    result = run_inference(configs, max_batch_input_product=32, db=tmp_path / "r.db")
    rows = {(r["batch"], r["input_length"]): r for r in result.rows}
    assert list(result.rows[0]) == INFER_COLUMNS
    assert [r["status"] for r in result.rows] == ["ok", "ok", "ok", "skipped"]
    skipped = rows[(2, 32)]
    assert skipped["note"] == "batch 2 x input 32 = 64 tokens > --max-batch-input-product 32"
    assert skipped["prefill_s"] is None and skipped["memory_est_bytes"] > 0
    for r in (rows[(1, 8)], rows[(1, 32)], rows[(2, 8)]):
        assert r["prefill_s"] > 0 and r["total_s"] > r["prefill_s"]
        assert r["decode_per_token_s"] == pytest.approx((r["total_s"] - r["prefill_s"]) / 3)
        assert r["tokens_per_s"] == pytest.approx(r["batch"] * 4 / r["total_s"])
        assert r["itl_p50_s"] <= r["itl_p90_s"] <= r["itl_p99_s"]
        assert r["rss_growth_bytes"] is not None and r["peak_allocated_bytes"] is None
        assert (r["device"], r["sampling"], r["runs"], r["params"]) == (
            "cpu", "greedy", 2, param_counts(configs[0].model)["total"])
    assert "1 config skipped; see the note column" in result.notes
    db = sqlite_utils.Database(tmp_path / "r.db")
    assert db["infer"].count == 4 and db["runs"].count == 1
    assert db["infer"].columns_dict["prefill_s"] is float

    limited = run_inference(configs[:1], memory_limit_bytes=1000)
    assert limited.rows[0]["status"] == "skipped"
    assert limited.rows[0]["note"].endswith(") > 1000 B (the given limit)")


def test_sampled_generation_runs_with_its_label():
    pytest.importorskip("torch")
    from nvtx_model.infer import run_inference

    spec = dict(size="tiny", vocab=64, device="cpu", threads=1, batch_sizes="2",
                input_lengths="8", output_length=3, runs=1, warmup=0)
    (row,) = run_inference(expand_infer(InferSpec(temperature=0.8, top_p=0.9, **spec))[0]).rows
    assert row["status"] == "ok" and row["sampling"] == "temperature 0.8, top-p 0.9"
    assert "warmup 0" in row["note"]


# ---- a local Hugging Face model (only with transformers installed) -------------------------
def test_hf_model_by_path_generates_what_transformers_generates(tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from nvtx_model.hf_model import load_hf_model
    from nvtx_model.infer import generate, run_inference

    torch.manual_seed(0)
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=4, max_position_embeddings=64)
    folder = tmp_path / "tiny-llama"
    transformers.LlamaForCausalLM(config).save_pretrained(folder)
    spec = InferSpec(model=f"hf:{folder}", device="cpu", threads=1, batch_sizes="2",
                     input_lengths="8", output_length=5, runs=1, warmup=0)
    (cfg,) = spec.configs()
    assert (cfg.size, cfg.model.d_model, cfg.model.vocab_size) == ("hf:tiny-llama", 32, 96)
    model = load_hf_model(str(folder), torch.device("cpu"), "fp32", "sdpa")
    prompt = torch.randint(0, 96, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        ours = generate(model, prompt, 5).tokens
        theirs = model.model.generate(prompt, max_new_tokens=5, min_new_tokens=5,
                                      do_sample=False, attention_mask=torch.ones_like(prompt))
    assert torch.equal(ours, theirs[:, 8:])
    (row,) = run_inference([cfg]).rows
    assert row["status"] == "ok" and row["params"] == model.num_parameters()
    with pytest.raises(BadOption, match="takes at most 64 positions; the grid needs 70"):
        InferSpec(model=f"hf:{folder}", input_lengths="60", output_length=10).configs()
    with pytest.raises(BadOption, match="no config.json in that folder"):
        InferSpec(model=f"hf:{tmp_path}").configs()


def test_hf_model_without_transformers_says_what_to_install(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "transformers" else real(name, *a))
    with pytest.raises(BadOption, match="needs the transformers package; pip install"):
        InferSpec(model="hf:/some/folder").configs()


# ---- the CUDA path, against mocked torch.cuda calls (tests/test_bench_cuda.py) ---------------
def test_cuda_path_synchronizes_every_token_and_checks_free_gpu_memory(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    from nvtx_model.infer import run_inference
    from tests.fake_cuda import FakeCuda

    cuda = FakeCuda(monkeypatch, tmp_path)
    free = {"bytes": 80 * 1024**3}
    monkeypatch.setattr(torch.cuda, "mem_get_info",
                        lambda device=None: (free["bytes"], 80 * 1024**3))
    configs, _ = expand_infer(InferSpec(size="tiny", vocab=64, device="cuda", batch_sizes="2",
                                        input_lengths="8", output_length=4, runs=2, warmup=1))
    (row,) = run_inference(configs).rows
    assert row["status"] == "ok" and row["device"] == "cuda"
    assert row["device_name"] == "NVIDIA H100 80GB HBM3"
    assert (row["peak_allocated_bytes"], row["peak_reserved_bytes"]) == (123_000_000,
                                                                         456_000_000)
    assert row["rss_growth_bytes"] is None
    # per generate call: before the clock starts, after the first token, after each of the 3
    # later tokens; 3 calls (1 warmup + 2 runs), plus one after the prompts are drawn
    assert cuda.names().count("synchronize") == 1 + 3 * (1 + 1 + 3)
    assert cuda.names().index("reset_peak_memory_stats") > cuda.names().index("synchronize")
    free["bytes"] = 256 * 1024  # the tiny model's weights alone are 514 KiB
    (row,) = run_inference(configs).rows
    assert row["status"] == "skipped"
    assert row["note"].endswith("> 230.4 KiB = 90% of free GPU memory")


def test_a_custom_shape_starts_from_the_given_preset_only():
    """``infer --d-model 64 --layers 2 --heads 2`` is the shape asked for, with d_ff 4 x 64 as
    in bench (it started from the default size, small, and took its d_ff of 3072); with
    ``--size`` the flags change that preset; without flags the default size is small."""
    custom = InferSpec(d_model=64, layers=2, heads=2, preset="quick_test").configs()[0]
    assert (custom.model.d_model, custom.model.d_ff, custom.model.num_layers,
            custom.model.num_heads) == (64, 256, 2, 2)
    bench = WorkloadSpec(d_model=64, layers=2, heads=2).configs()[0]
    assert custom.size == bench.size == "custom:d64-f256-L2-h2"
    from_tiny = InferSpec(size="tiny", layers=1, preset="quick_test").configs()[0]
    assert from_tiny.model.d_ff == PRESETS["tiny"].d_ff and from_tiny.model.num_layers == 1
    assert InferSpec(preset="quick_test").configs()[0].size == "small"
