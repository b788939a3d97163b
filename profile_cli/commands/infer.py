"""``nsys-mine infer``, ``nsys-mine micro matmul`` and ``nsys-mine micro mlp``.

Thin commands: options (``InferSpec`` / ``MicroSpec`` option groups; the model options are the
shared workload declarations) -> ``nvtx_model.infer.run_inference`` or
``nvtx_model.micro.matmul_benchmark``/``mlp_benchmark`` (rows, like ``bench``) -> the files of
``profile_cli.model_results.infer_files``/``micro_files`` (JSON, CSV, plots, report) ->
``reports.render``. torch and matplotlib are imported inside the commands only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nvtx_model.infer_config import (
    DEFAULT_MAX_BATCH_INPUT_PRODUCT,
    DEFAULT_PRESET,
    INFER_PRESETS,
    InferSpec,
)
from nvtx_model.micro_config import DEFAULT_DIMS, DEFAULT_SCALES, MLP_BASE, MLP_PARAMS, MicroSpec
from nvtx_model.nvtx_ranges import LEVELS
from profile_cli.commands.bench import emit_sweep
from profile_cli.commands.groups import OptionGroup, choice, dataclass_defaults, grouped
from profile_cli.commands.output import OUTPUT, OutputSpec
from profile_cli.commands.progress import progress_bar
from profile_cli.commands.workload import (
    AttentionOpt,
    DbOpt,
    DeviceOpt,
    DffOpt,
    DModelOpt,
    HeadsOpt,
    LayersOpt,
    SeedOpt,
    SizeOpt,
    ThreadsOpt,
    VocabOpt,
)

GRID = "Grid"
GENERATION = "Generation"
MEASURE = "Measurement"

INFER_TABLE = ["size", "precision", "attention", "sampling", "batch", "input_length",
               "output_length", "prefill_s", "decode_per_token_s", "itl_p50_s", "itl_p90_s",
               "itl_p99_s", "total_s", "tokens_per_s", "peak_allocated_bytes",
               "rss_growth_bytes", "memory_est_bytes", "device", "threads", "nvtx", "warmup",
               "runs", "status", "note"]
INFER_SETTINGS = ("size", "precision", "attention", "sampling", "output_length", "device",
                  "threads", "nvtx", "warmup", "runs")
MATMUL_TABLE = ["dim", "precision", "repeats", "mean_s", "std_s", "min_s", "tflops",
                "local_exponent", "exponent", "device", "threads", "warmup", "runs", "status",
                "note"]
MLP_TABLE = ["param", "value", "precision", "num_steps", "num_layers", "batch_size", "dim",
             "mean_s", "std_s", "min_s", "tflops", "local_exponent", "exponent", "device",
             "threads", "warmup", "runs", "status", "note"]
MICRO_SETTINGS = ("precision", "device", "threads", "warmup", "runs")
# Short headers for the rich table (JSON, CSV and markdown keep the column names).
INFER_HEADERS = {"input_length": "input", "output_length": "output", "prefill_s": "TTFT_s",
                 "decode_per_token_s": "TPOT_s", "itl_p50_s": "ITL_p50_s",
                 "itl_p90_s": "ITL_p90_s", "itl_p99_s": "ITL_p99_s", "tokens_per_s": "tok_per_s",
                 "peak_allocated_bytes": "peak_bytes", "rss_growth_bytes": "rss_growth_bytes",
                 "memory_est_bytes": "estimate_bytes"}
INFER_DROP = ("memory_est_bytes", "rss_growth_bytes", "peak_allocated_bytes", "itl_p50_s",
              "itl_p90_s", "total_s", "note", "sampling", "attention", "precision", "size")
MICRO_HEADERS = {"local_exponent": "local_k", "exponent": "k", "num_steps": "steps",
                 "num_layers": "layers", "batch_size": "batch"}
MICRO_DROP = ("min_s", "repeats", "num_steps", "num_layers", "batch_size", "dim", "note",
              "tflops", "local_exponent", "std_s")

# ---- options --------------------------------------------------------------------------------
def _values(values: tuple[int, ...]) -> str:
    """``1/4/16`` or, for a doubling series, ``64..16384 (x2)`` (short enough to wrap)."""
    if len(values) >= 4 and all(b == 2 * a for a, b in zip(values, values[1:])):
        return f"{values[0]}..{values[-1]} (x2)"
    return "/".join(map(str, values))


PresetOpt = Annotated[Optional[str], typer.Option(
    "--preset", rich_help_panel=GRID, show_default=DEFAULT_PRESET,
    help="Grid of batch sizes x input lengths: "
         + "; ".join(f"{name} ({_values(g.batch_sizes)} x {_values(g.input_lengths)}, "
                     f"{g.output_length} out)" for name, g in INFER_PRESETS.items()) + ".")]
InferPrecisionOpt = Annotated[str, typer.Option(
    "--precision", rich_help_panel="Workload",
    help="Comma list of fp32, bf16 (bf16: the weights and the KV cache are cast to bf16).")]
InferNvtxOpt = Annotated[str, typer.Option(
    "--nvtx", rich_help_panel="Workload", **choice(LEVELS),
    help="NVTX ranges: off, coarse (warmup/measure/prefill/decode), fine (+ decode step and "
         "the model's per-block ranges). See docs/MODEL.md.")]
MicroPrecisionOpt = Annotated[str, typer.Option(
    "--precision", help="Comma list of fp32, bf16 (tensors and weights in that dtype).")]
GridOpt = Annotated[Optional[Path], typer.Option(
    "--grid", rich_help_panel=GRID, dir_okay=False, metavar="FILE",
    help="A JSON or TOML grid file: batch_sizes, input_lengths, output_length and optionally "
         "max_batch_input_product (missing keys come from the default preset).")]
BatchSizesOpt = Annotated[Optional[str], typer.Option(
    "--batch-sizes", rich_help_panel=GRID, help="Comma list; replaces the grid's batch sizes.")]
InputLengthsOpt = Annotated[Optional[str], typer.Option(
    "--input-lengths", rich_help_panel=GRID,
    help="Comma list of prompt lengths in tokens; replaces the grid's.")]
OutputLengthOpt = Annotated[Optional[int], typer.Option(
    "--output-length", rich_help_panel=GRID,
    help="Tokens to generate per sequence (the grid's by default).")]
MaxProductOpt = Annotated[Optional[int], typer.Option(
    "--max-batch-input-product", rich_help_panel=GRID,
    show_default=f"{DEFAULT_MAX_BATCH_INPUT_PRODUCT} or the grid file's",
    help="Skip configs whose batch x input length exceeds this (0: no limit).")]
RunsOpt = Annotated[int, typer.Option("--runs", min=1, rich_help_panel=MEASURE,
                                      help="Measured generate calls per config.")]
WarmupOpt = Annotated[int, typer.Option("--warmup", min=0, rich_help_panel=MEASURE,
                                        help="Untimed generate calls first.")]
TemperatureOpt = Annotated[float, typer.Option(
    "--temperature", rich_help_panel=GENERATION,
    help="0: greedy decoding; > 0: sample from softmax(logits / temperature).")]
TopPOpt = Annotated[float, typer.Option(
    "--top-p", rich_help_panel=GENERATION,
    help="Nucleus sampling: draw from the most likely tokens holding this probability mass "
         "(needs --temperature > 0).")]
ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", rich_help_panel=GENERATION, metavar="hf:PATH",
    help="A local Hugging Face causal LM folder instead of the own model (needs "
         "transformers; nothing is downloaded).")]
OutDirOpt = Annotated[Path, typer.Option(
    "--out-dir", file_okay=False, metavar="DIR",
    help="Folder for the timestamped JSON, CSV, plots (and report); --output is the file the "
         "rendered table goes to.")]
SaveOpt = Annotated[bool, typer.Option(
    "--save/--no-save", help="Write the files into --out-dir (the table is printed either way).")]

# The options of infer -> ``InferSpec`` (``INFER.of(ctx)``).
INFER = OptionGroup("spec", InferSpec, {
    "size": SizeOpt, "d_model": DModelOpt, "d_ff": DffOpt, "layers": LayersOpt,
    "heads": HeadsOpt, "vocab": VocabOpt, "precision": InferPrecisionOpt,
    "attention": AttentionOpt, "nvtx": InferNvtxOpt, "device": DeviceOpt, "seed": SeedOpt,
    "threads": ThreadsOpt,
    "preset": PresetOpt, "grid_file": GridOpt, "batch_sizes": BatchSizesOpt,
    "input_lengths": InputLengthsOpt, "output_length": OutputLengthOpt, "runs": RunsOpt,
    "warmup": WarmupOpt, "max_batch_input_product": MaxProductOpt,
    "temperature": TemperatureOpt, "top_p": TopPOpt, "model": ModelOpt,
}, dataclass_defaults(InferSpec))

# The options of micro matmul and micro mlp -> ``MicroSpec`` (``MICRO.of(ctx)``).
MICRO = OptionGroup("spec", MicroSpec, {
    "precision": MicroPrecisionOpt, "device": DeviceOpt,
    "warmup": Annotated[int, typer.Option("--warmup", min=0, rich_help_panel=MEASURE,
                                          help="Untimed repetitions first.")],
    "runs": Annotated[int, typer.Option("--runs", min=1, rich_help_panel=MEASURE,
                                        help="Timed samples per config.")],
    "seed": SeedOpt, "threads": ThreadsOpt,
}, dataclass_defaults(MicroSpec))

micro_app = typer.Typer(name="micro", no_args_is_help=True, add_completion=False,
                        help="Micro-benchmarks: matmul time vs dimension, MLP time vs steps, "
                             "layers, batch and width, with fitted scaling exponents.")


def register(app: typer.Typer) -> None:
    """Add ``infer`` and the ``micro`` group to ``app``."""
    app.command("infer", cls=grouped(INFER(), OUTPUT(top=0)))(infer)
    app.add_typer(micro_app, name="micro")


# ---- infer ----------------------------------------------------------------------------------
def infer(
    ctx: typer.Context,
    out_dir: OutDirOpt = Path("infer_results"),
    save: SaveOpt = True,
    db: DbOpt = None,
) -> None:
    """Inference latency over a grid of batch sizes x input lengths.

    KV-cache generation of --output-length tokens after random prompts.
    Per config: TTFT (prefill_s), TPOT (decode_per_token_s), inter-token
    latency p50/p90/p99, total latency, tokens/s and peak memory: means
    over --runs after --warmup, synchronized after every token.

    Configs over --max-batch-input-product or the free memory are skipped
    with the reason. Writes JSON, CSV, heatmaps, scaling, breakdown and
    memory plots and a markdown report into --out-dir.

    Examples: `nsys-mine infer --size tiny --device cpu` ·
    `nsys-mine infer --size small --preset medium_scale --precision bf16`
    """
    from nvtx_model.errors import require_torch
    from nvtx_model.infer_config import expand_infer

    out: OutputSpec = OUTPUT.of(ctx)
    configs, plan = expand_infer(INFER.of(ctx))
    require_torch("nsys-mine infer")
    from nvtx_model.infer import INFER_COLUMNS, run_inference

    with progress_bar("infer") as progress:
        result = run_inference(configs, max_batch_input_product=plan.max_batch_input_product,
                               progress=progress, db=db)
    sentences = [f"grid: {plan.grid_source}; max_batch_input_product "
                 f"{plan.max_batch_input_product or 'none'}"]
    if save and result.rows:
        from profile_cli.model_results.infer_files import write_inference_outputs

        outputs = write_inference_outputs(
            result.rows, INFER_COLUMNS, out_dir, notes=result.notes,
            context={"grid_source": plan.grid_source,
                     "max_batch_input_product": plan.max_batch_input_product,
                     "planned": result.planned, "interrupted": result.interrupted})
        result.notes.append(f"wrote {len(outputs.files)} files to {out_dir}/, the report is "
                            f"{outputs.report}")
    if out.format == "table":
        sentences.append("TTFT = prefill_s, TPOT = decode_per_token_s, ITL = inter-token "
                         "latency, tok per s = generated tokens per second (the JSON/CSV keys: "
                         "docs/MODEL.md)")
    emit_sweep(result, INFER_COLUMNS, INFER_TABLE, out, "Inference latency per config",
               settings=INFER_SETTINGS, sentences=sentences, headers=INFER_HEADERS,
               drop=INFER_DROP,
               row_label=lambda r: f"batch {r['batch']}, input {r['input_length']}")


# ---- micro ----------------------------------------------------------------------------------
MicroOutDirOpt = Annotated[Path, typer.Option(
    "--out-dir", file_okay=False, metavar="DIR",
    help="Folder for the timestamped JSON, CSV and plots; --output is the file the rendered "
         "table goes to.")]


@micro_app.command("matmul", cls=grouped(MICRO(), OUTPUT(top=0)))
def matmul(
    ctx: typer.Context,
    dims: Annotated[Optional[str], typer.Option(
        "--dims", show_default=f"{','.join(map(str, DEFAULT_DIMS['cpu']))} on CPU, "
                               f"{','.join(map(str, DEFAULT_DIMS['cuda']))} on CUDA",
        help="Comma list of square dimensions n (n x n times n x n).")] = None,
    out_dir: MicroOutDirOpt = Path("micro_results"),
    save: SaveOpt = True,
    db: DbOpt = None,
) -> None:
    """Square matmul time and TFLOP/s vs dimension.

    Fits the exponent of time vs dimension (~3 once compute-bound).

    Example: `nsys-mine micro matmul --dims 256,512,1024,2048`
    """
    from nvtx_model.errors import require_torch

    require_torch("nsys-mine micro matmul")
    configs = MICRO.of(ctx).matmul_configs(dims)
    from nvtx_model.micro import MATMUL_COLUMNS, matmul_benchmark

    with progress_bar("matmul") as progress:
        result = matmul_benchmark(configs, progress=progress, db=db)
    _finish("matmul", result, MATMUL_COLUMNS, MATMUL_TABLE, out_dir, save, OUTPUT.of(ctx),
            ("precision",), "dim", "Square matmul time per dimension")


@micro_app.command("mlp", cls=grouped(MICRO(), OUTPUT(top=0)))
def mlp(
    ctx: typer.Context,
    params: Annotated[str, typer.Option(
        "--params", show_default=False,
        help=f"Comma list of the parameters to scale: {', '.join(MLP_PARAMS)} (default: all).")
    ] = ",".join(MLP_PARAMS),
    scales: Annotated[str, typer.Option(
        "--scales", help="Multiples of the base value to run each parameter at.")
    ] = ",".join(map(str, DEFAULT_SCALES)),
    base_steps: Annotated[int, typer.Option("--base-steps", min=1,
                                            help="Base num_steps.")] = MLP_BASE["num_steps"],
    base_layers: Annotated[int, typer.Option("--base-layers", min=1,
                                             help="Base num_layers.")] = MLP_BASE["num_layers"],
    base_batch: Annotated[int, typer.Option("--base-batch", min=1,
                                            help="Base batch_size.")] = MLP_BASE["batch_size"],
    base_dim: Annotated[int, typer.Option("--base-dim", min=1,
                                          help="Base width (dim).")] = MLP_BASE["dim"],
    out_dir: MicroOutDirOpt = Path("micro_results"),
    save: SaveOpt = True,
    db: DbOpt = None,
) -> None:
    """MLP (Linear + GELU) forward + backward time vs steps, layers, batch, dim.

    Each parameter scales from the base config with the others fixed; the
    fitted exponent per parameter (~1 for steps, layers and batch, ~2 for
    dim once large enough) and a plot per parameter.

    Examples: `nsys-mine micro mlp` · `nsys-mine micro mlp --params dim --scales 1,2,4,8`
    """
    from nvtx_model.errors import require_torch

    base = {"num_steps": base_steps, "num_layers": base_layers, "batch_size": base_batch,
            "dim": base_dim}
    configs = MICRO.of(ctx).mlp_configs(params, scales, base)
    require_torch("nsys-mine micro mlp")
    from nvtx_model.micro import MLP_COLUMNS, mlp_benchmark

    with progress_bar("mlp") as progress:
        result = mlp_benchmark(configs, progress=progress, db=db)
    _finish("mlp", result, MLP_COLUMNS, MLP_TABLE, out_dir, save, OUTPUT.of(ctx),
            ("param", "precision"), "param", "MLP time per scaled parameter")


def _finish(kind: str, result: Any, columns: list[str], table: list[str], out_dir: Path,
            save: bool, out: OutputSpec, series: tuple[str, ...], x: str, title: str) -> None:
    from profile_cli.model_results.micro_files import exponent_sentences

    if save and result.rows:
        from profile_cli.model_results.micro_files import write_micro_outputs

        files = write_micro_outputs(kind, result.rows, columns, out_dir)
        plots = [f.name for f in files if f.suffix == ".png"]
        result.notes.append(f"wrote {len(files)} files to {out_dir}/"
                            + (f" (plots: {', '.join(plots)})" if plots else ""))
    emit_sweep(result, columns, table, out, title, settings=MICRO_SETTINGS,
               sentences=exponent_sentences(result.rows, series, x) if result.rows else [],
               headers=MICRO_HEADERS, drop=MICRO_DROP,
               row_label=lambda r: (f"dim {r['dim']}" if kind == "matmul"
                                    else f"{r['param']} {r['value']}"))
