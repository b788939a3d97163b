"""``ranks``: which rank holds a multi-GPU job back, how much it costs the others, and why.

Exports: one export that holds several GPU processes (each a rank; mined here, through the
pipeline), or one per rank (files, globs or a folder: a job, ``run_job``; ``.nsys-rep``
reports are exported on the workers), each mined on a Dask worker into a small summary. The
cross-rank engine is ``reports.ranks``: the summaries (``summary``), the matching and lateness
(``matching``), the clocks (``clocks``), why a straggler is late (``why``), Dask
(``cluster``), the answer as data (``answer``) and its page.

One row per (rank, device): the ``gpus`` columns of its export and process, then ``late_ns``
(median lateness at the matched collectives of its group of ranks where it is latest: a
tensor-parallel group, a data-parallel one), ``wait_ns`` (time its collective kernels ran
before the last rank arrived), ``straggler``, the per-step columns, and ``error``: why a
rank whose export could not be read is missing (its row is there, its figures empty).
``--collectives``: one row per matched collective instead. The sentences say, for each
straggler, what differs from the median rank before its late arrivals.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Sequence

from reports.pipeline.analysis import Analysis, Param
from reports.pipeline.options import AnalysisOptions
from reports.pipeline.report import Report
from reports.pipeline.rules import CheckKey, CheckRule, RuleOutcome
from reports.pipeline.session import Session
from reports.ranks.answer import (
    RANK_COLUMNS,
    RanksAnswer,
    answer_notes,
    failed_lines,
    mine_ranks,
    per_rank_rows,
    side_by_side,
)
from reports.ranks.cluster import Engine
from reports.ranks.matching import collective_rows
from reports.ranks.summary import BYTES_PER_ROW, summarize_session
from reports.render import View

RANKS_COLUMNS = RANK_COLUMNS
RANKS_VIEW = View(
    columns=["rank", "straggler", "late_ns", "wait_ns", "wait_pct", "last_at", "matched",
             "span_ns", "idle_ns", "comm_ns", "exposed_comm_ns", "compute_ns", "steps",
             "step_med_ns", "device", "pid", "export", "error"],
    drop=("pid", "compute_ns", "comm_ns", "steps", "step_med_ns", "device", "export"),
    noun="ranks", rank_by=(),
    hide_if_zero=("steps", "step_med_ns", "error", "exposed_comm_ns", "comm_ns"),
    headers={"late_ns": "late", "wait_ns": "wait", "wait_pct": "wait %", "last_at": "last at",
             "exposed_comm_ns": "exposed comm", "comm_ns": "comm", "step_med_ns": "step med"})
COLLECTIVE_COLUMNS = [
    "collective", "key", "kind", "bytes", "ranks", "first_arrival_ns", "last_arrival_ns",
    "skew_ns", "last_rank", "last_late_ns", "wait_ns",
]
COLLECTIVE_VIEW = View(
    columns=["collective", "kind", "bytes", "skew_ns", "last_rank", "last_late_ns", "wait_ns",
             "first_arrival_ns", "key"],
    drop=("key", "first_arrival_ns", "bytes"), noun="collectives", rank_by=(),
    hide_if_zero=("bytes",),
    headers={"skew_ns": "skew", "last_late_ns": "last late", "wait_ns": "others wait",
             "first_arrival_ns": "first arrival"})


def ranks(paths: Sequence[str | Path], *, options: AnalysisOptions | None = None,
          client: Any = None, scheduler: str = "local", workers: int | None = None,
          collectives: bool = False, slurm_partition: str | None = None,
          slurm_time: str | None = None, slurm_mem: str | None = None,
          slurm_arg: Sequence[str] | None = None, **option_values: Any) -> Report:
    """The ``ranks`` answer of a job's exports, mined on Dask, as a ``Report`` (rows, notes,
    sentences; ``to_pandas()``; ``detail``: the ``RanksAnswer``). From a notebook with a
    running cluster: ``ranks(paths, client=client)``; ``option_values``: analysis options by
    name (``within="step"``)."""
    options = replace(options or AnalysisOptions(), **option_values)
    engine = Engine(scheduler=scheduler, workers=workers, slurm_partition=slurm_partition,
                    slurm_time=slurm_time, slurm_mem=slurm_mem,
                    slurm_args=tuple(slurm_arg or ()))
    return _report(mine_ranks(paths, options, engine=engine, client=client), collectives)


def ranks_of_export(s: Session, collectives: bool = False, **engine: Any) -> Report:
    """The ``ranks`` answer of one export's GPU processes (each a rank), mined here: no
    engine is needed (its options are ignored)."""
    path = s.export.source
    return _report(side_by_side(summarize_session(s), [path]), collectives)


def _report(a: RanksAnswer, collectives: bool) -> Report:
    sentences = [t for w in a.why for t in w.sentences()]
    notes = sentences + answer_notes(a)  # the explanation first: tables show notes
    warnings = failed_lines(a)
    if collectives:
        return Report(rows=collective_rows(a.matched, a.late, a.ranks),
                      columns=COLLECTIVE_COLUMNS, notes=notes, sentences=sentences,
                      title="Matched collectives across ranks", detail=a, warnings=warnings)
    return Report(rows=per_rank_rows(a), columns=RANKS_COLUMNS, notes=notes,
                  sentences=sentences, detail=a, warnings=warnings)


def _run_job(paths: list[Path], options: AnalysisOptions, **params: Any) -> Report:
    return ranks(paths, options=options, **params)


# -- check rules --------------------------------------------------------------------------


def _rank_check(column: str, what: str, unit: str) -> tuple[Any, Any]:
    """The ``check`` evaluations of a limit on a ranks column: on one export (its processes
    are the ranks) and on a job's exports together (``evaluate_exports``)."""
    def verdict(report: Report, limit: float) -> RuleOutcome:
        if len(report.rows) < 2:
            return RuleOutcome(True, 0.0, f"<= {limit:g}{unit}",
                               "one GPU process: no other rank to wait for")
        scale = 1e-6 if column == "late_ns" else 1.0
        worst = max(report.rows, key=lambda r: r[column] or 0)
        v = round((worst[column] or 0) * scale, 3)
        return RuleOutcome(v <= limit, v, f"<= {limit:g}{unit}",
                           f"{what} {v:g}{unit} on rank {worst['rank']}, the most of "
                           f"{len(report.rows)} ranks")

    def judge(paths: list[Path], options: AnalysisOptions, rule: CheckRule) -> RuleOutcome:
        within = replace(options, within=rule.range) if rule.range else options
        return verdict(ranks(paths, options=within), rule.values["limit"])

    def evaluate(s: Session, rule: CheckRule, baseline: Any, alpha: float) -> RuleOutcome:
        inside = (Session(s.export, replace(s.options, within=rule.range), trace=s.trace)
                  if rule.range else s)
        return verdict(ranks_of_export(inside), rule.values["limit"])
    return evaluate, judge


