"""``nsys-mine profile`` and ``nsys-mine sweep``: the model, or your own program, under Nsight
Systems, mined.

Thin commands over ``profile_cli.runs.nsys_run`` (one config), ``profile_cli.runs.command``
(``profile -- COMMAND``: your program) and ``profile_cli.runs.sweep`` (many, resumable);
rendering through ``reports.render``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, List, Optional

import typer

from nsys_parsers.errors import BadOption
from nvtx_model.infer_config import DEFAULT_PROFILE_OUTPUT_LENGTH, WORKLOAD_KINDS
from nvtx_model.nvtx_ranges import LEVELS
from nvtx_model.workload import WorkloadSpec
from profile_cli.commands.groups import (
    GroupedCommand,
    OptionGroup,
    choice,
    dataclass_defaults,
    grouped,
)
from profile_cli.commands.output import OUTPUT, OutputSpec, join_rendered
from profile_cli.commands.progress import progress_board
from profile_cli.commands.workload import PANEL as WORKLOAD_PANEL
from profile_cli.commands.workload import WORKLOAD
from profile_cli.runs.executors import EXECUTORS, SLURM_TIME_MARGIN_MIN, ExecutorSpec
from profile_cli.runs.nsys_run import NsysSpec

NSYS_PANEL = "Nsight Systems"
SWEEP_TABLES = ("runs", "dominant", "mix", "ranges")

OutOpt = Annotated[Path, typer.Option(
    "--out-dir", "--out", file_okay=False, metavar="DIR",
    help="Folder the runs go to (NAME.nsys-rep, NAME.sqlite, NAME.json); --output is the "
         "file the rendered tables go to.")]
NsysPathOpt = Annotated[Optional[str], typer.Option(
    "--nsys", rich_help_panel=NSYS_PANEL,
    help="The nsys binary (default: $NSYS, PATH, CUDA/Nsight folders, cached installs).")]
TraceOpt = Annotated[Optional[str], typer.Option(
    "--trace", rich_help_panel=NSYS_PANEL,
    help="nsys --trace set (default: cuda,nvtx,osrt with a GPU, nvtx,osrt on CPU).")]
SamplingOpt = Annotated[bool, typer.Option(
    "--quiet-sampling/--cpu-sampling", rich_help_panel=NSYS_PANEL,
    help="Pass --sample=none --cpuctxsw=none (default; without them nsys 2022.4's agent can "
         "hang after the program ends).")]
ExtraArgsOpt = Annotated[Optional[List[str]], typer.Option(
    "--nsys-arg", rich_help_panel=NSYS_PANEL,
    help="Extra argument for `nsys profile` (repeat the option for several).")]
TimeoutOpt = Annotated[float, typer.Option(
    "--timeout", min=1, rich_help_panel=NSYS_PANEL,
    help="Seconds before a hanging nsys run is ended (with its leftover processes).")]
InstallOpt = Annotated[bool, typer.Option(
    "--install-nsys", rich_help_panel=NSYS_PANEL,
    help="If no nsys is found, fetch nsys 2022.4 (Debian/Ubuntu x86-64) into the user cache.")]
# The nsys options -> ``NsysSpec`` (``NSYS.of(ctx)``).
NSYS = OptionGroup("nsys_spec", NsysSpec, {
    "nsys": NsysPathOpt, "trace": TraceOpt, "quiet_sampling": SamplingOpt,
    "extra_args": ExtraArgsOpt, "timeout_s": TimeoutOpt, "install": InstallOpt,
}, dataclass_defaults(NsysSpec), convert={"extra_args": lambda v: list(v or [])})
EXECUTOR_PANEL = "Where configs run (local, or Slurm through submitit)"
# The Slurm options about the wait have a panel of their own: Typer gives a flag pair's second
# name a column, which took a fifth of the executor panel's width at 80 columns.
WAITING_PANEL = "While Slurm jobs run"
COMMAND_PANEL = "Your own command"
ExecutorOpt = Annotated[str, typer.Option(
    "--executor", rich_help_panel=EXECUTOR_PANEL, **choice(EXECUTORS),
    help="local: run the configs here; slurm: one Slurm job per config (one job array), "
         "through submitit, from a login node. See docs/CLUSTER.md.")]
JobsOpt = Annotated[Optional[int], typer.Option(
    "--jobs", "-j", min=1, metavar="N", rich_help_panel=EXECUTOR_PANEL, show_default=False,
    help="Configs at once. local: on a CUDA machine each config gets its own GPU "
         "(CUDA_VISIBLE_DEVICES; default: the GPU count); on CPU default 1 (more disturbs "
         "timings). slurm: array tasks running at once (default: no limit).")]
PartitionOpt = Annotated[Optional[str], typer.Option(
    "--slurm-partition", metavar="NAME", rich_help_panel=EXECUTOR_PANEL,
    help="Slurm partition (default: the cluster's default).")]
SlurmTimeOpt = Annotated[Optional[str], typer.Option(
    "--slurm-time", metavar="TIME", rich_help_panel=EXECUTOR_PANEL, show_default=False,
    help=f"Time limit per job: minutes, HH:MM:SS or D-HH:MM:SS (default: --timeout plus "
         f"{SLURM_TIME_MARGIN_MIN} minutes). A job over it becomes `timeout`.")]
GpusPerTaskOpt = Annotated[Optional[int], typer.Option(
    "--slurm-gpus-per-task", min=0, metavar="N", rich_help_panel=EXECUTOR_PANEL,
    help="GPUs per job (sbatch --gpus-per-task; default: none requested).")]
SlurmMemOpt = Annotated[Optional[str], typer.Option(
    "--slurm-mem", metavar="SIZE", rich_help_panel=EXECUTOR_PANEL,
    help="Memory per job, e.g. 32G (sbatch --mem).")]
SlurmArgOpt = Annotated[Optional[List[str]], typer.Option(
    "--slurm-arg", metavar="KEY=VALUE", rich_help_panel=EXECUTOR_PANEL,
    help="Any other sbatch option, e.g. account=proj, cpus-per-task=8, qos=high, exclusive "
         "(repeat the option for several).")]
SlurmSetupOpt = Annotated[Optional[List[str]], typer.Option(
    "--slurm-setup", metavar="CMD", rich_help_panel=EXECUTOR_PANEL,
    help="Shell line run in each job before the config, e.g. 'module load cuda' (repeat "
         "the option for several).")]
SlurmPollOpt = Annotated[float, typer.Option(
    "--slurm-poll", min=0.5, metavar="S", rich_help_panel=WAITING_PANEL,
    help="Seconds between questions to Slurm (squeue/sacct) while waiting.")]
WaitOpt = Annotated[bool, typer.Option(
    "--wait/--no-wait", rich_help_panel=WAITING_PANEL,
    help="slurm: wait for the jobs and record them (default), or submit and return; "
         "`sweep --collect OUT` records the jobs that finished since.")]
CancelOpt = Annotated[Optional[bool], typer.Option(
    "--cancel-on-exit/--keep-on-exit", rich_help_panel=WAITING_PANEL, show_default=False,
    help="slurm: on Ctrl-C, cancel the unfinished jobs, or leave them to run (default: ask "
         "on a terminal, keep them otherwise).")]
# The executor options -> ``ExecutorSpec`` (``EXECUTOR.of(ctx)``).
EXECUTOR = OptionGroup("executor", ExecutorSpec, {
    "executor": ExecutorOpt, "jobs": JobsOpt, "slurm_partition": PartitionOpt,
    "slurm_time": SlurmTimeOpt, "slurm_gpus_per_task": GpusPerTaskOpt,
    "slurm_mem": SlurmMemOpt, "slurm_args": SlurmArgOpt, "slurm_setup": SlurmSetupOpt,
    "slurm_poll_s": SlurmPollOpt, "wait": WaitOpt, "cancel_on_exit": CancelOpt,
}, dataclass_defaults(ExecutorSpec), convert={"slurm_args": lambda v: list(v or []),
                                              "slurm_setup": lambda v: list(v or [])})
ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite existing exports.")]
WorkloadKindOpt = Annotated[str, typer.Option(
    "--workload", **choice(WORKLOAD_KINDS),
    help="bench: warmup + measured steps of --mode; infer: KV-cache generation (NVTX prefill, "
         "decode, decode step) of --batch prompts of --context tokens, --output-length new "
         "tokens, --steps measured generate calls.")]
OutputLengthOpt = Annotated[int, typer.Option(
    "--output-length", min=1, help="--workload infer: tokens generated per prompt.")]
# --nvtx of profile and sweep: the model's levels, or the ranges added to your own program
NvtxOpt = Annotated[Optional[str], typer.Option(
    "--nvtx", rich_help_panel=WORKLOAD_PANEL, show_default="model: fine",
    help="The model: off, coarse or fine (docs/MODEL.md). Your command: a comma list of "
         "modules[:DEPTH] (a range per nn.Module call, named like encoder.0.proj (Linear), "
         "and its backward), ops (operator ranges: CUDA builds of torch) and steps (a `step` "
         "range per optimizer step); default: none.")]
WithinOpt = Annotated[Optional[str], typer.Option(
    "--within", metavar="RANGE", show_default=False,
    help="Mine only what ran inside this NVTX range. Default: measure (the model's measured "
         "steps); your command: the whole run (--within step leaves start-up out with "
         "--nvtx steps).")]
CommandArg = Annotated[Optional[List[str]], typer.Argument(
    metavar="[-- COMMAND [ARGS]...]", show_default=False,
    help="Your own program and its arguments, after `--`.")]
COMMAND_OPT_HELP = ("Your own command, one run per combination of --grid: placeholders {NAME} "
                    "take the values of --grid NAME=... (e.g. \"python train.py --bs {bs}\").")
DASHDASH_ARGS = "nsys_mine.args"


class ProgramCommand(GroupedCommand):
    """``profile``: keeps the raw arguments, so that the command can tell ``-- COMMAND`` from
    a command given without ``--``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        ctx.meta[DASHDASH_ARGS] = list(args)
        return super().parse_args(ctx, args)


