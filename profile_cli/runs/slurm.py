"""Slurm sweeps through submitit: one array task per config, collected into the sweep index.

The driver (``nsys-mine sweep --executor slurm`` on a login node):

1. writes each config it is about to submit into the index as ``queued`` with a submission
   token, submits them all as one job array named ``nsys-mine-<token>`` (submitit writes the
   batch file, pickles and logs under ``OUT/slurm/<job id>/``), then stores each config's job
   id. A driver killed between ``sbatch`` and that write finds its jobs again by their name,
   so no config is ever submitted twice;
2. waits: a job writes a result record (``OUT/NAME.result.json``) next to its export and
   sidecar when its config is done; the driver records it into the index. Jobs that end
   without one (time limit, ``scancel``, preemption, node failure, a crash) get their state
   and reason from Slurm (``squeue``, then ``sacct`` for jobs squeue has forgotten):
   ``timeout``, ``cancelled``, ``failed``, ``oom``, never a hang;
3. on Ctrl-C (or SIGTERM) asks whether to cancel the unfinished jobs (``--cancel-on-exit`` /
   ``--keep-on-exit`` decide without asking). Jobs left running are collected by running the
   same sweep again or ``nsys-mine sweep --collect OUT``.

The job (``run_config_job`` on a compute node) profiles its config with the same code as a
local sweep (``profile_config`` + ``mine_outcome``); it finds nsys on the node ($NSYS, PATH,
the usual folders) unless --nsys names one, and runs under the driver's Python (the venv must
be on a filesystem the nodes share). See docs/CLUSTER.md.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from nsys_parsers.errors import BadOption, NsysMineError
from profile_cli.runs.executors import (
    ExecutorSpec,
    default_slurm_minutes,
    slurm_extra_args,
    slurm_mem,
    slurm_minutes,
)
from profile_cli.runs.index import (
    ACTIVE,
    PlannedRun,
    SweepOutcome,
    finished_names,
    index_row,
    record,
    run_rows,
    short_label,
    update_index_rows,
    utc_now,
    write_rows,
)
from profile_cli.runs.process import signals_held

SLURM_FOLDER = "slurm"
RECORD_SUFFIX = ".result.json"
JOB_NAME_PREFIX = "nsys-mine-"
RECORD_POLL_S = 1.0  # result records are looked for this often; Slurm is asked every poll_s
# A COMPLETED job's record may appear late on a network filesystem; a job Slurm does not
# know (any more) may be one that ended long ago on a cluster without accounting.
RECORD_GRACE_S = 30.0
QUERY_FAILURES_TOLERATED = 3
SETTLE_S = 15.0  # how long the driver waits for jobs that wrote their record to end
_sleep = time.sleep  # the driver's wait between looks (tests interrupt it)

# Slurm job state -> sweep status. COMPLETED means "look at the result record".
STATE_STATUS = {
    "PENDING": "queued", "CONFIGURING": "queued", "REQUEUED": "queued",
    "REQUEUE_FED": "queued", "REQUEUE_HOLD": "queued", "RESV_DEL_HOLD": "queued",
    "RUNNING": "running", "COMPLETING": "running", "SUSPENDED": "running",
    "STOPPED": "running", "SIGNALING": "running", "STAGE_OUT": "running",
    "RESIZING": "running",
    "COMPLETED": "completed",
    "TIMEOUT": "timeout", "DEADLINE": "timeout",
    "CANCELLED": "cancelled", "PREEMPTED": "cancelled", "REVOKED": "cancelled",
    "FAILED": "failed", "NODE_FAIL": "failed", "BOOT_FAIL": "failed", "SPECIAL_EXIT": "failed",
    "OUT_OF_MEMORY": "oom",
}
STATE_MEANING = {
    "TIMEOUT": "the job reached its time limit (--slurm-time)",
    "DEADLINE": "the job reached its deadline",
    "CANCELLED": "the job was cancelled (scancel, or an administrator)",
    "PREEMPTED": "the job was preempted by a higher-priority job",
    "REVOKED": "the job was revoked (federation)",
    "FAILED": "the job exited with an error",
    "NODE_FAIL": "the node failed",
    "BOOT_FAIL": "the node failed to boot",
    "SPECIAL_EXIT": "the job ended in a special state",
    "OUT_OF_MEMORY": "the job exceeded its memory (--slurm-mem)",
}


class SlurmError(NsysMineError):
    """Slurm refused the submission, or its commands cannot be run here."""


class DriverTerminated(KeyboardInterrupt):
    """SIGTERM to the driver (a script or a scheduler ending it): like Ctrl-C, but nobody is
    asked; --cancel-on-exit decides."""


@dataclass
class SlurmJobState:
    job_id: str
    state: str  # CANCELLED, not "CANCELLED by 0"
    reason: str | None = None
    node: str | None = None
    detail: str | None = None  # e.g. "by 0" from sacct, the exit code
    end: str | None = None  # end time as Slurm prints it (local time, 2026-11-23T05:42:49)

    def ended_s_ago(self) -> float | None:
        from datetime import datetime

        try:
            return (datetime.now() - datetime.fromisoformat(self.end or "")).total_seconds()
        except ValueError:
            return None


# --------------------------------------------------------------------------------------------
# the job, on a compute node

def record_path(out_dir: Path, name: str) -> Path:
    return Path(out_dir) / f"{name}{RECORD_SUFFIX}"


def job_log(out_dir: Path, job_id: str, stream: str = "err") -> Path:
    """submitit's log of a job (``OUT/slurm/<job id>/<job id>_0_log.err``)."""
    return Path(out_dir) / SLURM_FOLDER / job_id / f"{job_id}_0_log.{stream}"


