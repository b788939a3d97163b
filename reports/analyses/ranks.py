"""``ranks``: which rank holds a multi-GPU job back, how much it costs the others, and why.

Exports: one per rank (files, globs or a folder), one export that holds several GPU
processes (each a rank), or a mix; ``.nsys-rep`` reports are exported on the workers. Each
export is mined on a Dask worker into a small summary (``reports.rank_summary``); the client
matches the ranks' collectives, aligns their clocks and measures who arrives late and who
waits (``reports.rank_match``). The engine: ``reports.cluster`` (a local cluster of worker
processes by default, a running scheduler, or Slurm jobs).

One row per (rank, device): the ``gpus`` columns of its export and process, then ``late_ns``
(median lateness at the matched collectives), ``wait_ns`` (time its collective kernels ran
before the last rank arrived), ``straggler`` and the per-step columns. ``--collectives``: one
row per matched collective instead. The sentences say, for each straggler, what differs from
the median rank before its late arrivals.
"""

from __future__ import annotations

import glob
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from nsys_parsers.errors import ExportNotFound, NsysMineError
from reports.analysis import Analysis, Param
from reports.cluster import Engine, dask_client, map_exports
from reports.options import AnalysisOptions
from reports.rank_match import (
    STRAGGLER_RULE,
    Lateness,
    Matched,
    Why,
    assign_ranks,
    collective_rows,
    explain,
    lateness,
    match,
)
from reports.rank_summary import RankSummary, rank_from_name, summarize_export
from reports.render import View, human_ns
from reports.report import Report, r1
from reports.rules import CheckKey, CheckRule, RuleOutcome

GPUS_PART = ["span_ns", "busy_ns", "idle_ns", "comm_ns", "compute_ns", "exposed_comm_ns"]
RANKS_COLUMNS = [
    "rank", "export", "pid", "device", *GPUS_PART, "late_ns", "wait_ns", "wait_pct",
    "last_at", "matched", "straggler", "rank_source", "clock_offset_ns", "steps",
    "step_med_ns", "wait_per_step_ns",
]
RANKS_VIEW = View(
    columns=["rank", "straggler", "late_ns", "wait_ns", "wait_pct", "last_at", "matched",
             "span_ns", "idle_ns", "comm_ns", "exposed_comm_ns", "compute_ns", "steps",
             "step_med_ns", "device", "pid", "export"],
    drop=("pid", "compute_ns", "comm_ns", "steps", "step_med_ns", "device", "export"),
    noun="ranks", rank_by=(), hide_if_zero=("steps", "step_med_ns"),
    headers={"late_ns": "late", "wait_ns": "wait", "wait_pct": "wait %", "last_at": "last at",
             "exposed_comm_ns": "exposed comm", "comm_ns": "comm", "step_med_ns": "step med"})
COLLECTIVE_COLUMNS = [
    "collective", "key", "kind", "bytes", "first_arrival_ns", "last_arrival_ns", "skew_ns",
    "last_rank", "last_late_ns", "wait_ns",
]
COLLECTIVE_VIEW = View(
    columns=["collective", "kind", "bytes", "skew_ns", "last_rank", "last_late_ns", "wait_ns",
             "first_arrival_ns", "key"],
    drop=("key", "first_arrival_ns", "bytes"), noun="collectives", rank_by=(),
    hide_if_zero=("bytes",),
    headers={"skew_ns": "skew", "last_late_ns": "last late", "wait_ns": "others wait",
             "first_arrival_ns": "first arrival"})
EXPORT_SUFFIXES = (".sqlite", ".nsys-rep", ".qdrep")


@dataclass
class RanksAnswer:
    """The whole answer: the summaries (by rank), the matching, lateness and explanations."""

    summaries: list[RankSummary]
    ranks: list[int]
    sources: list[str]
    matched: Matched
    late: Lateness
    why: list[Why]
    notes: list[str] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (export, reason)


