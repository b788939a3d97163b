"""``nsys-mine sweep``: profile many configs, each in its own nsys run, with a resumable index.

The index (``OUT/index.sqlite``, ``profile_cli.runs.index``; open it in Datasette) holds per
config: ``runs`` (status queued/running/ok/oom/failed/timeout/skipped/cancelled, export paths,
wall time, where it ran, the dominant kernel and share of forward/backward/optimizer),
``dominant`` (the dominant kernel per range) and ``mix`` (kernel-category shares of ``forward``
and of the whole ``step``). A config's rows are written in one transaction after its run, so
Ctrl-C leaves the index consistent, and re-running the same sweep skips configs already in the
index.

Configs run here, one at a time or ``--jobs N`` at once (one GPU each on a CUDA machine), or as
Slurm jobs (``--executor slurm``, ``profile_cli.runs.slurm``). A sweep over your own command
(``sweep --command "python train.py --bs {bs}" --grid bs=8,16``, a ``CommandSweep``) runs one
``CommandConfig`` per combination of the grid through the same index, statuses and executors;
its tables show the grid values as the config and the whole run's dominant kernel.
"""

from __future__ import annotations

import itertools
import threading
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

from nsys_parsers.errors import BadOption
from nsys_parsers.nsys_tool import locate_nsys
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import (
    ATTENTIONS,
    COMPILE_MODES,
    MODES,
    PRECISIONS,
    PRESETS,
    preset_name,
    run_name,
)
from nvtx_model.workload import WorkloadSpec, parse_choices, parse_ints
from profile_cli.runs.command import CommandSweep, command_device
from profile_cli.runs.executors import ExecutorSpec, GpuPool, LocalPlan, local_plan, visible_gpus
from profile_cli.runs.index import (
    ACTIVE,
    FINISHED,
    HEADLINE,
    INDEX_NAME,
    MIX_SCOPES,
    STATUSES,
    PlannedRun,
    SweepOutcome,
    finished_names,
    grid_values,
    index_lock,
    open_index,
    record,
    run_rows,
    short_label,
)
from profile_cli.runs.mining import mine_outcome, mine_profile
from profile_cli.runs.nsys_run import NsysSpec, profile_config, resolve_device
from reports.categories import CATEGORIES
from reports.render import View

__all__ = ["ACTIVE", "FINISHED", "HEADLINE", "INDEX_NAME", "MIX_SCOPES", "STATUSES",
           "PlannedRun", "SweepOutcome", "plan_sweep", "run_sweep", "collect_sweep",
           "sweep_tables", "open_index", "finished_names"]

MIX_CATEGORIES = CATEGORIES  # every category of the rule table has its column

RUN_COLUMNS = ["name", "size", "context", "batch", "mode", "precision", "attention", "compile",
               "status",
               "job_id", "node", "gpu", "wall_s", "forward_kernel", "forward_share_pct",
               "backward_kernel", "backward_share_pct", "optimizer_kernel",
               "optimizer_share_pct", "reason", "sqlite"]
# People see the config, not its file name.
RUN_VIEW = View(
    columns=["size", "context", "mode", "precision", "attention", "compile", "status", "wall_s",
             "job_id", "node", "gpu", "forward_share_pct", "forward_kernel",
             "backward_share_pct", "backward_kernel", "optimizer_share_pct", "optimizer_kernel",
             "reason"],
    drop=(("optimizer_share_pct", "optimizer_kernel"), ("backward_share_pct",
                                                         "backward_kernel"), "job_id"),
    noun="configs",
    hide_if_constant=("context", "mode", "precision", "attention", "compile", "node", "gpu"),
    hide_if_zero=("forward_share_pct", "forward_kernel", "backward_share_pct",
                  "backward_kernel", "optimizer_share_pct", "optimizer_kernel", "reason",
                  "wall_s", "job_id", "node", "gpu"))
DOMINANT_COLUMNS = ["name", "range", "kernel", "category", "share_pct", "per_range_instance"]
MIX_COLUMNS = ["name", "scope", *(f"{c}_pct" for c in MIX_CATEGORIES)]
RANGE_TIME_COLUMNS = ["name", "range", "instances", "avg_ns", "gpu_inclusive_ns"]
# a sweep over a command: the config is its grid values
COMMAND_RUN_COLUMNS = ["config", "name", "kind", "command", "grid", "status", "exit_code",
                       "job_id", "node", "gpu", "wall_s", "dominant_kernel", "dominant_share_pct",
                       "reason", "sqlite"]
