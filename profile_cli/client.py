"""The command line's side of ``nsys-mine serve`` (``profile_cli.serve``): a command line
handed to a running answer server instead of being run in this process.

A question asked from the command line pays Python's start and the imports of numpy, Typer
and the loader (about 0.2 s) before it reads anything; an answer server has paid them once
and keeps the last exports asked about loaded (and their last answers). ``forward(args)``
runs before anything heavy is imported: when a server listens on ``socket_path()`` it sends
the command line with this process's working directory, environment and terminal, and
writes what comes back (stdout, stderr, the exit code) as the command would have. Without a
server (the socket is missing, or nobody listens), for the commands that run programs or
start processes (``LOCAL``), for ``--help``, or with ``NSYS_MINE_SERVER=off``, the command
runs here as always. With ``NSYS_MINE_SERVER=auto`` (or ``auto:PATH``) a command that finds
no server starts one (``start_server``: in a session of its own, stopping after
``AUTO_IDLE_MIN`` idle minutes) and is its first question. Standard library only: this
module is the whole cost of a served question on this side.

The protocol (one connection per command line): the client sends one JSON line (``argv``,
``cwd``, ``env``, ``tty``: whether stdin, stdout and stderr are terminals, ``width``: the
terminal's columns, ``stamp``: ``code_stamp()``, or ``stop``); the server answers with
frames, one byte of kind and four of length (big-endian) then the payload: ``o`` stdout,
``e`` stderr, ``x`` the exit code (the last frame), ``r`` refused (the server runs other code
than this command line's: it stops, and the command runs here).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import struct
import sys
from typing import Any

SERVER_ENV = "NSYS_MINE_SERVER"  # the socket's path, "off", or "auto" / "auto:PATH"
OFF = ("off", "0", "no", "false")
AUTO = "auto"  # start a server where none listens
AUTO_IDLE_MIN = 30  # a server a command started stops after this many idle minutes
START_S = 30.0  # how long a command waits for the server it started to listen
# Commands that run programs, start processes or serve themselves: always run here.
LOCAL = frozenset({"serve", "mcp", "profile", "sweep", "bench", "memory", "infer", "micro",
                   "ranks"})
PACKAGES = ("nsys_parsers", "nvtx_model", "reports", "profile_cli")
CODE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # where PACKAGES lie
HEADER = struct.Struct(">cI")
STDOUT, STDERR, EXIT, REFUSED = b"o", b"e", b"x", b"r"


def socket_path() -> str | None:
    """The answer server's socket: ``$NSYS_MINE_SERVER``, else ``nsys-mine-<uid>/serve.sock``
    in ``$XDG_RUNTIME_DIR`` (or the temporary folder); None with ``NSYS_MINE_SERVER=off``."""
    return _setting()[0]


def _setting() -> tuple[str | None, bool]:
    """(the socket, as ``socket_path``; whether a command starts a server there when none
    listens: ``NSYS_MINE_SERVER=auto`` or ``auto:PATH``)."""
    value = os.environ.get(SERVER_ENV, "")
    if value.lower() in OFF:
        return None, False
    auto = value == AUTO or value.startswith(AUTO + ":")
    if auto:
        value = value[len(AUTO) + 1:]
    if value:
        return value, auto
    base = os.environ.get("XDG_RUNTIME_DIR") or os.environ.get("TMPDIR") or "/tmp"
    return os.path.join(base, f"nsys-mine-{os.getuid()}", "serve.sock"), auto


def code_stamp() -> str:
    """What identifies the code that answers: where it lies, and the number, sizes and
    latest modification of its Python files (a server started before an upgrade or an edit
    does not answer for the new code)."""
    count = size = latest = 0
    for package in PACKAGES:
        for folder, dirs, files in os.walk(os.path.join(CODE_ROOT, package)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                if name.endswith(".py"):
                    st = os.stat(os.path.join(folder, name))
                    count, size = count + 1, size + st.st_size
                    latest = max(latest, st.st_mtime_ns)
    return f"{CODE_ROOT}:{count}:{size}:{latest}"


def code_first(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this code first on ``PYTHONPATH``: a process started with it (a server,
    a warming worker) runs this code, whatever folder it runs in, and its stamp is this
    one's."""
    return {**env, "PYTHONPATH": os.pathsep.join(
        p for p in (CODE_ROOT, env.get("PYTHONPATH", "")) if p)}


def ours_alone(st: os.stat_result) -> bool:
    """Whether a file or folder is this user's and nobody else can write to it (where the
    socket lies: the request carries the environment)."""
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


def served(args: list[str]) -> bool:
    """Whether a server may answer this command line."""
    return bool(args) and not args[0].startswith("-") and args[0] not in LOCAL and not any(
        a in ("--help", "-h") for a in args)


