"""`sweep --executor slurm` on a real one-node Slurm cluster (``scripts/slurm_cluster.sh``,
started once per session by the ``slurm_cluster`` fixture) with the tiny model on CPU.

Jobs profile with the real nsys 2022.4, or with small stand-ins around it where a test needs a
job that stays put: one that sleeps (for scancel, Ctrl-C and the time limit) and one that waits
for a file before it runs the real nsys (a driver killed while its jobs run). Slurm, sbatch,
squeue, scancel, submitit and the index are all real.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")
pytest.importorskip("submitit")

from nvtx_model.workload import WorkloadSpec  # noqa: E402
from profile_cli.runs import slurm as slurm_executor  # noqa: E402
from profile_cli.runs.executors import ExecutorSpec  # noqa: E402
from profile_cli.runs.nsys_run import NsysSpec  # noqa: E402
from profile_cli.runs.sweep import run_sweep  # noqa: E402
from tests.conftest import OVER_TIME_SLEEP_S, sleeping_nsys  # noqa: E402
from tests.conftest import run_cli as _run_cli  # noqa: E402

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parent.parent
QUICK = ["--warmup", "1", "--steps", "1", "--slurm-poll", "1", "--format", "json"]


def script(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def run_cli(*args) -> tuple[int, str, str]:
    res = _run_cli(*args)
    return res.exit_code, res.stdout, res.stderr


def index_rows(out: Path) -> dict[str, dict]:
    conn = sqlite3.connect(f"file:{out / 'index.sqlite'}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        return {r["name"]: dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY rowid")}
    finally:
        conn.close()


def squeue(*args: str) -> list[list[str]]:
    out = subprocess.run(["squeue", "-h", "-r", "--states=all", *args], capture_output=True,
                         text=True, check=True).stdout
    return [line.split("|") for line in out.splitlines() if line.strip()]


def job_state(job_id: str) -> str:
    rows = [r for r in squeue("-o", "%i|%T") if r[0] == job_id]
    return rows[0][1] if rows else "UNKNOWN"


def wait_for(what, check, timeout_s: float = 60.0, every_s: float = 0.3):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every_s)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def slurm(slurm_cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster))
    return slurm_cluster


def test_scancel_becomes_cancelled_and_retry_runs_it_again(slurm, tmp_path, nsys_bin):
    out = tmp_path / "out"
    args = ["sweep", "--executor", "slurm", "--size", "tiny", "--context", "32", "--mode",
            "forward", "--device", "cpu", "--out", out, *QUICK]
    code, stdout, err = run_cli(*args, "--nsys", sleeping_nsys(tmp_path), "--no-wait")
    assert code == 0, err
    (row,) = json.loads(stdout)["runs"]
    assert row["status"] in ("queued", "running") and row["job_id"]
    job = row["job_id"]
    wait_for("the job to run", lambda: job_state(job) == "RUNNING")
    code, stdout, _ = run_cli("sweep", "--collect", out, "--no-wait", "--format", "json")
    assert json.loads(stdout)["runs"][0]["status"] == "running"
    subprocess.run(["scancel", job], check=True)
    code, stdout, err = run_cli("sweep", "--collect", out, "--slurm-poll", "1", "--format",
                                "json")
    assert code == 0, err
    (row,) = json.loads(stdout)["runs"]
    assert row["status"] == "cancelled" and row["job_id"] == job
    assert row["reason"] == ("Slurm CANCELLED: the job was cancelled (scancel, or an "
                             "administrator)")
    assert not (out / f"{row['name']}.result.json").exists()
    # a plain re-run keeps the cancelled row; --retry submits it again, with the real nsys
    code, stdout, _ = run_cli(*args, "--nsys", nsys_bin)
    assert json.loads(stdout)["runs"][0]["status"] == "cancelled"
    code, stdout, err = run_cli(*args, "--nsys", nsys_bin, "--retry")
    assert code == 0, err
    (again,) = json.loads(stdout)["runs"]
    assert again["status"] == "ok" and again["job_id"] != job and again["reason"] is None
    assert Path(again["sqlite"]).exists()


def test_four_configs_end_ok_and_a_killed_driver_neither_loses_nor_duplicates_one(
        slurm, tmp_path, nsys_bin, monkeypatch):
    """The issue's done-when sweep (tiny, contexts 32,64, forward and train; 1 warmup + 1
    measured step to be quick), with its driver killed twice: right after sbatch, before the
    job ids are in the index, and again while it waits. The next driver finds the jobs by
    their submission token, submits nothing, and records four ok rows with their job ids."""
    go = tmp_path / "GO"
    gated = script(tmp_path / "nsys-gated", f'if [ "$1" = --version ]; then exec {nsys_bin} '
                   f'--version; fi\nwhile [ ! -e {go} ]; do sleep 0.2; done\n'
                   f'exec {nsys_bin} "$@"\n')
    out = tmp_path / "D"
    workload = ["--size", "tiny", "--context", "32,64", "--mode", "forward,train",
                "--warmup", "1", "--steps", "1"]
    spec = WorkloadSpec(size="tiny", context="32,64", mode="forward,train", nvtx="fine",
                        warmup=1, steps=1)

    def killed_after_sbatch(db, changes):
        raise RuntimeError("driver killed right after sbatch")

    with monkeypatch.context() as mp:
        mp.setattr(slurm_executor, "update_index_rows", killed_after_sbatch)
        with pytest.raises(RuntimeError, match="killed right after sbatch"):
            run_sweep(spec, out, NsysSpec(nsys=str(gated)),
                      ExecutorSpec(executor="slurm", slurm_poll_s=1))
    rows = index_rows(out)
    assert [(r["status"], r["job_id"]) for r in rows.values()] == [("queued", None)] * 4
    (token,) = {r["submit_token"] for r in rows.values()}
    submitted = squeue(f"--name=nsys-mine-{token}", "-o", "%i")
    array = submitted[0][0].split("_")[0]
    job_ids = [f"{array}_{i}" for i in range(4)]
    assert sorted(j for j, in submitted) == job_ids

    # a second driver finds the jobs by their token, then is killed while it waits
    driver = subprocess.Popen(
        [sys.executable, "-m", "profile_cli", "sweep", "--executor", "slurm", *workload,
         "--nsys", str(gated), "--slurm-poll", "1", "--out", str(out)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for("the driver to recover the job ids",
                 lambda: all(r["job_id"] for r in index_rows(out).values()), timeout_s=60)
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait()
    rows = index_rows(out)
    assert [r["job_id"] for r in rows.values()] == job_ids
    assert all(r["status"] in ("queued", "running") for r in rows.values())

    go.touch()  # the jobs go on without a driver; the done-when command collects them
    code, stdout, err = run_cli("sweep", "--executor", "slurm", *workload, "--out", out,
                                "--slurm-poll", "1", "--format", "json")
    assert code == 0, err
    data = json.loads(stdout)
    runs = data["runs"]
    assert [(r["context"], r["mode"], r["status"], r["job_id"]) for r in runs] == [
        (32, "forward", "ok", job_ids[0]), (32, "train", "ok", job_ids[1]),
        (64, "forward", "ok", job_ids[2]), (64, "train", "ok", job_ids[3])], \
        [r.get("reason") for r in runs]
    assert all(r["node"] == "localhost" for r in runs)
    assert "4 config(s) run, 0 already in the index" in " ".join(data["notes"])
    assert not any("submitted" in n for n in data["notes"])
    index = index_rows(out)
    assert list(index) == [r["name"] for r in runs]
    for r in runs:
        row = index[r["name"]]
        assert (row["status"], row["job_id"], row["executor"]) == ("ok", r["job_id"], "slurm")
        assert Path(row["sqlite"]).stat().st_size > 10_000
        assert Path(row["nsys_rep"]).exists() and Path(row["sidecar"]).exists()
        record = json.loads((out / f"{r['name']}.result.json").read_text())
        assert (record["job_id"], record["status"]) == (r["job_id"], "ok")
    ranges = {t["range"] for t in data["ranges"] if t["name"] == runs[1]["name"]}
    assert {"forward", "backward", "optimizer", "step"} <= ranges
    # the records come a moment before the jobs end: the driver waits for Slurm's word
    assert dict(squeue("-j", array, "-o", "%i|%T")) == {j: "COMPLETED" for j in job_ids}
    assert [index[r["name"]]["slurm_state"] for r in runs] == ["COMPLETED"] * 4
    # the same sweep again: everything is in the index, nothing is submitted
    code, stdout, err = run_cli("sweep", "--executor", "slurm", *workload, "--out", out,
                                "--format", "json")
    notes = json.loads(stdout)["notes"]
    assert code == 0 and "0 config(s) run, 4 already in the index (resumed), of 4" in notes[0]
    assert [j for j, in squeue("-o", "%F") if int(j) > int(array)] == []  # no second sbatch


def test_ctrl_c_cancels_the_jobs_when_asked(slurm, tmp_path, monkeypatch):
    out = tmp_path / "out"
    spec = WorkloadSpec(size="tiny", context="32", mode="forward", nvtx="fine", warmup=1,
                        steps=1, device="cpu")
    looks = []

    def interrupted_sleep(seconds):
        looks.append(seconds)
        if len(looks) >= 3:
            raise KeyboardInterrupt
        time.sleep(seconds)

    monkeypatch.setattr(slurm_executor, "_sleep", interrupted_sleep)
    asked = []
    outcome = run_sweep(spec, out, NsysSpec(nsys=str(sleeping_nsys(tmp_path))),
                        ExecutorSpec(executor="slurm", slurm_poll_s=0.5),
                        confirm_cancel=lambda queued, running: asked.append(
                            (queued, running)) or True)
    assert outcome.interrupted and len(outcome.cancelled) == 1 and outcome.pending == []
    assert len(asked) == 1 and sum(asked[0]) == 1
    (row,) = index_rows(out).values()
    assert (row["status"], row["reason"]) == (
        "cancelled", "cancelled when the sweep's driver was interrupted")
    wait_for("Slurm to cancel the job", lambda: job_state(row["job_id"]) == "CANCELLED",
             timeout_s=30)


def test_a_script_ending_the_driver_with_sigterm_and_cancel_on_exit(slurm, tmp_path):
    out = tmp_path / "out"
    driver = subprocess.Popen(
        [sys.executable, "-m", "profile_cli", "sweep", "--executor", "slurm", "--size", "tiny",
         "--context", "32", "--mode", "forward", "--device", "cpu", "--nsys",
         str(sleeping_nsys(tmp_path)), "--slurm-poll", "1", "--cancel-on-exit", "--out",
         str(out), "--format", "json"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        job = wait_for("the job to run", lambda: next(
            (r["job_id"] for r in index_rows(out).values()
             if r["job_id"] and job_state(r["job_id"]) == "RUNNING"), None)
            if (out / "index.sqlite").exists() else None)
        driver.send_signal(signal.SIGTERM)
        stdout, stderr = driver.communicate(timeout=60)
    finally:
        driver.kill()
    assert driver.returncode == 130, stderr
    (row,) = json.loads(stdout)["runs"]
    assert (row["status"], row["job_id"]) == ("cancelled", job)
    wait_for("Slurm to cancel the job", lambda: job_state(job) == "CANCELLED", timeout_s=30)


def test_sbatch_refusal_is_an_error_and_leaves_the_index_clean(slurm, tmp_path):
    out = tmp_path / "out"
    code, stdout, err = run_cli("sweep", "--executor", "slurm", "--size", "tiny", "--context",
                                "32", "--mode", "forward", "--slurm-partition", "nosuch",
                                "--out", out, *QUICK)
    assert code == 1 and stdout == ""
    assert err.startswith("Error: sbatch refused the sweep's jobs:") and "partition" in err
    assert "Traceback" not in err
    assert index_rows(out) == {}


def test_a_job_over_its_time_limit_becomes_timeout(slurm, slurm_over_time):
    """Submitted when the session started (fixture ``slurm_over_time``, tests/conftest.py)."""
    def collected():
        code, stdout, err = run_cli("sweep", "--collect", slurm_over_time, "--no-wait",
                                    "--format", "json")
        assert code == 0, err
        (row,) = json.loads(stdout)["runs"]
        return row if row["status"] not in ("queued", "running") else None

    row = wait_for("Slurm to end the job at its time limit", collected, timeout_s=150,
                   every_s=2)
    assert row["status"] == "timeout"
    assert row["reason"] == ("Slurm TIMEOUT (TimeLimit): the job reached its time limit "
                             "(--slurm-time)")
    index = index_rows(slurm_over_time)[row["name"]]
    assert (index["slurm_state"], index["job_id"]) == ("TIMEOUT", row["job_id"])
    # the job's nsys stand-in (and its sleep) ended with the job, not left behind
    for pattern in (str(slurm_over_time.parent / "nsys-sleeps"), f"sleep {OVER_TIME_SLEEP_S}"):
        leftovers = subprocess.run(["pgrep", "-f", pattern], capture_output=True,
                                   text=True).stdout.split()
        assert leftovers == [], pattern


def test_a_sweep_over_a_command_runs_as_slurm_jobs(slurm, tmp_path, nsys_bin):
    """sweep --command on Slurm: each combination is an array task that runs the command
    under nsys on the node (in the driver's working directory), the index records the
    command, grid and exit code, and the failed program's export is mined all the same."""
    tiny = ROOT / "tests" / "programs" / "tiny_train.py"
    out = tmp_path / "cmd"
    code, stdout, err = run_cli(
        "sweep", "--executor", "slurm", "--command",
        f"{sys.executable} {tiny} --steps 1 --exit-code {{code}}", "--grid", "code=0,3",
        "--nvtx", "modules:1,steps", "--out", out, "--nsys", nsys_bin, "--slurm-poll", "1",
        "--format", "json")
    assert code == 0, err
    runs = json.loads(stdout)["runs"]
    assert [(r["config"], r["status"], r["exit_code"]) for r in runs] == [
        ("code=0", "ok", 0), ("code=3", "failed", 3)]
    assert all(r["job_id"] for r in runs) and runs[1]["grid"] == {"code": "3"}
    rows = index_rows(out)
    assert {r["kind"] for r in rows.values()} == {"command"}
    times = json.loads(run_cli("sweep", "--report", out, "--table", "ranges", "--format",
                               "json")[1])["ranges"]
    assert {(t["name"] == runs[1]["name"], t["range"]) for t in times} >= {
        (True, "TinyNet backward"), (True, "step")}
