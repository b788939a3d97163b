#!/usr/bin/env python3
"""Time nsys-mine against `nsys stats` on the same scaled Nsight Systems export.

    .venv/bin/python benchmarks/run_benchmarks.py [--factor 300] [--repeat 3] [--skip-nsys]
                                                  [--nsys PATH] [--json results.json]

Builds (or reuses, cached in benchmarks/out/) two scaled copies of a real export with
benchmarks/scale_export.py: factor F (default 300: ~1.03 M kernels, ~5 M NVTX ranges
from the fastvideo fixture) and LxF (default L = 4). On the F file, side by side:

    nsys stats --report nvtxkernsum --format csv -o PREFIX FILE
        vs  nsys-mine nvtx-kernels FILE --format csv --output OUT.csv
    nsys stats --report gpukernsum  --format csv -o PREFIX FILE
        vs  nsys-mine kernels      FILE --format csv --output OUT.csv

and on the LxF file the nsys-mine commands again (linearity). Each command runs as
its own subprocess; wall time is measured around it and peak RSS is the child's
ru_maxrss from os.wait4 (the largest process in its tree that it waited for).
The runs of one file are interleaved (A B C D, A B C D, ...) after the file has been
read once so that every command sees a warm page cache. Reported: the MEDIAN wall
time of the runs (min in the JSON) and the MAX peak RSS over the runs.

A command that fails (non-zero exit, timeout, or no output file) is reported with
the tail of its stderr; the run goes on. See benchmarks/README.md for the targets.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from scale_export import DEFAULT_GAP_NS, scale_export  # noqa: E402

DEFAULT_SRC = ROOT.parent / "shared" / "fixtures" / "nsys" / \
    "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
OUT_DIR = HERE / "out"
SCALER_VERSION = 1  # bump when scale_export's output changes, to invalidate the cache

# Targets (see README.md).
NVTX_SPEEDUP_MIN = 10.0   # nvtxkernsum wall / nsys-mine nvtx-kernels wall
KERNELS_SPEEDUP_MIN = 1.0  # gpukernsum wall / nsys-mine kernels wall
LINEARITY_MAX = 4.5       # nsys-mine wall at 4x rows / at 1x (for a 4x multiple)


# --------------------------------------------------------------------------- tools

def find_nsys(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    bundled = ROOT / ".cache" / "nsys" / "usr" / "bin" / "nsys"
    if bundled.exists():
        return str(bundled)
    return shutil.which("nsys")


def find_nsys_mine(explicit: str | None) -> list[str]:
    if explicit:
        return [explicit]
    venv = ROOT / ".venv" / "bin" / "nsys-mine"
    if venv.exists():
        return [str(venv)]
    on_path = shutil.which("nsys-mine")
    if on_path:
        return [on_path]
    # Not installed: run the package from the checkout (run_once adds ROOT to PYTHONPATH).
    return [sys.executable, "-m", "profile_cli"]


# --------------------------------------------------------------------------- scaled files

def scaled_file(src: Path, factor: int, gap_ns: int, rebuild: bool) -> tuple[Path, dict]:
    """Return (path, info) of SRC scaled by FACTOR, building it unless a valid cached copy
    exists."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    dst = OUT_DIR / f"{src.stem}_x{factor}.sqlite"
    meta_path = dst.with_name(dst.name + ".json")
    st = src.stat()
    key = {"src": str(src.resolve()), "src_size": st.st_size, "src_mtime_ns": st.st_mtime_ns,
           "factor": factor, "gap_ns": gap_ns, "scaler_version": SCALER_VERSION}
    if not rebuild and dst.exists() and meta_path.exists():
        try:
            meta = json.loads(meta_path.read_text())
        except ValueError:
            meta = {}
        if meta.get("key") == key and meta.get("dst_size") == dst.stat().st_size:
            meta["cached"] = True
            return dst, meta
    print(f"building {dst.name} (factor {factor}) ...", flush=True)
    t0 = time.perf_counter()
    counts = scale_export(src, dst, factor, gap_ns=gap_ns, overwrite=True)
    secs = time.perf_counter() - t0
    meta = {"key": key, "counts": counts, "scale_seconds": round(secs, 2),
            "dst_size": dst.stat().st_size}
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"  {secs:.1f} s, {dst.stat().st_size / 2**20:.0f} MiB, "
          + ", ".join(f"{k} {v:,}" for k, v in counts.items()), flush=True)
    meta["cached"] = False
    return dst, meta


