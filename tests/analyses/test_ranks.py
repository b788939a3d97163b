"""``ranks`` on real parts: rank exports built from the real 2-GPU DDP capture
(``benchmarks/rank_exports.py``: split, cloned to 8 ranks, each file's clock shifted, a known
delay before every collective of rank 5), answered on a real Dask LocalCluster of 2 worker
processes (started once for the module); the one-file form on the real capture; bad input
(a crashed rank, a damaged and a missing export, exports of two runs, one process); a worker
killed mid-task; real ``dask scheduler`` + ``dask worker`` processes on loopback; and
``--scheduler slurm`` on the one-node Slurm cluster the tests start."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from benchmarks.rank_exports import build_rank_exports, truncate_export  # noqa: E402
from nsys_parsers.errors import BadOption, ExportNotFound  # noqa: E402
from reports.analyses.ranks import mine_ranks, ranks  # noqa: E402
from reports.pipeline.ask import ask  # noqa: E402
from reports.ranks.cluster import map_exports  # noqa: E402
from reports.ranks.matching import RanksMismatch  # noqa: E402
from reports.ranks.summary import (  # noqa: E402
    rank_from_capture,
    rank_from_name,
    summarize_export,
)
from tests.conftest import fixture_path  # noqa: E402

DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
RANKS, SLOW, DELAY = 8, 5, 2_000_000
CLOCK_STEP = 7_000_000_000
GPUS_COLUMNS = ["pid", "device", "span_ns", "busy_ns", "idle_ns", "comm_ns", "compute_ns",
                "exposed_comm_ns"]


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ranks8")
    build_rank_exports(fixture_path(DDP), out, ranks=RANKS, slow_rank=SLOW, delay_ns=DELAY,
                       clock_step_ns=CLOCK_STEP)
    return out


@pytest.fixture(scope="module")
def even(tmp_path_factory) -> Path:
    """The same 8 ranks without a straggler."""
    out = tmp_path_factory.mktemp("ranks8even")
    build_rank_exports(fixture_path(DDP), out, ranks=RANKS, clock_step_ns=CLOCK_STEP)
    return out


@pytest.fixture(scope="module")
def client():
    import distributed

    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as c:
        yield c


def by_rank(report) -> dict[int, dict]:
    return {r["rank"]: r for r in report.rows}


def test_rank_numbers_from_file_names():
    assert [rank_from_name(n) for n in ("rank_3.sqlite", "rank12.nsys-rep", "job-r3.sqlite",
                                        "trace-7.sqlite", "profile.sqlite")] == [3, 12, 3, 7,
                                                                                 None]


def test_rank_numbers_from_the_capture():
    assert rank_from_capture({"LOCAL_RANK": "1", "RANK": "3"}, []) == (3, "environment")
    assert rank_from_capture({}, ["train.py", "--local-rank", "2"]) == (2, "command line")
    assert rank_from_capture({}, ["train.py", "--rank=4"]) == (4, "command line")
    assert rank_from_capture({"PATH": "/bin"}, ["train.py"]) == (None, "")


def test_the_straggler_and_its_lateness_are_recovered(built, even, client):
    report = ranks([built], client=client)
    rows = by_rank(report)
    assert sorted(rows) == list(range(RANKS))
    assert [r for r, row in rows.items() if row["straggler"]] == [SLOW]
    slow = rows[SLOW]
    assert abs(slow["late_ns"] - DELAY) <= 0.02 * DELAY
    matched = slow["matched"]
    assert matched == 230 and slow["last_at"] == matched
    base = by_rank(ranks([even], client=client))
    assert not any(r["straggler"] for r in base.values())
    for r, row in rows.items():
        grew = row["wait_ns"] - base[r]["wait_ns"]
        if r == SLOW:
            assert row["wait_ns"] == 0
        else:  # every other rank waits the injected delay at every collective
            assert abs(grew - DELAY * matched) <= 0.02 * DELAY * matched
            assert abs(row["late_ns"]) <= 0.02 * DELAY
        assert row["rank_source"] == "nccl"
    # clocks: rank r's file was shifted by r * CLOCK_STEP; aligned by the collectives' ends
    assert [rows[r]["clock_offset_ns"] for r in range(RANKS)] == \
        [-r * CLOCK_STEP for r in range(RANKS)]
    assert any("residual error 0 ns" in n for n in report.notes)
    why = report.sentences[0]
    assert why.startswith(f"rank {SLOW} arrives 2.000 ms late at 230 of 230")
    assert "with cause `cpu` inside `data_loader`" in why
    assert "the other ranks lose 460.000 ms each waiting for it" in why
    assert report.sentences[1].startswith(
        f"rank {SLOW}: NVTX ranges that grew most before its late arrivals, vs the median")
    assert "`data_loader` +460.000 ms CPU" in report.sentences[1]
    why = mine_ranks([built], client=client).why
    assert [w.rank for w in why] == [SLOW]  # the injected idle, all of it `cpu`, recovered
    assert abs(why[0].idle_extra["cpu"] - DELAY * matched) <= 0.02 * DELAY * matched
    assert why[0].idle_range == "data_loader" and why[0].lost_ns == DELAY * matched


def test_per_rank_gpu_columns_equal_gpus(built, client):
    rows = by_rank(ranks([built], client=client))
    for r in (0, SLOW):
        gpus = ask("gpus", [built / f"rank_{r}.sqlite"]).rows
        assert len(gpus) == 1
        assert {c: rows[r][c] for c in GPUS_COLUMNS} == {c: gpus[0][c] for c in GPUS_COLUMNS}


def test_one_export_of_every_rank_the_real_ddp_capture(fx):
    report = ranks([fx(DDP)])
    rows = by_rank(report)
    gpus = {(g["pid"], g["device"]): g for g in ask("gpus", [fx(DDP)]).rows}
    assert sorted(rows) == [0, 1]
    for row in rows.values():
        g = gpus[(row["pid"], row["device"])]
        assert {c: row[c] for c in GPUS_COLUMNS} == {c: g[c] for c in GPUS_COLUMNS}
        assert row["rank_source"] == "nccl" and row["matched"] == 230
    assert (rows[0]["pid"], rows[1]["pid"]) == (13096, 13097)
    assert rows[1]["straggler"] and not rows[0]["straggler"]
    assert (rows[1]["late_ns"], rows[1]["last_at"], rows[0]["wait_ns"]) == (97681, 197,
                                                                           181680845)
    assert "clocks: one clock (one export)." in report.notes
    assert report.sentences[0].startswith("rank 1 arrives 97.681 µs late at 197 of 230")


def test_collectives_one_row_each(built, client):
    report = ranks([built], client=client, collectives=True)
    assert len(report.rows) == 230
    assert {r["last_rank"] for r in report.rows} == {SLOW}
    assert all(abs(r["skew_ns"] - DELAY) <= 0.02 * DELAY for r in report.rows)
    assert all(abs(r["wait_ns"] - DELAY * (RANKS - 1)) <= 0.02 * DELAY * RANKS
               for r in report.rows)
    first = report.rows[0]
    assert (first["kind"], first["bytes"], first["key"]) == ("AllReduce", 4,
                                                             "comm ba5e768486afce6c")


def test_the_summary_is_small(built):
    s = summarize_export(built / "rank_0.sqlite")[0]
    assert len(pickle.dumps(s)) < 200_000
    assert s.collectives == 230 and s.keyed_by == "communicator"


def test_bad_ranks_do_not_sink_the_answer(built, tmp_path, client):
    folder = tmp_path / "runs"
    shutil.copytree(built, folder)
    truncate_export(folder / "rank_3.sqlite", 150)  # a rank that crashed
    (folder / "rank_6.sqlite").write_bytes(b"not an export at all" * 100)  # damaged
    report = ranks([folder, tmp_path / "rank_9.sqlite"], client=client)
    rows = by_rank(report)
    assert sorted(rows) == [0, 1, 2, 3, 4, 5, 7]
    assert rows[SLOW]["straggler"] and rows[SLOW]["matched"] == 150
    notes = "\n".join(report.notes)
    assert "rank 6 (rank_6.sqlite) left out: " in notes
    assert "rank 9 (rank_9.sqlite) left out: " in notes and "no such file" in notes
    assert "150 collectives matched on every rank; rank 0 has 230" in notes


def test_exports_of_two_runs_are_refused(built, tmp_path, client):
    other = tmp_path / "other"
    build_rank_exports(fixture_path(DDP), other, ranks=3, comm_id=42, first_rank=5,
                       name="other_{rank}.sqlite")
    mixed = [built / f"rank_{r}.sqlite" for r in range(5)] + sorted(other.iterdir())
    with pytest.raises(RanksMismatch) as err:
        ranks(mixed, client=client)
    assert "other_5.sqlite" in str(err.value) and "other_7.sqlite" in str(err.value)
    assert "rank_0.sqlite" not in str(err.value)


def test_one_process_has_nothing_to_compare(fx):
    report = ranks([fx("vecadd_t4_nsys2022.4.sqlite")])
    assert len(report.rows) == 1 and report.rows[0]["straggler"] is False
    assert any("nothing to compare" in n for n in report.notes)


def test_bad_options_and_paths():
    with pytest.raises(BadOption, match="--scheduler 'bogus'"):
        ranks(["x.sqlite"], scheduler="bogus")
    with pytest.raises(BadOption, match="only apply with --scheduler slurm"):
        ranks(["x.sqlite"], slurm_partition="gpu")
    with pytest.raises(ExportNotFound, match="no file matches"):
        ranks(["/nonexistent/rank_*.sqlite"])


def test_the_command_line(built, cli, client, monkeypatch):
    monkeypatch.setattr("reports.ranks.cluster.CONNECT_TIMEOUT_S", 2)
    res = cli("ranks", built, "--workers", "2", "-f", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert [r["rank"] for r in rows if r["straggler"]] == [SLOW]
    res = cli("ranks", built / "rank_0.sqlite", built / "rank_5.sqlite", "--collectives",
              "--scheduler", client.scheduler.address, "-f", "csv")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[0].startswith("collective,key,kind,bytes")
    res = cli("ranks", built, "--scheduler", "tcp://127.0.0.1:1")
    assert res.exit_code == 1 and "Error: no Dask scheduler answers at tcp://127.0.0.1:1" \
        in res.stderr and "Traceback" not in res.stderr


def slow_summary(path: str, marker: str):
    """Mark that this worker started ``path``, wait, then summarize (a task long enough to
    kill its worker in the middle of)."""
    Path(marker, f"{Path(path).stem}.{os.getpid()}").touch()
    time.sleep(3)
    return summarize_export(path)


def test_a_killed_worker_is_retried(built, tmp_path, client):
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    marker = tmp_path / "started"
    marker.mkdir()
    paths = [built / "rank_0.sqlite", built / "rank_1.sqlite"]
    results: list = []
    t = threading.Thread(target=lambda: results.extend(
        map_exports(client, slow_summary, paths, str(marker))))
    t.start()
    deadline = time.monotonic() + 60
    while not list(marker.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    victim = sorted(marker.iterdir())[0]
    os.kill(int(victim.suffix[1:]), signal.SIGKILL)  # a worker dies mid-task
    t.join(120)
    assert sorted(p.name for p, r, e in results if e is None and r) == ["rank_0.sqlite",
                                                                        "rank_1.sqlite"]
    started = [p.name.split(".")[0] for p in marker.iterdir()]
    assert started.count(victim.name.split(".")[0]) == 2  # Dask ran it again elsewhere


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_a_running_dask_scheduler_and_workers(built):
    dask = Path(sys.executable).parent / "dask"
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port",
                               str(port), "--no-dashboard"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)]
    try:
        procs.append(subprocess.Popen([str(dask), "worker", address, "--nworkers", "2",
                                       "--nthreads", "1", "--no-dashboard"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                      start_new_session=True))
        import distributed

        with distributed.Client(address, timeout=60) as c:
            c.wait_for_workers(2, timeout=60)
        rows = by_rank(ranks([built], scheduler=address))
        assert [r for r, row in rows.items() if row["straggler"]] == [SLOW]
        assert abs(rows[SLOW]["late_ns"] - DELAY) <= 0.02 * DELAY
    finally:
        for p in reversed(procs):  # ended by PID, each with its children
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(10)


@pytest.mark.slow
@pytest.mark.slurm
def test_slurm_workers(built, slurm_cluster, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster))
    handler = signal.getsignal(signal.SIGINT)
    files = [built / f"rank_{r}.sqlite" for r in (0, 1, SLOW)]
    rows = by_rank(ranks(files, scheduler="slurm", workers=2, slurm_time="10",
                         slurm_mem="2GB"))
    assert [r for r, row in rows.items() if row["straggler"]] == [SLOW]
    assert abs(rows[SLOW]["late_ns"] - DELAY) <= 0.02 * DELAY
    jobs = subprocess.run(["squeue", "-h", "-n", "nsys-mine-ranks", "-t", "PD,R"],
                          capture_output=True, text=True).stdout.strip()
    assert jobs == ""  # the worker jobs were cancelled at the end
    logs = Path(os.environ["XDG_CACHE_HOME"]) / "nsys-mine" / "ranks-slurm"
    assert list(logs.rglob("nsys-mine-ranks-*.out"))  # their logs: never in the cwd
    assert signal.getsignal(signal.SIGINT) is handler  # dask_jobqueue's own is taken back


def test_check_rules_max_late_and_max_wait(fx, tmp_path, cli):
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nmax_late_ms = 0.05\n\n[[rule]]\nmax_wait_pct = 15\n')
    junit = tmp_path / "check.xml"
    res = cli("check", fx(DDP), "--rules", rules, "--junit", junit, "-f", "json")
    assert res.exit_code == 3, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["status"], r["observed"]) for r in rows] == [("fail", 0.098), ("pass", 11.2)]
    assert rows[0]["rule"] == "whole export: every rank's median lateness at collectives " \
                              "<= 0.05 ms"
    assert rows[0]["message"] == "median lateness 0.098 ms on rank 1, the most of 2 ranks"
    assert 'failures="1"' in junit.read_text()


def test_check_rules_on_a_folder_of_rank_exports(built, tmp_path, cli):
    """The ranks rules judge a folder of one export per rank (the built job: rank 5 is 2 ms
    late); a rule about one export fails there, saying so; JUnit as for one export."""
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nmax_late_ms = 1\n\n[[rule]]\nmax_late_ms = 3\n\n'
                     '[[rule]]\ndominant_category = "gemm"\n')
    junit = tmp_path / "check.xml"
    res = cli("check", built, "--rules", rules, "--junit", junit, "-f", "json")
    assert res.exit_code == 3, res.stderr
    rows = json.loads(res.stdout)
    assert [(r["status"], r["observed"]) for r in rows] == [
        ("fail", 2.0), ("pass", 2.0), ("fail", None)]
    assert rows[0]["message"] == f"median lateness 2 ms on rank {SLOW}, the most of {RANKS} ranks"
    assert rows[0]["rule"] == "every rank's median lateness at collectives <= 1 ms"  # the job's
    assert rows[2]["message"].startswith("dominant_category judges one export")
    assert 'failures="2"' in junit.read_text() and 'tests="3"' in junit.read_text()


def test_progress_over_ranks(built, client):
    from reports.ranks.cluster import PROGRESS

    seen = []
    token = PROGRESS.set(lambda done, total, what: seen.append((done, total)))
    try:
        ranks([built / "rank_0.sqlite", built / "rank_1.sqlite"], client=client)
    finally:
        PROGRESS.reset(token)
    assert seen[0] == (0, 2) and seen[-1] == (2, 2)


def test_the_page_of_a_folder_of_ranks(built, client, cli, tmp_path):
    from reports.page.model import page_markdown
    from reports.ranks.page import ranks_page

    page = ranks_page([built], scheduler=client.scheduler.address, title="ranks")
    text, files = page_markdown(page, "page")
    assert f"rank {SLOW} arrives 2.000 ms late at 230 of 230" in text
    assert sorted(files) == ["page-lateness.png", "page-rank-lanes.png", "page-rank-time.png"]
    assert all(png[:8] == b"\x89PNG\r\n\x1a\n" for png in files.values())
    # `report FOLDER` of exports without a sweep index: the ranks page
    folder = tmp_path / "one"
    folder.mkdir()
    shutil.copy(built / "rank_0.sqlite", folder)
    res = cli("report", folder, "-f", "md", "-o", tmp_path / "one.md")
    assert res.exit_code == 0, res.stderr
    text = (tmp_path / "one.md").read_text()
    assert text.startswith("# nsys-mine ranks report: ")
    assert "holds nsys exports and no sweep index" in text  # it says what it answers
    assert "nothing to compare" in text


def test_within_a_range_gives_per_step_columns(fx):
    report = ranks([fx(DDP)], within="distributed_training")
    gpus = {(g["pid"], g["device"]): g for g in ask("gpus", [fx(DDP)],
                                                    within="distributed_training").rows}
    for row in report.rows:
        g = gpus[(row["pid"], row["device"])]
        assert {c: row[c] for c in GPUS_COLUMNS} == {c: g[c] for c in GPUS_COLUMNS}
        assert row["steps"] == 1 and row["step_med_ns"] > 0
        assert row["wait_per_step_ns"] == row["wait_ns"]
        assert row["matched"] == 119  # the all-reduces the training loop launched


@pytest.mark.nsys
def test_reports_are_exported_on_the_workers(fx, nsys_bin, client):
    rep = fx("dlprof_pytorch_rtx2070s_nsys2022.1.nsys-rep")
    report = ranks([rep, fx("vecadd_t4_nsys2022.4.sqlite")], client=client)
    assert [Path(r["export"]).name for r in report.rows] == [rep.name,
                                                             "vecadd_t4_nsys2022.4.sqlite"]
    gpus = ask("gpus", [fx("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite")]).rows[0]
    assert {c: report.rows[0][c] for c in GPUS_COLUMNS} == {c: gpus[c] for c in GPUS_COLUMNS}
    assert report.rows[0]["matched"] == 0


def test_clocks_fall_back_to_the_session_start(built):
    from reports.ranks.matching import match

    summaries = [summarize_export(built / f"rank_{r}.sqlite")[0] for r in (0, 1)]
    aligned = match(summaries, [0, 1])
    assert list(aligned.offsets) == [0, -CLOCK_STEP] and aligned.residual_ns == 0
    for s in summaries:  # no collective to align by: the UTC start times
        s.coll_key = s.coll_key[:0]
        s.coll_start, s.coll_end = s.coll_start[:0], s.coll_end[:0]
    by_utc = match(summaries, [0, 1])
    assert by_utc.clock.startswith("session start times (UTC")
    # the builder made the session clocks disagree by 3 ms per rank
    assert list(by_utc.offsets) == [0, -CLOCK_STEP + 3_000_000]
