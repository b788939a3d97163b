"""Idle GPU gaps (``gaps``): against nsys analyze's gpu-starv rule on every fixture (every
gap, ``gap=0:rows=-1``; on the compile fixture, where gpu-starv leaves whole CUDA graph
launches out, against a plain sweep with them), its threshold and profiling-overhead rules
on synthetic exports, and the causes (API call in flight, NVTX range open) on real and
synthetic ones."""

from __future__ import annotations

import sqlite3

import pytest

from nsys_parsers.errors import MissingData
from reports.pipeline.ask import ask
from tests.conftest import CS336, KNOWN
from tests.nsys_stats import gpu_starv
from tests.synth import Synth, gtid

DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
COMPILE = "cs336_zx3xyy_result_2_7B_compile_ro.sqlite"


def _theirs(rows: list[dict]) -> list[tuple[int, int, int, int]]:
    return sorted((int(r["PID"]), int(r["Device ID"]), int(r["Start (ns)"]),
                   int(r["Duration (ns)"])) for r in rows)


def _ours(rows: list[dict]) -> list[tuple[int, int, int, int]]:
    return sorted((r["pid"], r["device"], r["start_ns"], r["duration_ns"]) for r in rows)


def _swept(export, *, graphs: bool) -> list[tuple[int, int, int, int]]:
    """Gaps between the GPU operations of each (process, device), by a plain sweep over the
    export's rows (with or without the whole CUDA graph launches)."""
    from tests.reference import OPS_SQL

    conn = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    ops: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for table, sql in OPS_SQL.items():
        if table in tables and (graphs or "GRAPH" not in table):
            for a, b, pid, dev, _ in conn.execute(sql):
                ops.setdefault((pid, dev), []).append((a, b))
    conn.close()
    out = []
    for (pid, dev), spans in ops.items():
        spans.sort()
        end = spans[0][1]
        for a, b in spans[1:]:
            if a > end:
                out.append((pid, dev, end, a - end))
            end = max(end, b)
    return sorted(out)


