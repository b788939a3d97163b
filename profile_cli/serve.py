"""``nsys-mine serve``: an answer server for the command line, opt-in.

It listens on a Unix socket (``profile_cli.client.socket_path()``: private to the user) and
runs each command line a client (``nsys-mine`` itself, ``profile_cli.client.forward``) hands
it, one at a time, as that command would run (``profile_cli.app.run_args``): in the client's
working directory, with its environment, for its terminal (width, colours), its output and
exit code sent back. What it keeps between questions (``reports.ask.HeldSessions``): the
imports (numpy, Typer, the loader, matplotlib once a page was drawn), the last ``keep_open``
exports asked about, loaded, and their last ``answers`` answers (the same question again, in
another format or with another --top, is its kept answer; an export whose file changed is
loaded afresh). While nobody asks (``AHEAD_AFTER_S`` after a question), a process of its
own (``profile_cli.ahead``) answers the questions people ask most of the export asked about
last, and the server keeps those answers when it ends (``HeldSessions.adopt``): the person
reading an answer finds the next one kept. That process is paused while the server answers
a question, and stopped with the server.

It stops after ``idle_timeout_s`` without a question (0: never), on SIGTERM or Ctrl-C, on
``nsys-mine serve --stop``, or when a client runs other code (an upgrade or an edit: the
client then answers itself); it removes its socket then. Nothing it keeps is written
anywhere. A question that fails is answered as the command line would (``Error: ...``, exit
1; a bug's traceback), and the server goes on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import stat
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Iterator, TextIO

from nsys_parsers.errors import BadOption, NsysMineError
from profile_cli import client
from profile_cli.ahead import AHEAD_AFTER_S, POLL_S, Warming
from profile_cli.client import EXIT, REFUSED, STDERR, STDOUT, send_frame
from profile_cli.commands import output

MAX_REQUEST = 64 << 20  # bytes of one request line (its environment)


class ServerRunning(NsysMineError):
    """Another server already listens on the socket."""


class _Stream:
    """A text stream whose writes go to the client as frames of one kind; a terminal when
    the client's is."""

    def __init__(self, conn: socket.socket, kind: bytes, tty: bool, lock: threading.Lock):
        self.conn, self.kind, self.tty, self.lock = conn, kind, tty, lock
        self.encoding, self.errors = "utf-8", "replace"
        self.closed = False  # the client went away: what is left is dropped

    def write(self, text: str) -> int:
        if text and not self.closed:
            with self.lock:
                self.closed = not send_frame(self.conn, self.kind,
                                             text.encode("utf-8", "replace"))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty

    def fileno(self) -> int:
        import io

        raise io.UnsupportedOperation("fileno")

    def readable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def read(self, *args: Any) -> str:  # as stdin: nothing (commands read no input)
        return ""

    def readline(self, *args: Any) -> str:
        return ""


@contextlib.contextmanager
def _as_client(request: dict[str, Any], conn: socket.socket) -> Iterator[None]:
    """This process set up as the client's: working directory, environment, terminal width
    (``COLUMNS``: what ``profile_cli.commands.output`` and rich read), standard streams."""
    lock = threading.Lock()
    tty = [bool(t) for t in request.get("tty", [False] * 3)]
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    saved_streams = sys.stdin, sys.stdout, sys.stderr
    env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}
    width = request.get("width")
    if "COLUMNS" not in env and isinstance(width, int) and width > 0:
        env["COLUMNS"] = str(width)
    try:
        os.environ.clear()
        os.environ.update(env)
        os.chdir(str(request.get("cwd") or saved_cwd))
        sys.stdin = _Stream(conn, STDERR, tty[0], lock)
        sys.stdout = _Stream(conn, STDOUT, tty[1], lock)
        sys.stderr = _Stream(conn, STDERR, tty[2], lock)
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved_streams
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)


def answer_request(request: dict[str, Any], conn: socket.socket) -> int:
    """Run the request's command line for its client: its exit code (output sent)."""
    from profile_cli.app import run_args

    argv = [str(a) for a in request.get("argv") or []]
    try:
        with _as_client(request, conn):
            try:
                return run_args(argv)
            except Exception:  # a bug: its traceback, as the command line shows it
                sys.stderr.write(traceback.format_exc())
                return 1
    except OSError as exc:  # the client's working directory is gone
        send_frame(conn, STDERR,
                   f"Error: cannot run in {request.get('cwd')}: {exc.strerror}\n".encode())
        return 1


def _prepare_socket(path: Path) -> None:
    """The socket's folder private to this user; a stale socket (nobody listens) removed;
    ServerRunning when a server listens there."""
    folder = path.parent
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise BadOption(f"cannot create {folder} for the server's socket: {exc.strerror}; "
                        f"choose another with --socket.") from None
    st = folder.stat()
    if not client.ours_alone(st):
        # the client sends its environment: it connects only to a socket in such a folder
        raise BadOption(f"{folder} is not yours alone (owner {st.st_uid}, mode "
                        f"{stat.S_IMODE(st.st_mode):o}): give --socket a path in a folder "
                        f"only you can write to (or remove {folder}).")
    if path.exists() or path.is_symlink():
        listening = client.connect(str(path))
        if listening is not None:
            listening.close()
            raise ServerRunning(f"a server already answers at {path}: use it, or stop it "
                                f"with `nsys-mine serve --stop`.")
        path.unlink()


def _read_line(conn: socket.socket) -> bytes:
    data = bytearray()
    while not data.endswith(b"\n"):
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError("request too long")
    return bytes(data)


