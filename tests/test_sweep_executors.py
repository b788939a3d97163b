"""Where sweep configs run, without a Slurm cluster: ``--jobs N`` locally (GPU pinning with an
injected GPU list, the CPU warning, and a real two-at-once CPU sweep under nsys), the Slurm
option values, how Slurm's answers become statuses (recorded squeue/sacct output), and the
index (old indexes, one driver per folder). The real-cluster tests are in test_slurm.py."""

from __future__ import annotations

import json
import sqlite3
import stat
import threading
import time
from datetime import datetime
from pathlib import Path

import pytest

from nsys_parsers.errors import BadOption
from nvtx_model.workload import WorkloadSpec
from profile_cli.runs import nsys_run as profiler
from profile_cli.runs import slurm as slurm_executor
from profile_cli.runs import sweep as sweeper
from profile_cli.runs.executors import (
    ExecutorSpec,
    GpuPool,
    local_plan,
    slurm_extra_args,
    slurm_mem,
    slurm_minutes,
    visible_gpus,
)
from profile_cli.runs.index import index_lock, open_index, run_rows
from profile_cli.runs.nsys_run import NsysSpec
from profile_cli.runs.process import run_with_timeout


def spec(**kw) -> WorkloadSpec:
    base = dict(size="tiny", context="32", mode="forward", nvtx="fine", warmup=1, steps=1,
                device="cpu")
    base.update(kw)
    return WorkloadSpec(**base)


