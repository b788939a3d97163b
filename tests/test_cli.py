"""The CLI contract: JSON keys, every format, --output, help text, python -m profile_cli."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from reports.analyses.dominant import DOMINANT_COLUMNS
from reports.analyses.kernels import KERNEL_COLUMNS
from reports.analyses.nvtx_kernels import NVTX_KERNEL_COLUMNS
from reports.analyses.ranges import RANGE_COLUMNS

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"

EXPECTED_KEYS = {
    "kernels": ["name", "category", "instances", "total_ns", "avg_ns", "med_ns", "min_ns",
                "max_ns", "stddev_ns", "time_pct"],
    "ranges": ["range", "style", "instances", "total_ns", "avg_ns", "med_ns", "min_ns",
               "max_ns", "stddev_ns", "kernel_instances", "gpu_inclusive_ns",
               "gpu_exclusive_ns", "gpu_span_ns"],
    "nvtx-kernels": ["range", "style", "pid", "tid", "range_instances", "kernel_instances",
                     "total_ns", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "kernel"],
}


def test_column_constants_are_the_documented_contract():
    assert KERNEL_COLUMNS == EXPECTED_KEYS["kernels"]
    assert RANGE_COLUMNS == EXPECTED_KEYS["ranges"]
    assert NVTX_KERNEL_COLUMNS == EXPECTED_KEYS["nvtx-kernels"]
    assert DOMINANT_COLUMNS[:8] == ["range", "kernel", "category", "share_pct", "total_ns",
                                    "instances", "range_instances", "per_range_instance"]


@pytest.mark.parametrize("command", sorted(EXPECTED_KEYS))
def test_json_rows_have_exactly_the_keys(command, cli, fx):
    res = cli(command, fx(DLPROF), "--format", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert rows and all(list(r) == EXPECTED_KEYS[command] for r in rows)


def test_info_json(cli, fx):
    res = cli("info", fx(DLPROF), "-f", "json")
    info = json.loads(res.stdout)
    assert {"nsys_version", "schema_version", "gpus", "tables", "capture_command",
            "kernel_count", "nvtx_range_count"} <= set(info)
    assert info["nsys_version"] == "2022.1.3.3" and info["schema_version"] == "2.9.1"
    assert info["gpus"] == ["NVIDIA GeForce RTX 2070 SUPER"]
    assert info["kernel_count"] == 46 and info["nvtx_range_count"] == 82
    assert info["tables"]["CUPTI_ACTIVITY_KIND_RUNTIME"] == 279
    assert info["capture_command"] == "python3"


def test_dominant_json_and_sentences(cli, fx):
    res = cli("dominant", fx(DLPROF), "-f", "json", "--range", "aten::conv2d, seq = 0")
    rows = json.loads(res.stdout)
    assert [r["range"] for r in rows] == [None, "aten::conv2d, seq = 0"]
    assert list(rows[0]) == DOMINANT_COLUMNS
    assert isinstance(rows[1]["category_shares"], dict)
    text = cli("dominant", fx(DLPROF), "--range", "aten::conv2d, seq = 0", "--format", "text")
    assert "aten::conv2d, seq = 0: " in text.stdout and "% of GPU time" in text.stdout
    table = cli("dominant", fx(DLPROF), "--range", "aten::conv2d, seq = 0")
    assert "% of GPU time" not in table.stdout  # the table says it once, as a table
    assert "aten::conv2d, seq = 0" in table.stdout and "14.5" in table.stdout


@pytest.mark.parametrize("fmt", ["table", "md", "csv", "json", "latex"])
@pytest.mark.parametrize("command", ["kernels", "ranges", "nvtx-kernels", "dominant", "memops",
                                     "info"])
def test_every_format_renders(command, fmt, cli, fx, tmp_path):
    out = tmp_path / f"out.{fmt}"
    res = cli(command, fx(DLPROF), "--format", fmt, "--output", out)
    assert res.exit_code == 0, res.stderr
    text = out.read_text()
    assert text.strip()
    if fmt == "json":
        json.loads(text)
    if fmt == "latex":
        assert "\\begin{tabular}" in text and "\\end{table}" in text
    if fmt == "md":
        assert "| ---" in text
    if fmt == "csv" and command != "info":
        assert text.splitlines()[0].split(",")[0] in ("name", "range", "operation")


def test_memops_numbers(cli, fx):
    rows = json.loads(cli("memops", fx("gtls_rtx3060_nsys2023.1.sqlite"), "-f", "json").stdout)
    by = {r["operation"]: r for r in rows}
    assert by["memcpy Device-to-Device"]["instances"] == 5072
    assert by["memcpy Device-to-Device"]["total_bytes"] == 213297888
    assert by["memcpy Host-to-Device"]["instances"] == 26
    assert by["memset"]["instances"] == 1 and by["memset"]["total_bytes"] == 213287744


def test_name_kinds(cli, fx):
    ex = fx(DLPROF)
    short = {r["name"] for r in json.loads(cli("kernels", ex, "--name-kind", "short", "-f",
                                                "json").stdout)}
    mangled = {r["name"] for r in json.loads(cli("kernels", ex, "--name-kind", "mangled", "-f",
                                                  "json").stdout)}
    assert "implicit_convolve_sgemm" in short
    assert any(n.startswith("_Z") for n in mangled)
    # older schema without mangledName falls back to demangled names, and says so
    res = cli("kernels", fx("kmeans_openacc_rtx3080_hpcsdk21.2.sqlite"), "--name-kind", "mangled")
    assert res.exit_code == 0 and "kmeans_235_gpu" in res.stdout and "no mangledName" in res.stdout


def test_top(cli, fx):
    rows = json.loads(cli("kernels", fx(DLPROF), "--top", "3", "-f", "json").stdout)
    assert len(rows) == 3 and rows[0]["total_ns"] >= rows[1]["total_ns"] >= rows[2]["total_ns"]


def test_help_for_every_command(cli):
    """Every command has help with one or two examples and the output options; the grouping
    of `a and b or c` that let this pass on "Usage" alone is gone: each check stands."""
    from profile_cli.app import app

    commands = [c.name or c.callback.__name__ for c in app.registered_commands]
    assert {"info", "kernels", "ranges", "nvtx-kernels", "dominant", "memops", "categories",
            "bench", "memory", "profile", "sweep"} <= set(commands)
    for name in commands:
        res = cli(name, "--help")
        assert res.exit_code == 0, name
        assert "Usage" in res.stdout, name
        assert "--format" in res.stdout, name
        assert "Example" in res.stdout, f"{name} --help shows no example"
        cmd = next(c for c in app.registered_commands if (c.name or c.callback.__name__) == name)
        assert (cmd.callback.__doc__ or "").strip(), f"{name} has no help text"


@pytest.mark.parametrize("width", [80, 100, 120])
def test_help_cuts_no_word(cli, monkeypatch, width):
    """At 80, 100 (docs/CLI.md) and 120 columns, no help of any command or subcommand shows
    a word cut to ``…`` (Typer's tables cut a word longer than its column: once
    ``--slurm-gpus-per-t…``, ``--d-model/--d-ff/--layers/-…``, cache paths and environment
    variables; the help texts, metavars and panels are written to fit), and every option's
    name is all there."""
    import typer.main

    from profile_cli.app import app

    monkeypatch.setenv("COLUMNS", str(width))
    for name in ["", *command_paths()]:
        out = cli(*name.split(), "--help").stdout
        assert "…" not in out, (name, width, [ln for ln in out.splitlines() if "…" in ln])
        assert all(len(ln) <= width for ln in out.splitlines()), (name, width)
    names: list[str] = []  # the first column of the option panels, folded lines rejoined
    for ln in cli("sweep", "--help").stdout.splitlines():
        if ln.startswith("│ ") and not ln[2].isspace():
            cell = ln[2:].split("  ")[0].strip()
            if cell.startswith("--") or not names:
                names.append(cell)
            else:
                names[-1] += cell
    options = [o for p in typer.main.get_command(app).commands["sweep"].params
               for o in p.opts if o.startswith("--")]
    assert "--slurm-gpus-per-task" in options
    shown = {n for cell in names for n in cell.split(",")}
    assert set(options) <= shown, sorted(set(options) - shown)


@pytest.mark.parametrize("width", [80, 100, 120])
def test_help_splits_no_word(cli, monkeypatch, width):
    """Every help of every command and subcommand shows each word whole at 80, 100 and 120
    columns: no cache path, environment variable, option name, identifier or choice list
    folded in the middle (`~/.cache/nsys-mine/co` + `lumns`, `--slurm-gpus-per-ta` + `sk`,
    `short|demangled|mangl` + `ed`, as before daa74b3 and the commit after it). A word that
    is a piece of a word of the same help printed wide is a split one."""
    def words(args: list[str], width: int) -> list[str]:
        monkeypatch.setenv("COLUMNS", str(width))
        out = cli(*args, "--help").stdout
        cells = [c for ln in out.splitlines()
                 for c in re.split(r"\s{2,}|│", ln.strip("│╭╮╰╯─ "))]
        return [w for c in cells for w in c.split()]

    for name in ["", *command_paths()]:
        wide = set(words(name.split(), 1000))
        split = {w for w in words(name.split(), width) if w not in wide and len(w) > 1
                 and any(x.startswith(w) or x.endswith(w) for x in wide)}
        assert not split, (name, sorted(split))


def command_names() -> list[str]:
    """Every command and command group of the application, in --help order."""
    from profile_cli.app import app

    return ([c.name or c.callback.__name__ for c in app.registered_commands]
            + [g.name for g in app.registered_groups if g.name])


def command_paths() -> list[str]:
    """Every command and subcommand, as typed (``micro matmul``), groups too."""
    import typer.main

    from profile_cli.app import app

    def walk(cmd, prefix: str) -> list[str]:
        subs = getattr(cmd, "commands", {})
        return [p for name, sub in subs.items()
                for p in [f"{prefix}{name}", *walk(sub, f"{prefix}{name} ")]]

    paths = walk(typer.main.get_command(app), "")
    assert {"kernels", "micro", "micro matmul", "micro mlp"} <= set(paths)
    return paths


def test_every_analysis_is_a_command_in_order():
    """The commands of the analyses come from their declarations, in their order, with
    `report` after the analyses of one export; then the model's commands."""
    from reports.pipeline.registry import all_analyses

    names = command_names()
    analyses = [a.name for a in all_analyses()]
    after = analyses.index("attention") + 1
    assert names[:len(analyses) + 1] == [*analyses[:after], "report", *analyses[after:]]
    assert names[len(analyses) + 1:] == ["bench", "memory", "profile", "sweep", "infer",
                                         "mcp", "micro"]