def _write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, default=str) + "\n")
    os.replace(tmp, path)


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and "status" in data else None


class _SlurmSignal(KeyboardInterrupt):
    """SIGTERM from Slurm (time limit, scancel, preemption): end the nsys run like Ctrl-C."""


def _on_sigterm(signum, frame):  # pragma: no cover - runs in the job
    raise _SlurmSignal(f"signal {signum}")


def run_config_job(cfg, out_dir: str, nsys_spec, name: str, token: str) -> dict[str, Any]:
    """Profile and mine one config on this node and write its result record (the function
    each Slurm job runs). Slurm's SIGTERM ends the nsys run and its leftover processes, and the
    job ends without a record: the driver then takes the state and reason from Slurm."""
    from profile_cli.runs.mining import mine_outcome
    from profile_cli.runs.nsys_run import profile_config

    out = Path(out_dir)
    job_id = os.environ.get("SLURM_JOB_ID", "")
    try:
        import submitit

        job_id = submitit.JobEnvironment().job_id
    except Exception:  # noqa: BLE001 - outside submitit (tests call this directly)
        pass
    node = os.environ.get("SLURMD_NODENAME") or socket.gethostname()
    base = {"name": name, "token": token, "job_id": job_id, "node": node,
            "gpu": os.environ.get("CUDA_VISIBLE_DEVICES")}
    previous = {}
    if threading.current_thread() is threading.main_thread():
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _on_sigterm)}
    try:
        result = report = None
        try:
            result = profile_config(cfg, out, nsys_spec, force=True)
            report, status, reason = mine_outcome(result)
        except NsysMineError as exc:  # e.g. no nsys on this node
            status, reason = "failed", f"on node {base['node']}: {exc}"
        data = {**base, "status": status, "reason": reason, "finished_utc": utc_now(),
                "result": asdict(result) if result is not None else None,
                "report": asdict(report) if report is not None else None}
        _write_json_atomic(record_path(out, name), data)
        return {"name": name, "status": status}
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# --------------------------------------------------------------------------------------------
# asking Slurm

def _slurm(argv: list[str], timeout_s: float = 60) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise SlurmError(f"`{argv[0]}` not found: run Slurm sweeps on a machine with Slurm's "
                         f"commands (a login node), or leave out --executor slurm.") from None
    except subprocess.TimeoutExpired:
        raise SlurmError(f"`{' '.join(argv[:2])}` did not answer within {timeout_s:.0f} s: "
                         f"is the Slurm controller up?") from None


def _base_ids(job_ids: list[str]) -> list[str]:
    return sorted({j.split("_")[0] for j in job_ids if j})


