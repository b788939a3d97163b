"""Bad input: one clear ``Error: ...`` line on stderr, exit code 1, no traceback, input
untouched."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.synth import Synth

COMMANDS = ["info", "kernels", "ranges", "nvtx-kernels", "dominant", "memops", "gpus", "gaps",
            "launches", "collectives"]
INCOMPLETE = ["is an incomplete nsys export (a failed or interrupted nsys export leaves such "
              "files): export the report again with an nsys at least as new as the one that "
              "recorded it"]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "-"


def assert_error(res, *fragments: str) -> None:
    assert res.exit_code == 1, (res.exit_code, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    for frag in fragments:
        assert frag in lines[0], (frag, lines[0])


def _write(p: Path, data: bytes) -> Path:
    p.write_bytes(data)
    return p


def _random_bytes(p: Path) -> Path:
    p.write_bytes(os.urandom(4096))
    return p


def _truncated(p: Path, fixture: Path) -> Path:
    data = fixture.read_bytes()
    p.write_bytes(data[: len(data) // 3])
    return p


def _not_nsys(p: Path) -> Path:
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    conn.commit()
    conn.close()
    return p


def _partial(p: Path) -> Path:
    """Some nsys tables but no StringIds: nsys stopped before writing its strings."""
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER, name TEXT, label TEXT)")
    conn.execute("CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT)")
    conn.commit()
    conn.close()
    return p


def _failed_export(p: Path) -> Path:
    """What nsys 2022.4 leaves when it fails to export a 2023.1+ report: exactly StringIds
    and ProcessStreams, with their nsys schema and a few rows."""
    conn = sqlite3.connect(p)
    conn.execute("CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL)")
    conn.execute("CREATE TABLE ProcessStreams (globalPid INTEGER NOT NULL, "
                 "filenameId INTEGER NOT NULL, contentId INTEGER NOT NULL)")
    conn.executemany("INSERT INTO StringIds VALUES (?, ?)", [(0, "[Unknown]"), (1, "stdout")])
    conn.execute("INSERT INTO ProcessStreams VALUES (0, 1, 0)")
    conn.commit()
    conn.close()
    return p


def _killed(p: Path, fixture: Path) -> Path:
    """What an `nsys export` killed midway leaves (seen with nsys 2022.4 on a 4.6 MB report
    killed after 0.3-1.0 s): the data pages, behind a first page of zeros that nsys writes
    last."""
    data = bytearray(fixture.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[:page] = bytes(page)
    p.write_bytes(bytes(data))
    return p


@pytest.fixture
def synth_export(tmp_path):
    s = Synth()
    s.range("forward", 0, 1000)
    s.kernel("gemm", 100, 200, launch=(10, 20))
    return s.write(tmp_path / "ok.sqlite")


CASES = {
    "missing": (lambda d, fx: d / "nope.sqlite", ["no such file"]),
    "directory": (lambda d, fx: d, ["is a directory"]),
    "empty": (lambda d, fx: _write(d / "empty.sqlite", b""), ["the file is empty"]),
    "random": (lambda d, fx: _random_bytes(d / "random.sqlite"), ["not an SQLite database"]),
    "text": (lambda d, fx: _write(d / "notes.sqlite", b"hello"), ["not an SQLite database"]),
    "not_nsys": (lambda d, fx: _not_nsys(d / "users.sqlite"), ["not an nsys export"]),
    "partial": (lambda d, fx: _partial(d / "partial.sqlite"), INCOMPLETE),
    "failed_export": (lambda d, fx: _failed_export(d / "failed.sqlite"), INCOMPLETE),
    "killed": (lambda d, fx: _killed(d / "killed.sqlite", fx("vecadd_t4_nsys2022.4.sqlite")),
               INCOMPLETE),
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_paths(case, command, tmp_path, cli, fx):
    make, fragments = CASES[case]
    path = make(tmp_path, fx)
    before = digest(path)
    assert_error(cli(command, path), *fragments)
    assert digest(path) == before


@pytest.mark.parametrize("command", COMMANDS)
def test_truncated_sqlite(command, tmp_path, cli, fx):
    path = _truncated(tmp_path / "cut.sqlite", fx("vecadd_t4_nsys2022.4.sqlite"))
    before = digest(path)
    assert_error(cli(command, path), "truncated")
    assert digest(path) == before


def test_report_without_nsys(tmp_path, cli, monkeypatch):
    import nsys_parsers.nsys_tool as tool

    monkeypatch.setattr(tool, "candidate_paths", lambda: [])
    rep = tmp_path / "run.nsys-rep"
    rep.write_bytes(b"not really a report")
    assert_error(cli("kernels", rep), "needs nsys", "install")
    assert_error(cli("info", tmp_path / "x.qdrep"), "no such file")


def test_broken_report_with_nsys(tmp_path, cli, nsys_bin, monkeypatch):
    monkeypatch.setenv("NSYS", str(nsys_bin))
    rep = tmp_path / "broken.nsys-rep"
    rep.write_bytes(b"\x00" * 5000)
    assert_error(cli("kernels", rep), "could not export")
    # the partial output nsys may leave is deleted, never mined
    cache = Path(os.environ["XDG_CACHE_HOME"])
    assert not [p for p in list(tmp_path.rglob("*")) + list(cache.rglob("*"))
                if p.suffix == ".sqlite"]


@pytest.mark.parametrize("command", COMMANDS)
def test_report_from_a_newer_nsys_says_which(command, cli, fx, nsys_bin, monkeypatch):
    """A 2026.1 report and the nsys 2022.4 here: the recording version, read from the
    report's header, and what to do; nothing left behind, the report untouched."""
    monkeypatch.setenv("NSYS", str(nsys_bin))
    rep = fx("vecadd2_rtx4060ti_nsys2026.1.nsys-rep")
    before = digest(rep)
    assert_error(cli(command, rep), "recorded by nsys 2026.1.1; the nsys here (2022.4) reads "
                 "reports up to 2022.x", "Export it with nsys 2026.1 or newer")
    assert digest(rep) == before
    cache = Path(os.environ["XDG_CACHE_HOME"])
    assert not [p for p in cache.rglob("*") if p.suffix == ".sqlite"]


