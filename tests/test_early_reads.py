"""Reads started before numpy is imported (``nsys_parsers.activity_reads``): what they give
equals a plain ``load_activity``, whether the chunks were parsed on their threads or came
back as text; a warm question starts none; unused reads are stopped; and the CLI starts them
before numpy loads."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nsys_parsers.activity_reads as ar
from nsys_parsers.activity import ACTIVITY_PART, load_activity
from nsys_parsers.activity_reads import Raw, start_activity_reads, submit_activity_reads
from nsys_parsers.cache import ExportCache
from nsys_parsers.export import open_export
from reports.analysis import ExportAnalysis

ROOT = Path(__file__).resolve().parent.parent
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
GTLS = "gtls_rtx3060_nsys2023.1.sqlite"  # no NVTX


def _same(a, b) -> None:
    assert a.capture_end == b.capture_end and a.notes == b.notes
    for x, y in ((a.kernels, b.kernels), (a.ranges, b.ranges)):
        assert (x is None) == (y is None)
        if x is not None:
            for f in x.__dataclass_fields__:
                u, v = getattr(x, f), getattr(y, f)
                if isinstance(u, np.ndarray):
                    assert np.array_equal(u, v), f
                else:
                    assert u == v, f
    assert (a.names is None) == (b.names is None)
    if a.names is not None:
        assert a.names.names == b.names.names
        assert np.array_equal(a.names.code, b.names.code)


def _raw_reads(export, name_kind: str, with_names: bool):
    """Reads whose every chunk comes back as text, as if read before numpy was loaded."""
    saved = dict(ar._PARSERS)
    ar._PARSERS.clear()
    try:
        reads = submit_activity_reads(export, name_kind, with_names)
        for jobs in (reads.nvtx, reads.keys, reads.kernels, reads.launches):
            for p in jobs or ():
                assert isinstance(p.result(), Raw)
    finally:
        ar._PARSERS.update(saved)
    return reads


@pytest.mark.parametrize("fixture", [FASTVIDEO, DLPROF, GTLS])
@pytest.mark.parametrize("with_names", [False, True])
def test_early_reads_equal_a_plain_load(fixture, with_names, fx):
    with open_export(fx(fixture)) as ex:
        plain = load_activity(ex, name_kind="short", with_names=with_names)
        assert plain.kernels is not None and len(plain.kernels.start) > 0
        assert (plain.ranges is None) == (fixture == GTLS)  # gtls: no NVTX table
        parsed = load_activity(ex, name_kind="short", with_names=with_names,
                               reads=submit_activity_reads(ex, "short", with_names))
        raw = load_activity(ex, name_kind="short", with_names=with_names,
                            reads=_raw_reads(ex, "short", with_names))
        # reads started for other options are mended: names added or dropped, or read again
        # for another kernel name kind
        other = load_activity(ex, name_kind="short", with_names=with_names,
                              reads=submit_activity_reads(ex, "short", not with_names))
        kind = load_activity(ex, name_kind="short", with_names=with_names,
                             reads=submit_activity_reads(ex, "mangled", with_names))
    for got in (parsed, raw, other, kind):
        _same(plain, got)


def test_raw_chunks_with_rowid_gaps_are_read_again_with_their_rowids(fx, tmp_path):
    gaps = tmp_path / "gaps.sqlite"
    shutil.copyfile(fx(FASTVIDEO), gaps)
    with sqlite3.connect(gaps) as db:  # our own copy: the fixture is never written
        db.execute("DELETE FROM NVTX_EVENTS WHERE rowid % 5 = 2")
    with open_export(gaps) as ex:
        plain = load_activity(ex, with_names=True)
        raw = load_activity(ex, with_names=True, reads=_raw_reads(ex, "demangled", True))
    _same(plain, raw)
    assert len(plain.ranges) > 10_000


def test_chunks_read_as_text_are_parsed_as_soon_as_the_parsers_are_loaded(fx):
    """``parse_read`` parses every chunk that came back as text (freeing its text before the
    other chunks are gathered); ``take`` leaves the job holding nothing."""
    with open_export(fx(FASTVIDEO)) as ex:
        reads = _raw_reads(ex, "demangled", True)
        reads.parse_read(ex.db)
        jobs = [p for js in (reads.nvtx, reads.keys, reads.kernels, reads.launches)
                for p in js or ()]
        assert len(jobs) >= 4
        assert not any(isinstance(p.value, Raw) for p in jobs)
        first = jobs[0].take()
        assert len(first) == 5 and first[0].dtype == np.int64  # s, e, t, f, r
        assert jobs[0].value is None
        reads.close()


def test_no_reads_start_when_the_cache_holds_the_activity(fx, tmp_path, monkeypatch):
    monkeypatch.setenv("NSYS_MINE_CACHE_DIR", str(tmp_path / "cache"))
    with open_export(fx(DLPROF)) as ex:
        cache = ExportCache.for_export(ex)
        assert cache is not None and not cache.has(ACTIVITY_PART)
        reads = start_activity_reads(ex, "demangled", False)
        assert reads is not None
        cold = load_activity(ex, with_names=False, cache=cache, reads=reads)
        cache.flush()
        assert cache.has(ACTIVITY_PART)
        assert start_activity_reads(ex, "demangled", False) is None
        assert start_activity_reads(ex, "demangled", False, use_cache=False) is not None
        # a part whose header names another export is not taken for this one's
        part = cache.dir / f"{ACTIVITY_PART}.part"
        other = ExportCache(dict(cache.key, size=1), root=cache.root)
        assert not other.has(ACTIVITY_PART)
        data = part.read_bytes()
        part.write_bytes(data[:20])  # truncated in its header
        assert not cache.has(ACTIVITY_PART)
        part.write_bytes(data)
        warm = load_activity(ex, with_names=False, cache=cache,
                             reads=submit_activity_reads(ex, "demangled", False))
    _same(cold, warm)


def test_unused_reads_are_stopped(fx, tmp_path):
    """Reads handed to an analysis that never loads the activity, or whose rules file is
    bad, are cancelled and their threads ended."""
    with open_export(fx(FASTVIDEO)) as ex:
        reads = submit_activity_reads(ex, "demangled", True)
        with ExportAnalysis(ex, cache=False, reads=reads) as a:
            a.info()
        assert all(p.done() for p in (reads.nvtx or []) + (reads.kernels or []))
        assert not any(t.is_alive() for t in reads.reader._threads)
        bad = tmp_path / "rules.toml"
        bad.write_text("[[rule]\n")
        reads = submit_activity_reads(ex, "demangled", True)
        with pytest.raises(Exception, match="rules"):
            ExportAnalysis(ex, cache=False, rules=bad, reads=reads)
        assert not any(t.is_alive() for t in reads.reader._threads)


SPY = """
import sys
import nsys_parsers.activity_reads as ar
real = ar.submit_activity_reads
def spy(*a, **k):
    print("numpy loaded when the reads started:", "numpy" in sys.modules, file=sys.stderr)
    return real(*a, **k)