def test_a_command_runs_as_a_process(fx):
    """`python -m profile_cli`: arguments, --help and usage errors of one command, and a
    command group."""
    exe = [sys.executable, "-m", "profile_cli"]
    env = dict(os.environ, COLUMNS="100")
    run = [subprocess.run([*exe, *args], capture_output=True, text=True, env=env, timeout=120)
           for args in (["kernels", str(fx(DLPROF)), "-f", "csv"], ["kernels", "--help"],
                        ["kernels"], ["micro", "--help"])]
    assert run[0].returncode == 0 and run[0].stdout.startswith("name,"), run[0].stderr
    assert run[1].returncode == 0 and "Usage: nsys-mine kernels [OPTIONS]" in run[1].stdout
    assert run[2].returncode == 2 and "Usage: nsys-mine kernels" in run[2].stderr
    assert run[3].returncode == 0 and "Usage: nsys-mine micro" in run[3].stdout


def test_help_states_each_commands_own_defaults(cli):
    """profile and sweep start from the tiny model: their --help says so (it said small)."""
    for name, size in (("profile", "tiny"), ("sweep", "tiny"), ("bench", "small")):
        text = " ".join(cli(name, "--help").stdout.split())
        start = re.search(r"--size\s+<str>", text).start()
        size_help = text[start:re.search(r"--d-model\s+<", text).start()]
        assert re.search(rf"\[default: \(?{size}\)?\]", size_help), (name, size_help)