def squeue_states(job_ids: list[str]) -> dict[str, SlurmJobState]:
    """States of the jobs the controller still knows (running, queued, and ended ones for
    MinJobAge seconds), one per array task."""
    if not job_ids:
        return {}
    proc = _slurm(["squeue", "-h", "-r", "--states=all", "-j", ",".join(_base_ids(job_ids)),
                   "-o", "%i|%T|%r|%N|%e"])
    if proc.returncode != 0:
        if "Invalid job id" in proc.stderr:  # none of them is known any more
            return {}
        raise SlurmError(f"squeue failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return parse_squeue(proc.stdout)


def parse_squeue(text: str) -> dict[str, SlurmJobState]:
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or not parts[0]:
            continue
        job, state, reason, node = parts[:4]
        out[job] = SlurmJobState(job_id=job, state=state.split()[0].upper(),
                                 reason=None if reason in ("", "None", "(null)") else reason,
                                 node=node or None, end=parts[4] if len(parts) > 4 else None)
    return out


def sacct_states(job_ids: list[str]) -> dict[str, SlurmJobState]:
    """States from Slurm's accounting (jobs squeue has forgotten); {} without accounting."""
    if not job_ids:
        return {}
    proc = _slurm(["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,NodeList,End",
                   "-j", ",".join(_base_ids(job_ids))])
    if proc.returncode != 0:  # "Slurm accounting storage is disabled", no slurmdbd, ...
        return {}
    return parse_sacct(proc.stdout)


def parse_sacct(text: str) -> dict[str, SlurmJobState]:
    out = {}
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) < 4 or not parts[0] or "[" in parts[0] or "." in parts[0]:
            continue  # pending array ranges (12_[3-5]) and job steps (12.batch)
        job, state, exit_code, node = parts[:4]
        words = state.split(None, 1)
        detail = words[1] if len(words) > 1 else None
        if exit_code and exit_code != "0:0":
            detail = f"{detail + ', ' if detail else ''}exit code {exit_code}"
        out[job] = SlurmJobState(job_id=job, state=words[0].upper() if words else "UNKNOWN",
                                 node=None if node in ("", "None assigned") else node,
                                 detail=detail, end=parts[4] if len(parts) > 4 else None)
    return out


def slurm_states(job_ids: list[str]) -> dict[str, SlurmJobState]:
    states = squeue_states(job_ids)
    missing = [j for j in job_ids if j not in states]
    if missing:
        states.update({k: v for k, v in sacct_states(missing).items() if k in missing})
    return states


def find_submission(token: str) -> dict[int, str]:
    """Array index -> job id of the jobs submitted with this token (a driver that died
    between sbatch and writing the job ids into the index): by job name, squeue then sacct."""
    name = JOB_NAME_PREFIX + token
    proc = _slurm(["squeue", "-h", "-r", "--states=all", f"--name={name}", "-o", "%i|%F|%K"])
    if proc.returncode != 0:
        raise SlurmError(f"squeue failed: {proc.stderr.strip()}")
    found = {}
    for line in proc.stdout.splitlines():
        job, array_job, task = (line.strip().split("|") + ["", ""])[:3]
        if not job:
            continue
        found[int(task) if task.isdigit() else 0] = job
    if not found:
        proc = _slurm(["sacct", "-X", "-n", "-P", f"--name={name}", "-o", "JobID"])
        if proc.returncode == 0:
            for line in proc.stdout.splitlines():
                job = line.strip()
                if job and "[" not in job and "." not in job:
                    _, _, task = job.partition("_")
                    found[int(task) if task.isdigit() else 0] = job
    return found


def scancel(job_ids: list[str]) -> None:
    if job_ids:
        proc = _slurm(["scancel", *job_ids])
        if proc.returncode != 0 and "Invalid job id" not in proc.stderr:
            raise SlurmError(f"scancel failed: {proc.stderr.strip()}")


# --------------------------------------------------------------------------------------------
# submitting

