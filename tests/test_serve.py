"""``nsys-mine serve`` and its client: a real server process on a real Unix socket, real
``nsys-mine`` command lines in other processes; what they print and exit with equals the
same command run without a server, and the server's log shows it answered them."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
ENTRY = "from profile_cli.app import main; main()"


def nsys_mine(args: list[str], env: dict[str, str], cwd: Path | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``nsys-mine ARGS`` as its entry point runs it, in another process."""
    return subprocess.run([sys.executable, "-c", ENTRY, *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


class Server:
    """``nsys-mine serve --socket PATH`` in its own process, its log in a file."""

    def __init__(self, path: Path, log: Path, *args: str) -> None:
        self.path, self.log = path, log
        self.env = {**os.environ, "NSYS_MINE_SERVER": str(path)}
        with log.open("w") as fh:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", ENTRY, "serve", "--socket", str(path), *args],
                env=self.env, stdout=fh, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not path.exists():
            assert self.proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)

    def answered(self) -> list[str]:
        return [line.strip() for line in self.log.read_text().splitlines()
                if line.startswith("  ") and " -> exit " in line]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)


@pytest.fixture
def server(tmp_path):
    sock_dir = Path(f"/tmp/nm-test-{os.getpid()}-{tmp_path.name[-20:]}")  # short: sun_path
    made = []

    def start(*args: str) -> Server:
        s = Server(sock_dir / "serve.sock", tmp_path / f"serve{len(made)}.log", *args)
        made.append(s)
        return s

    yield start
    for s in made:
        s.stop()
    shutil.rmtree(sock_dir, ignore_errors=True)


def test_a_served_command_prints_and_exits_as_it_would_alone(fx, tmp_path, server):
    """Tables (at the client's width), CSV, JSON, --output in the client's folder, an error,
    a usage error and a gate's exit code: equal with and without the server, and answered by
    it (its log); the same question again is its kept answer."""
    srv = server()
    export = fx(DDP)
    rules = tmp_path / "rules.toml"
    rules.write_text("[[rule]]\nname = 'gemm'\ndominant_category = 'attention'\n")
    asks = [
        ["kernels", str(export)],
        ["dominant", str(export), "-f", "csv"],
        ["nvtx-kernels", str(export), "-f", "json", "--top", "5"],
        ["ranges", str(export), "--top", "3"],
        ["gaps", str(export), "-f", "md"],
        ["gpus", str(export), "-f", "text"],
        ["check", str(export), "--rules", str(rules)],
        ["kernels", str(tmp_path / "missing.sqlite")],
        ["kernels", str(export), "--bogus"],
        ["kernels", str(export)],
    ]
    off = {**os.environ, "NSYS_MINE_SERVER": "off", "COLUMNS": "100"}
    on = {**srv.env, "COLUMNS": "100"}
    codes = []
    for args in asks:
        alone, served = nsys_mine(args, off), nsys_mine(args, on)
        assert (served.returncode, served.stdout, served.stderr) == (
            alone.returncode, alone.stdout, alone.stderr), args
        codes.append(alone.returncode)
    assert codes[6:9] == [3, 1, 2] and codes.count(0) == 7
    lines = srv.answered()
    assert len(lines) == len(asks) and lines[0].startswith("kernels ") and "exit 3" in lines[6]
    # --output relative to the client's working directory
    (tmp_path / "here").mkdir()
    out = nsys_mine(["kernels", str(export), "-f", "csv", "-o", "k.csv"], srv.env,
                    cwd=tmp_path / "here")
    assert out.returncode == 0 and out.stdout == ""
    alone = nsys_mine(["kernels", str(export), "-f", "csv"], off)
    assert (tmp_path / "here" / "k.csv").read_text() == alone.stdout
    assert len(srv.answered()) == len(asks) + 1


