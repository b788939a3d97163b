#!/usr/bin/env python3
"""``nsys-mine ranks`` on many rank exports, beside the loop a user would write.

    python benchmarks/ranks_benchmark.py [--ranks 8 16 32 64] [--replay 12 [48 ...]]
        [--out DIR] [--nsys-mine EXE] [--no-sequential] [--no-single]

For each ``--replay`` R, builds max(``--ranks``) rank exports (``rank_exports.py``: the real
2-GPU DDP capture split, cloned, rank 5 2 ms late at every collective, each rank's activity
replayed R times: about 0.75 MB per replay, 4.4 MB at 5, 15.5 at 20, 60 at 80) under
``benchmarks/out/ranks/rNxR`` (git-ignored; a folder of as many ranks or more at R is reused),
then measures, each with a fresh column cache (the first question on an export, as users
meet it):

* ``nsys-mine ranks DIR`` (the default local Dask cluster) on the first 8, 16, 32, 64 ranks;
* the sequential loop ``for f in rank_*.sqlite; do nsys-mine gpus $f -f json; done`` on the
  most ranks;
* (``--single``) ``nsys-mine gpus`` and ``nsys-mine gaps`` alone on rank 0's export: what one
  export costs a process, to set beside a worker's peak.

Each: the wall time; the CPU time of the process and the children it reaped (the Dask
workers); the peak RSS of the process itself (the client) and of each child (the workers):
the kernel's high-water mark (``VmHWM``) read every 20 ms, so short peaks are not missed
(``run_measured``). Several R show whether a worker's peak grows with its rank's export.
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rank_exports import build_rank_exports  # noqa: E402

SRC = ROOT.parent / "shared" / "fixtures" / "nsys" / "cs336_lizhieffe_ddp53_profile.sqlite"
NSYS_MINE = Path(sys.executable).parent / "nsys-mine"


def vm_hwm(pid: int) -> int | None:
    """The peak RSS of a running process so far, bytes: the kernel's high-water mark
    (``VmHWM`` in /proc/PID/status); None once it has ended."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def role(cmdline: list[str]) -> str:
    """What a child process of ``nsys-mine ranks`` is: ``worker`` (a ``LocalCluster`` worker,
    which multiprocessing spawns; the nannies live in the client), ``resource_tracker``
    (multiprocessing's), else its program's name."""
    text = " ".join(cmdline)
    for key, name in (("spawn_main", "worker"), ("resource_tracker", "resource_tracker")):
        if key in text:
            return name
    return Path(cmdline[0]).name if cmdline else "?"


@dataclass
class Measured:
    """One command's run: ``client_peak`` is its own peak RSS (bytes), ``child_peaks`` each
    child process's (PID -> (``role``, bytes)), ``tree_peak`` the kernel's ``ru_maxrss`` of
    the command and the children it reaped (the largest of them: a check)."""

    wall_s: float
    cpu_s: float
    client_peak: int
    child_peaks: dict[int, tuple[str, int]]
    tree_peak: int
    stdout: str

    @property
    def worker_peak(self) -> int | None:
        """The largest worker's peak RSS (bytes); None without workers."""
        return max((v for r, v in self.child_peaks.values() if r == "worker"), default=None)


def run_measured(cmd: list[str], env: dict[str, str]) -> Measured:
    """Run CMD and measure it (``Measured``): every 20 ms the ``VmHWM`` of the process and of
    each of its children, recursively (a ``LocalCluster``'s workers), the last value read per
    PID being its peak (it only grows); wall time; CPU time and ``ru_maxrss`` from ``wait4``
    (the process and the children it waited for: the workers)."""
    import psutil  # type: ignore[import-untyped]  # Dask's dependency

    t0 = time.perf_counter()
    out = tempfile.TemporaryFile()
    # run outside any checkout: `python -m` puts the working folder first on sys.path, so a
    # --nsys-mine wrapper of another worktree run from this one would import this one's code
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.DEVNULL, env=env,
                            cwd=tempfile.gettempdir())
    ps = psutil.Process(proc.pid)
    peaks: dict[int, int] = {}
    roles = {proc.pid: "client"}
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        try:
            kids = ps.children(recursive=True)
        except psutil.Error:
            kids = []
        for p in [ps, *kids]:
            if p.pid not in roles:
                try:
                    roles[p.pid] = role(p.cmdline())
                except psutil.Error:
                    continue
            if (hwm := vm_hwm(p.pid)) is not None:
                peaks[p.pid] = hwm
        time.sleep(0.02)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    out.seek(0)
    text = out.read().decode()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} exited {proc.returncode}")
    tree = usage.ru_maxrss * 1024
    client = peaks.pop(proc.pid, 0)
    return Measured(wall, usage.ru_utime + usage.ru_stime, client if peaks else tree,
                    {p: (roles[p], v) for p, v in sorted(peaks.items())}, tree, text)