def sbatch_parameters(ex: ExecutorSpec, nsys_timeout_s: float, token: str) -> dict[str, Any]:
    """submitit SlurmExecutor parameters for one sweep submission."""
    minutes = slurm_minutes(ex.slurm_time) if ex.slurm_time else default_slurm_minutes(
        nsys_timeout_s)
    extra: dict[str, Any] = dict(slurm_extra_args(ex.slurm_args))
    if ex.slurm_mem:
        extra["mem"] = slurm_mem(ex.slurm_mem)
    # submitit asks Slurm for SIGUSR2 shortly before the time limit (to checkpoint and
    # requeue). Slurm sends it to every process of the job, and USR2 ends a process that does
    # not handle it: the nsys run would die before its time. A profile cannot checkpoint, so
    # the warning becomes SIGURG, which every process ignores unless it asks for it.
    extra["signal"] = f"URG@{max(5, min(90, minutes * 60 // 4))}"
    params: dict[str, Any] = {"job_name": JOB_NAME_PREFIX + token, "time": minutes}
    if ex.slurm_partition:
        params["partition"] = ex.slurm_partition
    if ex.slurm_gpus_per_task:
        params["gpus_per_task"] = ex.slurm_gpus_per_task
    if ex.jobs:
        params["array_parallelism"] = ex.jobs
    if ex.slurm_setup:
        params["setup"] = list(ex.slurm_setup)
    if extra:
        params["additional_parameters"] = extra
    return params


def submit(db, todo: list[PlannedRun], out_dir: Path, nsys_spec, ex: ExecutorSpec,
           existing: dict[str, dict[str, Any]]) -> dict[str, str]:
    """Submit ``todo`` as one job array; returns config name -> job id."""
    token = uuid.uuid4().hex[:10]
    params = sbatch_parameters(ex, nsys_spec.timeout_s, token)
    rows = []
    for i, planned in enumerate(todo):
        record_path(out_dir, planned.name).unlink(missing_ok=True)  # a stale record
        row = index_row(planned)
        row.update(status="queued", executor="slurm", submit_token=token, array_index=i,
                   submitted_utc=utc_now())
        rows.append(row)
    try:
        import submitit
        from submitit.core.utils import FailedJobError, FailedSubmissionError
    except ImportError:
        raise SlurmError("--executor slurm needs submitit: pip install 'nsys-mine[slurm]' "
                         "(or pip install submitit).") from None
    try:
        executor = submitit.SlurmExecutor(folder=out_dir / SLURM_FOLDER / "%j",
                                          max_num_timeout=0)
    except RuntimeError:
        raise SlurmError("Slurm's `srun` is not on PATH: run the sweep on a Slurm login node, "
                         "or leave out --executor slurm to run here.") from None
    try:
        executor.update_parameters(**params)
    except ValueError as exc:
        raise SlurmError(f"submitit refused the Slurm options: {exc}") from None
    write_rows(db, rows)  # queued, no job id yet: a driver killed during sbatch finds them
    with signals_held():  # Ctrl-C and SIGTERM wait until the job ids are in the index
        try:
            # submitit prints sbatch's complaints itself; they belong in our one error line
            with contextlib.redirect_stderr(io.StringIO()), executor.batch():
                jobs = [executor.submit(run_config_job, p.cfg, str(out_dir), nsys_spec, p.name,
                                        token) for p in todo]
        except (FailedJobError, FailedSubmissionError, OSError) as exc:
            _forget_submission(db, todo, existing)
            folder = out_dir / SLURM_FOLDER  # what submitit left for jobs that never came
            for leftover in [*folder.glob("*.pkl"), *folder.glob(".submission_file_*")]:
                leftover.unlink(missing_ok=True)
            message = " ".join(str(exc).split())
            raise SlurmError(f"sbatch refused the sweep's jobs: {message}") from None
        ids = {p.name: job.job_id for p, job in zip(todo, jobs)}
        update_index_rows(db, {name: {"job_id": job_id} for name, job_id in ids.items()})
    return ids


def _forget_submission(db, todo: list[PlannedRun], existing: dict[str, dict[str, Any]]) -> None:
    """Put the index back as it was before a submission that sbatch refused."""
    back = [existing[p.name] for p in todo if p.name in existing]
    gone = [p.name for p in todo if p.name not in existing]
    with db.conn:
        for name in gone:
            db.conn.execute("DELETE FROM runs WHERE name = ?", [name])
    write_rows(db, back)