_LATE = _rank_check("late_ns", "median lateness", " ms")
_WAIT = _rank_check("wait_pct", "waiting for other ranks", "%")


ANALYSIS = Analysis(
    name="ranks",
    help="""Which rank holds a multi-GPU job back, how much it costs the others, and why.

    EXPORTS: one export per rank (files, globs or a folder; .nsys-rep reports are exported
    on the workers), one export that holds every rank's process, or a mix. Collectives are
    matched among the ranks that take part (per NCCL communicator where NCCL's NVTX payload
    names it, else per kind and stream in the order each process first used its streams),
    clocks aligned by the collectives' ends, one machine's clock or the UTC start times (with
    the error of each); each rank's lateness (late_ns), its wait for the others (wait_ns)
    and the straggler(s), with what differs before their late arrivals. An export that
    cannot be read is a row with its error. Runs on Dask: a local cluster of worker
    processes, a running scheduler, or Slurm jobs.

    Examples: `nsys-mine ranks rank_*.sqlite` · `nsys-mine ranks ddp.sqlite --collectives` ·
    `nsys-mine ranks runs/ --scheduler slurm --slurm-partition gpu`
    """,
    run=ranks_of_export, run_job=_run_job, inputs="job", input_name="exports",
    bytes_per_row=BYTES_PER_ROW,
    options=("within", "rules", "nsys", "cache"),
    params=(
        Param("scheduler", ("--scheduler",), "Where the exports are mined: local (a Dask "
              "cluster of worker processes here), slurm (workers as Slurm jobs, through "
              "dask-jobqueue), or the address of a running Dask scheduler (tcp://host:8786).",
              default="local", metavar="local|slurm|ADDRESS", panel="Engine", reaches=True),
        Param("workers", ("--workers",), "Worker processes (local: default one per core; "
              "slurm: jobs, default one per export up to 16).", type=int, minimum=1,
              metavar="N", panel="Engine"),
        Param("collectives", ("--collectives",), "One row per matched collective (kind, "
              "bytes, earliest and latest arrival, skew, the last rank, the others' wait) "
              "instead of one per rank.", type=bool, default=False),
        Param("slurm_partition", ("--slurm-partition",), "Slurm partition of the worker "
              "jobs.", metavar="NAME", panel="Engine", reaches=True),
        Param("slurm_time", ("--slurm-time",), "Time limit of each worker job (minutes, or "
              "HH:MM:SS; default 1 hour).", metavar="TIME", panel="Engine", reaches=True),
        Param("slurm_mem", ("--slurm-mem",), "Memory of each worker job (e.g. 8GB; default "
              "4GB).", metavar="SIZE", panel="Engine", reaches=True),
        Param("slurm_arg", ("--slurm-arg",), "Extra sbatch option for the worker jobs, "
              "KEY=VALUE (repeatable), e.g. account=myproj.", multiple=True,
              metavar="KEY=VALUE", panel="Engine", reaches=True),
    ),
    shape=lambda params: ((COLLECTIVE_COLUMNS, COLLECTIVE_VIEW) if params.get("collectives")
                          else (RANKS_COLUMNS, RANKS_VIEW)),
    column_types={"rank": "integer", "export": "string", "last_at": "integer",
                  "matched": "integer", "straggler": "boolean", "rank_source": "string",
                  "steps": "integer", "wait_per_step_ns": "number", "collective": "integer",
                  "bytes": "integer", "last_rank": "integer", "ranks": "integer",
                  "error": "string"},
    columns=RANKS_COLUMNS, view=RANKS_VIEW, title="Ranks: lateness and waits", order=69,
    default_top=0,
    checks=(
        CheckKey("max_late_ms", "limit", _LATE[0], evaluate_exports=_LATE[1],
                 order=10, describe=lambda where, v: f"{where}: every rank's median lateness "
                                                     f"at collectives <= {v['limit']:g} ms"),
        CheckKey("max_wait_pct", "limit", _WAIT[0], evaluate_exports=_WAIT[1], order=11,
                 describe=lambda where, v: f"{where}: time waiting for other ranks <= "
                                           f"{v['limit']:g}% of the GPU span"),
    ),
)