def rank_files(out: Path, ranks: int, replay: int) -> list[Path]:
    """``ranks`` exports replayed ``replay`` times, rank order: the first of a folder of as
    many or more at ``replay``, else built in ``out/r{ranks}x{replay}``."""
    def ranked(folder: Path) -> list[Path]:
        return sorted(folder.glob("rank_*.sqlite"), key=lambda p: int(p.stem.split("_")[1]))

    for folder in sorted(out.glob(f"r*x{replay}")):
        if len(files := ranked(folder)) >= ranks:
            return files[:ranks]
    folder = out / f"r{ranks}x{replay}"
    t0 = time.perf_counter()
    shutil.rmtree(folder, ignore_errors=True)
    build_rank_exports(SRC, folder, ranks=ranks, slow_rank=5, delay_ns=2_000_000,
                       replay=replay)
    print(f"built {ranks} ranks x{replay} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return ranked(folder)


def measure(what: str, cmd: list[str], files: list[Path], replay: int) -> tuple[dict[str, Any],
                                                                               Measured]:
    """Run CMD cold (a fresh column cache) and its row: sizes in MiB."""
    cache = tempfile.mkdtemp(prefix="nsm-bench-cache-")
    try:
        m = run_measured(cmd, dict(os.environ, NSYS_MINE_CACHE_DIR=cache))
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    mib = sum(f.stat().st_size for f in files) / 2**20
    row = {"what": what, "ranks": len(files), "replay": replay,
           "mb_per_rank": round(mib / len(files), 1), "mb": round(mib),
           "wall_s": round(m.wall_s, 1), "cpu_s": round(m.cpu_s, 1),
           "client_peak_mb": round(m.client_peak / 2**20),
           "worker_peak_mb": None if m.worker_peak is None else round(m.worker_peak / 2**20),
           "child_peaks_mb": {f"{r} {p}": round(v / 2**20) for p, (r, v) in m.child_peaks.items()},
           "tree_peak_mb": round(m.tree_peak / 2**20), "load": round(os.getloadavg()[0], 1)}
    return row, m


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 16, 32, 64])
    ap.add_argument("--replay", type=int, nargs="+", default=[12],
                    help="each rank's activity replayed R times; several: each measured")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "ranks")
    ap.add_argument("--sequential", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--single", action=argparse.BooleanOptionalAction, default=True,
                    help="also `gpus` and `gaps` alone on one export at each replay")
    ap.add_argument("--nsys-mine", type=Path, default=NSYS_MINE,
                    help="the nsys-mine to time (another worktree's: a script running "
                         "`python -P -m profile_cli \"$@\"` with it on PYTHONPATH: -P, or "
                         "`python -m` puts the working folder, a checkout, first)")
    a = ap.parse_args(argv)
    a.out = a.out.resolve()  # the commands run elsewhere (run_measured)
    exe = str(a.nsys_mine.resolve() if len(a.nsys_mine.parts) > 1 else a.nsys_mine)
    results = []

    def emit(row: dict[str, Any]) -> None:
        print(json.dumps(row), flush=True)
        results.append(row)

    for replay in a.replay:
        files = rank_files(a.out, max(a.ranks), replay)
        size = sum(p.stat().st_size for p in files)
        print(f"{len(files)} exports x{replay}, {size / 2**30:.2f} GiB", file=sys.stderr)
        for k in a.ranks:
            sub = a.out / f"first{k}x{replay}"
            shutil.rmtree(sub, ignore_errors=True)
            sub.mkdir(parents=True)
            for f in files[:k]:
                os.symlink(f, sub / f.name)
            row, m = measure("ranks (local Dask cluster)", [exe, "ranks", str(sub), "-f", "json"],
                             files[:k], replay)
            row["stragglers"] = [r["rank"] for r in json.loads(m.stdout) if r["straggler"]]
            emit(row)
            if a.sequential and k == max(a.ranks):
                t0, biggest, cpu_total = time.perf_counter(), 0, 0.0
                for f in files[:k]:
                    row, m = measure("", [exe, "gpus", str(f), "-f", "json"], [f], replay)
                    biggest, cpu_total = max(biggest, m.client_peak), cpu_total + m.cpu_s
                row.update(what="sequential `nsys-mine gpus` per file", ranks=k,
                           mb=round(sum(f.stat().st_size for f in files[:k]) / 2**20),
                           wall_s=round(time.perf_counter() - t0, 1), cpu_s=round(cpu_total, 1),
                           client_peak_mb=round(biggest / 2**20), tree_peak_mb=None)
                emit(row)
        if a.single:
            for q in ("gpus", "gaps"):
                emit(measure(f"`nsys-mine {q}` on one export", [exe, q, str(files[0]), "-f",
                                                                 "json"], files[:1], replay)[0])
    print("\n| what | ranks | replay | MB per rank | MB | wall s | CPU s | peak MB (client) | "
          "peak MB (largest worker) | load |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(f"| {r['what']} | {r['ranks']} | {r['replay']} | {r['mb_per_rank']} | {r['mb']} | "
              f"{r['wall_s']} | {r['cpu_s']} | {r['client_peak_mb']} | "
              f"{r['worker_peak_mb'] if r['worker_peak_mb'] is not None else ''} | {r['load']} |")
    return 0

if __name__ == "__main__":
    sys.exit(main())
