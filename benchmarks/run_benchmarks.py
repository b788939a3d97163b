#!/usr/bin/env python3
"""Time every nsys-mine answer beside the nsys report it reproduces, on scaled exports.

    .venv/bin/python benchmarks/run_benchmarks.py [--factors 30,100,300,1200]
        [--shapes shallow,nested,ddp] [--questions all|main|nvtx,kernels,...] [--every]
        [--repeat 3] [--skip-nsys] [--nsys-ai PATH | --skip-peer] [--json FILE] [--check]

Shapes (each replayed K times by benchmarks/scale_export.py, cached in benchmarks/out/):

  shallow  the fastvideo fixture: a real 2-process PyTorch emit_nvtx capture, 1-2 ranges deep
  ddp      benchmarks/ddp_export.py: a 2-process torchrun DDP step under emit_nvtx: inline
           aten:: ranges, NCCL-domain ranges named through textId, four launching threads,
           about five NVTX ranges per kernel
  nested   benchmarks/nested_export.py: 2 processes, forward and autograd threads, operators
           3-6 levels deep, most levels launching kernels

On every file, side by side, each question (QUESTIONS; output to a file for every command):

  nsys-mine nvtx-kernels   nsys stats --report nvtxkernsum     nsys-ai skill nvtx_kernel_map
  nsys-mine kernels        nsys stats --report gpukernsum      nsys-ai skill top_kernels
  nsys-mine ranges         nsys stats --report nvtxsum
  nsys-mine dominant, gpus, collectives, longest, compare, diff, check, report
  nsys-mine gaps           nsys analyze --rule gpu-starv       nsys-ai skill gpu_idle_gaps
  nsys-mine launches       nsys stats --report kernexecsum
  nsys-mine memops         nsys stats --report gpumemtimesum   (files with memory operations)
  nsys-mine ranges --instances   nsys stats --report nvtxgpuproj  (x4 at most: quadratic;
                                 above, --nsys-bound seconds of it: a memory lower bound)

The first four (MAIN) run at every factor, the others up to x100 (--every: at every
factor). compare and diff take a second export: the same source replayed with its replicas
2 ms apart instead of 1 ms; check takes CHECK_RULES.

"cold": nsys-mine with an empty cache folder (it reads the export and fills the cache);
"warm": the same command again right after, answering from that cache; "after": the command
asked for the first time, after another one (Question.after) filled the cache: the next,
different question. nsys-ai (the peer, optional: installed in a separate environment) keeps
its cache beside the export: "peer cold" runs on a link to the file in a fresh folder,
"peer warm" again in that folder. Each command runs as its own process through a tiny
launcher that takes wall time, CPU time (user + system) and peak RSS (os.wait4). The runs of
one file are interleaved after the file has been read once (warm page cache for everyone).
Reported: the MEDIAN wall and CPU time of the runs and the MAX peak RSS. nsys-mine's outputs
are compared with nsys's (rows, instances, totals) and warm/after with cold. A resident
caller's questions (the MCP server's, a notebook's: ``reports.Memo``) are timed by
``benchmarks/mcp_benchmark.py``.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import hashlib
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
from ddp_export import build as build_ddp  # noqa: E402
from nested_export import build as build_nested  # noqa: E402
from scale_export import DEFAULT_GAP_NS, file_row_counts, scale_export  # noqa: E402

FASTVIDEO = ROOT.parent / "shared" / "fixtures" / "nsys" / \
    "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
OUT_DIR = HERE / "out"
SCALER_VERSION = 1  # bump when scale_export's output changes, to invalidate the cache
NESTED_VERSION = 1  # bump when nested_export's output changes
NESTED_ARGS = {"steps": 4, "layers": 20, "seed": 0}
DDP_VERSION = 1  # bump when ddp_export's output changes
DDP_ARGS = {"steps": 4, "layers": 12, "seed": 0}

# Targets (issues 27, 28 and 38; see README.md).
NVTX_SPEEDUP_MIN = 10.0    # nvtxkernsum wall / nsys-mine nvtx-kernels wall (cold), x100 up
NVTX_SPEEDUP_MIN_X30 = 6.0  # ... at x30
KERNELS_SPEEDUP_MIN = 1.5  # gpukernsum wall / nsys-mine kernels wall (cold), x100 up
WARM_MAX_S = 0.6           # every report from the cache at x100
LINEARITY_MAX = 4.5        # nsys-mine wall at 4x the rows / at 1x
NEW_COLD_MAX = 2.0         # issue 28's answers cold / kernels cold
REPORT_MAX = 2.5           # issue 38: report cold / nvtx-kernels cold, on the same file
AUTO_NVTX_RUNS = 3         # nvtxkernsum runs (median) where one is quick ...
AUTO_NVTX_MAX_S = 60.0     # ... that is, under this many seconds
SMALL_MAX_FACTOR = 100     # above this factor only the MAIN questions run (unless --every)


@dataclass(frozen=True)
class Question:
    """One question the runner times: the nsys-mine command (``ranges --instances``), the
    nsys report or rule it reproduces, and how to ask and check it."""

    command: str
    nsys: str | None = None           # the nsys report (stats) or rule (analyze) beside it
    after: str | None = None          # the question asked first, for the "after" runs
    peer: str | None = None           # the nsys-ai skill that answers the same question
    extra: tuple[str, ...] = ()       # after the file: {other} the second export, {rules}
    output: str = "csv"               # csv (--format csv --output F), html (report -o F)
    ok_codes: tuple[int, ...] = (0,)  # exit codes of an answer (check: 3 = a rule failed)
    nsys_max_factor: int | None = None  # nsys's report only up to this factor (quadratic)
    needs: str | None = None          # "memops": nsys writes nothing without them


QUESTIONS = {  # key -> question; the first four are the MAIN questions (x300, x1200 too)
    "nvtx": Question("nvtx-kernels", "nvtxkernsum", after="dominant", peer="nvtx_kernel_map"),
    "kernels": Question("kernels", "gpukernsum", after="nvtx", peer="top_kernels"),
    "ranges": Question("ranges", "nvtxsum", after="nvtx"),
    "dominant": Question("dominant", after="nvtx"),
    # issue 28: where the GPU waits
    "gpus": Question("gpus", after="kernels"),
    "gaps": Question("gaps", "gpu-starv", after="gpus", peer="gpu_idle_gaps"),  # over 1 ms
    "launches": Question("launches", "kernexecsum", after="nvtx"),
    # nvtxgpuproj grows with the square of the ranges: 323 s at x4 of shallow, ~39 h at x100
    "instances": Question("ranges --instances", "nvtxgpuproj", after="ranges",
                          nsys_max_factor=4),
    "collectives": Question("collectives", after="gpus"),
    # issue 38: every other answer, and the page
    "longest": Question("longest", after="kernels"),
    "memops": Question("memops", "gpumemtimesum", after="kernels", needs="memops"),
    "compare": Question("compare", after="kernels", extra=("{other}",)),
    "diff": Question("diff", after="dominant", extra=("{other}",)),
    "check": Question("check", after="dominant", extra=("--rules", "{rules}"),
                      ok_codes=(0, 3)),
    "report": Question("report", after="nvtx", output="html"),
}
MAIN = ("nvtx", "kernels", "ranges", "dominant")
NEW_QUESTIONS = ("gpus", "gaps", "launches", "instances", "collectives")
MEMORY_TARGETS = ("nvtx", "kernels", "gaps", "launches", "instances")  # below nsys's peak
PEER_TARGETS = ("nvtx", "kernels", "gaps")  # warm answers faster than nsys-ai's
# How nsys answers each report: its arguments and the suffix of the CSV it writes.
NSYS_ARGS = {
    "gpu-starv": (["analyze", "--rule", "gpu-starv:gap=1:rows=-1"], "gpu-starv_gap=1_rows=-1"),
}
# check's rules (as scripts/snapshot_outputs.py): one on the dominant category, one on a share
CHECK_RULES = """\
[[rule]]
name = "a gemm dominates"
dominant_category = "gemm"