# profile's and sweep's workload: the tiny model, a short training run; --nvtx also takes the
# ranges added to your own program
MODEL_WORKLOAD = WORKLOAD(default_size="tiny", context="128", mode="train", nvtx=None, warmup=2,
                          steps=3, annotations={"nvtx": NvtxOpt})


def register(app: typer.Typer) -> None:
    """Add ``profile`` and ``sweep`` to ``app``."""
    # the first word that is not an option ends the options: `profile python x.py --bs 8`
    # reaches the command (which asks for `--`) instead of failing on --bs
    app.command("profile", cls=grouped(MODEL_WORKLOAD, NSYS(), OUTPUT(), base=ProgramCommand),
                context_settings={"allow_interspersed_args": False})(profile)
    app.command("sweep", cls=grouped(MODEL_WORKLOAD, NSYS(), EXECUTOR(), OUTPUT(top=0)))(sweep)


def profile(
    ctx: typer.Context,
    out_dir: OutOpt = Path("profiles"),
    force: ForceOpt = False,
    workload_kind: WorkloadKindOpt = "bench",
    output_length: OutputLengthOpt = DEFAULT_PROFILE_OUTPUT_LENGTH,
    within: WithinOpt = None,
    command: CommandArg = None,
) -> None:
    """Profile one config of the Transformer, or your own program, under nsys and show what
    dominates each range.

    Writes NAME.nsys-rep, NAME.sqlite and a NAME.json sidecar into --out-dir, then mines the
    export (measured steps only, warmup left out): range times, the dominant kernel of
    step/forward/backward/optimizer and the attention parts, and the top kernels.
    --workload infer profiles KV-cache generation instead: ranges prefill, decode and (fine)
    decode step, so the dominant kernel of each phase shows.

    Your own program: `nsys-mine profile [OPTIONS] -- COMMAND [ARGS]...` runs it unchanged
    under nsys (NAME from the command, NAME.log holds its output) and mines the whole run.
    --nvtx modules[:DEPTH],steps adds a range per nn.Module call and per training step. The
    exit code is the program's (1: nsys-mine could not run it or wrote no export).

    Examples: `nsys-mine profile --size tiny --context 128 --mode train` ·
    `nsys-mine profile --size small --precision bf16 --workload infer --out-dir runs/` ·
    `nsys-mine profile --nvtx modules:2,steps -- python train.py --bs 8`
    """
    workload, nsys_spec, out = WORKLOAD.of(ctx), NSYS.of(ctx), OUTPUT.of(ctx)
    if command or _dashdash(ctx, command or []):
        _profile_program(ctx, command or [], workload, nsys_spec, out, out_dir, force, within)
        return
    from profile_cli.runs.mining import mine_profile
    from profile_cli.runs.nsys_run import ProfileFailed, profile_config

    workload = replace(workload, nvtx=model_nvtx(workload.nvtx))
    configs: list[Any]
    if workload_kind == "infer":
        from nvtx_model.infer_config import infer_configs_from_workload

        configs = list(infer_configs_from_workload(workload, output_length))
    else:
        configs = list(workload.configs())
    if len(configs) != 1:
        raise BadOption(f"profile runs one config; these options give {len(configs)} "
                        f"({', '.join(c.label() for c in configs[:4])}...). Use `nsys-mine "
                        f"sweep` for several.")
    from nvtx_model.errors import require_torch

    require_torch("nsys-mine profile")
    result = profile_config(configs[0], out_dir, nsys_spec, force=force)
    if result.status != "ok":
        raise ProfileFailed(f"{result.status}: {result.reason}\n(sidecar: {result.sidecar})")
    out.emit(render_profile(mine_profile(result, within=within), out, within=within))