def fake_nsys(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


# --------------------------------------------------------------------------------------------
# local: how many at once, which GPU

def test_local_plan_one_config_per_gpu():
    gpus = ["0", "1", "2", "3"]
    assert local_plan(None, "cuda", gpus) == local_plan(4, "cuda", gpus)
    plan = local_plan(None, "cuda", gpus)
    assert (plan.workers, plan.gpus, plan.warnings) == (4, gpus, [])
    assert local_plan(2, "cuda", gpus).workers == 2
    over = local_plan(6, "cuda", ["0", "1"])
    assert over.workers == 6 and over.warnings == [
        "--jobs 6 with 2 GPU(s): configs share GPUs and disturb each other's timings; "
        "--jobs 2 gives each config its own GPU."]


def test_local_plan_on_cpu_defaults_to_one_and_warns_for_more():
    assert local_plan(None, "cpu", []) == local_plan(1, "cpu", ["0"]) and \
        local_plan(None, "cpu", []).workers == 1 and local_plan(None, "cpu", []).warnings == []
    plan = local_plan(2, "cpu", [], cores=8)
    assert plan.workers == 2 and plan.gpus == []
    assert plan.warnings == [
        "--jobs 2 on CPU: concurrent CPU runs disturb each other's timings (they share 8 "
        "cores); use --jobs 1 for timings you report; pass --threads 4 so that 2 runs x "
        "threads fit the 8 cores."]
    assert "--threads" not in local_plan(2, "cpu", [], threads=2, cores=8).warnings[0]


def test_visible_gpus_follow_the_drivers_cuda_visible_devices(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 5,GPU-8f3c")
    assert visible_gpus() == ["2", "5", "GPU-8f3c"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,-1,3")  # CUDA stops at an invalid entry
    assert visible_gpus() == ["1"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert visible_gpus() == []


def test_gpu_pool_gives_each_running_config_its_own_gpu():
    pool = GpuPool(["3", "1"])
    a, b = pool.acquire(), pool.acquire()
    assert (a, b) == ("3", "1")
    c = pool.acquire()  # more configs than GPUs: the least busy one, in the given order
    assert c == "3" and pool.busy() == {"3": 2, "1": 1}
    pool.release(a)
    pool.release(c)
    assert pool.acquire() == "3"


def test_parallel_sweep_pins_each_config_to_a_free_gpu(tmp_path, monkeypatch):
    """Four configs on an injected 2-GPU machine: two at a time, never two on one GPU, each
    row records its GPU; the child's CUDA_VISIBLE_DEVICES is checked below."""
    lock = threading.Lock()
    busy: dict[str, str] = {}
    overlaps, seen = [], []

    def fake_profile(cfg, out_dir, nsys_spec, force=False, nsys=None, gpu=None, stop=None):
        with lock:
            assert gpu not in busy.values(), f"GPU {gpu} given twice"
            busy[cfg.name] = gpu
            overlaps.append(len(busy))
            seen.append(gpu)
        time.sleep(0.3)
        with lock:
            del busy[cfg.name]
        return profiler.ProfileResult(
            name=cfg.name, config=cfg.to_dict("cuda"), status="failed", reason="stand-in",
            sqlite=None, nsys_rep=None, sidecar=str(out_dir / "x.json"), wall_s=0.3,
            command=["nsys"], nsys_version="2022.4", trace="cuda,nvtx,osrt", window="measure",
            gpu=gpu)

    monkeypatch.setattr(sweeper, "profile_config", fake_profile)
    monkeypatch.setattr(sweeper, "locate_nsys", lambda *a, **k: ("nsys", "2022.4"))
    warnings: list[str] = []
    out = sweeper.run_sweep(spec(context="16,32,64,128", device="cuda"), tmp_path, NsysSpec(),
                            warn=warnings.append, gpus=["0", "1"])
    assert len(out.ran) == 4 and warnings == [] and max(overlaps) == 2
    assert sorted(seen) == ["0", "0", "1", "1"]
    rows = sweeper.sweep_tables(tmp_path).runs
    assert [r["context"] for r in rows] == [16, 32, 64, 128]
    assert sorted(r["gpu"] for r in rows) == ["0", "0", "1", "1"]


def test_profile_config_pins_the_child_to_its_gpu(tmp_path):
    pytest.importorskip("torch")
    seen = tmp_path / "seen"
    nsys = fake_nsys(tmp_path / "nsys", f'echo "$CUDA_VISIBLE_DEVICES" > {seen}; exit 3\n')
    cfg = spec(device="cuda").configs()[0]
    result = profiler.profile_config(cfg, tmp_path / "out", NsysSpec(), nsys=(nsys, "2022.4"),
                                     gpu="5")
    assert seen.read_text().strip() == "5"
    assert result.gpu == "5" and json.loads(Path(result.sidecar).read_text())["gpu"] == "5"


def test_a_stop_event_ends_a_running_child_like_ctrl_c(tmp_path):
    pidfile = tmp_path / "pid"
    child = fake_nsys(tmp_path / "slow", f"echo $$ > {pidfile}; exec sleep 300\n")
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        run_with_timeout([str(child)], timeout_s=60, stop=stop)
    assert time.monotonic() - t0 < 10
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(
        f"/proc/{pid}/status").read_text().lower()


@pytest.mark.nsys
def test_jobs_2_on_cpu_runs_two_configs_at_once_with_a_warning(tmp_path, cli, nsys_bin):
    pytest.importorskip("torch")
    pytest.importorskip("nvtx")
    res = cli("sweep", "--size", "tiny", "--context", "16,32", "--mode", "forward",
              "--warmup", "1", "--steps", "1", "--device", "cpu", "--jobs", "2", "--out-dir",
              tmp_path, "--nsys", nsys_bin, "--timeout", "300", "--format", "json")
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith("Warning: --jobs 2 on CPU: concurrent CPU runs disturb each "
                                 "other's timings")
    data = json.loads(res.stdout)
    assert [(r["context"], r["status"], r["job_id"], r["gpu"]) for r in data["runs"]] == [
        (16, "ok", None, None), (32, "ok", None, None)]
    assert any("--jobs 2 on CPU" in n for n in data["notes"])
    sides = [json.loads(Path(r["sqlite"]).with_suffix(".json").read_text())
             for r in data["runs"]]
    starts = [datetime.fromisoformat(s["started_utc"]).timestamp() for s in sides]
    # the two nsys runs overlapped: the second started before the first one ended
    assert abs(starts[0] - starts[1]) < min(s["wall_s"] for s in sides)
    assert all(Path(r["sqlite"]).exists() for r in data["runs"])


# --------------------------------------------------------------------------------------------
# Slurm option values and errors

def test_slurm_time_values():
    assert [slurm_minutes(t) for t in ("90", "45:30", "1:30:00", "2-00:00:00", "1-12",
                                       "0:0:1")] == [90, 46, 90, 2880, 2160, 1]
    for bad in ("1h", "", "0", "-5", "1:2:3:4"):
        with pytest.raises(BadOption, match="--slurm-time"):
            slurm_minutes(bad)


def test_slurm_mem_and_extra_args():
    assert [slurm_mem(m) for m in ("16G", "64000m", "1.5T", "32GB")] == ["16G", "64000M",
                                                                        "1.5T", "32G"]
    with pytest.raises(BadOption, match="16G or 64000M"):
        slurm_mem("lots")
    assert slurm_extra_args(["account=proj", "--cpus-per-task=8", "exclusive",
                             "mail_type=END"]) == {"account": "proj", "cpus-per-task": "8",
                                                   "exclusive": True, "mail-type": "END"}
    with pytest.raises(BadOption, match="use --slurm-time instead"):
        slurm_extra_args(["time=10"])
    with pytest.raises(BadOption, match="sets --array itself"):
        slurm_extra_args(["array=0-3"])
    with pytest.raises(BadOption, match="KEY=VALUE"):
        slurm_extra_args(["=x"])


def test_sbatch_parameters_map_the_options():
    ex = ExecutorSpec(executor="slurm", jobs=3, slurm_partition="gpu", slurm_time="1:30:00",
                      slurm_gpus_per_task=1, slurm_mem="32G",
                      slurm_args=["account=proj", "exclusive"], slurm_setup=["module load cuda"])
    params = slurm_executor.sbatch_parameters(ex, nsys_timeout_s=900, token="abc")
    assert params == {
        "job_name": "nsys-mine-abc", "time": 90, "partition": "gpu", "gpus_per_task": 1,
        "array_parallelism": 3, "setup": ["module load cuda"],
        "additional_parameters": {"account": "proj", "exclusive": True, "mem": "32G",
                                  "signal": "URG@90"}}
    default = slurm_executor.sbatch_parameters(ExecutorSpec(executor="slurm"), 900, "t")
    assert default["time"] == 20 and default["additional_parameters"] == {"signal": "URG@90"}
    assert slurm_executor.sbatch_parameters(
        ExecutorSpec(executor="slurm", slurm_time="1"), 900, "t")["additional_parameters"] == {
        "signal": "URG@15"}


@pytest.mark.parametrize("args, message", [
    (["--no-wait"], "--no-wait only apply to Slurm sweeps; add --executor slurm"),
    (["--slurm-time", "10", "--slurm-mem", "4G"], "--slurm-time, --slurm-mem only apply"),
    (["--executor", "slurm", "--slurm-time", "soon"], "--slurm-time: 'soon' is not a Slurm"),
    (["--executor", "slurm", "--slurm-arg", "partition=x"], "use --slurm-partition instead"),
    (["--report", "a", "--collect", "b"], "give one of them"),
    (["--collect", "nowhere"], "nowhere: no index.sqlite here"),
    (["--executor", "slurm", "--install-nsys"], "would make every job install nsys at once"),
])
def test_executor_option_errors(tmp_path, cli, args, message):
    res = cli("sweep", "--size", "tiny", "--out-dir", tmp_path, *[
        str(tmp_path / a) if a in ("a", "b", "nowhere") else a for a in args])
    assert res.exit_code == 1 and message in res.stderr and "Traceback" not in res.stderr
    assert res.stderr.startswith("Error: ")


def test_slurm_sweep_without_slurm_commands_says_where_to_run(tmp_path, cli, monkeypatch):
    pytest.importorskip("submitit")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    res = cli("sweep", "--executor", "slurm", "--size", "tiny", "--context", "32",
              "--out-dir", tmp_path / "out")
    assert res.exit_code == 1
    assert res.stderr == ("Error: Slurm's `srun` is not on PATH: run the sweep on a Slurm "
                          "login node, or leave out --executor slurm to run here.\n")
    assert run_rows(open_index(tmp_path / "out")) == {}


# --------------------------------------------------------------------------------------------
# Slurm's answers -> statuses (recorded outputs; the live cluster path is in test_slurm.py)

def test_parse_squeue_and_sacct_outputs():
    states = slurm_executor.parse_squeue(
        "12_0|RUNNING|None|node7|2026-11-23T06:10:00\n"
        "12_1|PENDING|Priority||N/A\n"
        "13|TIMEOUT|TimeLimit|node2|2026-11-23T05:42:49\n")
    assert (states["12_0"].state, states["12_0"].node, states["12_0"].reason) == (
        "RUNNING", "node7", None)
    assert (states["12_1"].reason, states["12_1"].node) == ("Priority", None)
    assert states["13"].end == "2026-11-23T05:42:49" and states["13"].ended_s_ago() > 0
    acct = slurm_executor.parse_sacct(
        "14_0|CANCELLED by 1000|0:15|node3|2026-11-23T05:00:00\n"
        "14_[1-3]|PENDING|0:0|None assigned|Unknown\n"
        "14_0.batch|CANCELLED|0:15|node3|2026-11-23T05:00:00\n"
        "15|NODE_FAIL|1:0|node9|2026-11-23T05:01:00\n"
        "16|OUT_OF_MEMORY|0:125|node1|2026-11-23T05:02:00\n")
    assert sorted(acct) == ["14_0", "15", "16"]
    assert (acct["14_0"].state, acct["14_0"].detail) == ("CANCELLED", "by 1000, exit code 0:15")
    assert acct["15"].detail == "exit code 1:0"


def _queued_index(tmp_path: Path, jobs: list[str]) -> dict[str, dict]:
    from profile_cli.runs.index import index_row, write_rows

    db = open_index(tmp_path)
    plan = sweeper.plan_sweep(spec(context=",".join(str(16 * (i + 1)) for i in range(len(jobs)))))
    rows = []
    for planned, job in zip(plan, jobs):
        row = index_row(planned)
        row.update(status="queued", executor="slurm", job_id=job, submit_token="tok")
        rows.append(row)
    write_rows(db, rows)
    return {p.name: job for p, job in zip(plan, jobs)}


def test_slurm_endings_become_statuses_with_slurms_reason(tmp_path, monkeypatch):
    """States the one-node cluster cannot produce (node failure, preemption, memory), and a
    job Slurm no longer knows, as squeue/sacct report them."""
    names = _queued_index(tmp_path, ["20_0", "20_1", "20_2", "20_3", "20_4"])
    log = slurm_executor.job_log(tmp_path, "20_0")
    log.parent.mkdir(parents=True)
    log.write_text("srun: error: node7: task 0: Killed\n")
    answers = {"20_0": slurm_executor.SlurmJobState("20_0", "NODE_FAIL", None, "node7"),
               "20_1": slurm_executor.SlurmJobState("20_1", "PREEMPTED", None, "node8"),
               "20_2": slurm_executor.SlurmJobState("20_2", "OUT_OF_MEMORY", "OutOfMemory",
                                                    "node9", "exit code 0:125"),
               "20_3": slurm_executor.SlurmJobState("20_3", "RUNNING", None, "node1")}
    monkeypatch.setattr(slurm_executor, "slurm_states", lambda ids: dict(answers))
    out = sweeper.collect_sweep(tmp_path, ExecutorSpec(wait=False))
    rows = {r["job_id"]: r for r in run_rows(open_index(tmp_path)).values()}
    assert rows["20_0"]["status"] == "failed" and rows["20_0"]["reason"] == (
        f"Slurm NODE_FAIL: the node failed; log {log}:\n"
        "srun: error: node7: task 0: Killed")
    assert rows["20_1"]["status"] == "cancelled" and rows["20_1"]["reason"].startswith(
        "Slurm PREEMPTED: the job was preempted by a higher-priority job")
    assert rows["20_2"]["status"] == "oom" and rows["20_2"]["reason"] == (
        "Slurm OUT_OF_MEMORY (OutOfMemory, exit code 0:125): the job exceeded its memory "
        f"(--slurm-mem); no log at {slurm_executor.job_log(tmp_path, '20_2')}")
    assert [rows[j]["node"] for j in ("20_0", "20_1", "20_2")] == ["node7", "node8", "node9"]
    assert (rows["20_3"]["status"], rows["20_3"]["node"]) == ("running", "node1")
    # 20_4: unknown to squeue and sacct, no record: a --no-wait pass calls it failed
    assert rows["20_4"]["status"] == "failed" and rows["20_4"]["reason"].startswith(
        "Slurm no longer knows job 20_4")
    assert sorted(out.pending) == [n for n, j in names.items() if j == "20_3"]
    assert len(out.ran) == 4


def test_a_result_record_wins_and_a_stale_one_is_ignored(tmp_path, monkeypatch):
    names = _queued_index(tmp_path, ["30_0", "30_1"])
    (first, second) = names
    stale = {"name": second, "token": "an-older-submission", "job_id": "29_1", "status": "ok",
             "reason": None, "result": None, "report": None}
    slurm_executor._write_json_atomic(slurm_executor.record_path(tmp_path, second), stale)
    fresh = dict(stale, name=first, token="tok", job_id="30_0", status="oom",
                 reason="out of memory at size tiny context 16", node="node4")
    slurm_executor._write_json_atomic(slurm_executor.record_path(tmp_path, first), fresh)
    monkeypatch.setattr(slurm_executor, "slurm_states", lambda ids: {
        "30_1": slurm_executor.SlurmJobState("30_1", "PENDING", "Resources")})
    out = sweeper.collect_sweep(tmp_path, ExecutorSpec(wait=False))
    rows = run_rows(open_index(tmp_path))
    assert (rows[first]["status"], rows[first]["reason"], rows[first]["node"]) == (
        "oom", "out of memory at size tiny context 16", "node4")
    assert (rows[second]["status"], rows[second]["reason"]) == ("queued", "Resources")
    assert out.ran == [first] and out.pending == [second]


# --------------------------------------------------------------------------------------------
# the index

def test_an_index_from_before_executors_gains_the_new_columns(tmp_path):
    conn = sqlite3.connect(tmp_path / "index.sqlite")
    conn.execute("CREATE TABLE runs (name TEXT PRIMARY KEY, size TEXT, context INTEGER, "
                 "status TEXT, reason TEXT)")
    conn.execute("INSERT INTO runs VALUES ('old', 'tiny', 32, 'ok', NULL)")
    conn.commit()
    conn.close()
    db = open_index(tmp_path)
    row = run_rows(db)["old"]
    assert (row["status"], row["job_id"], row["executor"]) == ("ok", None, None)
    assert {"job_id", "slurm_state", "node", "gpu", "submit_token"} <= set(row)


def test_one_driver_per_sweep_folder(tmp_path):
    with index_lock(tmp_path):
        with pytest.raises(BadOption, match="another nsys-mine sweep is working on"):
            with index_lock(tmp_path):
                pass
    with index_lock(tmp_path):  # released when the first driver ends
        pass


def test_a_local_sweep_leaves_configs_held_by_slurm_jobs_alone(tmp_path, monkeypatch):
    names = _queued_index(tmp_path, ["40_0"])
    monkeypatch.setattr(sweeper, "locate_nsys", lambda *a, **k: ("nsys", "2022.4"))
    with pytest.raises(BadOption, match="collect them with `nsys-mine sweep --collect"):
        sweeper.run_sweep(spec(context="16"), tmp_path, NsysSpec())
    assert run_rows(open_index(tmp_path))[next(iter(names))]["status"] == "queued"


# --------------------------------------------------------------------------------------------
# The index file appears whole (a poller once found index.sqlite with no `runs` table)


def test_a_new_index_appears_with_every_table(tmp_path, monkeypatch):
    from profile_cli.runs import index as sweep_index

    out = tmp_path / "out"
    seen: list[bool] = []
    build = sweep_index._create_tables

    def watching(db):
        seen.append((out / sweep_index.INDEX_NAME).exists())
        build(db)

    monkeypatch.setattr(sweep_index, "_create_tables", watching)
    open_index(out).close()
    assert seen == [False]  # the tables were built before the file had its name
    conn = sqlite3.connect(f"file:{out / sweep_index.INDEX_NAME}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    conn.close()
    assert tables == {"runs", "dominant", "mix", "range_times"}
    assert sorted(p.name for p in out.iterdir()) == [sweep_index.INDEX_NAME]
    open_index(out).close()  # opening it again builds nothing
    assert seen == [False]


def test_an_empty_index_file_gets_its_tables(tmp_path):
    (tmp_path / "index.sqlite").touch()
    assert run_rows(open_index(tmp_path)) == {}