def recover_submissions(db, out_dir: Path) -> list[str]:
    """Rows left ``queued`` without a job id by a driver that died during ``sbatch``: give
    them the job ids Slurm knows by their token, or, when Slurm never got them, take them
    out of the index (the sweep submits them again). Returns the names taken out."""
    rows = run_rows(db)
    orphans: dict[str, list[dict[str, Any]]] = {}
    for row in rows.values():
        if row["status"] in ACTIVE and not row["job_id"] and row["submit_token"]:
            orphans.setdefault(row["submit_token"], []).append(row)
    dropped = []
    for token, group in orphans.items():
        found = find_submission(token)
        changes, gone = {}, []
        for row in group:
            job = found.get(row["array_index"] or 0)
            rec = read_record(record_path(out_dir, row["name"]))
            if job is None and rec and rec.get("token") == token:
                job = rec.get("job_id")
            if job:
                changes[row["name"]] = {"job_id": job}
            else:
                gone.append(row["name"])
        update_index_rows(db, changes)
        with db.conn:
            for name in gone:
                db.conn.execute("DELETE FROM runs WHERE name = ?", [name])
        dropped += gone
    return dropped


# --------------------------------------------------------------------------------------------
# the driver

Progress = Callable[[int, int, list[tuple[str, str]]], None]


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise DriverTerminated

    previous = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def drive(db, out_dir: Path, plan: list[PlannedRun] | None, nsys_spec, ex: ExecutorSpec, *,
          retry: bool = False, progress: Progress | None = None,
          confirm_cancel: Callable[[int, int], bool] | None = None) -> SweepOutcome:
    """Submit the planned configs that are not in the index yet (``plan=None``: only collect),
    then collect every job of the index until none is queued or running (or once, with
    ``ex.wait`` False). Ctrl-C or SIGTERM: cancel the unfinished jobs or leave them
    (``ex.cancel_on_exit``, else ``confirm_cancel(queued, running)`` on Ctrl-C)."""
    out_dir = Path(out_dir).resolve()  # jobs may start in another directory
    outcome = SweepOutcome(out_dir=out_dir, planned=len(plan) if plan is not None else 0)
    active: dict[str, dict[str, Any]] = {}
    with _sigterm_interrupts():
        try:
            recover_submissions(db, out_dir)
            rows = run_rows(db)
            if plan is not None:
                _submit_plan(db, out_dir, plan, nsys_spec, ex, retry, rows, outcome)
                rows = run_rows(db)
            active.update({n: r for n, r in rows.items()
                           if r["status"] in ACTIVE and r["job_id"]})
            names = [p.name for p in plan] if plan is not None else list(rows)
            total = len(set(names) | set(active))
            _collect(db, out_dir, active, ex, outcome, progress, total)
        except KeyboardInterrupt as exc:
            outcome.interrupted = True
            if not active:  # interrupted while submitting: the index has the job ids
                active.update({n: r for n, r in run_rows(db).items()
                               if r["status"] in ACTIVE and r["job_id"]})
            _on_exit(db, active, ex, outcome,
                     None if isinstance(exc, DriverTerminated) else confirm_cancel)
    outcome.pending = list(active)
    return outcome


def _submit_plan(db, out_dir: Path, plan: list[PlannedRun], nsys_spec, ex: ExecutorSpec,
                 retry: bool, rows: dict[str, dict[str, Any]], outcome: SweepOutcome) -> None:
    """Submit the planned configs that neither finished nor have a job (one job array)."""
    if nsys_spec.install:
        raise BadOption("--install-nsys with --executor slurm would make every job install "
                        "nsys at once; install it once where the nodes see it "
                        "(scripts/install_nsys.sh into a shared folder) and pass --nsys PATH.")
    done = finished_names(db, retry)
    held = {n for n, r in rows.items() if r["status"] in ACTIVE and r["job_id"]}
    outcome.resumed = [p.name for p in plan if p.name in done]
    todo = [p for p in plan if p.name not in done and p.name not in held]
    for planned in (p for p in todo if p.cfg is None):  # impossible shapes: no job
        record(db, planned, None, None, "failed", planned.error, executor="slurm")
        outcome.ran.append(planned.name)
    runnable = [p for p in todo if p.cfg is not None]
    if ex.slurm_gpus_per_task is None and any(p.cfg.device in ("cuda", "auto")
                                              for p in runnable):
        outcome.notes.append("no GPUs requested (--slurm-gpus-per-task): the jobs profile on "
                             "CPU unless the partition gives GPUs without asking.")
    if runnable:
        ids = submit(db, runnable, out_dir, nsys_spec, ex, rows)
        outcome.submitted = list(ids)
        outcome.job_ids = sorted({j.split("_")[0] for j in ids.values()}, key=int)


