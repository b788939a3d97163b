"""``nsys-mine sweep``: profile many configs, each in its own nsys run, with a resumable index.

The index (``OUT/index.sqlite``, sqlite-utils, open it in Datasette) holds per config:
``runs`` (status ok/oom/failed/timeout/skipped, export paths, wall time, the dominant kernel and
share of forward/backward/optimizer), ``dominant`` (the dominant kernel per range) and ``mix``
(kernel-category shares of ``forward`` and of the whole ``step``). A config's rows are written in
one transaction after its run, so Ctrl-C leaves the index consistent, and re-running the same
sweep skips configs already in the index.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from nsys_parsers.errors import BadOption, NsysMineError
from nsys_parsers.nsys_tool import locate_nsys
from nvtx_model import nvtx_ranges as nv
from nvtx_model.config import ATTENTIONS, MODES, PRECISIONS, preset_name, run_name
from nvtx_model.workload import WorkloadSpec, parse_choices, parse_ints
from profile_cli.mining import ProfileReport, mine_profile
from profile_cli.profiler import NsysSpec, ProfileResult, profile_config
from reports.categories import CATEGORIES
from reports.render import View

INDEX_NAME = "index.sqlite"
FINISHED = ("ok", "oom", "failed", "timeout", "skipped")
HEADLINE = (nv.FORWARD, nv.BACKWARD, nv.OPTIMIZER)
MIX_SCOPES = (nv.FORWARD, nv.STEP)
MIX_CATEGORIES = CATEGORIES  # every category of the rule table has its column

RUN_COLUMNS = ["name", "size", "context", "batch", "mode", "precision", "attention", "status",
               "wall_s", "forward_kernel", "forward_share_pct", "backward_kernel",
               "backward_share_pct", "optimizer_kernel", "optimizer_share_pct", "reason",
               "sqlite"]
# People see the config, not its file name.
RUN_VIEW = View(
    columns=["size", "context", "mode", "precision", "attention", "status", "wall_s",
             "forward_share_pct", "forward_kernel", "backward_share_pct", "backward_kernel",
             "optimizer_share_pct", "optimizer_kernel", "reason"],
    drop=(("optimizer_share_pct", "optimizer_kernel"), ("backward_share_pct",
                                                         "backward_kernel")),
    noun="configs", hide_if_constant=("context", "mode", "precision", "attention"),
    hide_if_zero=("forward_share_pct", "forward_kernel", "backward_share_pct",
                  "backward_kernel", "optimizer_share_pct", "optimizer_kernel", "reason",
                  "wall_s"))
DOMINANT_COLUMNS = ["name", "range", "kernel", "category", "share_pct", "per_range_instance"]
MIX_COLUMNS = ["name", "scope", *(f"{c}_pct" for c in MIX_CATEGORIES)]
RANGE_TIME_COLUMNS = ["name", "range", "instances", "avg_ns", "gpu_inclusive_ns"]


@dataclass
class PlannedRun:
    name: str
    cfg: Any  # RunConfig, or None when the config itself is invalid
    config: dict[str, Any]
    error: str | None = None


@dataclass
class SweepOutcome:
    out_dir: Path
    planned: int
    ran: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    interrupted: bool = False


def plan_sweep(spec: WorkloadSpec) -> list[PlannedRun]:
    """One PlannedRun per config. A size whose shape is impossible becomes failed configs of
    its own (the sweep goes on); other option errors stop the sweep before it starts."""
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
                parse_choices(spec.attention, ATTENTIONS, "--attention"))
            for context, mode, precision, attention in combos:
                name = run_name(token or "", context, spec.batch, mode, precision, attention,
                                spec.nvtx, spec.warmup, spec.steps)
                plan.append(PlannedRun(name=name, cfg=None, error=str(exc), config={
                    "size": token, "context": context, "batch": spec.batch, "mode": mode,
                    "precision": precision, "attention": attention, "nvtx": spec.nvtx,
                    "device": spec.device, "warmup": spec.warmup, "steps": spec.steps}))
            continue
        plan += [PlannedRun(name=c.name, cfg=c, config=c.to_dict()) for c in configs]
    return plan


def open_index(out_dir: Path):
    import sqlite_utils

    out_dir.mkdir(parents=True, exist_ok=True)
    db = sqlite_utils.Database(out_dir / INDEX_NAME)
    if "runs" not in db.table_names():
        db.table("runs").create({
            "name": str, "size": str, "context": int, "batch": int, "mode": str,
            "precision": str, "attention": str, "nvtx": str, "device": str, "warmup": int,
            "steps": int, "status": str, "reason": str, "sqlite": str, "nsys_rep": str,
            "sidecar": str, "wall_s": float, "finished_utc": str, "config_json": str,
            "forward_kernel": str, "forward_share_pct": float, "backward_kernel": str,
            "backward_share_pct": float, "optimizer_kernel": str, "optimizer_share_pct": float,
        }, pk="name")
        db.table("dominant").create({"name": str, "range": str, "kernel": str, "category": str,
                               "share_pct": float, "per_range_instance": float,
                               "range_kernel_ns": int}, pk=("name", "range"))
        db.table("mix").create({"name": str, "scope": str, "category": str, "share_pct": float},
                         pk=("name", "scope", "category"))
        db.table("range_times").create({"name": str, "range": str, "instances": int,
                                  "avg_ns": float, "gpu_inclusive_ns": int},
                                 pk=("name", "range"))
    return db


def _record(db, planned: PlannedRun, result: ProfileResult | None,
            report: ProfileReport | None, status: str, reason: str | None) -> None:
    row: dict[str, Any] = {k: planned.config.get(k) for k in (
        "size", "context", "batch", "mode", "precision", "attention", "nvtx", "device",
        "warmup", "steps")}
    row.update(name=planned.name, status=status, reason=reason,
               finished_utc=datetime.now(timezone.utc).isoformat(timespec="seconds"),
               config_json=json.dumps(planned.config))
    if result is not None:
        row.update(sqlite=result.sqlite, nsys_rep=result.nsys_rep, sidecar=result.sidecar,
                   wall_s=result.wall_s)
    dominant = {d["range"]: d for d in (report.dominant if report else []) if d["range"]}
    for r in HEADLINE:
        d = dominant.get(r)
        row[f"{r}_kernel"] = d["kernel"] if d else None
        row[f"{r}_share_pct"] = d["share_pct"] if d else None
    rows: dict[str, list[dict[str, Any]]] = {"runs": [row], "dominant": [], "mix": [],
                                              "range_times": []}
    if report is not None:
        rows["dominant"] = [
            {"name": planned.name, "range": d["range"], "kernel": d["kernel"],
             "category": d["category"], "share_pct": d["share_pct"],
             "per_range_instance": d["per_range_instance"],
             "range_kernel_ns": d["range_kernel_ns"]} for d in dominant.values()]
        rows["mix"] = [
            {"name": planned.name, "scope": scope, "category": cat, "share_pct": pct}
            for scope in MIX_SCOPES if scope in dominant
            for cat, pct in (dominant[scope]["category_shares"] or {}).items()]
        rows["range_times"] = [
            {"name": planned.name, "range": r["range"], "instances": r["instances"],
             "avg_ns": r["avg_ns"], "gpu_inclusive_ns": r["gpu_inclusive_ns"]}
            for r in report.ranges]
    # One transaction per config (plain statements: sqlite-utils helpers commit on their own),
    # so Ctrl-C never leaves half a config in the index.
    conn = db.conn
    with conn:
        for table in ("runs", "dominant", "mix", "range_times"):
            conn.execute(f"DELETE FROM [{table}] WHERE name = ?", [planned.name])
        for table, items in rows.items():
            for item in items:
                cols = list(item)
                conn.execute(f"INSERT INTO [{table}] ({', '.join(f'[{c}]' for c in cols)}) "
                             f"VALUES ({', '.join('?' * len(cols))})", [item[c] for c in cols])


def finished_names(db, retry: bool) -> set[str]:
    if "runs" not in db.table_names():
        return set()
    keep = ("ok",) if retry else FINISHED
    marks = ",".join("?" * len(keep))
    return {r[0] for r in db.execute(f"SELECT name FROM runs WHERE status IN ({marks})",
                                     list(keep)).fetchall()}


def run_sweep(spec, out_dir: Path, nsys_spec: NsysSpec, *, retry: bool = False,
              progress: Callable[[int, int, str], None] | None = None) -> SweepOutcome:
    """Profile every planned config not yet in the index. Returns what ran and what resumed."""
    plan = plan_sweep(spec)
    db = open_index(out_dir)
    done = finished_names(db, retry)
    outcome = SweepOutcome(out_dir=out_dir, planned=len(plan))
    todo = [p for p in plan if p.name not in done]
    outcome.resumed = [p.name for p in plan if p.name in done]
    nsys = locate_nsys(nsys_spec.nsys, install=nsys_spec.install) if any(
        p.cfg is not None for p in todo) else None
    try:
        for i, planned in enumerate(todo):
            if progress:
                progress(len(outcome.resumed) + i, len(plan), planned.name)
            if planned.cfg is None:
                _record(db, planned, None, None, "failed", planned.error)
                outcome.ran.append(planned.name)
                continue
            result = profile_config(planned.cfg, out_dir, nsys_spec, force=True, nsys=nsys)
            report = None
            status, reason = result.status, result.reason
            if status == "ok":
                try:
                    report = mine_profile(result)
                except NsysMineError as exc:
                    status, reason = "failed", f"mining the export failed: {exc}"
            _record(db, planned, result, report, status, reason)
            outcome.ran.append(planned.name)
        if progress:
            progress(len(plan), len(plan), "done")
    except KeyboardInterrupt:
        outcome.interrupted = True
    return outcome


# --------------------------------------------------------------------------------------------
# tables from the index

@dataclass
class SweepTables:
    runs: list[dict[str, Any]]
    dominant: list[dict[str, Any]]
    mix: list[dict[str, Any]]
    range_times: list[dict[str, Any]]
    notes: list[str]


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
        runs = conn.execute("SELECT * FROM runs ORDER BY rowid").fetchall()
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
    counts = {s: sum(r["status"] == s for r in runs) for s in FINISHED}
    notes.append(", ".join(f"{n} {s}" for s, n in counts.items() if n) or "no runs yet")
    if runs and not dominant:
        notes.append("no CUDA kernels in these runs (CPU profiles): dominant-kernel and category "
                     "tables are empty; range_times holds the CPU range times.")
    label = config_labels(runs)

    def labelled(rows: list[dict[str, Any]], columns: list[str]) -> list[dict[str, Any]]:
        return [{"config": label.get(r["name"], r["name"]), **{c: r.get(c) for c in columns}}
                for r in rows]

    return SweepTables(runs=[{c: r.get(c) for c in RUN_COLUMNS} for r in runs],
                       dominant=labelled(dominant, DOMINANT_COLUMNS),
                       mix=labelled(mix_list, MIX_COLUMNS),
                       range_times=labelled(times, RANGE_TIME_COLUMNS),
                       notes=notes)


LABEL_FIELDS = ("size", "context", "batch", "mode", "precision", "attention", "nvtx")


def config_labels(runs: list[dict[str, Any]]) -> dict[str, str]:
    """A short label per run for people: only the config fields that vary in this sweep
    (``tiny ctx32 train``), so that the runs can be told apart at a glance."""
    varying = [f for f in LABEL_FIELDS if len({r.get(f) for r in runs}) > 1] or ["size"]
    prefix = {"context": "ctx", "batch": "b"}
    return {r["name"]: " ".join(f"{prefix.get(f, '')}{r.get(f)}" for f in varying)
            for r in runs}