def model_nvtx(value: str | None) -> str:
    """--nvtx for the built-in model: off, coarse or fine (default fine)."""
    if value is None:
        return "fine"
    if value not in LEVELS:
        from nvtx_model.program_nvtx import PARTS

        if value.split(",")[0].split(":")[0] in PARTS:
            raise BadOption(f"--nvtx {value} adds ranges to your own program: give the program "
                            f"after `--` (nsys-mine profile --nvtx {value} -- python "
                            f"train.py); the built-in model takes off, coarse or fine.")
        raise BadOption(f"--nvtx: {value!r} is not one of {', '.join(LEVELS)} (the model's "
                        f"levels); your own program (after --) takes modules[:DEPTH], ops, "
                        f"steps.")
    return value


def program_nvtx(value: str | None) -> str:
    """--nvtx for your own program: modules[:DEPTH], ops, steps (default: none)."""
    from nvtx_model.program_nvtx import ProgramNvtx

    if value in ("coarse", "fine"):
        raise BadOption(f"--nvtx {value} is a level of the built-in model; for your own "
                        f"program use modules[:DEPTH], ops or steps (e.g. --nvtx "
                        f"modules:2,steps), or off.")
    return str(ProgramNvtx.parse(value))


def _dashdash(ctx: typer.Context, command: list[str]) -> bool:
    """Whether the command (the last arguments) came after `--`."""
    args = ctx.meta.get(DASHDASH_ARGS) or []
    at = len(args) - len(command) - 1
    return at >= 0 and args[at] == "--"