def find_exports(paths: Sequence[str | Path]) -> list[Path]:
    """The exports of ``paths``: files as given (a missing one too: its rank's answer says
    so), glob patterns, and the exports inside folders (a report's ``.sqlite`` export beside
    it is read instead of the report)."""
    out: list[Path] = []
    for p in paths:
        text = str(p)
        if any(c in text for c in "*?[") and not Path(text).exists():
            hits = sorted(glob.glob(text))
            if not hits:
                raise ExportNotFound(f"{text}: no file matches this pattern.")
            out += [Path(h) for h in hits]
        elif Path(text).is_dir():
            found = sorted(q for q in Path(text).iterdir()
                           if q.is_file() and q.suffix.lower() in EXPORT_SUFFIXES)
            stems = {q.with_suffix("") for q in found if q.suffix.lower() == ".sqlite"}
            found = [q for q in found if q.suffix.lower() == ".sqlite"
                     or q.with_suffix("") not in stems]
            if not found:
                raise ExportNotFound(f"{text}: no nsys export (.sqlite, .nsys-rep) in this "
                                     f"folder.")
            out += found
        else:
            out.append(Path(text))
    if not out:
        raise ExportNotFound("no exports given: name one export per rank (files, a glob or a "
                             "folder), or one export that holds every rank's process.")
    return list(dict.fromkeys(out))


def _reason(exc: BaseException) -> str:
    if isinstance(exc, NsysMineError):
        return str(exc)
    name = type(exc).__name__
    if name == "KilledWorker":
        return "its worker died each time it was tried (out of memory?)"
    return f"{name}: {exc}"


def mine_ranks(paths: Sequence[str | Path], options: AnalysisOptions | None = None, *,
               engine: Engine | None = None, client: Any = None) -> RanksAnswer:
    """Summarize every export (on Dask unless one export is asked on this machine) and
    answer: matching, clocks, lateness, explanations."""
    options = options or AnalysisOptions()
    engine = engine or Engine()
    engine.check()
    files = find_exports(paths)
    summaries: list[RankSummary] = []
    failed: list[tuple[str, str]] = []
    if client is None and len(files) == 1 and engine.scheduler == "local":
        try:
            summaries = summarize_export(files[0], options)
        except NsysMineError:
            raise  # one export: its error is the answer
    else:
        ctx = dask_client(engine, len(files)) if client is None else _given(client)
        with ctx as c:
            for path, result, error in map_exports(c, summarize_export, files, options,
                                                   what="rank"):
                if error is not None:
                    failed.append((str(path), _reason(error)))
                else:
                    summaries += result
        if not summaries:
            raise NsysMineError("no export could be read: " + "; ".join(
                f"{Path(p).name}: {why}" for p, why in failed))
    order = sorted(range(len(summaries)), key=lambda i: (files.index(Path(
        summaries[i].export)) if Path(summaries[i].export) in files else 0, summaries[i].pid,
        summaries[i].device))
    summaries = [summaries[i] for i in order]
    ranks, sources, notes = assign_ranks(summaries)
    by_rank = sorted(range(len(summaries)), key=lambda i: (ranks[i], summaries[i].device))
    summaries = [summaries[i] for i in by_rank]
    ranks = [ranks[i] for i in by_rank]
    sources = [sources[i] for i in by_rank]
    m = match(summaries, ranks)
    lt = lateness(m, np.array([_whole(s) for s in summaries], dtype=np.float64))
    why = [explain(i, summaries, m, lt, ranks) for i in np.flatnonzero(lt.straggler).tolist()]
    return RanksAnswer(summaries, ranks, sources, m, lt, why, notes + m.notes, failed)


def _whole(s: RankSummary) -> float:
    """A rank's time a straggler's cost is measured against: its step time, else its GPU
    span."""
    if s.steps.shape[0]:
        return float((s.steps[:, 1] - s.steps[:, 0]).sum())
    return float(s.gpus.get("span_ns") or 0)


class _given:
    """A client the caller owns: used, not closed."""

    def __init__(self, client: Any):
        self.client = client

    def __enter__(self) -> Any:
        return self.client

    def __exit__(self, *exc: object) -> None:
        return None