def warm_page_cache(path: Path) -> None:
    with open(path, "rb", buffering=0) as f:
        while f.read(1 << 24):
            pass


# --------------------------------------------------------------------------- running

@dataclass
class Run:
    ok: bool
    wall_s: float
    maxrss_mb: float
    rc: int | None
    error: str = ""
    cpu_s: float | None = None  # user + system CPU of the command and its children


@dataclass
class Result:
    label: str          # e.g. "nsys nvtxkernsum"
    tool: str           # "nsys" | "nsys-mine"
    pair: str           # "nvtx" | "kernels"
    factor: int
    argv: list[str]
    runs: list[Run] = field(default_factory=list)

    @property
    def good(self) -> list[Run]:
        return [r for r in self.runs if r.ok]

    @property
    def ok(self) -> bool:
        return bool(self.runs) and len(self.good) == len(self.runs)

    @property
    def wall_median(self) -> float | None:
        g = self.good
        return statistics.median(r.wall_s for r in g) if g and self.ok else None

    @property
    def wall_min(self) -> float | None:
        g = self.good
        return min(r.wall_s for r in g) if g and self.ok else None

    @property
    def cpu_median(self) -> float | None:
        g = [r.cpu_s for r in self.good if r.cpu_s is not None]
        return statistics.median(g) if g and self.ok else None

    @property
    def maxrss_mb(self) -> float | None:
        g = self.good
        return max(r.maxrss_mb for r in g) if g and self.ok else None

    def to_json(self) -> dict:
        d = asdict(self)
        d.update(ok=self.ok, wall_median_s=self.wall_median, wall_min_s=self.wall_min,
                 cpu_median_s=self.cpu_median, peak_rss_mb=self.maxrss_mb)
        return d


def _tail(path: Path, lines: int = 8, n: int = 1200) -> str:
    """The last LINES lines (at most N characters) of a log file."""
    try:
        data = path.read_bytes()[-8192:]
    except OSError:
        return ""
    text = "\n".join(data.decode("utf-8", "replace").strip().splitlines()[-lines:])
    return text[-n:]


# Each measured command is started by this tiny launcher (python -I -S, ~6-8 MB), which
# times it and reads its rusage with os.wait4. Measuring from the runner itself would be
# wrong: a child's ru_maxrss starts from the peak RSS of the process it was forked from
# (the kernel carries the parent's hiwater mark through fork/vfork + exec), and this
# runner grows to hundreds of MB while it builds the scaled files.
LAUNCHER = r"""
import json, os, sys, time
out, argv = sys.argv[1], sys.argv[2:]
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        os.write(2, ("cannot start %s: %s\n" % (argv[0], e)).encode())
    os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
with open(out, "w") as f:
    json.dump({"wall_s": wall, "status": status, "maxrss_kib": ru.ru_maxrss,
               "cpu_s": ru.ru_utime + ru.ru_stime}, f)
"""


