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
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
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
from reports.render import human_ns  # noqa: E402
from tests.conftest import fixture_path  # noqa: E402
from tests.reference import OPS_SQL, both, covered  # noqa: E402

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
    assert any("onto rank 0's by the ends of the collectives they share (error 0 ns, measured "
               "leaving each out)" in n for n in report.notes)
    why = report.sentences[0]
    assert why.startswith(f"rank {SLOW} arrives 2.000 ms late at 230 of 230")
    assert "with cause `cpu` inside `data_loader`" in why
    assert "the other ranks lose 460.000 ms each waiting for it" in why
    assert report.sentences[1].startswith(
        f"rank {SLOW}: NVTX ranges that grew most before its late arrivals, vs the median")
    assert "`data_loader` +460.000 ms CPU" in report.sentences[1]
    why = mine_ranks([built], client=client).why
    assert [w.rank for w in why] == [SLOW]  # the injected idle, all of it `cpu`, recovered
    assert abs(why[0].idle_net["cpu"] - DELAY * matched) <= 0.02 * DELAY * matched
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
    # the same in plain SQL: each process's NCCL kernels in time order, the n-th with the n-th
    db = sqlite3.connect(f"file:{fx(DDP)}?mode=ro", uri=True)
    kernels = {pid: db.execute(
        "SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s "
        "ON s.id = k.demangledName WHERE s.value LIKE 'nccl%' AND (k.globalPid >> 24) "
        "& 16777215 = ? ORDER BY k.start", (pid,)).fetchall() for pid in (13096, 13097)}
    db.close()
    (a0, e0), (a1, e1) = [list(zip(*kernels[p])) for p in (13096, 13097)]
    assert len(a0) == len(a1) == 230
    late1 = [b - (min(a, b) + (max(a, b) - min(a, b)) // 2) for a, b in zip(a0, a1)]
    assert rows[1]["late_ns"] == _median(late1)
    assert rows[1]["last_at"] == sum(b - a > 1_000 for a, b in zip(a0, a1))
    assert rows[0]["wait_ns"] == sum(max(0, min(b - a, e - a)) for a, b, e in zip(a0, a1, e0))
    assert rows[1]["wait_ns"] == sum(max(0, min(a - b, e - b)) for a, b, e in zip(a0, a1, e1))
    assert "clocks: one export, one clock." in report.notes
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


def test_the_summary_is_the_same_a_few_rows_at_a_time(fx, monkeypatch):
    """A worker reads its rank's columns a block of rows at a time (its peak does not grow
    with the export): every field of every summary is the same with blocks of 7 rows and
    the medians' durations 20 at a time, on the real captures, with steps (the middle step's
    lanes) and without."""
    import reports.ranks.summary as summary

    def every_field(*args, **kwargs) -> list[dict]:
        return [vars(s) for s in summarize_export(*args, **kwargs)]

    cases = [((fx(DDP),), {}), ((fx(DDP),), {"step_range": "distributed_training"}),
             ((fx(f"{NCCL_TREE}/example_2_nsys_report_ault43.cscs.ch_491764.sqlite"),), {})]
    whole = [every_field(*a, **kw) for a, kw in cases]
    monkeypatch.setattr(summary, "ROWS", 7)
    monkeypatch.setattr(summary, "MEDIAN_BATCH", 20)
    for (args, kwargs), expected in zip(cases, whole):
        got = every_field(*args, **kwargs)
        assert len(got) == len(expected) > 0
        for g, e in zip(got, expected):
            assert g.keys() == e.keys()
            for name in e:
                if isinstance(e[name], np.ndarray):
                    assert g[name].dtype == e[name].dtype, name
                    assert np.array_equal(g[name], e[name]), name
                elif isinstance(e[name], dict):  # lanes
                    assert g[name].keys() == e[name].keys(), name
                    assert all(np.array_equal(g[name][k], e[name][k]) for k in e[name]), name
                else:
                    assert g[name] == e[name], name
    # every part was there to compare: collectives, their windows, medians, lanes with holes
    for s in whole[0]:
        assert s["coll_start"].size > 0 and s["coll_range"].shape[0] > 0 and s["kernels"]
        assert s["lanes"]["compute"].shape[0] > 1 and s["coll_idle"].any()
    assert all(s["coll_start"].size > 0 for s in whole[2])  # UTC timestamps (1.7e18 ns)
    assert all(s["step_lanes"]["compute"].shape[0] > 1 for s in whole[1])


def test_a_union_of_unions_block_by_block_is_the_union():
    """``_union_of_blocks``: each part's union (its short holes closed) first, then theirs,
    is the union of all the intervals with its short holes closed, however they are split;
    and ``_median`` is numpy's median."""
    from reports.ranks.summary import _median, _union, _union_of_blocks
    rng = np.random.default_rng(52)
    for _ in range(300):
        n = int(rng.integers(1, 60))
        start = rng.integers(0, 1000, n)
        end = start + rng.integers(0, 80, n)
        min_hole = int(rng.integers(0, 40))
        cuts = np.sort(rng.integers(0, n + 1, int(rng.integers(0, 5))))
        parts = [(start[a:b], end[a:b]) for a, b in zip([0, *cuts], [*cuts, n])]
        assert np.array_equal(_union_of_blocks(iter(parts), min_hole),
                              _union(start, end, min_hole))
        assert _median(end) == float(np.median(end))


def test_bad_ranks_do_not_sink_the_answer(built, tmp_path, client):
    folder = tmp_path / "runs"
    shutil.copytree(built, folder)
    truncate_export(folder / "rank_3.sqlite", 150)  # a rank that crashed
    (folder / "rank_6.sqlite").write_bytes(b"not an export at all" * 100)  # damaged
    report = ranks([folder, tmp_path / "rank_9.sqlite"], client=client)
    rows = by_rank(report)
    assert sorted(r for r, row in rows.items() if row["error"] is None) == [0, 1, 2, 3, 4, 5, 7]
    assert rows[SLOW]["straggler"] and rows[SLOW]["matched"] == 150
    notes = "\n".join(report.notes)
    assert "rank 6 (rank_6.sqlite) left out: " in notes
    assert "rank 9 (rank_9.sqlite) left out: " in notes and "no such file" in notes
    assert "150 collectives matched on every rank of its group; rank 0 has 230" in notes
    # every rank accounted for, in every format: a rank not read is a row with its error
    assert rows[6]["error"] and rows[9]["error"] and "no such file" in rows[9]["error"]
    assert rows[6]["late_ns"] is None and not rows[6]["straggler"]
    assert report.warnings == [n for n in report.notes if " left out: " in n]


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


def test_the_page_of_the_real_two_node_job(fx, client):
    """One collective: a bar per rank instead of a one-column heatmap; the table names each
    export by its file name, in full."""
    from reports.page.model import page_markdown
    from reports.ranks.page import ranks_page

    folder = fx(NCCL_TREE)
    page = ranks_page([folder], scheduler=client.scheduler.address, title="job")
    text, files = page_markdown(page, "page")
    assert "6 rank(s), 1 matched collective  \n" in text
    assert sorted(files) == ["page-lateness.png", "page-rank-lanes.png", "page-rank-time.png"]
    assert "bars: each rank's arrival at the collective minus the median" in text
    for path in folder.glob("*.sqlite"):  # markdown escapes the underscores
        assert "| " + path.name.replace("_", "\\_") + " |" in text
    assert "ranks 0-2, all on ault43, arrive" in text


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
    assert list(aligned.offsets) == [0, -CLOCK_STEP]
    assert aligned.clocks.links == ["the first export", "ends"]
    assert aligned.clocks.error.tolist() == [[0, 0], [0, 0]] and aligned.clocks.measured
    for s in summaries:  # no collective to align by: the UTC start times
        s.coll_key = s.coll_key[:0]
        s.coll_start, s.coll_end = s.coll_start[:0], s.coll_end[:0]
    by_utc = match(summaries, [0, 1])
    # the builder made the session clocks disagree by 3 ms per rank
    assert list(by_utc.offsets) == [0, -CLOCK_STEP + 3_000_000]
    # copies of one capture: one machine, whose clock both sessions' UTC starts are on
    assert summaries[0].host == summaries[1].host == "lizhi-Super-Server"
    assert by_utc.clocks.links[1] == "host" and by_utc.clocks.measured


NCCL_TREE = "nccl_tree_2nodes_6gpus_nsys2024.5"


def _tree_reference(folder: Path) -> dict[int, dict]:
    """Per rank of the real 2-node job, in plain SQL over each export: its rank
    (``SLURM_PROCID`` of the capture's environment), machine, its one AllReduce kernel (start,
    end: UTC nanoseconds, integers) and its GPU time by the sweep of ``tests.reference``
    (communication: the kernels named ``nccl*``)."""
    out = {}
    for path in sorted(folder.glob("*.sqlite")):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        (env,), = db.execute("SELECT value FROM META_DATA_CAPTURE WHERE name LIKE "
                             "'%ENVIRONMENT_VARIABLE' AND value LIKE 'SLURM_PROCID=%'")
        (host,), = db.execute("SELECT value FROM META_DATA_CAPTURE "
                              "WHERE name = 'DEVICE_DISPLAY_NAME'")
        (start, end), = db.execute(
            "SELECT k.start, k.end FROM CUPTI_ACTIVITY_KIND_KERNEL k "
            "JOIN StringIds s ON s.id = k.demangledName WHERE s.value LIKE 'nccl%'")
        ops = []
        for table, sql in OPS_SQL.items():
            if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                ops += [(a, b, n) for a, b, _pid, _dev, n in db.execute(sql) if a > 0]
        db.close()
        every = [(a, b) for a, b, _ in ops]
        comm = [(a, b) for a, b, n in ops if n is not None and n.startswith("nccl")]
        compute = [(a, b) for a, b, n in ops if n is not None and not n.startswith("nccl")]
        span = max(b for _, b in every) - min(a for a, _ in every)
        busy = covered(every)
        out[int(env.split("=")[1].strip('"'))] = {
            "export": path.name, "host": host, "start": start, "end": end,
            "span_ns": span, "busy_ns": busy, "idle_ns": span - busy,
            "comm_ns": covered(comm), "compute_ns": covered(compute),
            "exposed_comm_ns": covered(comm) - both(comm, compute)}
    return out


def _median(values: list[int]) -> int:
    v = sorted(values)
    lo, hi = v[(len(v) - 1) // 2], v[len(v) // 2]
    return lo + (hi - lo) // 2


def test_the_real_two_node_job_against_plain_sql(fx, client):
    """Six processes on two machines, one export each, timestamps UTC (near 1.7e18 ns), one
    AllReduce: every per-rank figure equals the plain-SQL computation, to the nanosecond."""
    folder = fx(NCCL_TREE)
    want = _tree_reference(folder)
    assert sorted(want) == list(range(6))
    report = ranks([folder], client=client)
    rows = by_rank(report)
    assert sorted(rows) == list(range(6))
    arrivals = [want[r]["start"] for r in range(6)]
    median, last = _median(arrivals), max(arrivals)
    slowest = arrivals.index(last)
    for r, w in want.items():
        row = rows[r]
        assert Path(row["export"]).name == w["export"] and row["rank_source"] == "environment"
        assert {c: row[c] for c in GPUS_COLUMNS[2:]} == {c: w[c] for c in GPUS_COLUMNS[2:]}
        assert row["late_ns"] == w["start"] - median  # exact: no float64 on the way
        assert row["wait_ns"] == max(0, min(last - w["start"], w["end"] - w["start"]))
        assert row["clock_offset_ns"] == 0  # UTC timestamps: nothing to move
        assert (row["matched"], row["last_at"]) == (1, int(r == slowest))
        assert row["error"] is None
    assert slowest == 0 and [r for r in rows if rows[r]["straggler"]] == [0]
    # the clocks: one machine's processes share its clock; across the two machines the one
    # AllReduce's end disagrees by the error (the smallest disagreement of a pair across)
    hosts = sorted({w["host"] for w in want.values()})
    assert hosts == ["ault43.cscs.ch", "ault44.cscs.ch"]
    across = min(abs(want[a]["end"] - want[b]["end"]) for a in want for b in want
                 if want[a]["host"] != want[b]["host"])
    clocks = next(n for n in report.notes if n.startswith("clocks:"))
    for h in hosts:  # named as short names (SLURMD_NODENAME and the like are)
        assert f"share {h.split('.')[0]}'s clock (their UTC starts)" in clocks
    assert f"by the sessions' UTC start times (error {human_ns(across)}: how far" in clocks
    lo, hi = sorted(want[r]["start"] - median for r in (1, 2))[0], want[0]["start"] - median
    assert report.sentences[0].startswith(
        f"rank 0 arrives {human_ns(hi)} late at its one collective (AllReduce) of AllReduce "
        f"stream #0 (ranks 0-5)")
    assert report.sentences[1] == (f"ranks 0-2, all on ault43, arrive {human_ns(lo)} to "
                                   f"{human_ns(hi)} late: the machine is late, rank 0 the last "
                                   f"of its ranks.")
    # rank 0 is last by more than twice the error to each other rank (none on its machine)
    for r in range(1, 6):
        err = 0 if want[r]["host"] == want[0]["host"] else across
        assert last - arrivals[r] > max(1_000, 2 * err)


def test_one_collective_with_an_unknown_clock_error_names_nobody(fx, client, tmp_path):
    """The same job, its timestamps moved off UTC (no machine names, no UTC start times): one
    collective cannot measure the clocks, so nobody is called last or a straggler."""
    folder = fx(NCCL_TREE)
    for path in sorted(folder.glob("*.sqlite")):
        dst = tmp_path / path.name
        shutil.copy(path, dst)
        dst.chmod(0o644)
        db = sqlite3.connect(dst)
        db.execute("DELETE FROM META_DATA_CAPTURE WHERE name = 'DEVICE_DISPLAY_NAME' OR "
                   "value LIKE 'SLURM%' OR value LIKE 'HOSTNAME%'")
        db.execute("DELETE FROM TARGET_INFO_SESSION_START_TIME")
        db.commit()
        db.close()
    report = ranks([tmp_path], client=client)
    assert not any(r["straggler"] or r["last_at"] for r in report.rows)
    assert any("by the end of the one collective they share (error unknown)" in n
               for n in report.notes)
    assert any(n.startswith("no straggler: with the clock error unknown") for n in report.notes)


def _without_payloads(folder: Path) -> None:
    """Drop NCCL's NVTX payloads (no communicator ids): matched by kind and stream order."""
    for path in folder.glob("*.sqlite"):
        db = sqlite3.connect(path)
        db.execute("UPDATE NVTX_EVENTS SET jsonText = NULL")
        db.commit()
        db.close()


@pytest.fixture(scope="module")
def four(tmp_path_factory) -> dict[str, Path]:
    """Four ranks, rank 2 slow: as built; with each rank's stream ids its own (rank r adds
    8 r) and no payloads; with UTC timestamps (``--ts-normalize``)."""
    out = {}
    for kind, extra in (("plain", {}), ("streams", {"stream_shift": 8}),
                        ("utc", {"utc_normalized": True})):
        out[kind] = tmp_path_factory.mktemp(f"four_{kind}")
        build_rank_exports(fixture_path(DDP), out[kind], ranks=4, slow_rank=2, delay_ns=DELAY,
                           clock_step_ns=CLOCK_STEP, **extra)
    _without_payloads(out["streams"])
    return out


FIGURES = ("late_ns", "wait_ns", "last_at", "matched", "straggler", "busy_ns", "comm_ns")


def test_streams_numbered_differently_in_each_process(four, client):
    """NCCL on stream 7 and 17 in one process, 15 and 25 in the next, no communicator ids:
    matched by kind and the order each process first used its streams, the same answer."""
    ids = set()
    for r in range(4):
        db = sqlite3.connect(f"file:{four['streams'] / f'rank_{r}.sqlite'}?mode=ro", uri=True)
        ids |= {(r, s) for s, in db.execute("SELECT DISTINCT k.streamId FROM "
                                            "CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n "
                                            "ON n.id = k.shortName WHERE n.value LIKE 'nccl%'")}
        db.close()
    assert sorted(ids) == [(r, s + 8 * r) for r in range(4) for s in (7, 17)]
    want = by_rank(ranks([four["plain"]], client=client))
    report = ranks([four["streams"]], client=client)
    got = by_rank(report)
    for r in range(4):
        assert {c: got[r][c] for c in FIGURES} == {c: want[r][c] for c in FIGURES}
    assert [r for r in got if got[r]["straggler"]] == [2] and got[2]["matched"] == 230
    assert any("per collective kind and NCCL stream, the streams numbered in the order each "
               "process first used them" in n for n in report.notes)
    keys = {row["key"] for row in ranks([four["streams"]], client=client,
                                        collectives=True).rows}
    assert keys == {"AllReduce stream #0", "AllReduce stream #1", "Broadcast stream #0"}


def test_utc_timestamps_keep_every_nanosecond(four, client):
    """The same ranks with UTC timestamps (about 1.7e18, past float64's exact integers): every
    figure equal to the nanosecond."""
    db = sqlite3.connect(f"file:{four['utc'] / 'rank_3.sqlite'}?mode=ro", uri=True)
    (first,), = db.execute("SELECT min(start) FROM CUPTI_ACTIVITY_KIND_KERNEL")
    db.close()
    assert first > 1_700_000_000 * 10**9 and float(first + 1) == float(first)
    want = by_rank(ranks([four["plain"]], client=client))
    report = ranks([four["utc"]], client=client)
    got = by_rank(report)
    for r in range(4):
        assert {c: got[r][c] for c in FIGURES} == {c: want[r][c] for c in FIGURES}
    assert got[2]["late_ns"] == want[2]["late_ns"] and got[2]["straggler"]
    assert any("by the ends of the collectives they share (error 0 ns" in n
               for n in report.notes)


def test_tensor_parallel_groups(tmp_path, client):
    """Eight ranks, TP groups of 4 crossed with DP pairs, rank 5 slow before each TP
    collective: the straggler of TP group 4-7; ranks 0-3 are compared among themselves."""
    build_rank_exports(fixture_path(DDP), tmp_path, ranks=8, slow_rank=5, delay_ns=DELAY,
                       clock_step_ns=CLOCK_STEP, tp=4)
    report = ranks([tmp_path], client=client)
    rows = by_rank(report)
    assert [r for r in rows if rows[r]["straggler"]] == [5]
    assert rows[5]["last_at"] == 111 and rows[5]["late_ns"] == DELAY  # in its TP group
    assert {rows[r]["rank_source"] for r in rows} == {"file name"}  # NCCL's: per group
    for r in (4, 6, 7):  # its TP partners wait the delay at each of the 111 TP collectives
        assert abs(rows[r]["wait_ns"] - rows[0]["wait_ns"] - 111 * DELAY) <= 0.02 * 111 * DELAY
    for r in (0, 1, 2, 3):
        assert rows[r]["last_at"] <= 1 and not rows[r]["straggler"]
    groups = next(n for n in report.notes if n.startswith("collectives matched"))
    assert "6 groups: ranks 0-3 (1 key); ranks 0, 4 (1 key); " in groups
    assert "ranks 4-7 (1 key)" in groups
    assert report.sentences[0].startswith("rank 5 arrives 2.000 ms late at 111 of 111")
    assert "of communicator 00000000000003e9 (ranks 4-7)" in report.sentences[0]


def test_a_rank_an_old_nsys_cannot_read(tmp_path, cli, client, monkeypatch):
    """rank 3's report was recorded by nsys 2026.1: the answer has every other rank, rank 3's
    row says why it is missing, stderr warns once, and nothing prints a traceback."""
    build_rank_exports(fixture_path(DDP), tmp_path, ranks=4, slow_rank=1, delay_ns=DELAY,
                       clock_step_ns=CLOCK_STEP, unreadable=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "rank_0.sqlite", "rank_1.sqlite", "rank_2.sqlite", "rank_3.nsys-rep"]
    monkeypatch.setattr("reports.ranks.cluster.CONNECT_TIMEOUT_S", 2)
    res = cli("ranks", tmp_path, "--scheduler", client.scheduler.address, "-f", "json")
    assert res.exit_code == 0, res.stderr
    rows = {r["rank"]: r for r in json.loads(res.stdout)}
    assert sorted(rows) == [0, 1, 2, 3] and rows[3]["error"] and rows[3]["late_ns"] is None
    assert [r for r in rows if rows[r]["straggler"]] == [1]
    warnings = [line for line in res.stderr.splitlines() if line.startswith("Warning: ")]
    assert warnings == [f"Warning: rank 3 (rank_3.nsys-rep) left out: {rows[3]['error']}"]
    assert "Traceback" not in res.stderr and "2026" in rows[3]["error"]


def test_processes_without_collectives(fx):
    """The real fastvideo capture: two GPU processes, no NCCL: a row each with its own GPU
    time (the sweep of ``tests.reference``), nothing matched, and a note that says why."""
    export = fx("fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite")
    report = ranks([export])
    db = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    ops: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for table, sql in OPS_SQL.items():
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            for a, b, pid, dev, _name in db.execute(sql):
                if a > 0:
                    ops.setdefault((pid, dev), []).append((a, b))
    db.close()
    assert sorted((r["pid"], r["device"]) for r in report.rows) == sorted(ops)
    for row in report.rows:
        every = ops[(row["pid"], row["device"])]
        span = max(b for _, b in every) - min(a for a, _ in every)
        assert (row["span_ns"], row["busy_ns"]) == (span, covered(every))
        assert (row["matched"], row["late_ns"], row["wait_ns"], row["comm_ns"]) == (0, 0, 0, 0)
    assert any(n.startswith("no collective kernels (NCCL or other communication) in any rank")
               for n in report.notes)
    assert not report.sentences


def test_point_to_point_between_two_ranks_only(four, client, tmp_path):
    """The broadcasts made ``SendRecv`` kernels (no payload, so no peer is named): between two
    ranks they are matched like any collective; among four, who meets whom is unknown, so
    they are left out, and said so."""
    for r in range(4):
        dst = tmp_path / f"rank_{r}.sqlite"
        shutil.copy(four["streams"] / f"rank_{r}.sqlite", dst)
        db = sqlite3.connect(dst)
        db.execute("UPDATE StringIds SET value = replace(value, 'Broadcast', 'SendRecv') "
                   "WHERE value LIKE 'ncclDevKernel_Broadcast%'")
        db.commit()
        db.close()
    pair = ranks([tmp_path / "rank_0.sqlite", tmp_path / "rank_2.sqlite"], client=client)
    keys = {r["key"] for r in ranks([tmp_path / "rank_0.sqlite", tmp_path / "rank_2.sqlite"],
                                    client=client, collectives=True).rows}
    assert "Send/Recv stream #0" in keys and by_rank(pair)[2]["matched"] == 230
    report = ranks([tmp_path], client=client)
    assert by_rank(report)[2]["matched"] == 230 - 111  # the AllReduces
    assert any(n.startswith("Send/Recv stream #0: point-to-point kernels on more than two "
                            "ranks, with no peer to say who meets whom: not matched")
               for n in report.notes)
    assert [r for r, row in by_rank(report).items() if row["straggler"]] == [2]
