"""The memory budget: an answer whose estimate is over it stops before reading, and says how
much it needs (nsys_parsers.budget). The counts in the message are checked against plain SQL
on a real export; the estimate against the declared bytes per row."""

from __future__ import annotations

import re
import sqlite3

import pytest

from nsys_parsers.budget import BASE_BYTES, MB, Budget, available_bytes, budget
from nsys_parsers.errors import BadOption, OverBudget

DDP = "cs336_lizhieffe_ddp53_profile.sqlite"


def _rows(path, table: str) -> int:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        lo, hi = db.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
    return 0 if lo is None else hi - lo + 1


def _need_mb(path, per_row: int, *tables: str) -> int:
    rows = sum(_rows(path, t) for t in tables)
    return -(-(BASE_BYTES + per_row * rows) // MB)


def test_over_budget_says_what_it_needs_and_reads_nothing(cli, fx, monkeypatch):
    from reports.analyses.nvtx_kernels import ANALYSIS

    path = fx(DDP)
    need = _need_mb(path, ANALYSIS.bytes_per_row, "CUPTI_ACTIVITY_KIND_KERNEL",
                    "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need - 1))
    r = cli("nvtx-kernels", path)
    assert r.exit_code == 1 and r.stdout == ""
    kernels = _rows(path, "CUPTI_ACTIVITY_KIND_KERNEL")
    calls = _rows(path, "CUPTI_ACTIVITY_KIND_RUNTIME")
    nvtx = _rows(path, "NVTX_EVENTS")
    assert (kernels, calls, nvtx) == (4652, 24203, 778)
    assert r.stderr.startswith(
        f"Error: {path.name}: `nvtx-kernels` needs about {need:,} MB of memory "
        f"({kernels:,} kernels, {calls:,} API calls, {nvtx:,} NVTX rows), more than the "
        f"budget of {need - 1:,} MB (NSYS_MINE_MEMORY_MB={need - 1}). "
        f"Set NSYS_MINE_MEMORY_MB={need} on a machine that has it")
    assert "Traceback" not in r.stderr
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need))  # exactly enough: answered
    r = cli("nvtx-kernels", path, "--format", "csv")
    assert r.exit_code == 0 and r.stdout.startswith("range,")


def test_without_a_cache_the_columns_count_in_memory(cli, fx, monkeypatch):
    """The estimate is for columns in the cache's files; read into memory (--no-cache), an
    answer holds them: IN_MEMORY times the bytes per row."""
    from nsys_parsers.budget import IN_MEMORY
    from reports.analyses.nvtx_kernels import ANALYSIS

    path = fx(DDP)
    rows = sum(_rows(path, t) for t in ("CUPTI_ACTIVITY_KIND_KERNEL",
                                        "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS"))
    cached_bytes = BASE_BYTES + ANALYSIS.bytes_per_row * rows
    in_memory_bytes = BASE_BYTES + int(ANALYSIS.bytes_per_row * IN_MEMORY * rows)
    assert in_memory_bytes > cached_bytes  # (the same megabytes on this small export)
    cached, in_memory = -(-cached_bytes // MB), -(-in_memory_bytes // MB)
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", "1")
    assert f"needs about {cached:,} MB of memory" in cli("nvtx-kernels", path).stderr
    r = cli("nvtx-kernels", path, "--no-cache")
    assert f"needs about {in_memory:,} MB of memory" in r.stderr


def test_the_report_page_is_checked_for_all_its_sections(cli, fx, monkeypatch, tmp_path):
    """The page holds every section's answer: its need is its own bytes per row, not that of
    the first section that reads a table."""
    from reports.page.export import PAGE_BYTES_PER_ROW

    path = fx(DDP)
    need = _need_mb(path, PAGE_BYTES_PER_ROW, "CUPTI_ACTIVITY_KIND_KERNEL",
                    "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need - 1))
    r = cli("report", path, "-o", str(tmp_path / "page.html"))
    assert r.exit_code == 1 and not (tmp_path / "page.html").exists()
    assert f"`report` needs about {need:,} MB of memory (4,652 kernels" in r.stderr
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need))
    assert cli("report", path, "-o", str(tmp_path / "page.html")).exit_code == 0