def _terminal() -> tuple[list[bool], int | None]:
    ttys = []
    width = None
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            tty = stream is not None and stream.isatty()
        except (ValueError, OSError):
            tty = False
        ttys.append(bool(tty))
        if tty and width is None:
            try:
                width = os.get_terminal_size(stream.fileno()).columns
            except (OSError, ValueError):
                pass
    return ttys, width


def _read_exact(sock: socket.socket, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 20))
        if not chunk:
            raise ConnectionError("the answer server closed the connection")
        data += chunk
    return bytes(data)


def send_frame(sock: socket.socket, kind: bytes, data: bytes) -> bool:
    """One frame of ``kind`` (the server's side); whether it went out."""
    try:
        sock.sendall(HEADER.pack(kind, len(data)) + data)
    except OSError:
        return False
    return True


def _read_frame(sock: socket.socket) -> tuple[bytes, bytes]:
    kind, size = HEADER.unpack(_read_exact(sock, HEADER.size))
    return kind, _read_exact(sock, size)


def _send_request(sock: socket.socket, request: dict[str, Any]) -> None:
    sock.sendall(json.dumps(request).encode() + b"\n")


def connect(path: str) -> socket.socket | None:
    """A connection to the server at ``path``; None where there is none, or where the socket
    or its folder is not this user's alone (the request carries the environment)."""
    try:
        st, folder = os.lstat(path), os.stat(os.path.dirname(path) or ".")
    except OSError:
        return None
    if st.st_uid != os.getuid() or not ours_alone(folder):
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:  # nobody listens (a server that was killed): run here
        sock.close()
        return None
    return sock


def forward(args: list[str]) -> int | None:
    """Have the running answer server run ``args``: its exit code once its output is
    written here; None where no server answers it (then run it here)."""
    path, auto = _setting() if served(args) else (None, False)
    sock = connect(path) if path is not None else None
    if sock is None and path is not None and auto:
        try:
            sock = start_server(path)
        except KeyboardInterrupt:
            sys.stderr.write("Error: interrupted\n")
            return 130
    if sock is None:
        return None
    ttys, width = _terminal()
    request = {"argv": args, "cwd": os.getcwd(), "env": dict(os.environ), "tty": ttys,
               "width": width, "stamp": code_stamp()}
    wrote = False
    try:
        with sock:
            _send_request(sock, request)
            while True:
                kind, payload = _read_frame(sock)
                if kind == EXIT:
                    return int(payload)
                if kind == REFUSED:
                    sys.stderr.write(payload.decode(errors="replace"))
                    return None
                stream = sys.stdout if kind == STDOUT else sys.stderr
                if hasattr(stream, "buffer"):
                    stream.buffer.write(payload)
                else:
                    stream.write(payload.decode(errors="replace"))
                stream.flush()
                wrote = True
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        return 130
    except OSError as exc:  # the server went away
        if not wrote:
            return None
        sys.stderr.write(f"Error: the answer server at {path} stopped in the middle of the "
                         f"answer ({exc}); run the command again (without a server: "
                         f"{SERVER_ENV}=off).\n")
        return 1


def start_server(path: str) -> socket.socket | None:
    """Start ``nsys-mine serve`` on ``path`` for ``NSYS_MINE_SERVER=auto``, in a session of
    its own (it outlives this command and its terminal, and stops after ``AUTO_IDLE_MIN``
    idle minutes; its log beside the socket), and connect to it once it listens. One command
    starts it while the others that find no server wait (a lock beside the socket), then
    connect. None where it does not listen within ``START_S`` (the command runs here)."""
    import fcntl
    import subprocess
    import time

    folder = os.path.dirname(path) or "."
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        if not ours_alone(os.stat(folder)):
            return None  # connect() would refuse its socket
        lock = os.open(path + ".lock", os.O_WRONLY | os.O_CREAT, 0o600)
    except OSError:
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = connect(path)  # another command started it meanwhile
        if sock is not None:
            return sock
        with open(path + ".log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "profile_cli", "serve", "--socket", path,
                 "--idle-timeout", str(AUTO_IDLE_MIN)],
                cwd=folder, env=code_first(dict(os.environ)), stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True)
        deadline = time.monotonic() + START_S
        while True:
            sock = connect(path)
            if sock is not None:
                return sock
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.stderr.write(f"nsys-mine: no answer server started at {path} (its log: "
                                 f"{path}.log); answering here.\n")
                return None
            time.sleep(0.01)
    finally:
        os.close(lock)


def stop(path: str) -> bool:
    """Ask the server at ``path`` to stop; whether one was listening."""
    sock = connect(path)
    if sock is None:
        return False
    with sock:
        _send_request(sock, {"stop": True})
        with contextlib.suppress(OSError):
            _read_frame(sock)  # its exit code: it stops after answering
    return True


def request_of(line: bytes) -> dict[str, Any]:
    """A request line, parsed (the server's side)."""
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("a request is a JSON object")
    return value
