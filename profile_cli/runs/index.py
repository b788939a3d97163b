"""The sweep index, ``OUT/index.sqlite`` (sqlite-utils; open it in Datasette).

``runs`` holds one row per config: its status, export paths, wall time, the dominant kernel and
share of forward/backward/optimizer, and where it ran (``executor`` local or slurm, ``job_id``,
``node``, ``gpu``, and ``slurm_state``: the job's Slurm state, its last one once it ended).
``dominant``, ``mix`` and ``range_times`` hold the mined tables. Statuses:

- ``queued``, ``running``: a Slurm job holds the config (never submitted twice while it does);
- ``ok``, ``oom``, ``failed``, ``timeout``, ``skipped``, ``cancelled``: finished; running the
  same sweep again skips them, ``--retry`` runs every one that is not ``ok`` again.

A config's rows are written in one transaction (Ctrl-C never leaves half a config), and the
``runs`` row is updated in place, so the table keeps the order in which configs were planned.
Only the driver (the ``sweep`` process) writes the index; Slurm jobs write result records next
to their exports, which the driver collects.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from nsys_parsers.errors import BadOption
from nvtx_model import nvtx_ranges as nv

INDEX_NAME = "index.sqlite"
LOCK_NAME = ".index.lock"
ACTIVE = ("queued", "running")
FINISHED = ("ok", "oom", "failed", "timeout", "skipped", "cancelled")
STATUSES = ACTIVE + FINISHED
HEADLINE = (nv.FORWARD, nv.BACKWARD, nv.OPTIMIZER)
MIX_SCOPES = (nv.FORWARD, nv.STEP)

CONFIG_KEYS = ("size", "context", "batch", "mode", "precision", "attention", "nvtx", "device",
               "warmup", "steps", "kind", "command", "grid", "compile")
RUNS_SCHEMA: dict[str, type] = {
    "name": str, "size": str, "context": int, "batch": int, "mode": str, "precision": str,
    "attention": str, "nvtx": str, "device": str, "warmup": int, "steps": int, "status": str,
    "reason": str, "sqlite": str, "nsys_rep": str, "sidecar": str, "wall_s": float,
    "finished_utc": str, "config_json": str, "forward_kernel": str, "forward_share_pct": float,
    "backward_kernel": str, "backward_share_pct": float, "optimizer_kernel": str,
    "optimizer_share_pct": float,
    # where it ran (added by issue 13; older indexes get these columns when opened)
    "executor": str, "job_id": str, "slurm_state": str, "node": str, "gpu": str,
    "submitted_utc": str, "submit_token": str, "array_index": int,
    # sweeps over your own command (issue 30): kind "command" (NULL: the built-in model), the
    # command line of the config, its grid values (JSON), the program's exit code; and the
    # dominant kernel of the whole run (either kind)
    "kind": str, "command": str, "grid": str, "exit_code": int, "dominant_kernel": str,
    "dominant_share_pct": float,
    # torch.compile mode of the model (issue 29; NULL in older indexes: eager)
    "compile": str,
}


@dataclass
class SweepOutcome:
    """What one ``sweep`` (or ``sweep --collect``) did: configs run or collected, configs
    already in the index, Slurm submissions, jobs still queued or running, notes."""

    out_dir: Path
    planned: int
    ran: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    interrupted: bool = False
    submitted: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class PlannedRun:
    name: str
    cfg: Any  # RunConfig, or None when the config itself is invalid
    config: dict[str, Any]
    error: str | None = None


def grid_values(config: dict[str, Any]) -> dict[str, str]:
    """The grid values of a command config (a dict, or JSON as the index stores it)."""
    grid = config.get("grid")
    if isinstance(grid, str):
        try:
            grid = json.loads(grid)
        except ValueError:
            grid = None
    return dict(grid) if isinstance(grid, dict) else {}


def short_label(config: dict[str, Any]) -> str:
    """A config as people read it in a progress line: ``tiny ctx32 b4 forward fp32 naive``;
    a command's grid values (``bs=8 seq=512``) or its command line."""
    if config.get("kind") == "command":
        grid = grid_values(config)
        return " ".join(f"{k}={v}" for k, v in grid.items()) or str(config.get("command"))
    return " ".join(str(x) for x in (
        config.get("size"), f"ctx{config.get('context')}", f"b{config.get('batch')}",
        config.get("mode"), config.get("precision"), config.get("attention")))


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _create_tables(db) -> None:
    db.table("runs").create(dict(RUNS_SCHEMA), pk="name")
    db.table("dominant").create({"name": str, "range": str, "kernel": str, "category": str,
                                 "share_pct": float, "per_range_instance": float,
                                 "range_kernel_ns": int}, pk=("name", "range"))
    db.table("mix").create({"name": str, "scope": str, "category": str, "share_pct": float},
                           pk=("name", "scope", "category"))
    db.table("range_times").create({"name": str, "range": str, "instances": int,
                                    "avg_ns": float, "gpu_inclusive_ns": int},
                                   pk=("name", "range"))