def test_report_header_versions(fx):
    from nsys_parsers.nsys_tool import report_version, too_new

    assert report_version(fx("vecadd2_rtx4060ti_nsys2026.1.nsys-rep")) == "2026.1.1"
    assert report_version(fx("dlprof_pytorch_rtx2070s_nsys2022.1.nsys-rep")) is None  # format 1
    assert too_new("2026.1.1", "2022.4.2.1") and not too_new("2022.1.3", "2022.4.2.1")
    assert not too_new(None, "2022.4.2.1")


@pytest.mark.parametrize("name", ["forward'; DROP TABLE StringIds; --", 'a"b', "%", "forwad"])
def test_range_filter_with_quotes_or_sql(name, synth_export, cli):
    before = digest(synth_export)
    assert_error(cli("kernels", synth_export, "--range", name), "no NVTX range named")
    assert_error(cli("dominant", synth_export, "--range", name), "no NVTX range named")
    assert digest(synth_export) == before


def test_unknown_range_lists_closest(synth_export, cli):
    assert_error(cli("kernels", synth_export, "--range", "forwad"), "closest: 'forward'")


def test_missing_tables_are_explained(cli, fx):
    assert_error(cli("kernels", fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite")),
                 "kernels were not traced", "--trace=cuda")
    assert_error(cli("ranges", fx("vecadd_t4_nsys2022.4.sqlite")), "NVTX was not traced",
                 "--trace=nvtx")
    assert_error(cli("nvtx-kernels", fx("gtls_rtx3060_nsys2023.1.sqlite")), "--trace=nvtx")
    assert_error(cli("memops", fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite")),
                 "--trace=cuda")
    for command in ("gpus", "gaps", "launches", "collectives"):
        assert_error(cli(command, fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite")),
                     "kernels were not traced", "--trace=cuda")
    assert_error(cli("ranges", fx("vecadd_t4_nsys2022.4.sqlite"), "--instances"),
                 "--trace=nvtx")


def test_bad_rules_file(tmp_path, synth_export, cli):
    bad = tmp_path / "rules.toml"
    bad.write_text("[[rule]]\ncategory = 'nonsense'\npattern = 'x'\n")
    res = cli("kernels", synth_export, "--rules", bad)
    assert_error(res, "nonsense")


def test_output_goes_into_new_folders_or_says_why_not(tmp_path, synth_export, cli):
    """-o results/run1/x.csv makes the folders; a path that cannot be written is an error
    naming it (no traceback), for the tables and for the report page with its PNGs."""
    out = tmp_path / "results" / "run1" / "kernels.csv"
    assert cli("kernels", synth_export, "-f", "csv", "-o", out).exit_code == 0
    assert out.read_text().startswith("name,")
    page = tmp_path / "pages" / "run.md"
    assert cli("report", synth_export, "-o", page).exit_code == 0
    assert page.is_file() and any(p.suffix == ".png" for p in page.parent.iterdir())
    blocked = tmp_path / "file"
    blocked.write_text("")
    for command in ("kernels", "report"):
        res = cli(command, synth_export, "-o", blocked / "x.html")
        assert_error(res, f"cannot create the folder of --output {blocked / 'x.html'}")


def test_commands_never_modify_the_export(tmp_path, cli, fx):
    src = fx("dlprof_pytorch_rtx2070s_nsys2022.1.sqlite")
    copy = tmp_path / "copy.sqlite"
    shutil.copy(src, copy)
    before = digest(copy)
    for command in COMMANDS:
        assert cli(command, copy, "--format", "json").exit_code == 0
    assert cli("kernels", copy, "--range", "aten::conv2d, seq = 0").exit_code == 0
    assert digest(copy) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.sqlite"]  # no -wal/-journal


def test_dominant_range_on_an_export_without_nvtx(cli, fx):
    """dominant used the export after closing it on this path: now a clear error."""
    assert_error(cli("dominant", fx("gtls_rtx3060_nsys2023.1.sqlite"), "--range", "forward"),
                 "no NVTX_EVENTS table", "--trace=nvtx")


def _graph_traps(tmp_path: Path) -> dict[str, Path]:
    """Exports with the CUDA graph traps of real captures: empty graph tables, graph launches
    without their cudaGraphLaunch row (trimmed), creation records with negative timestamps
    (captured before the session started), launches from a thread without NVTX ranges, node
    kernels whose node has no creation record, and a node table without a kernel table."""
    out = {}
    s = Synth(graph_tables=True)
    s.range("step", 0, 1_000)
    s.kernel("ampere_sgemm_128x64_tn", 100, 900, launch=(10, 20))
    out["empty"] = s.write(tmp_path / "empty.sqlite")
    s = Synth()
    s.range("step", 0, 10_000)
    s.kernel("ampere_sgemm_128x64_tn", 100, 900, launch=(10, 20))
    s.graph_created(2, -5_000_000)
    s.graph_created(2, -4_000_000, graph_exec=3)
    s.graph_launch(2, 1_000, 5_000, launch=None, graph_exec=3)
    s.graph_launch(2, 5_000, 9_000, launch=(30, 40), tid=9, graph_exec=3)
    out["trimmed"] = s.write(tmp_path / "trimmed.sqlite")
    s = Synth()
    s.range("forward", 0, 10_000)
    corr = s.graph_launch_call(10, 20)
    s.graph_kernel("triton_poi_fused_add_0", 100, 200, node=50, corr=corr)
    s.node_created(51, -7)
    out["nodes"] = s.write(tmp_path / "nodes.sqlite")
    return out


@pytest.mark.parametrize("mode", ["launch", "capture"])
def test_graph_traps_are_explained_not_raised(tmp_path, cli, mode):
    for name, export in _graph_traps(tmp_path).items():
        for command in ["kernels", "ranges", "nvtx-kernels", "dominant"]:
            for fmt in ("table", "json"):
                res = cli(command, export, "--graph-attribution", mode, "--format", fmt)
                assert res.exit_code == 0, (name, command, res.stderr)
                assert "Traceback" not in res.stderr + res.stdout and not res.stderr.strip()
    res = cli("dominant", tmp_path / "trimmed.sqlite", "--graph-attribution", "capture")
    assert "1 were captured before the profiling session started" not in res.stdout
    assert "2 were captured before the profiling session started (negative timestamps), " \
           "when no NVTX range was recorded" in res.stdout.replace("\n", " ").replace("  ", " ")
    res = cli("dominant", tmp_path / "nodes.sqlite", "--graph-attribution", "capture")
    assert "1 have no creation record in the export and count in no range" in \
        res.stdout.replace("\n", " ")


def test_bad_graph_attribution(cli, synth_export):
    res = cli("dominant", synth_export, "--graph-attribution", "replay")
    assert res.exit_code == 2 and "launch" in res.stderr and "capture" in res.stderr