def test_each_command_counts_the_tables_it_reads(cli, fx, monkeypatch):
    path = fx(DDP)
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", "1")
    r = cli("kernels", path)  # the kernel table only
    assert r.exit_code == 1
    assert re.search(r"needs about [\d,]+ MB of memory \(4,652 kernels\)", r.stderr)
    r = cli("kernels", path, "--within", "distributed_training")  # within: launches, ranges
    assert "(4,652 kernels, 24,203 API calls, 778 NVTX rows)" in r.stderr
    r = cli("info", path)  # reads no table: never checked
    assert r.exit_code == 0


def test_no_check_and_a_bad_budget(cli, fx, monkeypatch):
    path = fx(DDP)
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", "0")
    assert cli("kernels", path, "--format", "csv").exit_code == 0
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", "lots")
    r = cli("kernels", path)
    assert r.exit_code == 1 and r.stderr.startswith(
        "Error: NSYS_MINE_MEMORY_MB='lots': give the megabytes an answer may use")
    with pytest.raises(BadOption):
        budget({"NSYS_MINE_MEMORY_MB": "-5"})
    assert budget({"NSYS_MINE_MEMORY_MB": "2048"}) == Budget(2048 * MB, "NSYS_MINE_MEMORY_MB=2048")


def test_the_python_api_raises_a_typed_error(fx, monkeypatch):
    import reports

    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", "1")
    with pytest.raises(OverBudget, match="`dominant` needs about"):
        reports.ask("dominant", [fx(DDP)])


def test_default_budget_is_what_is_available(tmp_path):
    """MemAvailable, or the cgroup's room when it is smaller (a CI runner's container)."""
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/meminfo").write_text(
        "MemTotal:       24000000 kB\nMemFree:  1000 kB\nMemAvailable:   20000000 kB\n")
    assert available_bytes(tmp_path) == 20000000 * 1024
    (tmp_path / "proc/self/cgroup").write_text("0::/runner/job\n")
    group = tmp_path / "sys/fs/cgroup/runner/job"
    group.mkdir(parents=True)
    (group / "memory.max").write_text("max\n")
    (group / "memory.current").write_text("1000\n")
    assert available_bytes(tmp_path) == 20000000 * 1024
    (group / "memory.max").write_text(f"{7 * 1024 * MB}\n")  # a 7 GB runner, 1 GB in use
    (group / "memory.current").write_text(f"{1024 * MB}\n")
    assert available_bytes(tmp_path) == 6 * 1024 * MB
    assert available_bytes(tmp_path / "nowhere") == 0


def test_an_agent_gets_the_same_error_as_a_result(fx, tmp_path, monkeypatch, cli):
    """Through a real MCP client: the server's answer over budget is an error result, word
    for word the command line's, and the server goes on."""
    import os
    import sys
    from pathlib import Path

    pytest.importorskip("mcp")
    anyio = pytest.importorskip("anyio")
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    path = fx(DDP)
    env = {"NSYS_MINE_CACHE_DIR": str(tmp_path / "columns"), "PATH": os.environ["PATH"],
           "XDG_CACHE_HOME": str(tmp_path / "xdg"), "NSYS_MINE_MEMORY_MB": "1"}
    server = StdioServerParameters(command=str(Path(sys.executable).parent / "nsys-mine"),
                                   args=["mcp", "--root", str(path.parent)], env=env)

    async def calls() -> tuple:
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                over = await s.call_tool("nvtx-kernels", {"export": str(path)})
                info = await s.call_tool("info", {"export": str(path)})
                return over, info

    over, info = anyio.run(calls)
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", "1")
    assert over.is_error
    assert over.content[0].text == cli("nvtx-kernels", path).stderr.strip()
    assert "needs about" in over.content[0].text
    assert not info.is_error