def per_rank_rows(a: RanksAnswer) -> list[dict[str, Any]]:
    rows = []
    for i, s in enumerate(a.summaries):
        span = s.gpus.get("span_ns") or 0
        wait = int(a.late.wait[i])
        steps = int(s.steps.shape[0])
        row = {"rank": a.ranks[i], "export": s.export, "pid": s.pid, "device": s.device}
        row.update({c: s.gpus.get(c) for c in GPUS_PART})
        row.update({
            "late_ns": int(a.late.late[i]), "wait_ns": wait,
            "wait_pct": r1(100.0 * wait / span) if span else None,
            "last_at": int(a.late.last_count[i]),
            "matched": a.matched.count if a.matched.index[i, :1].min(initial=0) >= 0 else 0,
            "straggler": bool(a.late.straggler[i]), "rank_source": a.sources[i],
            "clock_offset_ns": int(a.matched.offsets[i]), "steps": steps,
            "step_med_ns": (r1(float(np.median(s.steps[:, 1] - s.steps[:, 0])))
                            if steps else None),
            "wait_per_step_ns": r1(wait / steps) if steps else None,
        })
        rows.append(row)
    return rows


def answer_notes(a: RanksAnswer) -> list[str]:
    notes = []
    n = len(a.summaries)
    exports = len({s.export for s in a.summaries})
    src = Counter(a.sources)
    notes.append(f"{n} rank(s) from {exports} export(s); rank numbers from "
                 + ", ".join(f"{k} ({v})" for k, v in src.items()) + ".")
    for export, why in a.failed:
        hint = rank_from_name(Path(export).name)
        who = f"rank {hint} ({Path(export).name})" if hint is not None else Path(export).name
        notes.append(f"{who} left out: {why}")
    if n == 1:
        notes.append("one GPU process: there is nothing to compare it with (give one export "
                     "per rank, or one export of every rank's process).")
        return notes + a.notes
    m = a.matched
    keyed = Counter(s.keyed_by for s in a.summaries)
    notes.append(f"{m.count} collectives matched (the n-th of each "
                 f"{'communicator' if keyed.get('communicator') == n else 'kind and stream'});"
                 f" arrival = start of the rank's collective kernel.")
    if m.count:
        clock = f"clocks: {m.clock}"
        if m.clock.startswith("ends"):
            clock += f", residual error {human_ns(m.residual_ns)}"
        notes.append(clock + ".")
    notes.append(f"late_ns: median over matched collectives of the arrival minus the median "
                 f"arrival; wait_ns: time its collective kernels ran before the last rank "
                 f"arrived; {STRAGGLER_RULE}.")
    if not a.late.straggler.any() and m.count:
        notes.append("no straggler: no rank arrives last often and late enough.")
    return notes + a.notes


def ranks(paths: Sequence[str | Path], *, options: AnalysisOptions | None = None,
          client: Any = None, scheduler: str = "local", workers: int | None = None,
          collectives: bool = False, slurm_partition: str | None = None,
          slurm_time: str | None = None, slurm_mem: str | None = None,
          slurm_arg: Sequence[str] | None = None, **option_values: Any) -> Report:
    """The ``ranks`` answer as a ``Report`` (rows, notes, sentences; ``to_pandas()``). From a
    notebook with a running cluster: ``ranks(paths, client=client)``; ``option_values``:
    analysis options by name (``within="step"``)."""
    from dataclasses import replace

    options = replace(options or AnalysisOptions(), **option_values)
    engine = Engine(scheduler=scheduler, workers=workers, slurm_partition=slurm_partition,
                    slurm_time=slurm_time, slurm_mem=slurm_mem,
                    slurm_args=tuple(slurm_arg or ()))
    a = mine_ranks(paths, options, engine=engine, client=client)
    sentences = [t for w in a.why for t in w.sentences()]
    notes = sentences + answer_notes(a)  # the explanation first: tables show notes
    if collectives:
        rows = collective_rows(a.matched, a.late, a.ranks)
        return Report(rows=rows, columns=COLLECTIVE_COLUMNS, notes=notes,
                      sentences=sentences, view=COLLECTIVE_VIEW,
                      title="Matched collectives across ranks")
    return Report(rows=per_rank_rows(a), columns=RANKS_COLUMNS, notes=notes,
                  sentences=sentences, view=RANKS_VIEW)


def _run(paths: list[Path], options: AnalysisOptions, **params: Any) -> Report:
    return ranks(paths, options=options, **params)


# -- check rules --------------------------------------------------------------------------