def _pids_in(log: Path) -> list[int]:
    """The PIDs of the servers a log names (``answering at ... (pid N)``)."""
    import re

    text = log.read_text() if log.exists() else ""
    return [int(p) for p in re.findall(r"answering at .* \(pid (\d+)\)", text)]


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (not gone, not a zombie its new parent has yet to reap)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.fixture
def auto_socket(tmp_path):
    """A socket path for ``NSYS_MINE_SERVER=auto:PATH``; the servers commands started there
    stopped after the test by their PIDs (from their log)."""
    sock_dir = Path(f"/tmp/nm-auto-{os.getpid()}-{tmp_path.name[-16:]}")  # short: sun_path
    path = sock_dir / "serve.sock"
    yield path
    for pid in _pids_in(Path(f"{path}.log")):
        if _running(pid):
            os.kill(pid, 15)
            deadline = time.monotonic() + 30
            while _running(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
    shutil.rmtree(sock_dir, ignore_errors=True)


def test_auto_starts_one_server_that_outlives_the_commands(fx, auto_socket):
    """``NSYS_MINE_SERVER=auto:PATH``: two commands that find no server at once start one
    (the second waits for the first's, then asks it), each answered by it as it would be
    alone; the next question goes to it too; it runs on after the commands, in a session of
    its own, until stopped."""
    export = str(fx(DDP))
    off = {**os.environ, "NSYS_MINE_SERVER": "off"}
    auto = {**os.environ, "NSYS_MINE_SERVER": f"auto:{auto_socket}"}
    asks = [["kernels", export, "-f", "csv"], ["gpus", export, "-f", "json"],
            ["dominant", export, "-f", "csv"]]
    alone = [nsys_mine(a, off) for a in asks]
    both = [subprocess.Popen([sys.executable, "-c", ENTRY, *a], env=auto, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            for a in asks[:2]]
    got = [(*p.communicate(timeout=120), p.returncode) for p in both]
    after = nsys_mine(asks[2], auto)
    got.append((after.stdout, after.stderr, after.returncode))
    assert got == [(r.stdout, r.stderr, r.returncode) for r in alone]
    assert [code for _, _, code in got] == [0, 0, 0]
    log = Path(f"{auto_socket}.log")
    pids = _pids_in(log)
    answered = [line for line in log.read_text().splitlines() if " -> exit 0" in line]
    assert len(pids) == 1 and len(answered) == 3, log.read_text()
    assert _running(pids[0]) and os.getsid(pids[0]) == pids[0]  # its own session
    assert "stops after 1800 s idle" in log.read_text()
    stop = nsys_mine(["serve", "--stop"], {**os.environ, "NSYS_MINE_SERVER": str(auto_socket)})
    assert stop.returncode == 0 and "stopped" in stop.stdout
    deadline = time.monotonic() + 30
    while _running(pids[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pids[0]) and not auto_socket.exists()


def test_where_no_server_can_start_the_command_answers_itself(fx, tmp_path):
    """``auto`` with a socket path too long for a Unix socket: the server says why in its
    log (no traceback) and exits; the command answers as it would alone and says where that
    log is. ``serve --socket`` with that path is one ``Error:`` line."""
    export = str(fx(DLPROF))
    path = tmp_path / ("s" * 110) / "serve.sock"
    ask = ["kernels", export, "-f", "csv"]
    alone = nsys_mine(ask, {**os.environ, "NSYS_MINE_SERVER": "off"})
    got = nsys_mine(ask, {**os.environ, "NSYS_MINE_SERVER": f"auto:{path}"})
    assert (got.stdout, got.returncode) == (alone.stdout, 0)
    assert got.stderr == f"nsys-mine: no answer server started at {path} (its log: {path}.log); " \
                         f"answering here.\n"
    log = Path(f"{path}.log").read_text()
    assert log.startswith("Error: cannot listen at ") and "Traceback" not in log
    direct = nsys_mine(["serve", "--socket", str(path)], os.environ)
    assert direct.returncode == 1 and direct.stderr.startswith("Error: cannot listen at ")
    assert "AF_UNIX path too long" in direct.stderr and direct.stderr.count("\n") == 1


def test_commands_that_run_programs_and_help_never_go_to_the_server(fx, server):
    from profile_cli.client import LOCAL, served

    assert {"profile", "sweep", "bench", "serve", "mcp", "ranks"} <= LOCAL
    assert served(["kernels", "x.sqlite"]) and not served(["kernels", "--help"])
    assert not served(["profile", "--", "python", "x.py"]) and not served([])
    srv = server()
    res = nsys_mine(["kernels", "--help"], srv.env)
    assert res.returncode == 0 and "Usage" in res.stdout and srv.answered() == []


def test_a_changed_export_is_answered_afresh(fx, tmp_path, server):
    srv = server()
    export = tmp_path / "run.sqlite"
    shutil.copyfile(fx(DLPROF), export)
    ask = ["kernels", str(export), "-f", "json"]
    first = json.loads(nsys_mine(ask, srv.env).stdout)
    shutil.copyfile(fx(DDP), export)
    second = json.loads(nsys_mine(ask, srv.env).stdout)
    alone = json.loads(nsys_mine(ask, {**os.environ, "NSYS_MINE_SERVER": "off"}).stdout)
    assert second == alone != first and len(srv.answered()) == 2


def test_the_server_stops_when_asked_idle_or_running_other_code(fx, tmp_path, server):
    """--stop; --idle-timeout; a client of other code (refused: the server stops and the
    command runs in the client); each removes the socket. A second server on a socket in
    use is an error; a socket nobody listens on is taken over."""
    from profile_cli.client import EXIT, HEADER, REFUSED

    srv = server()
    again = nsys_mine(["serve", "--socket", str(srv.path)], srv.env)
    assert again.returncode == 1 and "already answers" in again.stderr
    stop = nsys_mine(["serve", "--stop", "--socket", str(srv.path)], srv.env)
    assert stop.returncode == 0 and "stopped" in stop.stdout
    assert srv.proc.wait(timeout=30) == 0 and not srv.path.exists()
    assert "stopped by `nsys-mine serve --stop`" in srv.log.read_text()
    # a socket left by a killed server: the client answers alone, a new server takes it
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(srv.path))
    stale.close()
    alone = nsys_mine(["kernels", str(fx(DLPROF)), "-f", "csv"], srv.env)
    assert alone.returncode == 0 and alone.stdout.startswith("name,category")
    idle = server("--idle-timeout", "0.02")  # 1.2 s
    assert idle.proc.wait(timeout=60) == 0 and not idle.path.exists()
    assert "idle for 1.2 s" in idle.log.read_text()
    # other code: refused, the server stops
    other = server()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.connect(str(other.path))
        sock.sendall(json.dumps({"argv": ["kernels"], "stamp": "elsewhere"}).encode() + b"\n")
        kind, size = HEADER.unpack(sock.recv(HEADER.size, socket.MSG_WAITALL))
        assert kind == REFUSED and b"other code" in sock.recv(size, socket.MSG_WAITALL)
    assert other.proc.wait(timeout=30) == 0 and not other.path.exists()
    assert kind != EXIT


def test_while_its_user_reads_the_server_answers_the_next_questions(fx, server):
    """A second after a question, the server answers the questions asked most of its export,
    with the options that question set (--within) and without (the log's "warmed ahead"
    line names them); the next question is then its kept answer, printed as the command
    alone prints it. With --no-ahead it warms nothing."""
    from reports.ask import HeldSessions

    export = str(fx(DDP))
    srv = server()
    within = ["--within", "forward pass"]
    assert nsys_mine(["gpus", export, *within], srv.env).returncode == 0
    deadline = time.monotonic() + 60
    while "warmed ahead" not in srv.log.read_text():
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.log.read_text()
        time.sleep(0.1)
    warmed = next(line for line in srv.log.read_text().splitlines() if "warmed ahead" in line)
    assert all(f" {name} " in warmed for name in HeldSessions.AHEAD), warmed
    assert "kernels, as asked" in warmed and "dominant, as asked" in warmed, warmed
    off = {**os.environ, "NSYS_MINE_SERVER": "off", "COLUMNS": "100"}
    on = {**srv.env, "COLUMNS": "100"}
    for args in (["gaps", export, "-f", "csv"], ["nvtx-kernels", export, "-f", "json"],
                 ["ranges", export], ["dominant", export, "--top", "3"],
                 ["kernels", export, *within], ["dominant", export, *within, "-f", "csv"]):
        served, alone = nsys_mine(args, on), nsys_mine(args, off)
        assert (served.returncode, served.stdout, served.stderr) == (
            alone.returncode, alone.stdout, alone.stderr) and alone.returncode == 0, args
    lines = srv.answered()
    assert len(lines) == 7 and "kept answer" not in lines[0], lines
    assert all(line.endswith("kept answer") for line in lines[1:]), lines
    assert srv.log.read_text().count("warmed ahead") == 1  # each question once per load
    srv.stop()
    lazy = server("--no-ahead")
    assert nsys_mine(["gpus", export], lazy.env).returncode == 0
    time.sleep(1.5)  # past AHEAD_AFTER_S
    assert nsys_mine(["gaps", export], lazy.env).returncode == 0
    assert "warmed ahead" not in lazy.log.read_text()
    assert not any("kept answer" in line for line in lazy.answered())


def test_a_warming_worker_answers_what_the_server_then_keeps(fx, tmp_path):
    """What the server hands a warming process (``HeldSessions.warm_target``: once per
    load) and what it keeps of its file (``adopt``): the worker's answers of the questions
    asked most, pickled, each then a kept answer equal to a fresh one; none of them for an
    export that changed since."""
    import pickle

    from profile_cli.ahead import warm
    from reports.ask import HeldSessions, ask

    export = tmp_path / "run.sqlite"
    shutil.copyfile(fx(DDP), export)
    held = HeldSessions(keep=2, answers=32)
    ask("gpus", [export], opener=held.opener)
    key = held.warm_target()
    assert key is not None and key[0] == str(export.resolve())
    assert held.warm_target() is None  # once per load
    out = tmp_path / "answers"
    warm({"path": key[0], "name_kind": key[2], "cache": key[3], "nsys": key[4]}, out)
    got = pickle.loads(out.read_bytes())
    assert [step[0] for step in got["steps"]] == list(HeldSessions.AHEAD)
    assert all(step[2] is None for step in got["steps"])
    assert len(got["answers"]) == len(HeldSessions.AHEAD)
    assert held.adopt(got["answers"]) == len(HeldSessions.AHEAD) - 1  # gpus: kept already
    recalled = held.recalled
    for name in HeldSessions.AHEAD:
        kept, fresh = ask(name, [export], opener=held.opener), ask(name, [export])
        assert (kept.rows, kept.notes, kept.title) == (fresh.rows, fresh.notes, fresh.title)
    assert held.recalled == recalled + len(HeldSessions.AHEAD) and held.opened == 1
    # the file changed: its load is another, and the old answers are not taken
    shutil.copyfile(fx(DLPROF), export)
    other = HeldSessions(keep=2, answers=32)
    ask("gpus", [export], opener=other.opener)
    assert other.adopt(got["answers"]) == 0 and len(other._answers) == 1
    held.close()
    other.close()


def test_a_warming_worker_that_fails_is_logged_and_the_server_goes_on(fx, tmp_path, server):
    srv = server()
    export = tmp_path / "gone.sqlite"
    shutil.copyfile(fx(DLPROF), export)
    assert nsys_mine(["kernels", str(export)], srv.env).returncode == 0
    export.unlink()  # before the second of quiet: the worker finds no export
    deadline = time.monotonic() + 60
    while "warming ahead of gone.sqlite failed" not in srv.log.read_text():
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.log.read_text()
        time.sleep(0.1)
    assert "gone.sqlite: no such file" in srv.log.read_text()
    alone = nsys_mine(["kernels", str(fx(DLPROF)), "-f", "csv"], srv.env)
    assert alone.returncode == 0 and alone.stdout.startswith("name,category")


def test_the_warming_process_runs_the_servers_code_whatever_the_folder_holds(
        fx, tmp_path, server):
    """A question asked from a folder holding a package named like one of ours: the warming
    process still imports the server's code (it runs in a private folder, the server's code
    first on its path) and warms ahead."""
    srv = server()
    here = tmp_path / "project"
    (here / "reports").mkdir(parents=True)
    (here / "reports" / "__init__.py").write_text("raise ImportError('not nsys-mine')\n")
    console = Path(sys.executable).parent / "nsys-mine"  # its path: the script's folder
    asked = subprocess.run([str(console), "gpus", str(fx(DDP))], env=srv.env, cwd=here,
                           capture_output=True, text=True, timeout=120)
    assert asked.returncode == 0, asked.stderr
    deadline = time.monotonic() + 60
    while "warmed ahead:" not in srv.log.read_text():
        assert "failed" not in srv.log.read_text(), srv.log.read_text()
        assert time.monotonic() < deadline and srv.proc.poll() is None, srv.log.read_text()
        time.sleep(0.1)


def test_the_client_sends_nothing_to_a_socket_others_could_have_made(tmp_path):
    """The request carries the environment: a socket in a folder others may write to is not
    connected to (the command runs here); in a private folder it is."""
    from profile_cli.client import connect

    folder = Path(f"/tmp/nm-perm-{os.getpid()}")
    folder.mkdir(mode=0o700)
    try:
        path = folder / "s.sock"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
            listener.bind(str(path))
            listener.listen(1)
            sock = connect(str(path))
            assert sock is not None
            sock.close()
            folder.chmod(0o777)
            assert connect(str(path)) is None
            folder.chmod(0o700)
        assert connect(str(path)) is None  # nobody listens: run here
        assert connect(str(folder / "missing.sock")) is None
        folder.chmod(0o777)  # the server refuses such a folder too
        bad = nsys_mine(["serve", "--socket", str(folder / "s.sock")], dict(os.environ))
        assert bad.returncode == 1 and "not yours alone" in bad.stderr
    finally:
        shutil.rmtree(folder, ignore_errors=True)