ar.submit_activity_reads = spy
from profile_cli.app import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize("command", ["nvtx-kernels", "ranges", "dominant"])
def test_the_cli_starts_the_reads_before_numpy(command, fx, tmp_path):
    env = {"NSYS_MINE_CACHE_DIR": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    args = [sys.executable, "-c", SPY, command, str(fx(DLPROF)), "--format", "json"]
    cold = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env)
    assert cold.returncode == 0, cold.stderr
    assert cold.stderr.count("numpy loaded when the reads started: False") == 1
    warm = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env)
    assert warm.returncode == 0 and "reads started" not in warm.stderr  # from the cache
    assert warm.stdout == cold.stdout
    plain = subprocess.run(args + ["--no-cache"], capture_output=True, text=True, cwd=ROOT,
                           env=env)
    assert plain.stdout == cold.stdout


def test_reader_stop_drops_queued_jobs_and_ends_the_threads(fx):
    """``Reader.stop`` (what every closer of unwanted reads calls): the job a thread has
    taken ends, the queued ones end cancelled, and the threads end."""
    import threading

    from nsys_parsers.reader import Reader

    started, gate = threading.Event(), threading.Event()

    def first(conn: sqlite3.Connection) -> int:
        started.set()
        gate.wait(10)
        return 1

    rd = Reader(fx(DLPROF), workers=1)
    running = rd.submit(first)
    queued = [rd.submit(lambda conn: 2) for _ in range(3)]
    assert started.wait(10)
    threading.Timer(0.2, gate.set).start()
    rd.stop()
    assert running.result() == 1
    for p in queued:
        assert p.done() and p.state == "cancelled"
        with pytest.raises(RuntimeError, match="cancelled"):
            p.result()
    assert not any(t.is_alive() for t in rd._threads)
