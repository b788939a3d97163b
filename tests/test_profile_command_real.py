"""`nsys-mine profile -- COMMAND` and `sweep --command` end to end under the real nsys 2022.4 on
CPU: an unmodified training script (tests/programs/tiny_train.py) with module and step ranges
added, `python -m` a package, a program that never imports torch and raises, Ctrl-C while the
program runs, and a sweep over a command (six nsys runs, about 25 s here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")

pytestmark = [pytest.mark.nsys, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = ROOT / "tests" / "programs"
TINY = str(PROGRAMS / "tiny_train.py")
MODULES = ["TinyNet", "encoder (Sequential)", "encoder.0 (Block)", "encoder.0.proj (Linear)",
           "encoder.0.act (ReLU)", "encoder.1 (Block)", "encoder.1.proj (Linear)",
           "encoder.1.act (ReLU)", "head (Linear)"]


def test_a_training_script_gets_module_and_step_ranges(cli, nsys_bin, tmp_path):
    """Module ranges with qualified names (and their backward), step ranges, the program's
    arguments and exit code, the sidecar; the export read back with the project's readers."""
    res = cli("profile", "--nvtx", "modules,steps", "--out-dir", tmp_path, "--nsys", nsys_bin,
              "--timeout", "300", "-f", "json", "--", sys.executable, TINY, "--steps", "3",
              "--exit-code", "3", "--show-argv")
    assert res.exit_code == 3, res.stderr  # the program's
    data = json.loads(res.stdout)
    assert set(data) == {"export", "config", "exit_code", "ranges", "dominant", "kernels",
                         "notes"}
    name = "tiny_train_steps-3_exit-code-3_show-argv_nvtx-modules+steps"
    assert data["export"] == str(tmp_path / f"{name}.sqlite") and data["exit_code"] == 3
    assert data["config"]["argv"] == [sys.executable, TINY, "--steps", "3", "--exit-code", "3",
                                      "--show-argv"]
    assert data["config"]["nvtx"] == "modules,steps" and data["config"]["device"] == "cpu"
    ranges = {r["range"]: r["instances"] for r in data["ranges"]}
    # 3 training steps + 1 evaluation forward; backward and step ranges for the 3 steps only
    assert {m: ranges[m] for m in MODULES} == dict.fromkeys(MODULES, 4)
    assert {m: ranges[f"{m} backward"] for m in MODULES} == dict.fromkeys(MODULES, 3)
    assert ranges["step"] == 3 and ranges["optimizer (SGD)"] == 3
    assert data["dominant"] == [] and data["kernels"] == []  # CPU: no kernels
    assert any("the program exited with status 3" in n for n in data["notes"])
    assert any("3 `step` ranges" in n for n in data["notes"])
    # the program saw its own argv, sys.path[0] and __main__, as without the launcher
    log = (tmp_path / f"{name}.log").read_text()
    shown = json.loads(next(ln for ln in log.splitlines() if ln.startswith('{"argv"')))
    assert shown == {"argv": [TINY, "--steps", "3", "--exit-code", "3", "--show-argv"],
                     "path0": str(PROGRAMS), "name": "__main__", "file": TINY}
    side = json.loads((tmp_path / f"{name}.json").read_text())
    assert side["kind"] == "command" and side["exit_code"] == 3 and side["status"] == "failed"
    assert side["program"]["cwd"] == os.getcwd() and "env" in side["program"]
    assert "--sample=none" in side["nsys_command"] and "--trace=nvtx,osrt" in side["nsys_command"]
    assert str(ROOT / "nvtx_model" / "launch.py") in side["nsys_command"]
    assert side["versions"]["nsys"].startswith("2022.4")
    assert side["versions"]["torch"] and side["launcher"]["roots"] == ["TinyNet"]
    # the export through the miner's own commands; --within step leaves the evaluation out
    export = tmp_path / f"{name}.sqlite"
    rows = json.loads(cli("ranges", export, "-f", "json").stdout)
    assert {r["range"] for r in rows} >= set(MODULES) | {"step", "optimizer (SGD)"}
    within = {r["range"]: r["instances"] for r in json.loads(
        cli("ranges", export, "--within", "step", "-f", "json").stdout)}
    assert within["TinyNet"] == 3 and within["encoder.1.proj (Linear) backward"] == 3
    glob = json.loads(cli("ranges", export, "--match", "encoder.*", "-f", "json").stdout)
    assert glob and all(r["range"].startswith("encoder.") for r in glob)
    assert "encoder.1.proj (Linear) backward" in {r["range"] for r in glob}
    # module ranges read as a tree: levels and parents from the names, parents first, a
    # module's backward right after its forward, the tree in one piece (siblings by CPU time)
    rows = data["ranges"]
    tree = [r for r in rows if r["depth"] is not None]
    parent = {"TinyNet": None, "encoder (Sequential)": "TinyNet", "head (Linear)": "TinyNet",
              "encoder.0 (Block)": "encoder (Sequential)",
              "encoder.1 (Block)": "encoder (Sequential)"}
    parent.update({f"encoder.{i}.{m}": f"encoder.{i} (Block)" for i in (0, 1)
                   for m in ("proj (Linear)", "act (ReLU)")})
    expected = {m: (m.count(".") + 2 - (m == "TinyNet"), parent[m]) for m in MODULES}
    expected.update({f"{m} backward": (d, p and f"{p} backward") for m, (d, p) in
                     list(expected.items())})
    assert {r["range"]: (r["depth"], r["parent"]) for r in tree} == expected
    assert {r["range"] for r in rows if r["depth"] is None} == {"step", "optimizer (SGD)"}
    at = [i for i, r in enumerate(rows) if r["depth"] is not None]
    assert at == list(range(at[0], at[0] + len(tree)))
    for i, r in enumerate(tree):
        assert r["parent"] is None or r["parent"] in {x["range"] for x in tree[:i]}
        if not r["range"].endswith(" backward"):
            assert tree[i + 1]["range"] == f"{r['range']} backward"
    # --depth counts module levels (the model 1), other ranges by nesting (step 1, its
    # optimizer 2)
    shallow = json.loads(cli("ranges", export, "--depth", "2", "-f", "json").stdout)
    assert {r["range"] for r in shallow} == {
        "step", "optimizer (SGD)", "TinyNet", "TinyNet backward", "encoder (Sequential)",
        "encoder (Sequential) backward", "head (Linear)", "head (Linear) backward"}