COMMAND_RUN_VIEW = View(
    columns=["config", "status", "exit_code", "wall_s", "job_id", "node", "gpu",
             "dominant_share_pct", "dominant_kernel", "reason"],
    drop=("job_id", "node"), noun="configs",
    hide_if_constant=("node", "gpu"),
    hide_if_zero=("exit_code", "dominant_share_pct", "dominant_kernel", "reason", "wall_s",
                  "job_id", "node", "gpu"))

# progress(done, total, active): active is one (config name, what it is doing) per config
# that runs or waits in a queue right now
Progress = Callable[[int, int, list[tuple[str, str]]], None]


def plan_sweep(spec: WorkloadSpec | CommandSweep) -> list[PlannedRun]:
    """One PlannedRun per config. A size whose shape is impossible becomes failed configs of
    its own (the sweep goes on); other option errors stop the sweep before it starts. A
    command sweep: one per combination of its grid (a command that does not exist stops it)."""
    if isinstance(spec, CommandSweep):
        return [PlannedRun(name=c.name, cfg=c, config=c.to_dict()) for c in spec.configs()]
    custom_flags = spec.has_custom_shape
    tokens = [spec.size] if custom_flags else spec.size_tokens()
    plan: list[PlannedRun] = []
    for token in tokens:
        sub = replace(spec, size=token)
        try:
            configs = sub.configs()
        except BadOption as exc:
            if preset_name(token or "") is None and not str(token).lower().startswith(
                    "custom:") and not custom_flags:
                raise  # an unknown preset name is a typo, not a failing config
            contexts = parse_ints(spec.context, "--context")
            combos = itertools.product(
                contexts, parse_choices(spec.mode, MODES, "--mode"),
                parse_choices(spec.precision, PRECISIONS, "--precision"),
                parse_choices(spec.attention, ATTENTIONS, "--attention"),
                parse_choices(spec.compile, COMPILE_MODES, "--compile"))
            for context, mode, precision, attention, compile in combos:
                name = run_name(token or "", context, spec.batch, mode, precision, attention,
                                spec.nvtx, spec.warmup, spec.steps, compile)
                plan.append(PlannedRun(name=name, cfg=None, error=str(exc), config={
                    "size": token, "context": context, "batch": spec.batch, "mode": mode,
                    "precision": precision, "attention": attention, "nvtx": spec.nvtx,
                    "device": spec.device, "warmup": spec.warmup, "steps": spec.steps,
                    "compile": compile}))
            continue
        plan += [PlannedRun(name=c.name, cfg=c, config=c.to_dict()) for c in configs]
    return plan


def run_sweep(spec: WorkloadSpec | CommandSweep, out_dir: Path, nsys_spec: NsysSpec,
              executor: ExecutorSpec | None = None, *, retry: bool = False,
              progress: Progress | None = None, warn: Callable[[str], None] | None = None,
              confirm_cancel: Callable[[int, int], bool] | None = None,
              gpus: list[str] | None = None) -> SweepOutcome:
    """Profile every planned config not yet in the index: here, one at a time or
    ``executor.jobs`` at once (one GPU each on a CUDA machine; ``gpus`` overrides the GPUs
    found), or as Slurm jobs. ``warn`` hears what the user should know before configs run;
    ``confirm_cancel(queued, running)`` is asked on Ctrl-C whether to cancel Slurm jobs."""
    ex = executor or ExecutorSpec()
    ex.check()
    plan = plan_sweep(spec)
    with index_lock(out_dir):
        db = open_index(out_dir)
        _same_kind(db, out_dir, "command" if isinstance(spec, CommandSweep) else "model")
        if ex.executor == "slurm":
            from profile_cli.runs.slurm import drive

            return drive(db, out_dir, plan, nsys_spec, ex, retry=retry, progress=progress,
                         confirm_cancel=confirm_cancel)
        return _run_local(db, out_dir, plan, spec, nsys_spec, ex, retry=retry,
                          progress=progress, warn=warn, gpus=gpus)


def _same_kind(db, out_dir: Path, kind: str) -> None:
    """A folder holds a sweep of the model or of a command, not both (their tables differ)."""
    other = {"model": "a command", "command": "the built-in model"}[kind]
    for row in run_rows(db).values():
        if (row.get("kind") or "model") != kind:
            raise BadOption(f"{out_dir} holds a sweep of {other}; give this sweep another "
                            f"--out-dir.")