def serve_answers(path: Path, *, idle_timeout_s: float = 3600.0, keep_open: int = 2,
                  answers: int = 32, ahead: bool = True, log: TextIO | None = None) -> None:
    """Answer command lines on the socket ``path`` until idle for ``idle_timeout_s`` (0:
    never), stopped, or a client runs other code. ``ahead``: when nobody asked for
    ``AHEAD_AFTER_S`` after a question, a process of its own answers the questions asked
    most of its export (``profile_cli.ahead``); the server keeps those answers when it ends,
    and answers every question meanwhile itself."""
    from reports.ask import HeldSessions

    log = log or sys.stderr
    path = Path(path)
    _prepare_socket(path)
    stamp = client.code_stamp()
    held = HeldSessions(keep=keep_open, answers=answers)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
    except OSError as exc:  # a path longer than a socket's (about 107 bytes), no access
        listener.close()
        raise BadOption(f"cannot listen at {path}: {exc.strerror or exc}; give --socket (or "
                        f"{client.SERVER_ENV}) a shorter path in a folder of yours.") from None
    os.chmod(path, 0o600)
    inode = path.stat().st_ino
    listener.listen(16)
    listener.settimeout(idle_timeout_s if idle_timeout_s > 0 else None)
    previous = signal.signal(signal.SIGTERM, _terminate)
    output.SERVED = held
    log.write(f"nsys-mine serve: answering at {path} (pid {os.getpid()})\n"
              f"  keeps {keep_open} export(s) loaded; stops after {idle_timeout_s:g} s idle, "
              f"or with `nsys-mine serve --stop`\n")
    log.flush()
    why = "stopped"
    try:
        why = _answer_until_stopped(listener, held, stamp, idle_timeout_s, ahead, log)
    except KeyboardInterrupt:
        why = "interrupted"
    except SystemExit:
        why = "terminated"
    finally:
        output.SERVED = None
        signal.signal(signal.SIGTERM, previous)
        listener.close()
        with contextlib.suppress(OSError):
            if path.stat().st_ino == inode:  # still ours
                path.unlink()
        held.close()
        log.write(f"nsys-mine serve: {why}; {path} removed\n")
        log.flush()


def _answer_until_stopped(listener: socket.socket, held: Any, stamp: str,
                          idle_timeout_s: float, ahead: bool, log: TextIO) -> str:
    """Answer each connection in turn; warm ahead (``Warming``) when nobody asked for
    ``AHEAD_AFTER_S``, the worker paused while a question runs and stopped on the way out.
    Why it stopped."""
    last = time.monotonic()  # of the last question
    wanted = False  # warm ahead once nobody asked for AHEAD_AFTER_S
    asked: dict[str, Any] = {}  # the last question's request: its environment
    worker: Warming | None = None
    try:
        while True:
            now = time.monotonic()
            waits = [max(0.0, last + idle_timeout_s - now)] if idle_timeout_s > 0 else []
            if worker is not None:
                waits.append(POLL_S)
            elif wanted:
                waits.append(max(0.0, last + AHEAD_AFTER_S - now))
            listener.settimeout(min(waits) if waits else None)
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                now = time.monotonic()
                if worker is not None and worker.finished(held, last, log):
                    worker = None
                if wanted and worker is None and now >= last + AHEAD_AFTER_S:
                    wanted = False
                    worker = Warming.start(held, asked, log)
                if idle_timeout_s > 0 and now >= last + idle_timeout_s:
                    return f"idle for {idle_timeout_s:g} s"
                continue
            if worker is not None and worker.finished(held, last, log):
                worker = None  # its answers kept before this question is answered
            if worker is not None:
                worker.pause()  # the question has both cores
            try:
                with conn:
                    conn.settimeout(None)
                    done, answered = _handle(conn, stamp, log)
            finally:
                if worker is not None:
                    worker.resume()
            if done is not None:
                return done
            last = time.monotonic()
            if ahead and answered is not None:
                asked, wanted = answered, True
    finally:
        if worker is not None:
            worker.stop()


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(0)


def _handle(conn: socket.socket, stamp: str, log: TextIO
            ) -> tuple[str | None, dict[str, Any] | None]:
    """Answer one connection: (why the server stops after it, None: it goes on; the request
    it answered, if any)."""
    try:
        request = client.request_of(_read_line(conn))
    except (ValueError, OSError, UnicodeDecodeError):
        send_frame(conn, STDERR, b"Error: not a request of nsys-mine's client\n")
        send_frame(conn, EXIT, b"2")
        return None, None
    if request.get("stop"):
        send_frame(conn, EXIT, b"0")
        return "stopped by `nsys-mine serve --stop`", None
    if request.get("stamp") != stamp:
        send_frame(conn, REFUSED, b"nsys-mine: the answer server ran other code (nsys-mine "
                                  b"was upgraded or edited): it stopped; answering here. "
                                  b"Start it again with `nsys-mine serve`.\n")
        return "a client runs other code", None
    began = time.perf_counter()
    served = output.SERVED
    recalled = served.recalled if served is not None else 0
    code = answer_request(request, conn)
    send_frame(conn, EXIT, str(code).encode())
    # files by their name: a line per question, short enough for a terminal
    argv = " ".join(os.path.basename(a) if os.sep in a else a
                    for a in (str(a) for a in request.get("argv") or []))
    kept = ", kept answer" if served is not None and served.recalled > recalled else ""
    log.write(f"  {argv[:90]} -> exit {code}, {time.perf_counter() - began:.2f} s{kept}\n")
    log.flush()
    return None, request
