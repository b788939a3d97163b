"""Warming ahead for ``nsys-mine serve``, in a process of its own: the questions people ask
most (``reports.ask.HeldSessions.AHEAD``) answered of one export, as the command line asks
them without options, and their answers handed back to the server in a file.

The server (``profile_cli.serve``) starts it a second after a question, with that client's
environment (and the server's code first on its path, in a private folder), for the export
asked about last (``HeldSessions.warm_target``):

    python -m profile_cli.ahead SPEC OUT

SPEC is JSON: ``path``, ``name_kind``, ``cache``, ``nsys`` (what the server's load of the
export depends on: the worker's answers are keyed as the server keys them) and ``carried``
(the options the last question set, ``HeldSessions.warm_options``: asked with them too).
OUT is written once, when every question was asked: a pickle of ``{"steps": [[question,
seconds, error or None], ...], "answers": {key: Report}}`` (the answers that pickle; the
server keeps those whose export it still holds in the same state, ``HeldSessions.adopt``).
The worker loads
the export itself (from the column cache the server's question filled), so the server goes
on answering while it runs; it prints nothing and exits 0, or 1 with the reason on stderr.
``Warming`` is the server's handle on it.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from profile_cli.client import code_first

AHEAD_AFTER_S = 1.0  # warm ahead after this long without a question (a script's next one
# comes sooner, and shares no CPU with a warming process)
POLL_S = 0.05  # how often a warming process is looked at while it runs


def warm(spec: dict[str, Any], out: Path) -> None:
    """Answer ``HeldSessions.AHEAD`` of the export ``spec`` names; write OUT."""
    from reports.ask import HeldSessions
    from reports.options import AnalysisOptions

    held = HeldSessions(keep=1, answers=2 * len(HeldSessions.AHEAD))
    options = AnalysisOptions(name_kind=spec["name_kind"], cache=bool(spec["cache"]),
                              nsys=spec.get("nsys"))
    try:
        with held.opener(Path(spec["path"]), options):
            pass  # loaded lazily: held for the steps
        steps = [[name, seconds, error]
                 for name, seconds, error in held.ahead(spec.get("carried"))]
        answers = {}
        for key, report in held._answers.items():
            try:
                pickle.dumps(report)
            except Exception:  # a value that does not pickle: the server computes it
                continue
            answers[key] = report
    finally:
        held.close()
    partial = out.with_name(out.name + ".partial")
    with open(partial, "wb") as fh:
        pickle.dump({"steps": steps, "answers": answers}, fh)
    partial.replace(out)


class Warming:
    """A server's handle on the warming process for one export: started with the environment
    of the question that asked about it last (``start``), paused while the
    server answers a question, its answers kept (``HeldSessions.adopt``) when it ended
    (``finished``), stopped by its PID with the server."""

    def __init__(self, proc: subprocess.Popen[bytes], folder: Path, export: str) -> None:
        self.proc, self.folder, self.export = proc, folder, export

    @classmethod
    def start(cls, held: Any, request: dict[str, Any], log: TextIO) -> Warming | None:
        key = held.warm_target()
        if key is None:
            return None
        path, _, name_kind, cache, nsys = key
        folder = Path(tempfile.mkdtemp(prefix="nsys-mine-ahead-"))
        env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}
        env["NSYS_MINE_SERVER"] = "off"
        # the server's own code, whatever the client's folder holds (the worker runs in its
        # private folder: `-m` puts that first on its path, not the client's folder)
        env = code_first(env)
        spec = json.dumps({"path": path, "name_kind": name_kind, "cache": cache, "nsys": nsys,
                           "carried": held.warm_options(key)})
        with open(folder / "stderr", "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-m", "profile_cli.ahead", spec, str(folder / "answers")],
                env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=err)
        log.write(f"  warming ahead: {os.path.basename(path)} (pid {proc.pid})\n")
        log.flush()
        return cls(proc, folder, os.path.basename(path))

    def finished(self, held: Any, last: float, log: TextIO) -> bool:
        """Whether it ended; if so, its answers kept and the log told."""
        code = self.proc.poll()
        if code is None:
            return False
        try:
            if code == 0:
                with open(self.folder / "answers", "rb") as fh:
                    got = pickle.load(fh)
                kept = held.adopt(got["answers"])
                steps = ", ".join(
                    f"{name} {seconds:.2f} s" + (f" (cannot: {error.splitlines()[0][:60]})"
                                                 if error else "")
                    for name, seconds, error in got["steps"])
                log.write(f"  warmed ahead: {steps}; {kept} answers kept "
                          f"({time.monotonic() - last:.2f} s after the last question)\n")
            else:
                err = (self.folder / "stderr").read_text(errors="replace").strip()
                log.write(f"  warming ahead of {self.export} failed (exit {code}): "
                          f"{err.splitlines()[-1] if err else 'no message'}\n")
        except (OSError, EOFError, pickle.UnpicklingError, KeyError, TypeError) as exc:
            log.write(f"  warming ahead of {self.export}: its answers unreadable ({exc})\n")
        log.flush()
        shutil.rmtree(self.folder, ignore_errors=True)
        return True

    def pause(self) -> None:
        """Stopped while the server answers a question (SIGSTOP: it holds no lock the
        server could wait for; the cache is written under new names)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        if self.proc.poll() is None:  # the worker this server started, by its PID
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    from nsys_parsers.errors import NsysMineError
    from profile_cli.app import one_malloc_arena

    args = sys.argv[1:] if argv is None else argv
    one_malloc_arena()
    try:
        warm(json.loads(args[0]), Path(args[1]))
    except NsysMineError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
