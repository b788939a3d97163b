"""The shared workload-options contract (profile_cli.commands.workload); no torch needed."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from nsys_parsers.errors import BadOption
from nvtx_model.config import PRESETS, RunConfig
from nvtx_model.errors import BadShape
from nvtx_model.workload import WorkloadSpec, config_args, parse_choices, parse_ints
from profile_cli.commands.groups import grouped
from profile_cli.commands.workload import WORKLOAD


def test_defaults_follow_the_issue():
    configs = WorkloadSpec().configs()
    assert {c.size for c in configs} == {"small"}
    assert [c.context for c in configs][::2] == [128, 256, 512, 1024]
    assert {c.batch for c in configs} == {4} and {c.model.vocab_size for c in configs} == {10_000}
    assert {(c.warmup, c.steps) for c in configs} == {(5, 10)}
    assert {c.model.rope_theta for c in configs} == {10_000.0}


def test_expansion_order_is_size_context_mode_precision_attention():
    spec = WorkloadSpec(size="tiny,small", context="64,32", mode="forward,train",
                        precision="fp32,bf16", attention="naive,sdpa")
    configs = spec.configs()
    assert len(configs) == 2 * 2 * 2 * 2 * 2
    keys = [(c.size, c.context, c.mode, c.precision, c.attention) for c in configs]
    assert keys[:3] == [("tiny", 64, "forward", "fp32", "naive"),
                        ("tiny", 64, "forward", "fp32", "sdpa"),
                        ("tiny", 64, "forward", "bf16", "naive")]
    assert keys[-1] == ("small", 32, "train", "bf16", "sdpa")


def test_lists_are_trimmed_and_deduplicated():
    assert parse_choices(" train, forward ,train,", ("forward", "train"), "--mode") == [
        "train", "forward"]
    assert parse_ints("128, 256,128", "--context") == [128, 256]


@pytest.mark.parametrize("spec, message", [
    (WorkloadSpec(mode="trian"), "--mode: unknown value 'trian' (did you mean train?)"),
    (WorkloadSpec(precision="fp16"), "--precision: unknown value 'fp16'"),
    (WorkloadSpec(attention="flash"), "use one or more of naive, sdpa"),
    (WorkloadSpec(mode=" , "), "--mode is empty"),
    (WorkloadSpec(context="128,abc"), "--context: 'abc' is not a positive integer"),
    (WorkloadSpec(context="0"), "--context: '0' is not a positive integer"),
    (WorkloadSpec(size="smal"), "unknown preset 'smal' (did you mean small?)"),
    (WorkloadSpec(size="custom"), "--size custom needs --d-model, --layers and --heads"),
    (WorkloadSpec(d_model=256), "a custom shape needs --layers, --heads"),
    (WorkloadSpec(size="tiny,small", layers=3), "give at most one --size"),
])
def test_bad_options_are_bad_option_errors_that_say_what_to_do(spec, message):
    with pytest.raises(BadOption) as info:
        spec.configs()
    assert message in str(info.value)


def test_impossible_custom_shape_is_a_bad_option():
    with pytest.raises(BadShape, match="not divisible by 3 heads"):
        WorkloadSpec(size="tiny", heads=3, context="16").configs()
    assert issubclass(BadShape, BadOption)


def test_custom_shapes():
    (cfg,) = WorkloadSpec(d_model=128, layers=3, heads=4, context="32", mode="train").configs()
    assert cfg.size == "custom:d128-f512-L3-h4"  # d_ff defaults to 4 x d_model
    assert (cfg.model.d_model, cfg.model.d_ff, cfg.model.num_layers, cfg.model.num_heads) == (
        128, 512, 3, 4)
    (cfg,) = WorkloadSpec(size="small", layers=2, context="32", mode="train").configs()
    assert cfg.size == "custom:d768-f3072-L2-h12"  # a preset to start from
    (cfg,) = WorkloadSpec(size="small", layers=12, context="32", mode="train").configs()
    assert cfg.size == "small"  # overrides that change nothing keep the preset's name
    assert WorkloadSpec(size="2.7b", context="32", mode="train").configs()[0].size == "2.7B"


@pytest.mark.parametrize("spec", [
    WorkloadSpec(size="tiny", context="64", mode="forward-backward", precision="bf16",
                 attention="sdpa", nvtx="fine", device="cpu", warmup=0, steps=3,
                 adamw="foreach", seed=7, batch=2, vocab=321, threads=1),
    WorkloadSpec(d_model=96, d_ff=200, layers=3, heads=6, context="40", mode="train"),
    WorkloadSpec(size="tiny", context="16", mode="forward", compile="reduce-overhead"),
])
def test_config_args_round_trip(spec):
    (cfg,) = spec.configs()
    args = config_args(cfg)
    assert all(isinstance(a, str) for a in args)

    app = typer.Typer()
    seen: list[RunConfig] = []

    @app.command(cls=grouped(WORKLOAD()))
    def child(ctx: typer.Context) -> None:
        seen.extend(WORKLOAD.of(ctx).configs())

    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen == [cfg]


def test_run_module_dry_run_parses_config_args():
    from profile_cli.run_workload import app

    (cfg,) = WorkloadSpec(size="tiny", context="16", mode="forward", nvtx="fine").configs()
    result = CliRunner().invoke(app, config_args(cfg) + ["--dry-run"])
    assert result.exit_code == 0, result.output
    line = json.loads(result.stdout.strip())
    assert line["size"] == "tiny" and line["nvtx"] == "fine" and line["mode"] == "forward"
    assert line["model"]["context_length"] == 16


def test_a_commands_defaults_and_own_options():
    app = typer.Typer()
    got = {}

    @app.command(cls=grouped(WORKLOAD(warmup=1, steps=1, nvtx="coarse")))
    def memory_like(ctx: typer.Context, extra: int = 3) -> None:
        got["spec"], got["extra"] = WORKLOAD.of(ctx), extra

    result = CliRunner().invoke(app, ["--size", "tiny", "--extra", "4"])
    assert result.exit_code == 0, result.output
    assert (got["spec"].warmup, got["spec"].steps, got["spec"].nvtx) == (1, 1, "coarse")
    assert got["spec"].size == "tiny" and got["extra"] == 4
    assert isinstance(got["spec"].nvtx, str)  # enums arrive as plain strings
    with pytest.raises(TypeError, match="not WorkloadSpec options: wramup"):
        WORKLOAD(wramup=1)


def test_a_commands_default_size_never_becomes_the_base_of_a_custom_shape():
    """profile and sweep default to tiny. --d-model/--layers/--heads alone describe a shape
    from nothing there too (d_ff 4 x d_model, as bench and infer do); it used to start from
    tiny and take its d_ff of 256. Without shape flags the default size is tiny; --help
    says so."""
    from nvtx_model.infer_config import infer_configs_from_workload

    app = typer.Typer()
    got = {}

    @app.command(cls=grouped(WORKLOAD(default_size="tiny", context="32", mode="forward")))
    def profile_like(ctx: typer.Context) -> None:
        got["spec"] = WORKLOAD.of(ctx)

    def configs(*args):
        result = CliRunner().invoke(app, list(args))
        assert result.exit_code == 0, result.output
        return got["spec"].configs()

    (cfg,) = configs("--d-model", "128", "--layers", "2", "--heads", "2")
    assert (cfg.size, cfg.model.d_ff) == ("custom:d128-f512-L2-h2", 512)
    assert [c.size for c in configs()] == ["tiny"]
    assert got["spec"].size_tokens() == ["tiny"]
    assert [c.size for c in infer_configs_from_workload(got["spec"], 4)] == ["tiny"]
    (cfg,) = configs("--size", "tiny", "--layers", "1")
    assert (cfg.model.d_ff, cfg.model.num_layers) == (PRESETS["tiny"].d_ff, 1)
    assert "[default: (tiny)]" in " ".join(CliRunner().invoke(app, ["--help"]).output.split())
    with pytest.raises(TypeError, match="not WorkloadSpec options: default_sise"):
        WORKLOAD(default_sise="tiny")


def test_enum_options_are_validated_by_the_parser():
    app = typer.Typer()

    @app.command(cls=grouped(WORKLOAD()))
    def cmd(ctx: typer.Context) -> None:
        pass

    result = CliRunner().invoke(app, ["--nvtx", "verbose"])
    assert result.exit_code == 2
    assert "verbose" in result.output


def test_run_config_validates_its_fields():
    (cfg,) = WorkloadSpec(size="tiny", context="8", mode="train").configs()
    with pytest.raises(BadOption, match="--mode 'jog' is not one of"):
        cfg.with_(mode="jog")
    with pytest.raises(BadOption, match="--steps must be >= 1"):
        cfg.with_(steps=0)
    assert set(PRESETS) == {"tiny", "small", "medium", "large", "xl", "2.7B"}


def test_compile_is_a_workload_axis():
    """--compile takes a comma list: eager and compiled configs of one shape, compiled ones
    named and labelled by their mode (eager names are unchanged)."""
    configs = WorkloadSpec(size="tiny", context="32", mode="forward,train",
                           compile="none,default").configs()
    assert [(c.mode, c.compile) for c in configs] == [
        ("forward", "none"), ("forward", "default"), ("train", "none"), ("train", "default")]
    assert [c.name for c in configs[:2]] == [
        "tiny_ctx32_b4_forward_fp32_naive_nvtx-off_w5s10",
        "tiny_ctx32_b4_forward_fp32_naive_nvtx-off_compile-default_w5s10"]
    assert configs[1].label() == "tiny ctx 32 b4 forward fp32 naive compile default"
    assert configs[1].to_dict()["compile"] == "default" and not configs[0].compiled
    assert "--compile" not in config_args(configs[0])
    assert config_args(configs[1])[-2:] == ["--compile", "default"]
    with pytest.raises(BadOption, match="--compile: unknown value 'max_autotune' "
                                        r"\(did you mean max-autotune\?\)"):
        WorkloadSpec(size="tiny", context="32", compile="max_autotune").configs()


def test_compile_does_not_apply_to_inference():
    from nvtx_model.infer_config import infer_configs_from_workload

    spec = WorkloadSpec(size="tiny", context="16", compile="default")
    with pytest.raises(BadOption, match="--compile applies to --workload bench"):
        infer_configs_from_workload(spec, 4)


def test_compile_without_a_cpu_compiler_says_what_to_install(monkeypatch):
    pytest.importorskip("torch")
    from nvtx_model.errors import CompileUnavailable
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import resolve_runtime

    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    (cfg,) = WorkloadSpec(size="tiny", context="16", mode="forward", device="cpu",
                          compile="default").configs()
    with pytest.raises(CompileUnavailable, match="needs a C\\+\\+ compiler .* install g\\+\\+"):
        Workload(cfg, resolve_runtime("cpu"))


def test_a_failed_compile_is_a_clear_error(monkeypatch):
    """An error raised by torch.compile's machinery at the first step becomes one message
    that names the mode and says how to run without it."""
    torch = pytest.importorskip("torch")
    from nvtx_model.errors import CompileUnavailable
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import resolve_runtime

    class BackendCompilerFailed(RuntimeError):
        pass

    BackendCompilerFailed.__module__ = "torch._dynamo.exc"

    def broken(model, mode=None):
        def call(*args, **kwargs):
            raise BackendCompilerFailed("inductor raised CppCompileError: g++ failed\nmore")
        return call

    monkeypatch.setattr(torch, "compile", broken)
    (cfg,) = WorkloadSpec(size="tiny", context="16", mode="forward", device="cpu", warmup=1,
                          steps=1, compile="max-autotune").configs()
    with pytest.raises(CompileUnavailable) as info:
        Workload(cfg, resolve_runtime("cpu")).run()
    assert str(info.value) == (
        "torch.compile(mode='max-autotune') failed on cpu (BackendCompilerFailed: inductor "
        "raised CppCompileError: g++ failed); run without --compile, or with --compile default")
