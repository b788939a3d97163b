#!/usr/bin/env python3
"""Where one command's memory goes at its peak: the allocation sites (file:line, with the
caller chain inside nsys-mine) of what is alive when the traced memory is highest.

    python benchmarks/memory_profile.py EXPORT COMMAND [ARGS...] [--cold] [--top 15]

The command runs in this process (``profile_cli.app``, output discarded) under
``tracemalloc``, which sees numpy's array buffers as well as Python objects. A sampler thread
watches the traced total every 20 ms and takes a snapshot each time it passes the highest
yet by 5%; the last snapshot is the peak's. ``--cold`` gives the command a fresh column cache
(else the export's cache is filled first, and the warm answer is profiled). Memory-mapped
cache files are not allocations: they show in the RSS that the benchmark reports, not here.
Prints the traced peak, the peak RSS of the process, and the sites holding the most at the
peak (issue 52: profile first).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_cli(argv: list[str]) -> None:
    from profile_cli.app import main

    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            sys.argv = ["nsys-mine", *argv]
            main()
        except SystemExit:
            pass


def profile(argv: list[str], top: int) -> None:
    tracemalloc.start(12)
    best = [0]
    snapshot: list[tracemalloc.Snapshot] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            current, _ = tracemalloc.get_traced_memory()
            if current > best[0] * 1.05:
                best[0] = current
                snapshot[:] = [tracemalloc.take_snapshot()]

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    run_cli(argv)
    wall = time.perf_counter() - t0
    done.set()
    sampler.join()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{' '.join(argv)}: {wall:.2f} s; traced peak {peak / 2**20:,.0f} MiB; "
          f"the last snapshot {best[0] / 2**20:,.0f} MiB; process peak RSS {rss:,.0f} MiB")
    if not snapshot:
        return
    mine = str(ROOT)
    stats = snapshot[0].statistics("traceback")
    for stat in stats[:top]:
        frames = [f for f in stat.traceback if f.filename.startswith(mine)]
        where = " <- ".join(f"{Path(f.filename).relative_to(ROOT)}:{f.lineno}"
                            for f in reversed(frames[-4:])) or str(stat.traceback[-1])
        print(f"{stat.size / 2**20:9,.1f} MiB {stat.count:8,d} blocks  {where}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("export", type=Path)
    parser.add_argument("command")
    parser.add_argument("args", nargs="*")
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--top", type=int, default=15)
    a = parser.parse_args()
    argv = [a.command, str(a.export.resolve()), *a.args, "--format", "json"]
    with tempfile.TemporaryDirectory(prefix="memprof-") as cache:
        os.environ["NSYS_MINE_CACHE_DIR"] = cache
        if not a.cold:
            import subprocess

            subprocess.run([sys.executable, "-c", "from profile_cli.app import main; main()",
                            *argv], stdout=subprocess.DEVNULL, check=False,
                           env={**os.environ})
        profile(argv, a.top)


if __name__ == "__main__":
    main()