def _given(ctx: typer.Context, names: list[str]) -> list[str]:
    """The options of ``names`` that the user gave (on the command line or the
    environment), as they are spelled."""
    given = []
    for param in ctx.command.params:
        if param.name in names:
            source = ctx.get_parameter_source(param.name)
            if source is not None and source.name in ("COMMANDLINE", "ENVIRONMENT"):
                given.append(param.opts[0])
    return given


def _program_only(ctx: typer.Context, what: str) -> None:
    """Options of the built-in model make no sense with your own command."""
    from dataclasses import fields

    names = [f.name for f in fields(WorkloadSpec) if f.name != "nvtx"] + [
        "workload_kind", "output_length"]
    given = _given(ctx, names)
    if given:
        raise BadOption(f"{', '.join(given)} {'sets' if len(given) == 1 else 'set'} the "
                        f"built-in model, not {what}: leave "
                        f"{'it' if len(given) == 1 else 'them'} out (your program takes its "
                        f"own arguments).")


def _profile_program(ctx: typer.Context, command: list[str], workload: WorkloadSpec,
                     nsys_spec: NsysSpec, out: OutputSpec, out_dir: Path, force: bool,
                     within: str | None) -> None:
    import os
    import shlex

    from profile_cli.runs.command import CommandConfig
    from profile_cli.runs.mining import mine_profile
    from profile_cli.runs.nsys_run import ProfileFailed, profile_config

    if not _dashdash(ctx, command):
        raise BadOption(f"put `--` before the command to profile: nsys-mine profile "
                        f"[OPTIONS] -- {shlex.join(command)}")
    if not command:
        raise BadOption("no command after `--`; e.g. `nsys-mine profile -- python train.py`")
    _program_only(ctx, "your command")
    cfg = CommandConfig(argv=list(command), cwd=os.getcwd(), nvtx=program_nvtx(workload.nvtx))
    from profile_cli.commands.progress import status

    try:
        what = shlex.join(command)
        what = what if len(what) <= 40 else what[:39] + "…"
        with status(f"running `{what}` under nsys (output: {out_dir / cfg.name}.log)",
                    delay_s=0.0):
            result = profile_config(cfg, out_dir, nsys_spec, force=force)
    except KeyboardInterrupt:
        _interrupted(out_dir / f"{cfg.name}.sqlite")
    if result.sqlite is None or result.status == "timeout":
        raise ProfileFailed(f"{result.status}: {result.reason}\n(sidecar: {result.sidecar}; the "
                            f"program's output: {result.log})")
    out.emit(render_command(mine_profile(result, within=within), result, out, within))
    code = result.exit_code or 0
    if code:
        raise typer.Exit(code if code > 0 else 128 - code)


