"""Run a child process tree safely: its own session, a timeout, and no leftovers.

nsys 2022.4's agent can hang after the profiled program exits and is re-parented to PID 1, out
of reach of the process group. Every process of one run therefore inherits a marker
environment variable (``NSYS_MINE_RUN_ID=<uuid>``); after the run, on timeout and on Ctrl-C,
the group is ended and then every process that carries the marker, by PID. Only processes this
run started carry it. Ctrl-C and a handled SIGTERM wait while Popen starts the child, so that
the child is known when they end the run.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

MARKER_ENV = "NSYS_MINE_RUN_ID"


@dataclass
class ProcessOutcome:
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    killed_pids: list[int]


def marked_pids(marker: str) -> list[int]:
    """PIDs of processes whose environment carries this run's marker (nsys and its agents
    inherit it; an agent that hangs is re-parented to PID 1, out of our process group)."""
    needle = f"{MARKER_ENV}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


def _kill(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def end_marked_processes(marker: str, grace_s: float = 2.0, kill_wait_s: float = 2.0
                         ) -> list[int]:
    """SIGTERM, then SIGKILL after ``grace_s``, every leftover process of this run, and wait
    (up to ``kill_wait_s`` more) until none is left; returns their PIDs. Each round signals
    every marked process found then, so a child forked meanwhile (a script that had just
    started its ``sleep``) is ended too; it once outlived a run that only signalled the
    first ones found, and a SIGKILL not yet carried out when this returned looked like a
    leftover."""
    ended: list[int] = []
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        deadline = time.monotonic() + wait_s
        while True:
            pids = marked_pids(marker)
            if not pids:
                return ended
            ended += [pid for pid in pids if pid not in ended]
            _kill(pids, sig)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.05)
    return ended


def run_with_timeout(argv: list[str], timeout_s: float, *, env: dict[str, str] | None = None,
                     cwd: str | None = None, stop: threading.Event | None = None,
                     log: Path | None = None) -> ProcessOutcome:
    """Run argv in its own session; on timeout or Ctrl-C end its process group and every
    process that carries this run's marker, by PID. ``stop`` (set by another thread, e.g. a
    sweep that runs several configs at once and got Ctrl-C) ends the run the same way and
    raises KeyboardInterrupt in this thread. ``log``: stdout and stderr go to this file
    (a program's output can be long) instead of the outcome's ``stdout`` and ``stderr``."""
    marker = uuid.uuid4().hex
    env = dict(os.environ if env is None else env)
    env[MARKER_ENV] = marker
    t0 = time.monotonic()
    proc: subprocess.Popen | None = None
    timed_out = False
    with contextlib.ExitStack() as files:
        sink: Any = subprocess.PIPE
        if log is not None:
            sink = files.enter_context(open(log, "wb"))
        try:
            with signals_held():
                proc = subprocess.Popen(
                    argv, stdout=sink, stderr=subprocess.STDOUT if log is not None else sink,
                    text=True, errors="replace", env=env, cwd=cwd, start_new_session=True)
            out, err = _communicate(proc, timeout_s, stop)
        except subprocess.TimeoutExpired:
            assert proc is not None
            timed_out = True
            _end_group(proc)
            out, err = proc.communicate()
        except KeyboardInterrupt:
            if proc is not None:
                _end_group(proc)
                proc.communicate()
            end_marked_processes(marker)
            raise
    killed = end_marked_processes(marker)
    return ProcessOutcome(returncode=proc.returncode, stdout=out or "", stderr=err or "",
                          timed_out=timed_out, wall_s=time.monotonic() - t0, killed_pids=killed)


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C and SIGTERM (where Python handles it: a Slurm job, the sweep driver) wait until
    the block is done, then act as they would have, through the handlers they had; dropped
    if the block raised. Here a signal that came while Popen started the child raised out
    of Popen before it returned the child, which then ran on in its own session, out of
    reach (a scancel'ed Slurm job's nsys stand-in did); the Slurm driver holds them while
    sbatch runs. Main thread only: signals reach Python there; other threads are stopped
    through ``stop``."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[tuple[int, Any]] = []
    held: dict[int, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        handler = signal.getsignal(sig)
        if callable(handler):
            held[sig] = handler
            signal.signal(sig, lambda num, frame: caught.append((num, frame)))
    try:
        yield
    finally:
        for num, handler in held.items():
            signal.signal(num, handler)
    for num, frame in caught[:1]:  # one is enough: the first handler ends the caller's work
        held[num](num, frame)


def _communicate(proc: subprocess.Popen, timeout_s: float,
                 stop: threading.Event | None) -> tuple[str, str]:
    if stop is None:
        return proc.communicate(timeout=timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        if stop.is_set():
            raise KeyboardInterrupt
        left = deadline - time.monotonic()
        try:  # retrying communicate after TimeoutExpired loses no output
            return proc.communicate(timeout=max(0.01, min(0.5, left)))
        except subprocess.TimeoutExpired:
            if left <= 0.5:
                raise


def _end_group(proc: subprocess.Popen) -> None:
    try:
        pgid = os.getpgid(proc.pid)
    except ProcessLookupError:
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