def _collect(db, out_dir: Path, active: dict[str, dict[str, Any]], ex: ExecutorSpec,
             outcome: SweepOutcome, progress: Progress | None, total: int) -> None:
    ended_since: dict[str, float] = {}  # COMPLETED or unknown, no record yet
    from_records: dict[str, str] = {}  # name -> job id, recorded while the job still ends
    failures = 0
    last_query = float("-inf")
    while True:
        for name, row in list(active.items()):
            rec = read_record(record_path(out_dir, name))
            if rec is not None and rec.get("token") == row["submit_token"]:
                _record_from_job(db, row, rec)
                outcome.ran.append(name)
                from_records[name] = row["job_id"]
                del active[name]
        now = time.monotonic()
        if active and (now - last_query >= ex.slurm_poll_s or not ex.wait):
            last_query = now
            try:
                states = slurm_states([r["job_id"] for r in active.values()])
                failures = 0
            except SlurmError:
                failures += 1
                if failures >= QUERY_FAILURES_TOLERATED or not ex.wait:
                    raise
                states = None
            if states is not None:
                _apply_states(db, out_dir, active, states, ended_since, outcome, now,
                              final=not ex.wait)
        if progress:
            progress(total - len(active), total, _board(active))
        if not active or not ex.wait:
            _settle(db, from_records, SETTLE_S if ex.wait else 0.0)
            return
        _sleep(RECORD_POLL_S)


def _settle(db, jobs: dict[str, str], wait_s: float) -> None:
    """A job writes its record a moment before it ends (submitit still saves its result):
    give those rows the state Slurm ends them with (COMPLETED, normally), waiting up to
    ``wait_s`` seconds; rows whose job has not ended by then keep the state last seen."""
    deadline = time.monotonic() + wait_s
    while jobs:
        try:
            states = slurm_states(list(jobs.values()))
        except SlurmError:
            return
        ended = {name: states[job] for name, job in jobs.items() if job in states and
                 STATE_STATUS.get(states[job].state) not in ACTIVE}
        update_index_rows(db, {name: {"slurm_state": st.state} for name, st in ended.items()})
        for name in ended:
            del jobs[name]
        if not jobs or time.monotonic() >= deadline:
            return
        _sleep(RECORD_POLL_S)