def run_once(argv: list[str], expected: Path, workdir: Path, timeout: float) -> Run:
    """Run ARGV once through LAUNCHER: wall time and the child's peak RSS (os.wait4)."""
    out_log, err_log = workdir / "stdout.log", workdir / "stderr.log"
    stats_path = workdir / "rusage.json"
    env = None
    if argv[:3] == [sys.executable, "-m", "profile_cli"]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with open(out_log, "wb") as fo, open(err_log, "wb") as fe:
        t0 = time.perf_counter()
        try:
            p = subprocess.Popen([sys.executable, "-I", "-S", "-c", LAUNCHER, str(stats_path),
                                  *argv], stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 cwd=workdir, env=env, start_new_session=True)
        except OSError as e:
            return Run(False, 0.0, 0.0, None, f"cannot start: {e}")
        timed_out = threading.Event()

        def kill() -> None:
            timed_out.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the launcher and the command
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            p.wait()
        finally:
            timer.cancel()
        outer_wall = time.perf_counter() - t0
    if timed_out.is_set():
        return Run(False, outer_wall, 0.0, None, f"timed out after {timeout:.0f} s")
    try:
        st = json.loads(stats_path.read_text())
    except (OSError, ValueError):
        return Run(False, outer_wall, 0.0, p.returncode,
                   f"launcher failed (exit {p.returncode}): {_tail(err_log)}")
    rc = os.waitstatus_to_exitcode(st["status"])
    wall, maxrss_mb, cpu = st["wall_s"], st["maxrss_kib"] / 1024.0, st["cpu_s"]
    if rc != 0:
        return Run(False, wall, maxrss_mb, rc,
                   f"exit {rc}: " + (_tail(err_log) or _tail(out_log)), cpu)
    if not expected.exists() or expected.stat().st_size == 0:
        return Run(False, wall, maxrss_mb, rc,
                   f"no output {expected.name}: " + (_tail(out_log) or _tail(err_log)), cpu)
    return Run(True, wall, maxrss_mb, rc, "", cpu)


def rss_floor(workdir: Path) -> float | None:
    """Peak RSS the launcher reports for /bin/true: the smallest value it can measure."""
    true = shutil.which("true")
    if not true:
        return None
    marker = workdir / "true.out"
    marker.write_text("x")
    r = run_once([true], marker, workdir, 30)
    return r.maxrss_mb if r.ok else None


def commands(nsys: str | None, mine: list[str], db: Path, skip_nsys: bool
             ) -> list[tuple[str, str, str, object]]:
    """(label, tool, pair, builder) where builder(workdir) -> (argv, expected output)."""
    out = []
    if nsys and not skip_nsys:
        for rep, pair in (("nvtxkernsum", "nvtx"), ("gpukernsum", "kernels")):
            out.append((f"nsys stats {rep}", "nsys", pair,
                        lambda w, rep=rep: ([nsys, "stats", "--report", rep, "--format", "csv",
                                             "-o", str(w / "nsys"), str(db)],
                                            w / f"nsys_{rep}.csv")))
    for sub, pair in (("nvtx-kernels", "nvtx"), ("kernels", "kernels")):
        out.append((f"nsys-mine {sub}", "nsys-mine", pair,
                    lambda w, sub=sub: ([*mine, sub, str(db), "--format", "csv",
                                         "--output", str(w / "out.csv")], w / "out.csv")))
    return out


def bench_file(db: Path, factor: int, cmds, repeat_of, timeout: float, keep: Path | None
               ) -> list[Result]:
    warm_page_cache(db)
    results = [Result(label, tool, pair, factor, []) for label, tool, pair, _ in cmds]
    rounds = max(repeat_of(r) for r in results)
    for i in range(rounds):
        for res, (_label, _tool, _pair, build) in zip(results, cmds, strict=True):
            if i >= repeat_of(res):
                continue
            if res.runs and not res.runs[-1].ok:
                continue  # it failed once; don't spend time repeating the failure
            with tempfile.TemporaryDirectory(dir=OUT_DIR, prefix="run_") as tmp:
                w = Path(tmp)
                argv, expected = build(w)
                res.argv = argv
                print(f"  x{factor} [{i + 1}/{repeat_of(res)}] {res.label} ...", end=" ",
                      flush=True)
                run = run_once(argv, expected, w, timeout)
                res.runs.append(run)
                if run.ok:
                    print(f"{run.wall_s:.2f} s, {run.maxrss_mb:.0f} MB", flush=True)
                    if keep is not None:
                        keep.mkdir(parents=True, exist_ok=True)
                        name = res.label.replace(" ", "_") + f"_x{factor}.csv"
                        shutil.copyfile(expected, keep / name)
                else:
                    print("FAILED", flush=True)
                    print("    " + run.error.replace("\n", "\n    "), flush=True)
    return results


# --------------------------------------------------------------------------- report