[[rule]]
name = "gemm share"
category = "gemm"
min_share_pct = 10
"""
OTHER_GAP_NS = 2 * DEFAULT_GAP_NS  # compare/diff's second export: replicas 2 ms apart


def parse_questions(text: str) -> list[str]:
    """Question keys from ``--questions``: keys (nvtx), commands (nvtx-kernels, "ranges
    --instances" as instances), ``main`` (the four main ones) or ``all``."""
    by_command = {q.command: k for k, q in QUESTIONS.items()}
    out: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        keys = (list(QUESTIONS) if word == "all" else list(MAIN) if word == "main"
                else [by_command.get(word, word)])
        for k in keys:
            if k not in QUESTIONS:
                raise SystemExit(f"unknown question {word!r}: one of all, main, "
                                 + ", ".join(QUESTIONS))
            if k not in out:
                out.append(k)
    return out


# --------------------------------------------------------------------------- tools

def find_nsys(explicit: str | None) -> str | None:
    if explicit:
        return explicit
    if os.environ.get("NSYS"):
        return os.environ["NSYS"]
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


def find_nsys_ai(explicit: str | None) -> str | None:
    """nsys-ai (the peer; optional): --nsys-ai, $NSYS_AI, or on PATH. Install it beside, never
    into, the project's environment (benchmarks/README.md)."""
    if explicit:
        return explicit
    return os.environ.get("NSYS_AI") or shutil.which("nsys-ai")


def peer_env(nsys_ai: str, workdir: Path) -> dict[str, str]:
    """nsys-ai's environment: one DuckDB thread (its answers vary on more, issue 38) and,
    where the duckdb-ext-sqlite package sits in its environment, a HOME whose DuckDB
    extension folder is that package's (DuckDB would download the sqlite extension)."""
    env = {"NSYS_AI_DUCKDB_THREADS": "1"}
    venv = Path(nsys_ai).resolve().parent.parent
    for ext in sorted(venv.glob("lib/python*/site-packages/duckdb_ext/extensions")):
        home = workdir / "home"
        (home / ".duckdb").mkdir(parents=True, exist_ok=True)
        link = home / ".duckdb" / "extensions"
        if not link.exists():
            link.symlink_to(ext, target_is_directory=True)
        env["HOME"] = str(home)
        break
    return env


# --------------------------------------------------------------------------- scaled files

def _sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes (the sources are a few MB: milliseconds)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def built_source(shape: str, rebuild: bool) -> Path:
    """The one-replica capture of a built shape (nested_export.py, ddp_export.py), built once
    (again when its script or arguments change)."""
    build, args, version, script = {
        "nested": (build_nested, NESTED_ARGS, NESTED_VERSION, "nested_export.py"),
        "ddp": (build_ddp, DDP_ARGS, DDP_VERSION, "ddp_export.py")}[shape]
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    dst = OUT_DIR / f"{shape}_x1.sqlite"
    meta_path = dst.with_name(dst.name + ".json")
    key = {**args, "version": version, "script_sha256": _sha256(HERE / script),
           "model_sha256": _sha256(HERE / "nested_export.py")}
    if not rebuild and dst.exists() and meta_path.exists():
        try:
            if json.loads(meta_path.read_text()).get("key") == key:
                return dst
        except ValueError:
            pass
    print(f"building {dst.name} ...", flush=True)
    counts = build(dst, **args)
    meta_path.write_text(json.dumps({"key": key, "counts": counts}, indent=1))
    return dst


def scaled_file(src: Path, factor: int, gap_ns: int, rebuild: bool, name: str
                ) -> tuple[Path, dict]:
    """Return (path, info) of SRC scaled by FACTOR, building it unless a valid cached copy
    exists."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    if factor == 1:  # nothing to replay: the source itself, read only
        return src, {"key": None, "counts": file_row_counts(src), "cached": True}
    dst = OUT_DIR / f"{name}_x{factor}.sqlite"
    meta_path = dst.with_name(dst.name + ".json")
    # keyed on the source's bytes, not its mtime: the shared fixture folder is set up again
    # (new mtimes, same files) at every session, and 5.5 GiB took minutes to rebuild
    key = {"src": str(src.resolve()), "src_sha256": _sha256(src),
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
    shape: str          # "shallow" | "nested" | "ddp"
    factor: int
    question: str       # "nvtx" | "kernels" | "ranges" | "dominant"
    tool: str           # "nsys" | "cold" | "warm" | "after" (nsys-mine: empty cache, its
    #                     own cache, the cache of the question before it: AFTER)
    argv: list[str] = field(default_factory=list)
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


def command_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a timed command runs in: this one, compiled modules reused (as users
    run it), then ``extra``."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(extra or {})
    return env


def run_once(argv: list[str], expected: Path, workdir: Path, timeout: float,
             env_extra: dict[str, str] | None = None, ok_codes: tuple[int, ...] = (0,)) -> Run:
    """Run ARGV once through LAUNCHER: wall time and the child's peak RSS (os.wait4). It
    succeeded when it exits with one of ``ok_codes`` and writes ``expected``."""
    out_log, err_log = workdir / "stdout.log", workdir / "stderr.log"
    stats_path = workdir / "rusage.json"
    env = command_env(env_extra)
    if argv[:3] == [sys.executable, "-m", "profile_cli"]:
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
    if rc not in ok_codes:
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



def run_bounded(argv: list[str], workdir: Path, limit_s: float) -> Run:
    """Run ARGV for at most ``limit_s`` seconds (then kill it and its children), sampling the
    resident memory of its process tree every 50 ms: a lower bound of its peak where it does
    not finish (nvtxgpuproj at x30 and above: hours). ``rc`` is None when it was stopped.
    The tree as ``ranks_benchmark.run_measured`` walks it: psutil (Dask's dependency)."""
    import psutil

    with open(workdir / "stdout.log", "wb") as fo, open(workdir / "stderr.log", "wb") as fe:
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                             cwd=workdir, start_new_session=True)
        ps = psutil.Process(p.pid)
        peak = 0
        while p.poll() is None and time.monotonic() - t0 < limit_s:
            rss = 0
            for proc in [ps, *ps.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # one that ended meanwhile
                    rss += proc.memory_info().rss
            peak = max(peak, rss)
            time.sleep(0.05)
        wall = time.monotonic() - t0
        stopped = p.poll() is None
        if stopped:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return Run(True, wall, peak / 2**20, None if stopped else p.returncode,
               f"stopped after {limit_s:.0f} s" if stopped else "")


def compile_project() -> None:
    """Compile the project's modules once, as an installed package would have them."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / p) for p in (
        "nsys_parsers", "reports", "profile_cli", "nvtx_model"))], env=env,
        stdout=subprocess.DEVNULL, check=False)


def nsys_runs(q: str, factor: int, counts: dict[str, int]) -> bool:
    """Whether nsys's report of question ``q`` is run on this file."""
    spec = QUESTIONS[q]
    if spec.nsys is None or (spec.nsys_max_factor is not None and factor > spec.nsys_max_factor):
        return False
    if spec.needs == "memops":  # nsys writes an empty file without memory operations
        return any(counts.get(t, 0) for t in ("CUPTI_ACTIVITY_KIND_MEMCPY",
                                                "CUPTI_ACTIVITY_KIND_MEMSET"))
    return True


def nsys_argv(nsys: str, report: str, prefix: Path, db: Path) -> tuple[list[str], str]:
    """nsys's command for a report or rule, and the suffix of the CSV file it writes."""
    args, suffix = NSYS_ARGS.get(report, (["stats", "--report", report], report))
    return [nsys, *args, "--format", "csv", "-o", str(prefix), str(db)], suffix


def mine_argv(mine: list[str], q: str, db: Path, out: Path, other: Path | None,
              rules: Path | None) -> list[str]:
    """nsys-mine's command for question ``q`` on ``db``, its answer written to ``out``."""
    spec = QUESTIONS[q]
    extra = [a.replace("{other}", str(other)).replace("{rules}", str(rules))
             for a in spec.extra]
    fmt = (["-o", str(out)] if spec.output == "html"
           else ["--format", "csv", "--output", str(out)])
    return [*mine, *spec.command.split(), str(db), *extra, *fmt]


def bench_file(shape: str, db: Path, factor: int, nsys: str | None, mine: list[str],
               questions: list[str], repeat: int, nvtx_repeat: int, timeout: float,
               keep: Path | None, *, counts: dict[str, int] | None = None,
               other: Path | None = None, rules: Path | None = None,
               nsys_ai: str | None = None, nsys_bound: float = 0) -> list[Result]:
    """Every question on one file, interleaved: nsys's report, nsys-mine cold, warm and
    after, nsys-ai cold and warm (its skill, where it has one); ``repeat`` times. A report
    too slow to run at this size (``nsys_max_factor``) runs once for ``nsys_bound`` seconds
    instead, for a lower bound of its peak memory."""
    warm_page_cache(db)
    if other is not None and other != db:
        warm_page_cache(other)
    counts = counts or {}
    results: dict[tuple[str, str], Result] = {}
    for q in questions:
        spec = QUESTIONS[q]
        if nsys and nsys_runs(q, factor, counts):
            results[q, "nsys"] = Result(shape, factor, q, "nsys")
        elif nsys and spec.nsys and nsys_bound > 0 and spec.nsys_max_factor is not None:
            results[q, "nsys bound"] = Result(shape, factor, q, "nsys bound")
        results[q, "cold"] = Result(shape, factor, q, "cold")
        results[q, "warm"] = Result(shape, factor, q, "warm")
        if spec.after in questions:
            results[q, "after"] = Result(shape, factor, q, "after")
        if nsys_ai and spec.peer:
            results[q, "peer cold"] = Result(shape, factor, q, "peer cold")
            results[q, "peer warm"] = Result(shape, factor, q, "peer warm")
    outputs: dict[tuple[str, str], Path] = {}
    ext = {"csv": ".csv", "html": ".html"}

    def failed(res: Result) -> bool:
        return bool(res.runs) and not res.runs[-1].ok

    for i in range(max(repeat, nvtx_repeat, AUTO_NVTX_RUNS if nvtx_repeat <= 0 else 0)):
        for q in questions:
            spec = QUESTIONS[q]
            nsys_res = results.get((q, "nsys"))
            runs_wanted = repeat
            if q == "nvtx":
                runs_wanted = nvtx_repeat if nvtx_repeat > 0 else _auto_nvtx_runs(nsys_res)
            if nsys_res is not None and nsys and spec.nsys and i < runs_wanted \
                    and not failed(nsys_res):
                with tempfile.TemporaryDirectory(dir=OUT_DIR, prefix="run_") as tmp:
                    w = Path(tmp)
                    argv, suffix = nsys_argv(nsys, spec.nsys, w / "nsys", db)
                    _one(nsys_res, argv, w / f"nsys_{suffix}.csv", w, timeout, None, keep,
                         outputs, i)
            bound = results.get((q, "nsys bound"))
            if bound is not None and nsys and spec.nsys and i == 0:
                with tempfile.TemporaryDirectory(dir=OUT_DIR, prefix="run_") as tmp:
                    argv, _ = nsys_argv(nsys, spec.nsys, Path(tmp) / "nsys", db)
                    bound.argv = argv
                    print(f"  {shape} x{factor} {q} nsys for {nsys_bound:.0f} s at most",
                          end=" ", flush=True)
                    bound.runs.append(run_bounded(argv, Path(tmp), nsys_bound))
                    print(f"{bound.runs[-1].wall_s:7.2f} s  peak >= "
                          f"{bound.runs[-1].maxrss_mb:6.0f} MB", flush=True)
            if i >= repeat:
                continue
            with tempfile.TemporaryDirectory(dir=OUT_DIR, prefix="run_") as tmp:
                w = Path(tmp)
                env = {"NSYS_MINE_CACHE_DIR": str(w / "cache")}
                for tool in ("cold", "warm"):
                    res = results[q, tool]
                    if failed(res):
                        continue
                    out = w / f"{tool}{ext[spec.output]}"
                    _one(res, mine_argv(mine, q, db, out, other, rules), out, w, timeout, env,
                         keep, outputs, i, spec.ok_codes)
                # the questions asked after this one: each in its own copy of this cache
                # (hard links: parts are replaced by rename, never rewritten in place)
                for nxt in [n for n in questions if QUESTIONS[n].after == q]:
                    res = results[nxt, "after"]
                    if failed(res) or not (w / "cache").is_dir():
                        continue
                    cache = w / f"cache_{nxt}"
                    shutil.copytree(w / "cache", cache, copy_function=os.link)
                    out = w / f"after_{nxt}{ext[QUESTIONS[nxt].output]}"
                    _one(res, mine_argv(mine, nxt, db, out, other, rules), out, w, timeout,
                         {"NSYS_MINE_CACHE_DIR": str(cache)}, keep, outputs, i,
                         QUESTIONS[nxt].ok_codes)
            if nsys_ai and spec.peer and not failed(results[q, "peer cold"]):
                # nsys-ai keeps its cache beside the export: a link to it in a fresh folder
                with tempfile.TemporaryDirectory(dir=OUT_DIR, prefix="peer_") as tmp:
                    w = Path(tmp)
                    link = w / "export.sqlite"
                    link.symlink_to(db.resolve())
                    env = peer_env(nsys_ai, w)
                    for tool in ("peer cold", "peer warm"):
                        argv = [nsys_ai, "skill", "run", spec.peer, str(link), "--format",
                                "json"]
                        _one(results[q, tool], argv, w / "stdout.log", w, timeout, env, keep,
                             outputs, i, suffix=".json")
    _compare(shape, factor, outputs)
    return list(results.values())


def _auto_nvtx_runs(nsys_res: Result | None) -> int:
    """Runs of nvtxkernsum when not given: AUTO_NVTX_RUNS where the first took under
    AUTO_NVTX_MAX_S (x30, x100: a single run of it varied 9.3-10.8 s on shallow x30, which
    decides which side of 10x that file lands on), else that one run (x300, x1200: 2-10
    minutes each, 14-19x)."""
    if nsys_res is None or not nsys_res.runs:
        return AUTO_NVTX_RUNS
    first = nsys_res.runs[0]
    return AUTO_NVTX_RUNS if first.ok and first.wall_s < AUTO_NVTX_MAX_S else 1


def _one(res: Result, argv: list[str], expected: Path, w: Path, timeout: float,
         env: dict[str, str] | None, keep: Path | None, outputs: dict, i: int,
         ok_codes: tuple[int, ...] = (0,), suffix: str | None = None) -> None:
    res.argv = argv
    label = f"{res.shape} x{res.factor} [{i + 1}] {res.question} {res.tool}"
    print(f"  {label:42s}", end=" ", flush=True)
    run = run_once(argv, expected, w, timeout, env, ok_codes)
    res.runs.append(run)
    if run.ok:
        print(f"{run.wall_s:7.2f} s  cpu {run.cpu_s or 0:6.2f} s  {run.maxrss_mb:6.0f} MB",
              flush=True)
        if i == 0:
            name = f"{res.shape}_x{res.factor}_{res.question}_{res.tool.replace(' ', '_')}"
            dst = (keep or OUT_DIR) / f"{name}{suffix or expected.suffix}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(expected, dst)
            outputs[res.question, res.tool] = dst
    else:
        print("FAILED", flush=True)
        print("    " + run.error.replace("\n", "\n    "), flush=True)


def _rows(path: Path) -> list[dict]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _none(v: str | None):
    return None if v in (None, "None", "") else v


def _compare(shape: str, factor: int, outputs: dict) -> None:
    """nsys-mine's rows against nsys's: cold == warm == after, and the nsys reports' keys,
    instances and totals (nvtx-kernels), instances and totals per kernel name (kernels), the
    ranges' instances and totals (ranges: row by row where the names are nsys's, else in
    all), the memory operations' counts and times (memops), and the rows of gaps, launches
    and ranges --instances; the kernels nsys-ai lists, against ours."""
    for q in QUESTIONS:
        cold = outputs.get((q, "cold"))
        for tool in ("warm", "after"):
            other = outputs.get((q, tool))
            if cold and other and cold.read_bytes() != other.read_bytes():
                print(f"  MISMATCH {shape} x{factor} {q}: {tool} output differs from cold")
    if ("nvtx", "nsys") in outputs and ("nvtx", "cold") in outputs:
        theirs = {(_none(r["NVTX Range"]), _none(r["Style"]), _none(r["PID"]), _none(r["TID"]),
                   r["Kernel Name"]): (int(r["NVTX Inst"]), int(r["Kern Inst"]),
                                       int(r["Total Time (ns)"]))
                  for r in _rows(outputs["nvtx", "nsys"])}
        ours = {(_none(r["range"]), _none(r["style"]), _none(r["pid"]), _none(r["tid"]),
                 r["kernel"]): (int(r["range_instances"]), int(r["kernel_instances"]),
                                int(r["total_ns"]))
                for r in _rows(outputs["nvtx", "cold"])}
        same = theirs == ours
        print(f"  nvtx-kernels vs nvtxkernsum: {len(ours):,} rows, "
              f"{'equal' if same else 'DIFFERENT'}", flush=True)
    if ("kernels", "nsys") in outputs and ("kernels", "cold") in outputs:
        agg: dict[str, list[int]] = {}
        for r in _rows(outputs["kernels", "nsys"]):
            a = agg.setdefault(r["Name"], [0, 0])
            a[0] += int(r["Instances"])
            a[1] += int(r["Total Time (ns)"])
        ours_k = {r["name"]: [int(r["instances"]), int(r["total_ns"])]
                  for r in _rows(outputs["kernels", "cold"])}
        print(f"  kernels vs gpukernsum: {len(ours_k):,} names, "
              f"{'equal' if ours_k == agg else 'DIFFERENT'}", flush=True)
    if ("ranges", "nsys") in outputs and ("ranges", "cold") in outputs:
        theirs_r = sorted((r["Range"], r["Style"], int(r["Instances"]),
                           int(r["Total Time (ns)"])) for r in _rows(outputs["ranges", "nsys"]))
        ours_r = sorted((r["range"], r["style"], int(r["instances"]), int(r["total_ns"]))
                        for r in _rows(outputs["ranges", "cold"]))
        if {r[:2] for r in theirs_r} == {r[:2] for r in ours_r}:
            what, same = f"{len(ours_r):,} rows", theirs_r == ours_r
        else:  # PyTorch operator calls merged per operator (--merge-op-ids auto)
            what = f"{len(ours_r):,} rows for nsys's {len(theirs_r):,}: instances and time"
            same = ([sum(r[2] for r in theirs_r), sum(r[3] for r in theirs_r)]
                    == [sum(r[2] for r in ours_r), sum(r[3] for r in ours_r)])
        print(f"  ranges vs nvtxsum: {what}, {'equal' if same else 'DIFFERENT'}", flush=True)
    if ("memops", "nsys") in outputs and ("memops", "cold") in outputs:
        theirs_m = sorted((int(r["Count"]), int(r["Total Time (ns)"]), int(r["Min (ns)"]),
                           int(r["Max (ns)"])) for r in _rows(outputs["memops", "nsys"]))
        ours_m = sorted((int(r["instances"]), int(r["total_ns"]), int(r["min_ns"]),
                         int(r["max_ns"])) for r in _rows(outputs["memops", "cold"]))
        print(f"  memops vs gpumemtimesum: {len(ours_m):,} kinds, "
              f"{'equal' if ours_m == theirs_m else 'DIFFERENT'}", flush=True)
    checks = {  # question -> (nsys row key, nsys-mine row key)
        "gaps": (lambda r: (r["PID"], r["Device ID"], r["Start (ns)"], r["Duration (ns)"]),
                 lambda r: (r["pid"], r["device"], r["start_ns"], r["duration_ns"])),
        "launches": (lambda r: (r["PID"], r["TID"], r["DevId"], r["API Name"],
                                r["Kernel Name"], r["Count"], r["KMax (ns)"]),
                     lambda r: (r["pid"], r["tid"], r["device"], r["api"], r["kernel"],
                                r["count"], r["kernel_max_ns"])),
        "instances": (lambda r: (r["Name"], r["PID"], r["TID"], r["Orig Start (ns)"],
                                 r["Projected Start (ns)"], r["Projected Duration (ns)"],
                                 r["NumGPUOps"]),
                      lambda r: (r["range"], r["pid"], r["tid"], r["start_ns"],
                                 r["gpu_start_ns"], r["gpu_duration_ns"], r["gpu_ops"])),
    }
    for q, (theirs_key, ours_key) in checks.items():
        if (q, "nsys") in outputs and (q, "cold") in outputs:
            theirs_rows = sorted(theirs_key(r) for r in _rows(outputs[q, "nsys"]))
            ours_rows = sorted(ours_key(r) for r in _rows(outputs[q, "cold"])
                               if q != "instances" or r["gpu_ops"] not in ("", "0"))
            print(f"  {QUESTIONS[q].command} vs {QUESTIONS[q].nsys}: {len(ours_rows):,} rows, "
                  f"{'equal' if ours_rows == theirs_rows else 'DIFFERENT'}", flush=True)
    if ("kernels", "peer cold") in outputs and ("kernels", "cold") in outputs:
        try:
            listed = json.loads(outputs["kernels", "peer cold"].read_text())
        except ValueError:
            listed = None
        ours_n = {r["name"]: int(r["instances"]) for r in _rows(outputs["kernels", "cold"])}
        if isinstance(listed, list):
            rows = [r for r in listed if isinstance(r, dict) and "kernel_name" in r]
            same = all(ours_n.get(r["kernel_name"]) == r.get("invocations") for r in rows)
            print(f"  nsys-ai top_kernels vs kernels: its {len(rows)} kernels' calls "
                  f"{'equal' if same else 'DIFFERENT'}", flush=True)


# --------------------------------------------------------------------------- report

def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "-" if x is None else format(x, spec)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


SHAPES = ["shallow", "ddp", "nested"]


def table(results: list[Result]) -> str:
    """The markdown table of docs/PERFORMANCE.md: one row per shape, factor and question."""
    get = {(r.shape, r.factor, r.question, r.tool): r for r in results}
    lines = ["| shape | x | command | nsys report | nsys s | nsys MB | cold s | cold CPU s | "
             "cold MB | warm s | warm MB | after s | nsys/cold | nsys-ai cold s | "
             "nsys-ai warm s |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
             "| ---: | ---: | ---: |"]
    keys = sorted({(r.shape, r.factor, r.question) for r in results},
                  key=lambda k: (SHAPES.index(k[0]) if k[0] in SHAPES else len(SHAPES), k[1],
                                 list(QUESTIONS).index(k[2])))
    for shape, factor, q in keys:
        n, c, w, a, pc, pw, nb = (get.get((shape, factor, q, t)) for t in (
            "nsys", "cold", "warm", "after", "peer cold", "peer warm", "nsys bound"))
        spec = QUESTIONS[q]
        report = spec.nsys or "-"
        nsys_s = _fmt(n.wall_median if n else None)
        nsys_mb = _fmt(n.maxrss_mb if n else None, ".0f")
        bounded = nb.runs[0] if nb is not None and nb.runs else None
        if bounded is not None and bounded.rc is None:  # its peak so far: a lower bound
            report += f" (stopped at {bounded.wall_s:.0f} s)"
            nsys_s, nsys_mb = f"> {bounded.wall_s:.0f}", f">= {bounded.maxrss_mb:.0f}"
        elif bounded is not None:  # it finished within the time: once, sampled
            nsys_s, nsys_mb = _fmt(bounded.wall_s), _fmt(bounded.maxrss_mb, ".0f")
        elif spec.nsys and n is None:
            report += " (not run)"
        cells = [shape, str(factor), spec.command, report, nsys_s, nsys_mb,
                 _fmt(c.wall_median if c else None), _fmt(c.cpu_median if c else None),
                 _fmt(c.maxrss_mb if c else None, ".0f"),
                 _fmt(w.wall_median if w else None), _fmt(w.maxrss_mb if w else None, ".0f"),
                 _fmt(a.wall_median if a else None),
                 _fmt(_ratio(n.wall_median if n else None, c.wall_median if c else None),
                      ".1f"),
                 _fmt(pc.wall_median if pc else None), _fmt(pw.wall_median if pw else None)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def checks(results: list[Result], factors: list[int]) -> dict[str, dict]:
    """Every target the results can say something about: name -> the value and pass."""
    get = {(r.shape, r.factor, r.question, r.tool): r for r in results}
    out: dict[str, dict] = {}

    def wall(shape, f, q, tool):
        r = get.get((shape, f, q, tool))
        return r.wall_median if r else None

    def rss(shape, f, q, tool):
        r = get.get((shape, f, q, tool))
        return r.maxrss_mb if r else None

    def cmd(q: str) -> str:
        return QUESTIONS[q].command

    for shape in sorted({r.shape for r in results}):
        for f in factors:
            least = NVTX_SPEEDUP_MIN if f >= 100 else NVTX_SPEEDUP_MIN_X30 if f >= 30 else None
            t = _ratio(wall(shape, f, "nvtx", "nsys"), wall(shape, f, "nvtx", "cold"))
            if t is not None and least is not None:
                out[f"{shape} x{f} nvtx-kernels >= {least:g}x nvtxkernsum"] = {
                    "time_ratio": t, "pass": t >= least}
            t = _ratio(wall(shape, f, "kernels", "nsys"), wall(shape, f, "kernels", "cold"))
            if t is not None and f >= 100:
                out[f"{shape} x{f} kernels >= {KERNELS_SPEEDUP_MIN:g}x gpukernsum"] = {
                    "time_ratio": t, "pass": t >= KERNELS_SPEEDUP_MIN}
            for q in MEMORY_TARGETS:  # peak memory below nsys's, everywhere
                m = _ratio(rss(shape, f, q, "nsys"), rss(shape, f, q, "cold"))
                if m is not None:
                    out[f"{shape} x{f} {cmd(q)} less memory than {QUESTIONS[q].nsys}"] = {
                        "rss_ratio": m, "time_ratio": _ratio(wall(shape, f, q, "nsys"),
                                                             wall(shape, f, q, "cold")),
                        "pass": m > 1}
                b = get.get((shape, f, q, "nsys bound"))
                m = _ratio(rss(shape, f, q, "nsys bound"), rss(shape, f, q, "cold"))
                if m is not None and b is not None:
                    within = (f"'s first {b.runs[0].wall_s:.0f} s" if b.runs[0].rc is None
                              else "")
                    out[f"{shape} x{f} {cmd(q)} less memory than {QUESTIONS[q].nsys}"
                        f"{within}"] = {"rss_ratio": m, "pass": m > 1}
            # issue 38: the page within 2.5x of the first answer, on the same file
            r = _ratio(wall(shape, f, "report", "cold"), wall(shape, f, "nvtx", "cold"))
            if r is not None:
                out[f"{shape} x{f} report cold within {REPORT_MAX:g}x of nvtx-kernels"] = {
                    "time_ratio": r, "pass": r <= REPORT_MAX}
            for q in NEW_QUESTIONS:  # issue 28: the new answers against kernels
                r = _ratio(wall(shape, f, q, "cold"), wall(shape, f, "kernels", "cold"))
                if r is not None:
                    out[f"{shape} x{f} {cmd(q)} cold within {NEW_COLD_MAX:g}x of "
                        f"kernels"] = {"time_ratio": r, "pass": r <= NEW_COLD_MAX}
            for q in PEER_TARGETS:  # issue 38: faster than nsys-ai, cold and warm
                for ours, theirs in (("cold", "peer cold"), ("warm", "peer warm")):
                    r = _ratio(wall(shape, f, q, theirs), wall(shape, f, q, ours))
                    if r is not None:
                        out[f"{shape} x{f} {cmd(q)} {ours} faster than nsys-ai "
                            f"{QUESTIONS[q].peer}"] = {"time_ratio": r, "pass": r > 1}
        if 100 in factors:
            for q in MAIN + NEW_QUESTIONS:
                w = wall(shape, 100, q, "warm")
                if w is not None:
                    out[f"{shape} x100 warm {cmd(q)} < {WARM_MAX_S:g} s"] = {
                        "wall_s": w, "pass": w < WARM_MAX_S}
        for a, b in zip(factors, factors[1:], strict=False):
            for q in ("nvtx", "kernels"):
                lin = _ratio(wall(shape, b, q, "cold"), wall(shape, a, q, "cold"))
                if lin is not None and b == 4 * a:
                    out[f"{shape} {cmd(q)} x{b}/x{a} <= {LINEARITY_MAX:g}"] = {
                        "time_ratio": lin, "pass": lin <= LINEARITY_MAX}
    return out


# --------------------------------------------------------------------------- main

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--factors", default="30,100,300,1200",
                    help="replay factors (default 30,100,300,1200)")
    ap.add_argument("--shapes", default="shallow,nested,ddp",
                    help="shallow (the fastvideo fixture), nested (nested_export.py), ddp "
                         "(ddp_export.py)")
    ap.add_argument("--questions", default="all",
                    help="all (default), main (nvtx, kernels, ranges, dominant) or any of "
                         + ", ".join(QUESTIONS) + " (or their commands: nvtx-kernels, ...)")
    ap.add_argument("--every", action="store_true",
                    help=f"every question at every factor (default: above x{SMALL_MAX_FACTOR} "
                         "only the main four)")
    ap.add_argument("--repeat", type=int, default=3,
                    help="runs per nsys-mine command and nsys report (default 3)")
    ap.add_argument("--nvtxkernsum-repeat", type=int, default=0,
                    help="runs of the slow `nsys stats nvtxkernsum` (default: "
                         f"{AUTO_NVTX_RUNS} where the first takes under "
                         f"{AUTO_NVTX_MAX_S:g} s, else 1)")
    ap.add_argument("--nsys", help="nsys binary (default $NSYS, .cache/nsys, PATH)")
    ap.add_argument("--nsys-mine", dest="nsys_mine",
                    help="nsys-mine executable (default .venv/bin/nsys-mine)")
    ap.add_argument("--nsys-ai", dest="nsys_ai",
                    help="nsys-ai 0.3 executable, the peer (default $NSYS_AI or PATH; "
                         "none: not run)")
    ap.add_argument("--skip-nsys", action="store_true", help="time only nsys-mine (and nsys-ai)")
    ap.add_argument("--skip-peer", action="store_true", help="do not run nsys-ai")
    ap.add_argument("--nsys-bound", type=float, default=60, metavar="S",
                    help="run an nsys report too slow for this size (nvtxgpuproj above x4) "
                         "for S seconds: its peak memory so far, a lower bound (0: skip)")
    ap.add_argument("--timeout", type=float, default=900,
                    help="per-command limit in s (default 900)")
    ap.add_argument("--rebuild", action="store_true", help="rebuild the scaled files")
    ap.add_argument("--drop-files", action="store_true",
                    help="delete each scaled file after timing it (saves disk)")
    ap.add_argument("--keep-outputs", type=Path, metavar="DIR",
                    help="where the first run's output of every command goes (default "
                         "benchmarks/out)")
    ap.add_argument("--json", type=Path, metavar="FILE", help="save all results as JSON")
    ap.add_argument("--check", action="store_true",
                    help="exit 1 if a target is missed or a command failed")
    a = ap.parse_args(argv)

    factors = sorted(int(f) for f in a.factors.split(",") if f.strip())
    shapes = [s.strip() for s in a.shapes.split(",") if s.strip()]
    questions = parse_questions(a.questions)
    nsys = None if a.skip_nsys else find_nsys(a.nsys)
    mine = find_nsys_mine(a.nsys_mine)
    nsys_ai = None if a.skip_peer else find_nsys_ai(a.nsys_ai)
    compile_project()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    rules = OUT_DIR / "check_rules.toml"
    rules.write_text(CHECK_RULES)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=OUT_DIR) as tmp:
        floor = rss_floor(Path(tmp))
    print(f"peak-RSS floor of the launcher (/bin/true): {_fmt(floor, '.1f')} MB; "
          f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores", flush=True)
    results: list[Result] = []
    files: dict[str, dict] = {}
    for shape in shapes:
        src = FASTVIDEO if shape == "shallow" else built_source(shape, a.rebuild)
        for f in factors:
            asked = [q for q in questions
                     if a.every or f <= SMALL_MAX_FACTOR or q in MAIN]
            if not asked:
                continue
            path, meta = scaled_file(src, f, DEFAULT_GAP_NS, a.rebuild, shape)
            other = None
            if any(QUESTIONS[q].extra and "{other}" in QUESTIONS[q].extra for q in asked):
                other = (path if f == 1 else
                         scaled_file(src, f, OTHER_GAP_NS, a.rebuild, f"{shape}_b")[0])
            c = meta["counts"]
            files[f"{shape} x{f}"] = {"path": str(path), **meta,
                                      "other": str(other) if other else None}
            print(f"{shape} x{f}: {path.stat().st_size / 2**20:.0f} MiB, "
                  f"{c.get('CUPTI_ACTIVITY_KIND_KERNEL', 0):,} kernels, "
                  f"{c.get('NVTX_EVENTS_ranges', 0):,} NVTX ranges, "
                  f"{c.get('CUPTI_ACTIVITY_KIND_RUNTIME', 0):,} runtime rows; "
                  f"load average {os.getloadavg()[0]:.2f}", flush=True)
            results += bench_file(shape, path, f, nsys, mine, asked, a.repeat,
                                  a.nvtxkernsum_repeat, a.timeout, a.keep_outputs,
                                  counts=c, other=other, rules=rules, nsys_ai=nsys_ai,
                                  nsys_bound=a.nsys_bound)
            if a.drop_files:  # never the source (factor 1)
                for p in {path, other} - {src, None}:
                    assert p is not None
                    p.unlink(missing_ok=True)
                    p.with_name(p.name + ".json").unlink(missing_ok=True)
    print()
    print(table(results))
    print()
    found = checks(results, factors)
    for name, c in found.items():
        value = c["rss_ratio"] if "rss_ratio" in c else c.get("time_ratio", c.get("wall_s"))
        print(f"{'PASS' if c['pass'] else 'FAIL'}  {name}: {_fmt(value)}")
    total = time.perf_counter() - t_start
    print(f"\ntotal {total:.0f} s. nsys: {nsys or '-'}; nsys-mine: {' '.join(mine)}; "
          f"nsys-ai: {nsys_ai or '-'}; load average now {os.getloadavg()[0]:.2f}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({
            "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "host": {"machine": platform.machine(), "cpus": os.cpu_count(),
                     "python": platform.python_version(), "platform": platform.platform()},
            "nsys": nsys, "nsys_mine": mine, "nsys_ai": nsys_ai, "rss_floor_mb": floor,
            "files": files, "statistic": "wall and CPU: median of runs; RSS: max over runs",
            "results": [r.to_json() for r in results], "checks": found,
            "table": table(results), "total_seconds": round(total, 1),
        }, indent=1))
        print(f"results saved to {a.json}")
    if a.check:
        failed = any(not r.ok for r in results) or any(not c["pass"] for c in found.values())
        return 1 if failed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