def _board(active: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    lines = []
    for _name, row in sorted(active.items(), key=lambda kv: kv[1]["status"] != "running"):
        where = f" on {row['node']}" if row["status"] == "running" and row["node"] else ""
        why = f" ({row['reason']})" if row["status"] == "queued" and row["reason"] else ""
        label = short_label(row)
        lines.append((label, f"job {row['job_id']} {row['status']}{where}{why}"))
    return lines


def _apply_states(db, out_dir: Path, active: dict[str, dict[str, Any]],
                  states: dict[str, SlurmJobState], ended_since: dict[str, float],
                  outcome: SweepOutcome, now: float, final: bool) -> None:
    changes: dict[str, dict[str, Any]] = {}
    for name, row in list(active.items()):
        st = states.get(row["job_id"])
        status = STATE_STATUS.get(st.state, "failed") if st else None
        if status in ACTIVE and st is not None:
            values = {"status": status, "slurm_state": st.state, "node": st.node,
                      "reason": st.reason if status == "queued" else None}
            if any(row.get(k) != v for k, v in values.items()):
                changes[name] = values
                row.update(values)
            continue
        if status in (None, "completed"):
            # no record (yet): a network filesystem may show it late, so wait a little before
            # calling it a failure, unless Slurm says the job ended long ago. A job Slurm does
            # not know at all is not waited for by a single --no-wait/--collect pass.
            first = ended_since.setdefault(name, now)
            ago = st.ended_s_ago() if st is not None else None
            settled = (ago is not None and ago > RECORD_GRACE_S) or (st is None and final)
            if not settled and now - first < RECORD_GRACE_S:
                continue
            if st is None:
                reason = (f"Slurm no longer knows job {row['job_id']} (it ended more than "
                          f"MinJobAge ago and sacct is not available) and the job wrote no "
                          f"result record; its log: {job_log(out_dir, row['job_id'])}")
                _record_ended(db, row, "failed", reason, None)
            else:
                reason = (f"Slurm job {row['job_id']} COMPLETED but wrote no result record "
                          f"({record_path(out_dir, name).name}){_log_tail(out_dir, row)}")
                _record_ended(db, row, "failed", reason, st)
        elif st is not None:
            _record_ended(db, row, status, _slurm_reason(out_dir, row, st), st)
        outcome.ran.append(name)
        del active[name]
    update_index_rows(db, changes)


def _slurm_reason(out_dir: Path, row: dict[str, Any], st: SlurmJobState) -> str:
    said = ", ".join(x for x in (st.reason, st.detail) if x and x != st.state)
    text = (f"Slurm {st.state}{f' ({said})' if said else ''}: "
            f"{STATE_MEANING.get(st.state, 'the job ended')}")  # job id, node: own columns
    if st.state in ("FAILED", "SPECIAL_EXIT", "NODE_FAIL", "OUT_OF_MEMORY"):
        text += _log_tail(out_dir, row)
    return text


def _log_tail(out_dir: Path, row: dict[str, Any], lines: int = 8) -> str:
    log = job_log(out_dir, row["job_id"])
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return f"; no log at {log}"
    last = "\n".join(text.rstrip().splitlines()[-lines:])
    return f"; log {log}:\n{last}" if last else f"; log {log} is empty"


def _where(row: dict[str, Any], **more: Any) -> dict[str, Any]:
    keep = {k: row.get(k) for k in ("executor", "job_id", "slurm_state", "node", "gpu",
                                    "submitted_utc", "submit_token", "array_index")}
    keep.update({k: v for k, v in more.items() if v is not None})
    return keep


def _planned(row: dict[str, Any]) -> PlannedRun:
    return PlannedRun(name=row["name"], cfg=None, config=json.loads(row["config_json"] or "{}"))


def _record_ended(db, row: dict[str, Any], status: str, reason: str,
                  st: SlurmJobState | None) -> None:
    record(db, _planned(row), None, None, status, reason,
           **_where(row, slurm_state=st.state if st else None, node=st.node if st else None))


def _record_from_job(db, row: dict[str, Any], rec: dict[str, Any]) -> None:
    from profile_cli.runs.mining import ProfileReport
    from profile_cli.runs.nsys_run import ProfileResult

    result = ProfileResult(**rec["result"]) if rec.get("result") else None
    report = ProfileReport(**rec["report"]) if rec.get("report") else None
    record(db, _planned(row), result, report, rec["status"], rec.get("reason"),
           **_where(row, node=rec.get("node"), gpu=rec.get("gpu"),
                    job_id=rec.get("job_id") or row.get("job_id")))


def _on_exit(db, active: dict[str, dict[str, Any]], ex: ExecutorSpec, outcome: SweepOutcome,
             confirm_cancel: Callable[[int, int], bool] | None) -> None:
    """Ctrl-C while waiting: cancel the unfinished jobs, or leave them for a later collect."""
    if not active:
        return
    running = sum(r["status"] == "running" for r in active.values())
    if ex.cancel_on_exit is not None:
        cancel = ex.cancel_on_exit
    elif confirm_cancel is not None:
        try:
            cancel = confirm_cancel(len(active) - running, running)
        except KeyboardInterrupt:
            cancel = False
    else:
        cancel = False
    if not cancel:
        return
    scancel([r["job_id"] for r in active.values()])
    for name, row in list(active.items()):
        record(db, _planned(row), None, None, "cancelled",
               "cancelled when the sweep's driver was interrupted",
               **_where(row, slurm_state="CANCELLED"))
        outcome.cancelled.append(name)
        del active[name]