def collect_sweep(out_dir: Path, executor: ExecutorSpec | None = None, *,
                  progress: Progress | None = None,
                  confirm_cancel: Callable[[int, int], bool] | None = None) -> SweepOutcome:
    """Record the Slurm jobs of a sweep folder that finished since its driver left (after
    ``--no-wait``, or a driver that died), and wait for the rest unless ``executor.wait`` is
    False. Submits nothing."""
    if not (Path(out_dir) / INDEX_NAME).exists():
        raise BadOption(f"{out_dir}: no {INDEX_NAME} here; `--collect` takes the --out-dir "
                        f"folder of a sweep.")
    ex = replace(executor or ExecutorSpec(), executor="slurm")
    with index_lock(out_dir):
        db = open_index(out_dir)
        if not any(r["status"] in ACTIVE for r in run_rows(db).values()):
            outcome = SweepOutcome(out_dir=out_dir, planned=0)
            outcome.notes.append("nothing to collect: no config of this sweep is queued or "
                                 "running.")
            return outcome
        from profile_cli.runs.slurm import drive

        return drive(db, out_dir, None, None, ex, progress=progress,
                     confirm_cancel=confirm_cancel)


def _mined(result) -> tuple[Any, str, str | None]:
    """(report, status, reason) of a profiled config: mined when it ran ok (a command also
    when it failed but nsys wrote an export)."""
    return mine_outcome(result, mine_profile)


def _run_local(db, out_dir: Path, plan: list[PlannedRun], spec: WorkloadSpec | CommandSweep,
               nsys_spec: NsysSpec, ex: ExecutorSpec, *, retry: bool,
               progress: Progress | None, warn: Callable[[str], None] | None,
               gpus: list[str] | None) -> SweepOutcome:
    rows = run_rows(db)
    held = [p.name for p in plan if (rows.get(p.name) or {}).get("status") in ACTIVE]
    if held:
        raise BadOption(f"{len(held)} config(s) of this sweep are Slurm jobs that are still "
                        f"queued or running (e.g. {held[0]}): collect them with `nsys-mine "
                        f"sweep --collect {out_dir}`, or run the sweep with --executor slurm.")
    done = finished_names(db, retry)
    outcome = SweepOutcome(out_dir=out_dir, planned=len(plan))
    todo = [p for p in plan if p.name not in done]
    outcome.resumed = [p.name for p in plan if p.name in done]
    runnable = [p for p in todo if p.cfg is not None]
    for planned in (p for p in todo if p.cfg is None):  # impossible shapes fail at once
        record(db, planned, None, None, "failed", planned.error, executor="local")
        outcome.ran.append(planned.name)
    if not runnable:
        if progress:
            progress(len(plan), len(plan), [])
        return outcome
    nsys = locate_nsys(nsys_spec.nsys, install=nsys_spec.install)
    if isinstance(spec, CommandSweep):
        device, threads = command_device(spec.device), None
    else:
        device, threads = resolve_device(spec.device), spec.threads
    lp = local_plan(ex.jobs, device, visible_gpus() if gpus is None else gpus, threads=threads)
    for message in lp.warnings:
        outcome.notes.append(message)
        if warn:
            warn(message)
    run = _run_serial if lp.workers == 1 and not lp.gpus else _run_pool
    try:
        run(db, out_dir, plan, runnable, nsys_spec, nsys, lp, outcome, progress)
    except KeyboardInterrupt:
        outcome.interrupted = True
    else:
        if progress:
            progress(len(plan), len(plan), [])
    return outcome


def _run_serial(db, out_dir: Path, plan: list[PlannedRun], runnable: list[PlannedRun],
                nsys_spec: NsysSpec, nsys, lp: LocalPlan, outcome: SweepOutcome,
                progress: Progress | None) -> None:
    for planned in runnable:
        if progress:
            progress(len(outcome.resumed) + len(outcome.ran), len(plan),
                     [(short_label(planned.config), "running")])
        result = profile_config(planned.cfg, out_dir, nsys_spec, force=True, nsys=nsys)
        report, status, reason = _mined(result)
        record(db, planned, result, report, status, reason, executor="local")
        outcome.ran.append(planned.name)


