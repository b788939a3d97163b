#!/usr/bin/env python3
"""``nsys-mine ranks`` on many rank exports, beside the loop a user would write.

    python benchmarks/ranks_benchmark.py [--ranks 8 16 32 64] [--replay 12] [--out DIR]
        [--nsys-mine EXE] [--no-sequential]

Builds 64 rank exports (``rank_exports.py``: the real 2-GPU DDP capture split, cloned, rank 5
2 ms late at every collective, each rank's activity replayed ``--replay`` times: about 16 MB
each, 1 GB in all) under ``benchmarks/out/ranks`` (git-ignored), then measures, each with a
fresh column cache (the first question on an export, as users meet it):

* ``nsys-mine ranks DIR`` (the default local Dask cluster) on the first 8, 16, 32, 64 ranks:
  wall time and the peak memory of the client process (the command; its workers apart);
* the sequential loop ``for f in rank_*.sqlite; do nsys-mine gpus $f -f json; done`` on the
  same files: wall time and the largest process.

Prints one JSON object per measurement and a table; the numbers go to docs/PERFORMANCE.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rank_exports import build_rank_exports  # noqa: E402

SRC = ROOT.parent / "shared" / "fixtures" / "nsys" / "cs336_lizhieffe_ddp53_profile.sqlite"
NSYS_MINE = Path(sys.executable).parent / "nsys-mine"


def run_measured(cmd: list[str], env: dict[str, str]) -> tuple[float, int, str, float]:
    """(wall seconds, peak RSS bytes of the process itself, stdout, CPU seconds of the
    process and its children: the Dask workers)."""
    import psutil

    t0 = time.perf_counter()
    out = tempfile.TemporaryFile()
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env)
    ps = psutil.Process(proc.pid)
    peak = 0
    cpu: dict[int, float] = {}
    while proc.poll() is None:
        try:
            peak = max(peak, ps.memory_info().rss)
            for p in [ps, *ps.children(recursive=True)]:
                t = p.cpu_times()
                cpu[p.pid] = t.user + t.system
        except psutil.Error:
            pass
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    out.seek(0)
    text = out.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} exited {proc.returncode}")
    return wall, peak, text, sum(cpu.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--replay", type=int, default=12)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "ranks")
    ap.add_argument("--sequential", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--nsys-mine", type=Path, default=NSYS_MINE,
                    help="the nsys-mine to time (another worktree's: a script running "
                         "`python -m profile_cli \"$@\"` with it on PYTHONPATH)")
    a = ap.parse_args(argv)
    exe = str(a.nsys_mine)
    n = max(a.ranks)
    folder = a.out / f"r{n}x{a.replay}"
    if len(list(folder.glob("rank_*.sqlite"))) != n:
        t0 = time.perf_counter()
        shutil.rmtree(folder, ignore_errors=True)
        build_rank_exports(SRC, folder, ranks=n, slow_rank=5, delay_ns=2_000_000,
                           replay=a.replay)
        print(f"built {n} ranks in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    files = sorted(folder.glob("rank_*.sqlite"), key=lambda p: int(p.stem.split("_")[1]))
    size = sum(p.stat().st_size for p in files)
    print(f"{n} exports, {size / 2**30:.2f} GiB", file=sys.stderr)
    results = []
    for k in a.ranks:
        sub = a.out / f"first{k}"
        shutil.rmtree(sub, ignore_errors=True)
        sub.mkdir(parents=True)
        for f in files[:k]:
            os.symlink(f, sub / f.name)
        cache = tempfile.mkdtemp(prefix="nsm-bench-cache-")
        env = dict(os.environ, NSYS_MINE_CACHE_DIR=cache)
        wall, peak, text, cpu_s = run_measured(
            [exe, "ranks", str(sub), "-f", "json"], env)
        rows = json.loads(text)
        slow = [r["rank"] for r in rows if r["straggler"]]
        row = {"what": "ranks (local Dask cluster)", "ranks": k, "wall_s": round(wall, 1),
               "cpu_s": round(cpu_s, 1), "client_peak_mb": round(peak / 2**20),
               "stragglers": slow, "load": round(os.getloadavg()[0], 1),
               "mb": round(sum(f.stat().st_size for f in files[:k]) / 2**20)}
        print(json.dumps(row), flush=True)
        results.append(row)
        shutil.rmtree(cache, ignore_errors=True)
        if a.sequential and k == max(a.ranks):
            cache = tempfile.mkdtemp(prefix="nsm-bench-cache-")
            env = dict(os.environ, NSYS_MINE_CACHE_DIR=cache)
            t0 = time.perf_counter()
            biggest, cpu_total = 0, 0.0
            for f in files[:k]:
                _, peak, _, cpu_s = run_measured([exe, "gpus", str(f), "-f", "json"], env)
                biggest, cpu_total = max(biggest, peak), cpu_total + cpu_s
            row = {"what": "sequential `nsys-mine gpus` per file", "ranks": k,
                   "wall_s": round(time.perf_counter() - t0, 1), "cpu_s": round(cpu_total, 1),
                   "client_peak_mb": round(biggest / 2**20), "stragglers": None,
                   "load": round(os.getloadavg()[0], 1),
                   "mb": results[-1]["mb"]}
            print(json.dumps(row), flush=True)
            results.append(row)
            shutil.rmtree(cache, ignore_errors=True)
    print("\n| what | ranks | MB | wall s | CPU s | peak MB (client) | load |\n"
          "|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['what']} | {r['ranks']} | {r['mb']} | {r['wall_s']} | {r['cpu_s']} | "
              f"{r['client_peak_mb']} | {r['load']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
