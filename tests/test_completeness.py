"""A capture whose CUDA trace stopped early says so in every answer (nsys_parsers/completeness).

The cut exports are real ones (the shared fixtures) with their CUDA rows deleted after a
time, in a copy; what the warning must say is computed here with plain SQL on that copy.
No shared fixture gets a warning.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from nsys_parsers.completeness import LAUNCHES, RANGES, trace_cut
from nsys_parsers.export import open_export
from tests.conftest import CS336, FIXTURES, KNOWN, fixture_path

CUDA_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
               "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_RUNTIME")
RANGE_TYPES = "(59, 60, 70, 71)"
DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
NCCL_TREE = "nccl_tree_2nodes_6gpus_nsys2024.5"  # one export per rank, UTC timestamps


def every_fixture() -> list[Path]:
    names = [*KNOWN, *CS336]
    tree = sorted((FIXTURES / NCCL_TREE).glob("*.sqlite")) if FIXTURES.is_dir() else []
    return [FIXTURES / n for n in names] + tree


@pytest.mark.parametrize("path", every_fixture(), ids=lambda p: p.name)
def test_no_shared_fixture_is_called_incomplete(path):
    if not path.exists():
        pytest.skip(f"fixture {path.name} not found")
    with open_export(path) as export:
        assert trace_cut(export) is None


def cut_copy(src: Path, dst: Path, share: float, tables=CUDA_TABLES) -> Path:
    """A copy of ``src`` without the rows of ``tables`` that end after ``share`` of the way
    through its CUDA trace (the first to the last kernel, copy, memset or API call)."""
    with sqlite3.connect(f"file:{src}?mode=ro", uri=True) as s, sqlite3.connect(dst) as d:
        s.backup(d)
    with sqlite3.connect(dst) as d:
        extents = [d.execute(f"SELECT MIN(start), MAX(end) FROM {t}").fetchone()
                   for t in CUDA_TABLES]
        lo = min(e[0] for e in extents if e[0] is not None)
        hi = max(e[1] for e in extents if e[1] is not None)
        t = lo + int((hi - lo) * share)
        for table in tables:
            d.execute(f"DELETE FROM {table} WHERE end > ?", (t,))
    return dst


def expected_ranges_cut(path: Path) -> dict[str, int]:
    """What the warning must say, in plain SQL: where the CUDA trace stops, the NVTX ranges
    that start after it and how long they go on."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        stop = max(db.execute(f"SELECT MAX(end) FROM {t}").fetchone()[0] or 0
                   for t in CUDA_TABLES)
        count, last = db.execute(
            f"SELECT COUNT(*), MAX(COALESCE(end, start)) FROM NVTX_EVENTS "
            f"WHERE eventType IN {RANGE_TYPES} AND start > ?", (stop,)).fetchone()
        utc = db.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()[0]
    return {"stop": stop, "count": count, "goes_on": last - stop, "utc": utc}


def test_a_real_capture_cut_after_a_third_of_its_kernels(tmp_path, cli):
    cut = cut_copy(fixture_path(DDP), tmp_path / "ddp_cut.sqlite", 1 / 3)
    want = expected_ranges_cut(cut)
    with open_export(cut) as export:
        got = trace_cut(export)
    assert got is not None and got.sign == RANGES
    assert (got.stops_ns, got.count, got.goes_on_ns) == (want["stop"], want["count"],
                                                         want["goes_on"])
    assert (got.stops_ns, got.count, got.goes_on_ns) == (4904379496, 756, 2005086036)
    assert (got.nsys, got.driver_cuda) == ("2026.3.1", "13.2")  # what the export records
    message = got.message()
    assert message.startswith(
        "incomplete CUDA trace: nothing CUDA (kernels, memory copies, API calls) is recorded "
        "after 4.904 s, while 756 NVTX ranges go on for 2.005 s more (67% of the capture)")
    assert message.endswith("(recorded by nsys 2026.3.1, a driver for CUDA 13.2): record again "
                            "with an nsys at least as new as the program's CUDA.")
    # the command line: one line on stderr, in every format; stdout stays parseable
    for fmt in ("table", "json", "csv"):
        result = cli("kernels", cut, "--format", fmt, "--top", "3")
        assert result.exit_code == 0, result.stderr
        assert result.stderr.count("Warning: incomplete CUDA trace") == 1
        assert f"Warning: {message}\n" in result.stderr
    assert json.loads(cli("kernels", cut, "--format", "json").stdout)
    # the clean export says nothing
    assert "Warning" not in cli("kernels", fixture_path(DDP), "--top", "3").stderr


def test_every_way_of_asking_carries_the_warning(tmp_path):
    from reports.pipeline.ask import answer
    from reports.pipeline.contract import envelope
    from reports.pipeline.registry import get
    from reports.pipeline.session import Session

    cut = cut_copy(fixture_path(DDP), tmp_path / "ddp_cut.sqlite", 1 / 3)
    with Session(cut) as s:
        (warning,) = s.trace_warnings
        for name in ("kernels", "ranges", "dominant", "info", "gaps"):
            report = answer(s, name)
            assert report.warnings == [warning], name
            # agents (MCP) read the envelope: the warning is its first note
            assert envelope(get(name), report, {}, 5)["notes"][0] == warning, name
        assert answer(s, "kernels").to_pandas().attrs["warnings"] == [warning]


