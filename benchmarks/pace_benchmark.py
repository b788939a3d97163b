"""The next question through ``nsys-mine serve``, asked D seconds after the first answer:
what warming ahead (``HeldSessions.ahead``) costs a question that arrives while a step runs,
and buys one that arrives after. For each pair (first, next) and each delay: a fresh cache
filled by the first question run alone (as the benchmark's cold run), a fresh server, the
first question asked of it, a pause of D seconds, then the next question, timed from the
client's start to its exit. One run each; docs/PERFORMANCE.md ("Warming ahead") has a run.

    .venv/bin/python benchmarks/pace_benchmark.py benchmarks/out/shallow_x100.sqlite \\
        --delays 0,1.5,2.5,5
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PAIRS = [("gpus", "gaps"), ("nvtx-kernels", "ranges"), ("kernels", "gpus"),
         ("dominant", "nvtx-kernels"), ("nvtx-kernels", "dominant")]
MINE = str(Path(sys.executable).with_name("nsys-mine"))


def _ask(question: str, db: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run([MINE, question, str(db), "-f", "csv", "-o", os.devnull], env=env,
                   check=True, timeout=600)
    return time.perf_counter() - began


def next_after(first: str, nxt: str, db: Path, delay: float) -> float:
    """Seconds of ``nxt`` asked ``delay`` s after ``first``'s answer, through a new server."""
    work = Path(tempfile.mkdtemp(prefix="nm-pace-"))
    sock = work / "s.sock"
    env = {**os.environ, "NSYS_MINE_CACHE_DIR": str(work / "cache"), "NSYS_MINE_SERVER": "off"}
    server = None
    try:
        _ask(first, db, env)  # alone: fills the cache
        env["NSYS_MINE_SERVER"] = str(sock)
        with open(work / "serve.log", "wb") as log:
            server = subprocess.Popen([MINE, "serve", "--socket", str(sock)], env=env,
                                      stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while not sock.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((work / "serve.log").read_text())
            time.sleep(0.05)
        _ask(first, db, env)
        time.sleep(delay)
        return _ask(nxt, db, env)
    finally:
        if server is not None:  # the server this run started, by its PID
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("export", type=Path)
    ap.add_argument("--delays", default="0,1.5,2.5,5", help="seconds, comma-separated")
    a = ap.parse_args()
    delays = [float(d) for d in a.delays.split(",")]
    print(f"{a.export.name}: the next question D s after the first's answer (s)")
    print(f"{'next (after)':30s} " + "  ".join(f"D={d:g}" for d in delays))
    for first, nxt in PAIRS:
        times = [next_after(first, nxt, a.export, d) for d in delays]
        print(f"{nxt + ' (' + first + ')':30s} " + "  ".join(f"{t:5.2f}" for t in times),
              flush=True)


if __name__ == "__main__":
    main()