def _interrupted(export: Path) -> None:
    """Ctrl-C: the program and nsys were ended; say what nsys wrote before it ended."""
    import sys

    from profile_cli.runs.command import export_problem

    text = "interrupted: the program and nsys were ended, nothing is left running"
    if export_problem(export) is None:
        text += (f"; nsys wrote {export} (what ran until then): `nsys-mine ranges {export}` "
                 f"mines it")
    sys.stderr.write(f"Error: {text}.\n")
    raise typer.Exit(130)


def render_command(report: Any, result: Any, out: OutputSpec, within: str | None) -> Any:
    """The answer for your own program: caption (export, command, exit code), the NVTX
    ranges by time, the dominant kernel of the run and of each range, the top kernels; JSON:
    one object with ``export``, ``config``, ``exit_code``, ``ranges``, ``dominant``,
    ``kernels`` and ``notes``. Module ranges (``--nvtx modules``) read as a tree."""
    notes = list(report.notes)
    code = result.exit_code
    if result.status != "ok":
        notes.insert(0, f"{result.status}: {result.reason}")
    notes.append(f"the program's output: {result.log}")
    cfg = report.config
    scope = f"inside {within!r}" if within else "the whole run"
    head = [f"export: {report.export}",
            f"command: {cfg['command']} (exit code {code}; {result.wall_s:g} s under nsys)",
            f"NVTX added: {cfg['nvtx']}; {cfg['device']}, trace {result.trace}; in "
            f"{cfg['cwd']}"]
    return _tables(report, out, notes, {"exit_code": code}, caption=head,
                   range_title=f"NVTX ranges ({scope})", whole=f"({scope})")


def render_profile(report: Any, out: OutputSpec, *, within: str | None = None) -> Any:
    """The profile's answer: caption (export, config), range times, dominant kernels, top
    kernels; JSON: one object with ``export``, ``config``, ``ranges``, ``dominant``,
    ``kernels`` and ``notes``."""
    cfg = report.config
    shape = (f"{cfg['size']} (d_model {cfg['d_model']}, {cfg['layers']} layers, {cfg['heads']} "
             f"heads)")
    if cfg.get("mode") == "infer":
        what = (f"generating {cfg['output_length']} tokens after {cfg['batch']} prompts of "
                f"{cfg['input_length']} tokens")
        runs = "generate calls"
    else:
        what = f"context {cfg['context']}, batch {cfg['batch']}, {cfg['mode']}"
        runs = "steps"
    head = (f"{shape}, {what}, {cfg['precision']}, {cfg['attention']} attention, NVTX "
            f"{cfg['nvtx']}, {cfg['device']}, {cfg['warmup']} warmup + {cfg['steps']} measured "
            f"{runs}")
    # ranges keep the model's order (step > forward > ...), not the GPU-time ranking
    return _tables(report, out, report.notes, {}, caption=[f"export: {report.export}", head],
                   range_title=(f"NVTX ranges (measured {runs})" if within in (None, "measure")
                                else f"NVTX ranges (inside {within!r})"),
                   whole=f"(measured {runs})", ranges_in_order=True)