@pytest.mark.parametrize("name", KNOWN + CS336)
def test_gaps_match_gpu_starv(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    ref, reason = gpu_starv(nsys_bin, export, tmp_path, gap_ms=0)
    if ref is None:  # no GPU operations: nsys skips, we say which trace records them
        assert "does not contain the required data" in reason
        with pytest.raises(MissingData, match="--trace=cuda"):
            ask("gaps", [export], min_gap_ms=0)
        return
    ours = ask("gaps", [export], min_gap_ms=0).rows
    if name == COMPILE:  # nsys leaves whole CUDA graph launches out: 7 s of "idle" GPU
        assert _theirs(ref) == _swept(export, graphs=False)
        assert _ours(ours) == _swept(export, graphs=True)
        assert (len(ref), sum(r["duration_ns"] for r in ours)) == (29, 387_286)
        return
    assert ref and _ours(ours) == _theirs(ref)
    # nsys's order: longest first, then earliest
    assert [(-r["duration_ns"], r["start_ns"]) for r in ours] == sorted(
        (-r["duration_ns"], r["start_ns"]) for r in ours)
    assert all(r["end_ns"] - r["start_ns"] == r["duration_ns"] for r in ours)


def test_threshold_is_strict_as_gpu_starv(fx, nsys_bin, tmp_path):
    """gap=<ms> keeps gaps longer than the threshold: the DDP capture's at 100 ms."""
    export = fx(DDP)
    ref, _ = gpu_starv(nsys_bin, export, tmp_path, gap_ms=100)
    ours = ask("gaps", [export], min_gap_ms=100).rows
    assert _ours(ours) == _theirs(ref) and len(ours) == 4


def _gap_export(path, *, overhead: bool) -> Synth:
    """Two kernels 10 ms apart on one device (a gap), and a synchronize in flight when it
    starts; optionally a CUDA profiling overhead inside the gap, written as nsys does."""
    s = Synth()
    s.range("train", 0, 40_000_000)
    s.kernel("k1", 1_000_000, 2_000_000, launch=(500_000, 600_000))
    s.call("cudaStreamSynchronize_v3020", 700_000, 2_100_000)
    s.kernel("k2", 12_000_000, 13_000_000, launch=(11_000_000, 11_100_000))
    s.kernel("k3", 30_000_000, 31_000_000, launch=(29_000_000, 29_100_000))
    s.write(path)
    if overhead:
        conn = sqlite3.connect(path)
        with conn:
            conn.execute("CREATE TABLE PROFILER_OVERHEAD (start INTEGER, end INTEGER, "
                         "globalTid INTEGER, nameId INTEGER)")
            name = len(s.strings)
            conn.execute("INSERT INTO StringIds VALUES (?, "
                         "'CUDA profiling data flush overhead')", (name,))
            conn.execute("INSERT INTO PROFILER_OVERHEAD VALUES (?, ?, ?, ?)",
                         (15_000_000, 20_000_000, gtid(1, 3), name))
        conn.close()
    return s


@pytest.mark.parametrize("overhead", [False, True])
def test_profiling_overhead_is_busy_as_gpu_starv(overhead, nsys_bin, tmp_path):
    export = tmp_path / "gap.sqlite"
    _gap_export(export, overhead=overhead)
    ref, _ = gpu_starv(nsys_bin, export, tmp_path, gap_ms=1)
    ours = ask("gaps", [export], min_gap_ms=1).rows
    assert _ours(ours) == _theirs(ref)
    if overhead:  # the 17 ms gap is cut in two by nsys's flush: 3 ms and 10 ms
        assert [(r["start_ns"], r["duration_ns"]) for r in ours] == [
            (2_000_000, 10_000_000), (20_000_000, 10_000_000), (13_000_000, 2_000_000)]
        assert ours[1]["before_kernel"] == "CUDA profiling overhead"
    else:
        assert [r["duration_ns"] for r in ours] == [17_000_000, 10_000_000]


def test_causes_on_a_synthetic_export(tmp_path):
    export = tmp_path / "gap.sqlite"
    _gap_export(export, overhead=False)
    rows = {r["start_ns"]: r for r in ask("gaps", [export], min_gap_ms=1).rows}
    sync = rows[2_000_000]
    assert (sync["cause"], sync["api"], sync["range"]) == ("sync", "cudaStreamSynchronize",
                                                           "train")
    assert (sync["before_kernel"], sync["after_kernel"]) == ("k1", "k2")
    idle = rows[13_000_000]
    assert (idle["cause"], idle["api"], idle["range"]) == ("cpu", None, "train")


def test_gaps_outside_the_api_records_have_no_cause(tmp_path):
    """A trimmed export: kernels without launch rows, and a gap where no CUDA API call was
    recorded in the process; the answer says so."""
    s = Synth()
    s.kernel("k1", 1_000_000, 2_000_000, launch=None)
    s.kernel("k2", 5_000_000, 6_000_000, launch=None)
    s.kernel("k3", 9_000_000, 10_000_000, launch=(8_000_000, 8_100_000))
    report = ask("gaps", [s.write(tmp_path / "t.sqlite")], min_gap_ms=1)
    assert [(r["start_ns"], r["cause"]) for r in report.rows] == [
        (2_000_000, "unknown"), (6_000_000, "unknown")]
    notes = " ".join(report.notes)
    assert "2 of 3 GPU operations have no launch record" in notes
    assert "2 gaps start where no CUDA API call was recorded" in notes


def test_ddp_gaps_and_their_causes(fx):
    """The issue's 909 ms gap on device 1, and where the two processes were."""
    report = ask("gaps", [fx(DDP)], min_gap_ms=100)
    top = report.rows[0]
    assert (top["pid"], top["device"], top["duration_ns"], top["start_ns"]) == (
        13097, 1, 909201923, 4904305219)
    assert (top["cause"], top["api"], top["range"]) == ("cpu", None, "warmup")
    assert top["before_kernel"].startswith("ncclDevKernel_AllReduce_Sum_u64")
    assert [(r["device"], r["duration_ns"]) for r in report.rows] == [
        (1, 909201923), (0, 769718246), (1, 136273394), (0, 123454128)]
    assert report.notes[0].startswith("4 gaps longer than 100 ms: 1.939 s in all")
    within = ask("gaps", [fx(DDP)], min_gap_ms=100, within="forward pass").rows
    assert [r["duration_ns"] for r in within] == [136273394, 123454128]


@pytest.mark.parametrize("width", [80, 120])
def test_gaps_read_at_80_and_120_columns(width, cli, fx, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    res = cli("gaps", fx(DDP), "--top", "3")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert all(len(ln) <= width for ln in lines)
    assert "909.202 ms" in res.stdout and "3 of 126 gaps" in res.stdout


def test_without_runtime_or_nvtx_the_answer_says_so(tmp_path):
    s = Synth()
    s.kernel("k1", 1_000_000, 2_000_000, launch=None)
    s.kernel("k2", 5_000_000, 6_000_000, launch=None)
    path = s.write(tmp_path / "k.sqlite")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute("DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME")
    conn.close()
    report = ask("gaps", [path], min_gap_ms=1)
    assert [r["cause"] for r in report.rows] == ["unknown"]
    notes = " ".join(report.notes)
    assert "--trace=cuda" in notes and "--trace=cuda,nvtx" in notes


def _union_holes(start, end):
    """(start, end) of the holes of one group's union, by a sweep over merged intervals."""
    out, reach = [], None
    for s, e in sorted(zip(start, end)):
        if reach is not None and s > reach:
            out.append((reach, s))
        reach = e if reach is None else max(reach, e)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_long_holes_keep_the_long_ones_and_count_every_one(seed):
    """``long_holes`` (what ``gaps`` keeps of the hole search) against a sweep of each
    group's merged intervals: groups with absent codes between them, touching, nested and
    overlapping intervals."""
    import numpy as np

    from nsys_parsers.intervals import holes, long_holes

    rng = np.random.default_rng(seed)
    n = 400
    group = rng.choice([0, 2, 3, 7], size=n)
    start = rng.integers(0, 5_000, size=n)
    end = start + rng.integers(0, 60, size=n)
    threshold = 25
    got, idle = long_holes(group, start, end, threshold)
    want_all = [(int(g), a, b) for g in sorted(set(group.tolist()))
                for a, b in _union_holes(start[group == g].tolist(), end[group == g].tolist())]
    assert idle == sum(b - a for _, a, b in want_all) > 0
    long = [h for h in want_all if h[2] - h[1] > threshold]
    assert list(zip(got.group.tolist(), got.start.tolist(), got.end.tolist())) == long
    assert (end[got.before] == got.start).all() and (start[got.after] == got.end).all()
    every = holes(group, start, end)
    assert list(zip(every.group.tolist(), every.start.tolist(), every.end.tolist())) \
        == want_all


@pytest.mark.parametrize("seed", range(4))
def test_union_length_is_the_merged_intervals_length(seed, monkeypatch):
    """``union_length`` (what ``gpus`` measures busy, communication and compute time with)
    against a sweep of each group's merged intervals: absent and empty groups, zero-length,
    touching, nested and overlapping intervals, one interval alone; its sort keys built in
    blocks of 7 rows or in one, from times near 0 or Unix-epoch nanoseconds."""
    import numpy as np

    from nsys_parsers.intervals import union_length

    monkeypatch.setattr("nsys_parsers.intervals.ROWS", 7 if seed % 2 else 1 << 20)
    rng = np.random.default_rng(seed)
    n = 300
    group = rng.choice([0, 2, 3, 5], size=n, p=[0.5, 0.3, 0.2 - 1 / n, 1 / n])
    group[-1] = 5  # a group of one interval
    start = rng.integers(0, 4_000, size=n) + (1_764_000_000_000_000_000 if seed >= 2 else 0)
    end = start + rng.integers(0, 40, size=n)
    want = []
    for g in range(7):
        mine = sorted(zip(start[group == g].tolist(), end[group == g].tolist()))
        total, reach = 0, None
        for a, b in mine:
            lo = a if reach is None else max(a, reach)
            total += max(0, b - lo)
            reach = b if reach is None else max(reach, b)
        want.append(total)
    assert union_length(group, start, end, 7).tolist() == want
    assert union_length(group[:1], start[:1], end[:1], 7).tolist() == \
        [int(end[0] - start[0]) if g == group[0] else 0 for g in range(7)]