def test_a_question_leaves_no_check_behind(fx, monkeypatch):
    """The check belongs to a question: a question that loads nothing new does not leave it
    to a later load of the session outside any question."""
    from reports import Session, answer

    with Session(fx(DDP)) as s:
        answer(s, "kernels")  # loads the kernels: checked (the default budget is ample)
        monkeypatch.setenv("NSYS_MINE_MEMORY_MB", "1")
        assert answer(s, "kernels").rows  # nothing new to load: not checked, answered
        s.load("ranges")  # outside a question: never checked
        assert s.ranges is not None and len(s.ranges) > 0
        with pytest.raises(OverBudget, match="`gaps` needs about"):
            answer(s, "gaps")  # a question's first new load is


def test_ranks_and_its_workers_are_checked_once_at_the_summary_need(cli, fx, monkeypatch):
    """`ranks` of one export, and a rank's summary on a worker (``summarize_export``, whose
    OverBudget the client says as that rank's error), are checked once, at the summary's
    bytes per row over every table it reads: the `gpus` and `gaps` answers it asks load
    nothing more, so their own 31 and 32 bytes a row are not asked (a worker refused a
    2.3 GB rank below 1.2 GB of budget, where it takes 330 MB)."""
    from reports.ranks.summary import BYTES_PER_ROW, summarize_export

    path = fx(DDP)
    tables = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
              "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "NVTX_EVENTS")
    assert [_rows(path, t) for t in tables] == [4652, 24203, 330, 30, 778]
    need = _need_mb(path, BYTES_PER_ROW, *tables)
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need - 1))
    r = cli("ranks", path)
    assert r.exit_code == 1 and r.stderr.startswith(
        f"Error: {path.name}: `ranks` needs about {need:,} MB of memory (4,652 kernels, "
        f"24,203 API calls, 330 memcpys, 30 memsets, 778 NVTX rows), more than the budget "
        f"of {need - 1:,} MB")
    with pytest.raises(OverBudget, match=f"`ranks` needs about {need:,} MB of memory"):
        summarize_export(path)
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need))  # exactly enough: answered
    assert cli("ranks", path, "-f", "csv").exit_code == 0
    import nsys_parsers.trace

    asked: list[tuple[str, int]] = []
    check = nsys_parsers.trace.check_need

    def recorded(export, tables, per_row, what, **kw):
        asked.append((what, per_row))
        return check(export, tables, per_row, what, **kw)

    monkeypatch.setattr(nsys_parsers.trace, "check_need", recorded)
    assert [s.collectives for s in summarize_export(path)] == [230, 230]
    assert asked == [("`ranks`", BYTES_PER_ROW)]  # not `gaps` at 32 after it


def test_ranges_instances_is_checked_at_the_cost_of_ranges(cli, fx, monkeypatch):
    """`ranges --instances` holds no more a row than `ranges` (828 MiB cold at x4800, where
    `ranges` takes 841: docs/PERFORMANCE.md): it is checked at the same bytes per row, on
    the same tables, and refused below that need as `ranges` is. (A small export's need is
    the base either way: the cost is raised here to see the check.)"""
    from reports.analyses.ranges import ANALYSIS

    monkeypatch.setitem(ANALYSIS.__dict__, "bytes_per_row", 1000)  # a frozen dataclass
    path = fx(DDP)
    need = _need_mb(path, 1000, "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME",
                    "NVTX_EVENTS")
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need - 1))
    for args in ((), ("--instances",)):
        r = cli("ranges", path, *args)
        assert r.exit_code == 1 and r.stderr.startswith(
            f"Error: {path.name}: `ranges` needs about {need:,} MB of memory "
            f"(4,652 kernels, 24,203 API calls, 778 NVTX rows)"), (args, r.stderr)
    monkeypatch.setenv("NSYS_MINE_MEMORY_MB", str(need))
    assert cli("ranges", path, "--instances", "--format", "csv").exit_code == 0
