"""A person's first and next question from a bare command line with
``NSYS_MINE_SERVER=auto``, beside the same questions without a server.

For each export and pair (first, next), on a cache the first question filled (as a person's
second session finds it): the first question alone (``NSYS_MINE_SERVER=off``), the first
through ``auto`` (no server listens: the command starts one and is its first question),
then, once the server has warmed ahead (its log says so) and ``--delay`` seconds later, the
next question through it, and the next question alone. Each timed from the command's start
to its exit; the outputs compared byte for byte; the server stopped with ``serve --stop``
and its PID checked gone. Medians of ``--repeat`` runs; docs/PERFORMANCE.md has a run.

    .venv/bin/python benchmarks/auto_benchmark.py benchmarks/out/*_x100.sqlite
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_benchmarks import command_env

PAIRS = [("nvtx-kernels", "dominant"), ("kernels", "gpus"), ("gpus", "gaps")]
MINE = str(Path(sys.executable).with_name("nsys-mine"))


def _ask(question: str, db: Path, env: dict[str, str], out: Path) -> float:
    began = time.perf_counter()
    subprocess.run([MINE, question, str(db), "-f", "csv", "-o", str(out)], env=env,
                   check=True, timeout=600)
    return time.perf_counter() - began


def _gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "\nState:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True  # ended; its new parent has yet to reap it
        except OSError:
            return True
        time.sleep(0.05)
    return False


def one_run(first: str, nxt: str, db: Path, delay: float) -> tuple[float, float, float, float]:
    """(first alone, first through auto, next through auto, next alone), in seconds."""
    with tempfile.TemporaryDirectory(prefix="nm-auto-") as folder:
        work = Path(folder)
        sock = work / "s.sock"
        off = command_env({"NSYS_MINE_CACHE_DIR": str(work / "cache"),
                           "NSYS_MINE_SERVER": "off"})
        auto = {**off, "NSYS_MINE_SERVER": f"auto:{sock}"}
        _ask(first, db, off, work / "fill.csv")
        alone = _ask(first, db, off, work / "first_alone.csv")
        through = _ask(first, db, auto, work / "first_auto.csv")
        log = Path(f"{sock}.log")
        deadline = time.monotonic() + 300
        while "warmed ahead" not in log.read_text(errors="replace"):
            if time.monotonic() > deadline:
                raise SystemExit(f"the server did not warm ahead: {log.read_text()}")
            time.sleep(0.05)
        time.sleep(delay)
        nxt_auto = _ask(nxt, db, auto, work / "next_auto.csv")
        nxt_alone = _ask(nxt, db, off, work / "next_alone.csv")
        pids = [int(p) for p in re.findall(r"\(pid (\d+)\)", log.read_text().splitlines()[0])]
        subprocess.run([MINE, "serve", "--stop"], env={**off, "NSYS_MINE_SERVER": str(sock)},
                       check=True, capture_output=True, timeout=60)
        if not pids or not _gone(pids[0]):
            raise SystemExit(f"the server {pids} did not stop: {log.read_text()}")
        for a, b in (("first_alone", "first_auto"), ("next_alone", "next_auto")):
            if (work / f"{a}.csv").read_bytes() != (work / f"{b}.csv").read_bytes():
                raise SystemExit(f"{db.name} {first}/{nxt}: {a} and {b} differ")
        return alone, through, nxt_auto, nxt_alone


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("exports", type=Path, nargs="+")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.5,
                    help="seconds between the warmed server and the next question")
    a = ap.parse_args()
    print("| export | first (next) | first alone s | first through auto s | "
          "next through auto s | next alone s |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for db in a.exports:
        for first, nxt in PAIRS:
            runs = [one_run(first, nxt, db, a.delay) for _ in range(a.repeat)]
            med = [statistics.median(col) for col in zip(*runs)]
            print(f"| {db.name} | {first} ({nxt}) | " + " | ".join(f"{v:.2f}" for v in med)
                  + " |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}; medians of {a.repeat}; outputs equal")


if __name__ == "__main__":
    main()
