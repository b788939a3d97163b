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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from run_benchmarks import answer_server, command_env

PAIRS = [("gpus", "gaps"), ("nvtx-kernels", "ranges"), ("kernels", "gpus"),
         ("dominant", "nvtx-kernels"), ("nvtx-kernels", "dominant")]
MINE = str(Path(sys.executable).with_name("nsys-mine"))


def _ask(question: str, db: Path, env: dict[str, str]) -> float:
    began = time.perf_counter()
    subprocess.run([MINE, question, str(db), "-f", "csv", "-o", os.devnull], env=env,
                   check=True, timeout=600)
    return time.perf_counter() - began


def next_after(first: str, nxt: str, db: Path, delay: float) -> float:
    """Seconds of ``nxt`` asked ``delay`` s after ``first``'s answer, through a new server
    (``run_benchmarks.answer_server``, on a fresh cache that ``first`` alone filled)."""
    with tempfile.TemporaryDirectory(prefix="nm-pace-") as folder:
        work = Path(folder)
        _ask(first, db, command_env({"NSYS_MINE_CACHE_DIR": str(work / "cache")}))
        with answer_server([MINE], work, "serve") as served:
            if served is None:
                raise SystemExit(f"the server did not start: {work / 'serve.log'}")
            env = command_env(served)
            _ask(first, db, env)
            time.sleep(delay)
            return _ask(nxt, db, env)


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