def test_every_accepted_option_does_something(cli, fx):
    """ranges took --name-kind and ignored it: options a command cannot honour are usage
    errors; --within, as README says, works on kernels, ranges, nvtx-kernels and dominant."""
    assert cli("ranges", fx(DLPROF), "--name-kind", "short").exit_code == 2
    for command in ("kernels", "ranges", "nvtx-kernels", "dominant"):
        res = cli(command, fx(DLPROF), "--within", "aten::conv2d, seq = 0", "-f", "json")
        assert res.exit_code == 0, (command, res.stderr)
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    assert "in `kernels`, `ranges`, `nvtx-kernels` and `dominant`" in readme


def test_python_dash_m_and_unknown_option(fx):
    proc = subprocess.run([sys.executable, "-m", "profile_cli", "kernels", str(fx(DLPROF)),
                           "--top", "1", "-f", "csv"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("name,category")
    bad = subprocess.run([sys.executable, "-m", "profile_cli", "kernels", "--format", "xml",
                          str(fx(DLPROF))], capture_output=True, text=True)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_quick_exit_writes_everything(fx, tmp_path):
    """A mining command run as the process's entry ends with os._exit (no interpreter
    teardown): its whole answer still reaches a pipe and a file, the exit codes are those of
    a normal exit, and the cache it fills is complete (the warm answer is equal)."""
    exe = [sys.executable, "-m", "profile_cli"]
    env = dict(os.environ, NSYS_MINE_CACHE_DIR=str(tmp_path / "cache"))
    big = ["ranges", str(fx(FASTVIDEO)), "--format", "csv"]  # 16,582 rows, 2.4 MB
    cold = subprocess.run([*exe, *big], capture_output=True, text=True, env=env, timeout=120)
    warm = subprocess.run([*exe, *big], capture_output=True, text=True, env=env, timeout=120)
    assert cold.returncode == 0 and cold.stdout.count("\n") == 16583, cold.stderr
    assert warm.stdout == cold.stdout
    assert subprocess.run([*exe, *big, "--output", str(tmp_path / "r.csv")], env=env,
                          timeout=120).returncode == 0
    assert (tmp_path / "r.csv").read_text() == cold.stdout
    bad = subprocess.run([*exe, "kernels", str(tmp_path / "none.sqlite")], capture_output=True,
                         text=True, env=env, timeout=120)
    assert bad.returncode == 1 and bad.stderr.startswith("Error: ")
    usage = subprocess.run([*exe, "kernels", "--bogus"], capture_output=True, text=True,
                           env=env, timeout=120)
    assert usage.returncode == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc arenas")
def test_the_command_line_process_keeps_one_malloc_arena(tmp_path):
    """Threads started after ``one_malloc_arena`` (as the reader threads are) allocate from
    the one arena (glibc's malloc_info lists its heaps): their freed memory is reused, not
    kept in arenas of their own."""
    script = tmp_path / "arenas.py"
    script.write_text(textwrap.dedent('''
        import ctypes, os, sys, threading
        from profile_cli.app import one_malloc_arena
        if sys.argv[1] == "one":
            one_malloc_arena()
        def work():
            kept = [bytearray(200_000) for _ in range(50)]
            del kept
        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        libc = ctypes.CDLL(None)
        libc.fdopen.restype = ctypes.c_void_p
        r, w = os.pipe()
        fp = libc.fdopen(w, b"w")
        libc.malloc_info(0, ctypes.c_void_p(fp))
        libc.fclose(ctypes.c_void_p(fp))
        print(os.read(r, 1 << 20).decode().count("<heap nr="))
    '''))
    out = subprocess.run([sys.executable, str(script), "one"], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["1"], out.stderr