def _rank_check(column: str, what: str, unit: str) -> tuple[Any, Any]:
    """The ``check`` evaluations of a limit on a ranks column: on one export (its processes
    are the ranks) and on a job's exports together (``evaluate_exports``)."""
    def judge(paths: list[Path], options: AnalysisOptions, rule: CheckRule) -> RuleOutcome:
        from dataclasses import replace

        limit = rule.values["limit"]
        report = ranks(paths, options=replace(options, within=rule.range) if rule.range
                       else options)
        if len(report.rows) < 2:
            return RuleOutcome(True, 0.0, f"<= {limit:g}{unit}",
                               "one GPU process: no other rank to wait for")
        scale = 1e-6 if column == "late_ns" else 1.0
        worst = max(report.rows, key=lambda r: r[column] or 0)
        v = round((worst[column] or 0) * scale, 3)
        return RuleOutcome(v <= limit, v, f"<= {limit:g}{unit}",
                           f"{what} {v:g}{unit} on rank {worst['rank']}, the most of "
                           f"{len(report.rows)} ranks")

    def evaluate(s: Any, rule: CheckRule, baseline: Any, alpha: float) -> RuleOutcome:
        return judge([s.export.source], s.options, rule)
    return evaluate, judge


_LATE = _rank_check("late_ns", "median lateness", " ms")
_WAIT = _rank_check("wait_pct", "waiting for other ranks", "%")


ANALYSIS = Analysis(
    name="ranks",
    help="""Which rank holds a multi-GPU job back, how much it costs the others, and why.

    EXPORTS: one export per rank (files, globs or a folder; .nsys-rep reports are exported
    on the workers), one export that holds every rank's process, or a mix. Collectives are
    matched across ranks (per NCCL communicator where NCCL's NVTX payload names it, else per
    kind and stream), clocks aligned by their ends; each rank's lateness (late_ns), its wait
    for the others (wait_ns) and the straggler(s), with what differs before their late
    arrivals. Runs on Dask: a local cluster of worker processes, a running scheduler, or
    Slurm jobs.

    Examples: `nsys-mine ranks rank_*.sqlite` · `nsys-mine ranks ddp.sqlite --collectives` ·
    `nsys-mine ranks runs/ --scheduler slurm --slurm-partition gpu`
    """,
    run=_run, inputs="paths", input_name="exports",
    options=("within", "rules", "nsys", "cache"),
    params=(
        Param("scheduler", ("--scheduler",), "Where the exports are mined: local (a Dask "
              "cluster of worker processes here), slurm (workers as Slurm jobs, through "
              "dask-jobqueue), or the address of a running Dask scheduler (tcp://host:8786).",
              default="local", metavar="local|slurm|ADDRESS", panel="Engine"),
        Param("workers", ("--workers",), "Worker processes (local: default one per core; "
              "slurm: jobs, default one per export up to 16).", type=int, minimum=1,
              metavar="N", panel="Engine"),
        Param("collectives", ("--collectives",), "One row per matched collective (kind, "
              "bytes, earliest and latest arrival, skew, the last rank, the others' wait) "
              "instead of one per rank.", type=bool, default=False),
        Param("slurm_partition", ("--slurm-partition",), "Slurm partition of the worker "
              "jobs.", metavar="NAME", panel="Engine"),
        Param("slurm_time", ("--slurm-time",), "Time limit of each worker job (minutes, or "
              "HH:MM:SS; default 1 hour).", metavar="TIME", panel="Engine"),
        Param("slurm_mem", ("--slurm-mem",), "Memory of each worker job (e.g. 8GB; default "
              "4GB).", metavar="SIZE", panel="Engine"),
        Param("slurm_arg", ("--slurm-arg",), "Extra sbatch option for the worker jobs, "
              "KEY=VALUE (repeatable), e.g. account=myproj.", multiple=True,
              metavar="KEY=VALUE", panel="Engine"),
    ),
    shape=lambda params: ((COLLECTIVE_COLUMNS, COLLECTIVE_VIEW) if params.get("collectives")
                          else (RANKS_COLUMNS, RANKS_VIEW)),
    column_types={"rank": "integer", "export": "string", "last_at": "integer",
                  "matched": "integer", "straggler": "boolean", "rank_source": "string",
                  "steps": "integer", "wait_per_step_ns": "number", "collective": "integer",
                  "bytes": "integer", "last_rank": "integer"},
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