def _tables(report: Any, out: OutputSpec, notes: list[str], extra: dict[str, Any], *,
            caption: list[str], range_title: str, whole: str,
            ranges_in_order: bool = False) -> Any:
    """The ranges, dominant kernels and top kernels of a mined run, each through its
    analysis's view (a module tree's when its rows are one): three tables with ``caption``
    first, or for JSON one object (the export, its config, ``extra``, the three row lists and
    the notes). ``whole``: what the whole-export row stands for; ``ranges_in_order``: the
    ranges as mined (the model's order), not ranked."""
    from reports.render import Rendered, render_rows, to_json, top_rows

    ranges, dominant, kernels = (_shown(n, rows) for n, rows in (
        ("ranges", report.ranges), ("dominant", report.dominant), ("kernels", report.kernels)))
    if out.format == "json":
        def rows(items: list[dict[str, Any]], cols: list[str], view: Any) -> list[dict]:
            items = top_rows(items, view, out.top)[0] if out.top else items
            return [{c: r.get(c) for c in cols} for r in items]
        return Rendered(text=to_json({
            "export": report.export, "config": report.config, **extra,
            "ranges": rows(report.ranges, *ranges), "dominant": rows(report.dominant, *dominant),
            "kernels": rows(report.kernels, *kernels), "notes": notes}))
    opts: dict[str, Any] = dict(top=out.top, width=out.width, wide=out.wide)
    range_view = replace(ranges[1], rank_by=()) if ranges_in_order else ranges[1]
    parts = [render_rows(report.ranges, ranges[0], out.format, title=range_title,
                         caption=caption, notes=notes, view=range_view, **opts)]
    if report.dominant:
        parts += [
            render_rows(report.dominant, dominant[0], out.format,
                        title="Dominant kernel per range", sentences=report.sentences,
                        view=replace(dominant[1], null_labels={"range": whole}), **opts),
            render_rows(report.kernels, kernels[0], out.format, title="Top kernels",
                        view=kernels[1], **opts),
        ]
    return join_rendered(parts, out.format)


def _shown(name: str, rows: list[dict[str, Any]]) -> tuple[list[str], Any]:
    """(columns, view) of the analysis ``name``'s rows as its declaration shows them: a
    module tree's when they are one (``Analysis.view_of``)."""
    from reports.module_tree import TREE_COLUMNS, is_tree
    from reports.pipeline.registry import get
    from reports.pipeline.report import Report

    a = get(name)
    columns = list(a.columns) + (TREE_COLUMNS if a.tree_view is not None and is_tree(rows)
                                 else [])
    view = a.view_of(Report(rows=rows, columns=columns), {})
    assert view is not None
    return columns, view