def test_python_dash_m_with_depth_and_ops(cli, nsys_bin, tmp_path, monkeypatch):
    """`python -m package` from its folder; modules:1 stops at the model's children; ops says
    it needs a CUDA build here. The table as people see it at 80 columns."""
    monkeypatch.chdir(PROGRAMS)
    monkeypatch.setenv("COLUMNS", "80")
    res = cli("profile", "--nvtx", "modules:1,ops", "--out-dir", tmp_path, "--nsys", nsys_bin,
              "--timeout", "300", "--", sys.executable, "-m", "tinypkg", "--steps", "2")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert all(len(line) <= 80 for line in out.splitlines()), out
    assert "NVTX ranges (the whole run)" in out and "exit code 0" in " ".join(out.split())
    for name in ("Mlp", "layers (Sequential)", "layers (Sequential) backward"):
        assert f" {name}" in out
    assert "PushPop     layers (Sequential)" in out  # a module tree: indented by level
    assert "layers.0" not in out
    if not __import__("torch").version.cuda:
        assert "needs a CUDA build of torch" in " ".join(out.split())
    log = (tmp_path / "tinypkg_steps-2_nvtx-modules1+ops.log").read_text()
    assert "tinypkg: 2 steps, package tinypkg, argv ['--steps', '2']" in log


def test_a_program_that_never_imports_torch_and_raises(cli, nsys_bin, tmp_path):
    res = cli("profile", "--nvtx", "modules", "--out-dir", tmp_path, "--nsys", nsys_bin,
              "--timeout", "300", "-f", "json", "--", sys.executable,
              str(PROGRAMS / "no_torch.py"), "--raise")
    assert res.exit_code == 1, res.stderr
    data = json.loads(res.stdout)
    notes = " ".join(data["notes"])
    assert "never imported torch: no module, step or operator ranges were added" in notes
    assert "ValueError: no_torch failed on purpose (--raise)" in notes
    assert "launch.py" not in notes  # the program's traceback, not the launcher's
    assert data["ranges"] == [] and data["exit_code"] == 1


def _tagged(tag: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"NSYS_MINE_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_ctrl_c_while_the_program_runs_leaves_nothing_running(nsys_bin, tmp_path):
    tag, ready = uuid.uuid4().hex, tmp_path / "ready"
    env = dict(os.environ, NSYS_MINE_TEST_TAG=tag)
    proc = subprocess.Popen(
        [sys.executable, "-m", "profile_cli", "profile", "--nvtx", "modules", "--out-dir",
         str(tmp_path / "out"), "--nsys", str(nsys_bin), "--timeout", "300", "--",
         sys.executable, TINY, "--steps", "200", "--sleep", "0.5", "--ready", str(ready)],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 90
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ready.exists(), proc.communicate(timeout=30)
        proc.send_signal(signal.SIGINT)  # Ctrl-C reaches nsys-mine; the program has its session
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 130, err
        assert "interrupted: the program and nsys were ended" in err
        assert _tagged(tag) == []
    finally:
        for pid in _tagged(tag):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_a_sweep_over_a_command(cli, nsys_bin, tmp_path):
    """One nsys run per grid value through the index; resumes; the tables and the report."""
    out = tmp_path / "sweep"
    args = ["sweep", "--command", f"{sys.executable} {TINY} --steps {{steps}}", "--grid",
            "steps=1,2", "--nvtx", "modules:0,steps", "--out-dir", out, "--nsys", nsys_bin,
            "--timeout", "300", "-f", "json"]
    first = cli(*args)
    assert first.exit_code == 0, first.stderr
    data = json.loads(first.stdout)
    assert [(r["config"], r["status"], r["exit_code"]) for r in data["runs"]] == [
        ("steps=1", "ok", 0), ("steps=2", "ok", 0)]
    assert data["runs"][1]["grid"] == {"steps": "2"} and TINY in data["runs"][1]["command"]
    two = data["runs"][1]["name"]
    times = {(r["name"], r["range"]): r["instances"] for r in data["ranges"]}
    assert times[(two, "step")] == 2 and times[(two, "TinyNet")] == 3
    again = cli(*args)
    assert "0 config(s) run, 2 already in the index" in again.stdout
    page = cli("report", out, "-o", tmp_path / "page.html")
    assert page.exit_code == 0, page.stderr
    assert "steps=2: ok" in (tmp_path / "page.html").read_text()
    table = cli("sweep", "--report", out, "--table", "runs")
    assert table.exit_code == 0 and "Runs of the command" in table.stdout