def test_several_exports_name_the_one_cut(tmp_path, cli):
    cut = cut_copy(fixture_path(DDP), tmp_path / "ddp_cut.sqlite", 1 / 3)
    result = cli("kernels", cut, fixture_path(DDP), "--top", "2")
    assert result.exit_code == 0, result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("Warning")]
    assert len(lines) == 1 and lines[0].startswith("Warning: ddp_cut: incomplete CUDA trace")


def test_kernels_cut_while_launches_go_on(tmp_path):
    """Only the kernel rows cut: the launches after the last kernel are the sign."""
    cut = cut_copy(fixture_path(DDP), tmp_path / "kernels_cut.sqlite", 1 / 3,
                   tables=("CUPTI_ACTIVITY_KIND_KERNEL",))
    with sqlite3.connect(f"file:{cut}?mode=ro", uri=True) as db:
        (kernel_end,) = db.execute("SELECT MAX(end) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
        count, last = db.execute(
            "SELECT COUNT(*), MAX(r.end) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s "
            "ON s.id = r.nameId WHERE r.start > ? AND (s.value LIKE 'cudaLaunchKernel%' OR "
            "s.value LIKE 'cuLaunchKernel%')", (kernel_end,)).fetchone()
    with open_export(cut) as export:
        got = trace_cut(export)
    assert got is not None and got.sign == LAUNCHES
    assert (got.stops_ns, got.count, got.goes_on_ns) == (kernel_end, count, last - kernel_end)
    assert count > 100
    assert f"no kernel is recorded after {kernel_end / 1e9:.3f} s, while {count:,} kernel " \
           "launches go on" in got.message()


def test_a_short_tail_is_no_alarm(tmp_path):
    """Cut after 99% of the kernels: what goes on after is under a tenth of the capture."""
    cut = cut_copy(fixture_path(DDP), tmp_path / "late_cut.sqlite", 0.99)
    with open_export(cut) as export:
        assert trace_cut(export) is None


def test_utc_timestamps_are_told_from_the_capture_start(tmp_path):
    """Timestamps made UTC (``nsys export --ts-normalize``: about 1.7e18 ns; the 2-node job of
    the shared fixtures counts so, but has one kernel): the time the trace stops is said from
    the session's start, as nsys shows it, to the nanosecond."""
    cut = cut_copy(fixture_path(DDP), tmp_path / "utc_cut.sqlite", 1 / 3)
    plain = expected_ranges_cut(cut)
    with sqlite3.connect(cut) as db:
        for table in (*CUDA_TABLES, "NVTX_EVENTS"):
            db.execute(f"UPDATE {table} SET start = start + ?, end = end + ?",
                       (plain["utc"], plain["utc"]))
    want = expected_ranges_cut(cut)
    assert want["stop"] > 10**18 and want["stop"] - want["utc"] == plain["stop"]
    with open_export(cut) as export:
        got = trace_cut(export)
    assert got is not None and got.sign == RANGES
    assert (got.stops_ns, got.count, got.goes_on_ns) == (
        plain["stop"], want["count"], want["goes_on"])
    assert (got.count, got.goes_on_ns) == (plain["count"], plain["goes_on"])


def test_the_extents_are_read_once_per_export(tmp_path, monkeypatch):
    from nsys_parsers import completeness
    from nsys_parsers.cache import ColumnCache

    cut = cut_copy(fixture_path(DDP), tmp_path / "ddp_cut.sqlite", 1 / 3)
    with open_export(cut) as export:
        cache = ColumnCache.for_export(export)
        first = trace_cut(export, cache)
        cache.flush()

        def scan(export):
            raise AssertionError("read again")

        monkeypatch.setattr(completeness, "extents", scan)
        assert trace_cut(export, ColumnCache.for_export(export)) == first


def test_the_page_leads_with_the_warning(tmp_path, cli):
    from reports.page.export import report_for_export
    from reports.page.html import page_html
    from reports.pipeline.options import AnalysisOptions

    cut = cut_copy(fixture_path(DDP), tmp_path / "ddp_cut.sqlite", 1 / 3)
    page = report_for_export(cut, AnalysisOptions())
    (warning,) = page.warnings
    assert warning.startswith("incomplete CUDA trace") and f"Warning: {warning}" in page.lead
    assert '<p class="lead warning">Warning: incomplete CUDA trace' in page_html(page)
    result = cli("report", cut, "--output", tmp_path / "page.html")
    assert result.exit_code == 0 and f"Warning: {warning}\n" in result.stderr
    clean = report_for_export(fixture_path(DDP), AnalysisOptions())
    assert clean.warnings == [] and not any(x.startswith("Warning") for x in clean.lead)