def sweep(
    ctx: typer.Context,
    out_dir: OutOpt = Path("sweep"),
    report: Annotated[Optional[Path], typer.Option(
        "--report", file_okay=False, metavar="DIR",
        help="Only re-render the tables of an existing sweep folder; run nothing.")] = None,
    collect: Annotated[Optional[Path], typer.Option(
        "--collect", file_okay=False, metavar="DIR",
        help="Record the Slurm jobs of a sweep folder that ended since its driver left "
             "(--no-wait, or a driver that died), wait for the rest (unless --no-wait), "
             "render the tables. Submits nothing.")] = None,
    retry: Annotated[bool, typer.Option(
        "--retry", help="Run again the configs that did not end ok (resume skips them).")] = False,
    table: Annotated[str, typer.Option(
        "--table", help=f"Which table to show: {', '.join(SWEEP_TABLES)} or all.",
        **choice(SWEEP_TABLES + ("all",), "TABLE"))] = "all",
    command: Annotated[Optional[str], typer.Option(
        "--command", metavar="COMMAND", rich_help_panel=COMMAND_PANEL,
        help=COMMAND_OPT_HELP)] = None,
    grid: Annotated[Optional[List[str]], typer.Option(
        "--grid", metavar="NAME=V1,V2", rich_help_panel=COMMAND_PANEL,
        help="The values of a placeholder of --command (repeat the option for each "
             "placeholder; every combination runs).")] = None,
) -> None:
    """Profile sizes x contexts x modes x precisions x attention, or your command over a
    --grid, one nsys run per config.

    Configs run here (one at a time, or --jobs N at once: one GPU each) or as Slurm jobs
    (--executor slurm). An index (OUT_DIR/index.sqlite) records each config's status (queued,
    running, ok, oom, failed, timeout, skipped, cancelled), exports, wall time, job id and
    dominant kernels; re-running resumes and never runs or submits a config twice. Tables:
    dominant kernel per config and range, and the kernel-category mix of forward vs the whole
    step.

    Your own command: --command "python train.py --bs {bs}" --grid bs=8,16 runs it once per
    combination of the grid values (--nvtx modules,steps adds ranges to each run).

    Examples: `nsys-mine sweep --size tiny,small --context 128,256 --mode forward,train
    --out-dir sweep/` · `nsys-mine sweep --executor slurm --size small,medium --out-dir cs336/`
    · `nsys-mine sweep --command "python train.py --bs {bs}" --grid bs=8,16 --out-dir bs/`
    """
    from profile_cli.runs.sweep import sweep_tables

    if report is not None and collect is not None:
        raise BadOption("--report only renders and --collect records finished jobs; give one "
                        "of them.")
    spec = _sweep_spec(ctx, command, grid)
    outcome = None
    folder = report if report is not None else collect if collect is not None else out_dir
    if report is None:
        outcome = _run_or_collect(ctx, spec, folder, collect=collect is not None, retry=retry)
    tables = sweep_tables(folder)
    notes = list(tables.notes)
    if outcome is not None:
        notes[:0] = sweep_notes(outcome, folder)
    wanted = list(SWEEP_TABLES) if table == "all" else [table]
    out = OUTPUT.of(ctx)
    out.emit(render_sweep(tables, wanted, out, notes))
    if outcome is not None and outcome.interrupted:
        raise typer.Exit(130)


def _sweep_spec(ctx: typer.Context, command: str | None, grid: list[str] | None) -> Any:
    """What sweep runs: your --command over the --grid (a ``CommandSweep``), or the model's
    configs (the ``WorkloadSpec`` of the options). BadOption for a --grid without --command
    and for model options given with --command."""
    workload = WORKLOAD.of(ctx)
    if command is not None:
        import os

        from profile_cli.runs.command import CommandSweep

        _program_only(ctx, "--command")
        return CommandSweep(template=command, grid=tuple(grid or ()),
                            nvtx=program_nvtx(workload.nvtx), cwd=os.getcwd())
    if grid:
        raise BadOption("--grid gives the values of --command's placeholders; add --command "
                        "\"python train.py --bs {bs}\" (or sweep the model with --size, "
                        "--context, ...).")
    return replace(workload, nvtx=model_nvtx(workload.nvtx))


def _run_or_collect(ctx: typer.Context, spec: Any, folder: Path, *, collect: bool,
                    retry: bool) -> Any:
    """Run the sweep ``spec`` into ``folder`` (resuming it), or with ``collect`` record the
    Slurm jobs of ``folder`` that ended; a progress board on stderr. Out: the sweep's
    outcome (``profile_cli.runs.sweep``)."""
    from profile_cli.runs.sweep import collect_sweep, run_sweep

    executor: ExecutorSpec = EXECUTOR.of(ctx)
    with progress_board("sweep") as board:
        ask = _cancel_question(board, folder)
        if collect:
            return collect_sweep(folder, executor, progress=board, confirm_cancel=ask)
        # Slurm jobs need torch on the nodes only; a command brings its own Python
        if executor.executor == "local" and isinstance(spec, WorkloadSpec):
            from nvtx_model.errors import require_torch

            require_torch("nsys-mine sweep")
        return run_sweep(spec, folder, NSYS.of(ctx), executor, retry=retry, progress=board,
                         warn=_warn, confirm_cancel=ask)


def _warn(message: str) -> None:
    import sys

    sys.stderr.write(f"Warning: {message}\n")