def open_index(out_dir: Path):
    """The folder's index, created when missing. A new index is built beside it and renamed
    into place, so whoever opens ``index.sqlite`` (Datasette, a script polling the sweep, a
    test) finds either no file or one with every table, never an empty database. Callers hold
    ``index_lock``."""
    import sqlite_utils

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / INDEX_NAME
    if not path.exists():
        fresh = out_dir / f".{INDEX_NAME}.{os.getpid()}.new"
        fresh.unlink(missing_ok=True)
        building = sqlite_utils.Database(fresh)
        try:
            _create_tables(building)
        finally:
            building.close()
        os.replace(fresh, path)
    db = sqlite_utils.Database(path)
    if "runs" not in db.table_names():  # an empty file, not made by us
        _create_tables(db)
    else:  # an index written before these columns existed
        have = set(db.table("runs").columns_dict)
        for column, kind in RUNS_SCHEMA.items():
            if column not in have:
                db.table("runs").add_column(column, kind)
    return db


@contextlib.contextmanager
def index_lock(out_dir: Path) -> Iterator[None]:
    """One driver per sweep folder: a second ``sweep`` on the same folder (which could submit
    or run the same configs again) stops with an error while the first one runs. The lock is
    an flock, so a driver that was killed holds nothing."""
    import fcntl

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / LOCK_NAME
    fh = open(path, "a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown"
            raise BadOption(f"another nsys-mine sweep is working on {out_dir} (PID {holder}); "
                            f"wait for it to end, or look at its results with `nsys-mine "
                            f"sweep --report {out_dir}`.") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        yield
    finally:
        fh.close()


def run_rows(db) -> dict[str, dict[str, Any]]:
    """Every ``runs`` row by config name, in index order."""
    if "runs" not in db.table_names():
        return {}
    cur = db.execute("SELECT * FROM runs ORDER BY rowid")
    cols = [d[0] for d in cur.description]
    rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    return {r["name"]: r for r in rows}


def finished_names(db, retry: bool) -> set[str]:
    if "runs" not in db.table_names():
        return set()
    keep = ("ok",) if retry else FINISHED
    marks = ",".join("?" * len(keep))
    return {r[0] for r in db.execute(f"SELECT name FROM runs WHERE status IN ({marks})",
                                     list(keep)).fetchall()}


def _upsert_sql(table: str, cols: list[str], key: str) -> str:
    sets = ", ".join(f"[{c}] = excluded.[{c}]" for c in cols if c != key)
    return (f"INSERT INTO [{table}] ({', '.join(f'[{c}]' for c in cols)}) VALUES "
            f"({', '.join('?' * len(cols))}) ON CONFLICT([{key}]) DO UPDATE SET {sets}")


def index_row(planned: PlannedRun) -> dict[str, Any]:
    """A full ``runs`` row for a config with nothing known yet but its config."""
    row: dict[str, Any] = {c: None for c in RUNS_SCHEMA}
    row.update({k: planned.config.get(k) for k in CONFIG_KEYS})
    if isinstance(row.get("grid"), dict):
        row["grid"] = json.dumps(row["grid"])
    row.update(name=planned.name, config_json=json.dumps(planned.config))
    return row


def write_rows(db, rows: list[dict[str, Any]]) -> None:
    """Insert or update whole ``runs`` rows in one transaction (rows keep their place)."""
    if not rows:
        return
    cols = list(RUNS_SCHEMA)
    sql = _upsert_sql("runs", cols, "name")
    with db.conn:
        for row in rows:
            db.conn.execute(sql, [row.get(c) for c in cols])


def update_index_rows(db, changes: dict[str, dict[str, Any]]) -> None:
    """Change some columns of some ``runs`` rows, in one transaction."""
    if not changes:
        return
    with db.conn:
        for name, values in changes.items():
            cols = list(values)
            db.conn.execute(f"UPDATE runs SET {', '.join(f'[{c}] = ?' for c in cols)} "
                            f"WHERE name = ?", [values[c] for c in cols] + [name])


def record(db, planned: PlannedRun, result, report, status: str, reason: str | None,
           **where: Any) -> None:
    """A finished config: its ``runs`` row (with ``where`` it ran: executor, job_id, node,
    gpu, slurm_state, ...) and its mined tables, in one transaction."""
    row = index_row(planned)
    row.update(status=status, reason=reason, finished_utc=utc_now())
    row.update({k: v for k, v in where.items() if k in RUNS_SCHEMA})
    if result is not None:
        row.update(sqlite=result.sqlite, nsys_rep=result.nsys_rep, sidecar=result.sidecar,
                   wall_s=result.wall_s, exit_code=getattr(result, "exit_code", None))
        if row.get("gpu") is None:
            row["gpu"] = getattr(result, "gpu", None)
    whole = next((d for d in (report.dominant if report else []) if d["range"] is None), None)
    if whole is not None:
        row.update(dominant_kernel=whole["kernel"], dominant_share_pct=whole["share_pct"])
    dominant = {d["range"]: d for d in (report.dominant if report else []) if d["range"]}
    for r in HEADLINE:
        d = dominant.get(r)
        row[f"{r}_kernel"] = d["kernel"] if d else None
        row[f"{r}_share_pct"] = d["share_pct"] if d else None
    rows: dict[str, list[dict[str, Any]]] = {"dominant": [], "mix": [], "range_times": []}
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
    cols = list(RUNS_SCHEMA)
    with conn:
        conn.execute(_upsert_sql("runs", cols, "name"), [row.get(c) for c in cols])
        for table in rows:
            conn.execute(f"DELETE FROM [{table}] WHERE name = ?", [planned.name])
        for table, items in rows.items():
            for item in items:
                icols = list(item)
                conn.execute(f"INSERT INTO [{table}] ({', '.join(f'[{c}]' for c in icols)}) "
                             f"VALUES ({', '.join('?' * len(icols))})",
                             [item[c] for c in icols])