def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(results: list[Result], base: int, lin_base: int, big: int | None,
              mult: int) -> dict:
    def get(tool: str, pair: str, factor: int) -> Result | None:
        for r in results:
            if r.tool == tool and r.pair == pair and r.factor == factor:
                return r
        return None

    checks: dict[str, dict] = {}
    print()
    print(f"{'command':28s} {'factor':>6s} {'runs':>4s} {'wall s (median)':>15s} "
          f"{'wall s (min)':>12s} {'CPU s':>7s} {'peak RSS MB':>11s}  status")
    for r in results:
        status = "ok" if r.ok else "FAILED"
        print(f"{r.label:28s} {r.factor:>6d} {len(r.runs):>4d} {_fmt(r.wall_median):>15s} "
              f"{_fmt(r.wall_min):>12s} {_fmt(r.cpu_median, '.1f'):>7s} "
              f"{_fmt(r.maxrss_mb, '.0f'):>11s}  {status}")
    print()
    print(f"comparisons (median wall time, max peak RSS; file factor {base}):")
    for pair, nsys_label, target in (("nvtx", "nvtxkernsum", NVTX_SPEEDUP_MIN),
                                     ("kernels", "gpukernsum", KERNELS_SPEEDUP_MIN)):
        n, m = get("nsys", pair, base), get("nsys-mine", pair, base)
        t = _ratio(n.wall_median if n else None, m.wall_median if m else None)
        rss = _ratio(n.maxrss_mb if n else None, m.maxrss_mb if m else None)
        name = "nvtx-kernels" if pair == "nvtx" else "kernels"
        passed = None if t is None else (t >= target and (pair != "nvtx" or (rss or 0) > 1.0))
        want = (f">= {target:g}x faster and lower peak RSS" if pair == "nvtx"
                else f">= {target:g}x (no slower)")
        print(f"  {nsys_label} / nsys-mine {name}: time {_fmt(t)}x, RSS {_fmt(rss)}x   "
              f"target {want}: {'-' if passed is None else ('PASS' if passed else 'FAIL')}")
        checks[f"{pair}_vs_nsys"] = {"time_ratio": t, "rss_ratio": rss, "target": want,
                                     "pass": passed}
    if big:
        limit = LINEARITY_MAX * mult / 4.0
        print(f"linearity (wall at factor {big} / wall at factor {lin_base}; "
              f"{mult}x rows, target <= {limit:g}):")
        for tool in ("nsys-mine", "nsys"):
            for pair in ("nvtx", "kernels"):
                a, b = get(tool, pair, lin_base), get(tool, pair, big)
                if a is None or b is None:
                    continue
                lin = _ratio(b.wall_median, a.wall_median)
                rss = _ratio(b.maxrss_mb, a.maxrss_mb)
                passed = None if lin is None else lin <= limit
                verdict = ("" if tool == "nsys" else
                           f"   {'-' if passed is None else ('PASS' if passed else 'FAIL')}")
                print(f"  {a.label:30s} time {_fmt(lin)}x, RSS {_fmt(rss)}x{verdict}")
                if tool == "nsys-mine":
                    checks[f"{pair}_linearity"] = {"time_ratio": lin, "rss_ratio": rss,
                                                   "target": f"<= {limit:g}", "pass": passed}
    return checks


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--src", type=Path, default=DEFAULT_SRC,
                    help="real nsys export to scale (read only; default: the fastvideo fixture)")
    ap.add_argument("--factor", type=int, default=300,
                    help="replay factor of the main file (default 300: ~1.03 M kernels)")
    ap.add_argument("--linearity-multiple", type=int, default=4,
                    help="also time nsys-mine on a file MULTIPLE times bigger "
                         "(default 4; 0 = skip)")
    ap.add_argument("--linearity-base", type=int, metavar="FACTOR",
                    help="small file of the linearity pair (default: --factor); e.g. "
                         "--linearity-base 75 compares x75 with x300 and keeps x300 for the "
                         "nsys comparison, avoiding the 2.3 GiB x1200 file")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per command; the median wall time is reported (default 3)")
    ap.add_argument("--nvtxkernsum-repeat", type=int, default=1,
                    help="runs of the slow `nsys stats nvtxkernsum` (default 1)")
    ap.add_argument("--nsys",
                    help="nsys binary (default .cache/nsys/usr/bin/nsys, else nsys on PATH)")
    ap.add_argument("--nsys-mine", dest="nsys_mine",
                    help="nsys-mine executable (default .venv/bin/nsys-mine)")
    ap.add_argument("--skip-nsys", action="store_true",
                    help="time only nsys-mine (nvtxkernsum takes ~45-60 s on the default file)")
    ap.add_argument("--nsys-at-multiple", action="store_true",
                    help="also run nsys stats on the big linearity file (slow: minutes)")
    ap.add_argument("--timeout", type=float, default=600,
                    help="per-command limit in s (default 600)")
    ap.add_argument("--gap-ns", type=int, default=DEFAULT_GAP_NS, help=argparse.SUPPRESS)
    ap.add_argument("--rebuild", action="store_true",
                    help="rebuild the scaled files even if cached")
    ap.add_argument("--keep-outputs", type=Path, metavar="DIR",
                    help="copy each command's CSV output to DIR (for diffing)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="save all results as JSON")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a target is missed or a command failed")
    a = ap.parse_args(argv)

    if not a.src.is_file():
        print(f"error: source export {a.src} not found (see --src)", file=sys.stderr)
        return 2
    nsys = find_nsys(a.nsys)
    if not nsys and not a.skip_nsys:
        print("warning: no nsys found (--nsys); timing nsys-mine only", file=sys.stderr)
    mine = find_nsys_mine(a.nsys_mine)
    base = a.factor
    lin_base = a.linearity_base or base
    big = (lin_base * a.linearity_multiple
           if a.linearity_multiple and a.linearity_multiple > 1 else None)

    t_start = time.perf_counter()
    files = {}
    for f in sorted({base} | ({lin_base, big} if big else set())):
        path, meta = scaled_file(a.src, f, a.gap_ns, a.rebuild)
        files[f] = (path, meta)
        c = meta["counts"]
        print(f"x{f}: {path.name}, {meta['dst_size'] / 2**20:.0f} MiB, "
              f"{c.get('CUPTI_ACTIVITY_KIND_KERNEL', 0):,} kernels, "
              f"{c.get('NVTX_EVENTS_ranges', 0):,} NVTX ranges, "
              f"{c.get('CUPTI_ACTIVITY_KIND_RUNTIME', 0):,} runtime rows"
              + (" (cached)" if meta.get("cached") else f" (built in {meta['scale_seconds']} s)"),
              flush=True)

    def repeat_of(r: Result) -> int:
        if r.label == "nsys stats nvtxkernsum":
            return max(1, a.nvtxkernsum_repeat)
        return max(1, a.repeat)

    with tempfile.TemporaryDirectory(dir=OUT_DIR, prefix="floor_") as tmp:
        floor = rss_floor(Path(tmp))
    print(f"peak-RSS floor of the launcher (/bin/true): {_fmt(floor, '.1f')} MB", flush=True)

    results: list[Result] = []
    for f, (path, _meta) in files.items():
        skip = a.skip_nsys or (f != base and not a.nsys_at_multiple)
        print(f"timing on {path.name}:", flush=True)
        results += bench_file(path, f, commands(nsys, mine, path, skip), repeat_of, a.timeout,
                              a.keep_outputs)

    checks = summarize(results, base, lin_base, big, a.linearity_multiple)
    total = time.perf_counter() - t_start
    print(f"\ntotal {total:.0f} s. nsys: {nsys or '-'}; nsys-mine: {' '.join(mine)}")

    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                     "python": platform.python_version(), "platform": platform.platform()},
            "nsys": nsys, "nsys_mine": mine, "src": str(a.src),
            "statistic": "wall: median of runs (wall_min_s also given); RSS: max over runs",
            "rss_floor_mb": floor,
            "files": {str(f): {"path": str(p), **m} for f, (p, m) in files.items()},
            "results": [r.to_json() for r in results],
            "checks": checks,
            "total_seconds": round(total, 1),
        }, indent=1))
        print(f"results saved to {a.json}")

    if a.check:
        failed = any(not r.ok for r in results) or any(c["pass"] is False for c in checks.values())
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