def _cancel_question(board, folder: Path):
    """Ctrl-C during a Slurm sweep: ask on a terminal whether to cancel its jobs."""
    import sys

    def ask(queued: int, running: int) -> bool:
        if not sys.stdin.isatty():
            return False
        if board is not None:
            board.stop()
        return typer.confirm(
            f"\nCancel the sweep's {queued + running} unfinished Slurm job(s) ({running} "
            f"running, {queued} queued)? If not, they go on and `nsys-mine sweep --collect "
            f"{folder}` records them later", default=False, err=True)
    return ask


def sweep_notes(outcome, folder: Path) -> list[str]:
    """What this sweep did, for the notes above its tables."""
    notes = []
    if outcome.interrupted:
        notes.append("interrupted: the index holds every config finished so far; run the same "
                     "command again to resume.")
    if outcome.submitted:
        jobs = ", ".join(outcome.job_ids)
        kind = "job array" if len(outcome.submitted) > 1 else "job"
        notes.append(f"submitted {len(outcome.submitted)} config(s) to Slurm ({kind} {jobs}); "
                     f"logs in {folder / 'slurm'}")
    if outcome.planned:
        notes.append(f"{len(outcome.ran)} config(s) run, {len(outcome.resumed)} already in the "
                     f"index (resumed), of {outcome.planned}; index: {folder / 'index.sqlite'}")
    elif outcome.ran:
        notes.append(f"{len(outcome.ran)} finished config(s) recorded; index: "
                     f"{folder / 'index.sqlite'}")
    if outcome.cancelled:
        notes.append(f"cancelled {len(outcome.cancelled)} Slurm job(s); --retry runs them "
                     f"again.")
    return notes + list(outcome.notes)


def render_sweep(tables: Any, wanted: list[str], out: OutputSpec, notes: list[str]) -> Any:
    from profile_cli.runs.sweep import (
        COMMAND_RUN_COLUMNS,
        COMMAND_RUN_VIEW,
        DOMINANT_COLUMNS,
        MIX_COLUMNS,
        RANGE_TIME_COLUMNS,
        RUN_COLUMNS,
        RUN_VIEW,
    )
    from reports.render import Rendered, View, render_rows, to_json

    fmt = out.format
    runs: tuple[list[dict[str, Any]], list[str], str, Any] = (
        tables.runs, RUN_COLUMNS, "Configs", RUN_VIEW)
    if tables.kind == "command":
        runs = (tables.runs, COMMAND_RUN_COLUMNS, "Runs of the command", COMMAND_RUN_VIEW)
    data: dict[str, tuple[list[dict[str, Any]], list[str], str, Any]] = {
        "runs": runs,
        "dominant": (tables.dominant, DOMINANT_COLUMNS, "Dominant kernel per config and range",
                     View(columns=["config", "range", "share_pct", "per_range_instance",
                                   "category", "kernel"], noun="rows")),
        "mix": (tables.mix, MIX_COLUMNS, "Kernel-category mix: forward vs the whole step (%)",
                View(columns=["config", *MIX_COLUMNS[1:]], noun="rows",
                     hide_if_zero=tuple(c for c in MIX_COLUMNS if c.endswith("_pct")))),
        "ranges": (tables.range_times, RANGE_TIME_COLUMNS, "Range times (measured steps)"
                   if tables.kind != "command" else "Range times",
                   View(columns=["config", *RANGE_TIME_COLUMNS[1:]], noun="rows",
                        hide_if_zero=("gpu_inclusive_ns",))),
    }
    if fmt == "json":
        obj: dict[str, Any] = {k: [{c: r.get(c) for c in data[k][1]} for r in data[k][0]]
                               for k in wanted}
        obj["notes"] = notes
        return Rendered(text=to_json(obj))
    if len(wanted) > 1 and fmt != "csv":  # empty tables (CPU sweeps: no kernels) say nothing
        wanted = [k for k in wanted if data[k][0] or k == "runs"]
    parts = []
    for i, key in enumerate(wanted):
        rows, cols, title, view = data[key]
        if fmt == "csv" and len(wanted) > 1:
            body = render_rows(rows, cols, fmt).as_text() or ""
            parts.append(Rendered(text=f"# {key}\n" + body))
            continue
        parts.append(render_rows(rows, cols, fmt, title=title, notes=notes if i == 0 else (),
                                 view=view, top=out.top, width=out.width, wide=out.wide))
    return join_rendered(parts, fmt)