def _run_pool(db, out_dir: Path, plan: list[PlannedRun], runnable: list[PlannedRun],
              nsys_spec: NsysSpec, nsys, lp: LocalPlan, outcome: SweepOutcome,
              progress: Progress | None) -> None:
    """``lp.workers`` configs at once in threads (each waits on its own nsys process); each
    gets a GPU of its own from the pool when there are GPUs. Only this thread writes the
    index. Ctrl-C stops every running config (their processes are ended by PID)."""
    stop = threading.Event()
    pool = GpuPool(lp.gpus) if lp.gpus else None
    running: dict[str, str] = {}
    lock = threading.Lock()

    def work(planned: PlannedRun):
        gpu = pool.acquire() if pool else None
        with lock:
            running[short_label(planned.config)] = "running" + (
                f" on GPU {gpu}" if gpu is not None else "")
        try:
            if stop.is_set():
                raise KeyboardInterrupt
            result = profile_config(planned.cfg, out_dir, nsys_spec, force=True, nsys=nsys,
                                    gpu=gpu, stop=stop)
            return (result, *_mined(result))
        finally:
            with lock:
                running.pop(short_label(planned.config), None)
            if pool and gpu is not None:
                pool.release(gpu)

    def board() -> list[tuple[str, str]]:
        with lock:
            return sorted(running.items())

    def record_finished(futures: dict[Future, PlannedRun], finished) -> BaseException | None:
        problem = None
        for fut in finished:
            if fut.cancelled():
                continue
            exc = fut.exception()
            if exc is not None:
                problem = problem or exc
                continue
            result, report, status, reason = fut.result()
            record(db, futures[fut], result, report, status, reason, executor="local")
            outcome.ran.append(futures[fut].name)
        return problem

    executor = ThreadPoolExecutor(max_workers=lp.workers, thread_name_prefix="sweep")
    futures = {executor.submit(work, p): p for p in runnable}
    pending = set(futures)
    try:
        while pending:
            finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
            problem = record_finished(futures, finished)
            if problem is not None:
                raise problem
            if progress:
                progress(len(outcome.resumed) + len(outcome.ran), len(plan), board())
    except BaseException:
        stop.set()
        for fut in pending:
            fut.cancel()
        finished, _ = wait(pending)
        record_finished(futures, finished)  # configs that ended before they were stopped
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)

# --------------------------------------------------------------------------------------------
# tables from the index

@dataclass
class SweepTables:
    runs: list[dict[str, Any]]
    dominant: list[dict[str, Any]]
    mix: list[dict[str, Any]]
    range_times: list[dict[str, Any]]
    notes: list[str]
    kind: str = "model"  # "command": a sweep over your own command (COMMAND_RUN_COLUMNS)


def config_order(row: dict[str, Any]) -> tuple:
    """Rows in config order, whatever order they finished in (configs run at once, Slurm):
    presets small to large, then custom shapes; contexts ascending; modes, precisions and
    attention in their option order. Command configs: by their grid values (numbers as
    numbers), in the order of the --grid options."""
    if row.get("kind") == "command":
        def value(v: str) -> tuple:
            try:
                return (0, float(v), "")
            except ValueError:
                return (1, 0.0, v)
        return tuple(value(str(v)) for v in grid_values(row).values())

    def rank(value: Any, choices: tuple[str, ...] | list[str]) -> int:
        return choices.index(value) if value in choices else len(choices)

    return (rank(row.get("size"), list(PRESETS)), str(row.get("size") or ""),
            row.get("context") or 0, row.get("batch") or 0, rank(row.get("mode"), MODES),
            rank(row.get("precision"), PRECISIONS), rank(row.get("attention"), ATTENTIONS),
            str(row.get("nvtx") or ""), row.get("warmup") or 0, row.get("steps") or 0)


def sweep_tables(out_dir: Path) -> SweepTables:
    """The final tables of a sweep, from its index (``sweep --report DIR`` renders these)."""
    index = Path(out_dir) / INDEX_NAME
    if not index.exists():
        raise BadOption(f"{out_dir}: no {INDEX_NAME} here; run `nsys-mine sweep --out-dir "
                        f"{out_dir} ...` first.")
    from nsys_parsers.sqlite_file import connect_readonly

    conn = connect_readonly(index)
    conn.row_factory = lambda cur, row: {d[0]: v for d, v in zip(cur.description, row, strict=True)}
    try:
        runs = sorted(conn.execute("SELECT * FROM runs ORDER BY rowid").fetchall(),
                      key=config_order)
        order = {r["name"]: i for i, r in enumerate(runs)}
        nesting = {n: i for i, n in enumerate(nv.HEADLINE_RANGES)}  # step > forward > ...

        def by_run_then_nesting(d: dict[str, Any]) -> tuple[int, int, str]:
            return order.get(d["name"], 0), nesting.get(d["range"], len(nesting)), d["range"]

        dominant = sorted(conn.execute("SELECT * FROM dominant").fetchall(),
                          key=by_run_then_nesting)
        mix_rows = conn.execute("SELECT * FROM mix").fetchall()
        times = sorted(conn.execute("SELECT * FROM range_times").fetchall(),
                       key=by_run_then_nesting)
    finally:
        conn.close()
    mix: dict[tuple[str, str], dict[str, Any]] = {}
    for m in mix_rows:
        row = mix.setdefault((m["name"], m["scope"]), {"name": m["name"], "scope": m["scope"],
                                                       **{f"{c}_pct": 0.0 for c in MIX_CATEGORIES}})
        row[f"{m['category']}_pct"] = m["share_pct"]
    mix_list = sorted(mix.values(), key=lambda r: (order.get(r["name"], 0),
                                                  MIX_SCOPES.index(r["scope"])))
    notes = []
    counts = {s: sum(r["status"] == s for r in runs) for s in FINISHED + ACTIVE}
    notes.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no runs yet")
    waiting = sum(counts[s] for s in ACTIVE)
    if waiting:
        notes.append(f"{waiting} config(s) are Slurm jobs still queued or running: `nsys-mine "
                     f"sweep --collect {out_dir}` records them when they end.")
    if any(r["status"] == "ok" for r in runs) and not dominant:
        notes.append("no CUDA kernels in these runs (CPU profiles): dominant-kernel and category "
                     "tables are empty; range_times holds the CPU range times.")
    label = config_labels(runs)

    def labelled(rows: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
        return [{"config": label.get(r["name"], r["name"]), **{c: r.get(c) for c in columns}}
                for r in rows]

    if runs and all(r.get("kind") == "command" for r in runs):
        command_runs = [{**{c: r.get(c) for c in COMMAND_RUN_COLUMNS},
                         "config": label.get(r["name"], r["name"]), "grid": grid_values(r)}
                        for r in runs]
        if any(r["status"] == "ok" for r in runs) and not dominant:
            notes = [n.replace("range_times holds the CPU range times",
                               "the ranges table holds the CPU range times") for n in notes]
        return SweepTables(runs=command_runs, dominant=labelled(dominant, DOMINANT_COLUMNS),
                           mix=labelled(mix_list, MIX_COLUMNS),
                           range_times=labelled(times, RANGE_TIME_COLUMNS), notes=notes,
                           kind="command")
    return SweepTables(runs=[{c: r.get(c) for c in RUN_COLUMNS} for r in runs],
                       dominant=labelled(dominant, DOMINANT_COLUMNS),
                       mix=labelled(mix_list, MIX_COLUMNS),
                       range_times=labelled(times, RANGE_TIME_COLUMNS),
                       notes=notes)


LABEL_FIELDS = ("size", "context", "batch", "mode", "precision", "attention", "nvtx",
                "compile")


def config_labels(runs: list[dict[str, Any]]) -> dict[str, str]:
    """A short label per run for people: only the config fields that vary in this sweep
    (``tiny ctx32 train``), so that the runs can be told apart at a glance; for a sweep over
    a command, the grid values that vary (``bs=8 seq=512``), else the command line."""
    if runs and all(r.get("kind") == "command" for r in runs):
        grids = {r["name"]: grid_values(r) for r in runs}
        keys = list(dict.fromkeys(k for g in grids.values() for k in g))
        vary = [k for k in keys if len({g.get(k) for g in grids.values()}) > 1] or keys
        return {r["name"]: (" ".join(f"{k}={grids[r['name']].get(k)}" for k in vary)
                            or str(r.get("command") or r["name"])) for r in runs}
    def value(r: dict[str, Any], f: str) -> Any:
        if f == "compile":  # older indexes have no compile column: eager runs
            return "eager" if r.get(f) in (None, "none") else f"compile {r[f]}"
        return r.get(f)

    varying = [f for f in LABEL_FIELDS if len({value(r, f) for r in runs}) > 1] or ["size"]
    prefix = {"context": "ctx", "batch": "b"}
    return {r["name"]: " ".join(f"{prefix.get(f, '')}{value(r, f)}" for f in varying)
            for r in runs}
