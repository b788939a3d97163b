"""Record what every export command prints, in every format, on every shared fixture (and
what ``ranks``, ``check`` and ``report`` say of each folder of rank exports there).

    python scripts/snapshot_outputs.py OUT_DIR [--fixtures DIR] [--jobs N] [--only NAME]

Each run is a real ``nsys-mine`` process (a fresh cache folder per fixture, so the first
question of each fixture is cold and later ones may be warm) and leaves three files in
``OUT_DIR/<fixture>/``: ``<run>.out`` (stdout), ``<run>.err`` (stderr) and ``<run>.rc`` (exit
code); ``report`` pages are copied in as written. Two snapshots, taken before and after a
change, are compared with ``diff -r BEFORE AFTER``: any difference is a behaviour change that
must be named.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORMATS = ("table", "md", "csv", "json", "latex", "text")
# a range of each fixture that has NVTX ranges around kernels, for --within and --range
WITHIN = {
    "cs336_bolongcheng_small_fwd_A100": "profile",
    "cs336_lizhieffe_ddp53_profile": "distributed_training",
    "nvfuser_h100_nsys2024.6": "KernelExecutor::runFusion",
    "pipit_saxpy_mpi_a100_nsys2022.2": "saxpy",
    "dlprof_pytorch_rtx2070s_nsys2022.1": "conv2d @ dummy_network.py:25",
}
CHECK_RULES = """\
[[rule]]
name = "a gemm dominates"
dominant_category = "gemm"

[[rule]]
name = "gemm share"
category = "gemm"
min_share_pct = 10
"""


def runs_for(fixture: Path, partner: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(run name, arguments, extra environment) of every run on one fixture."""
    f = str(fixture)
    out: list[tuple[str, list[str], dict[str, str]]] = []

    def each_format(name: str, args: list[str]) -> None:
        for fmt in FORMATS:
            out.append((f"{name}.{fmt}", [*args, "--format", fmt], {}))
        out.append((f"{name}.table80", [*args], {"COLUMNS": "80"}))

    for cmd in ("info", "kernels", "ranges", "nvtx-kernels", "dominant", "memops", "gpus",
                "gaps", "longest", "launches", "collectives"):
        each_format(cmd, [cmd, f])
    out += [
        ("kernels.short.json", ["kernels", f, "--name-kind", "short", "--format", "json"], {}),
        ("kernels.mangled.csv", ["kernels", f, "--name-kind", "mangled", "--format", "csv"], {}),
        ("kernels.top3", ["kernels", f, "--top", "3"], {}),
        ("kernels.wide", ["kernels", f, "--wide"], {}),
        ("ranges.depth1.json", ["ranges", f, "--depth", "1", "--format", "json"], {}),
        ("ranges.match.csv", ["ranges", f, "--match", "aten::*", "--match", "*conv*",
                              "--format", "csv"], {}),
        ("ranges.merge.json", ["ranges", f, "--merge-op-ids", "on", "--format", "json"], {}),
        ("nvtx-kernels.innermost.json", ["nvtx-kernels", f, "--attribution", "innermost",
                                         "--format", "json"], {}),
        ("nvtx-kernels.innermost.table", ["nvtx-kernels", f, "--attribution", "innermost"], {}),
        ("nvtx-kernels.depth2.csv", ["nvtx-kernels", f, "--depth", "2", "--format", "csv"], {}),
        ("dominant.nomerge.json", ["dominant", f, "--merge-op-ids", "off", "--format", "json"],
         {}),
        ("dominant.innermost.json", ["dominant", f, "--attribution", "innermost",
                                     "--format", "json"], {}),
        ("dominant.depth1.table", ["dominant", f, "--depth", "1"], {}),
        ("ranges.instances.csv", ["ranges", f, "--instances", "--format", "csv"], {}),
        ("ranges.instances.table", ["ranges", f, "--instances"], {}),
        ("kernels.by-device.json", ["kernels", f, "--by", "device", "--format", "json"], {}),
        ("ranges.by-stream.csv", ["ranges", f, "--by", "stream", "--format", "csv"], {}),
        ("dominant.by-process.table", ["dominant", f, "--by", "process"], {}),
        ("gaps.min0.json", ["gaps", f, "--min-gap-ms", "0.01", "--format", "json"], {}),
        ("longest.count5.csv", ["longest", f, "--count", "5", "--format", "csv"], {}),
        ("categories.json", ["categories", "--format", "json"], {}),
        ("attention.table", ["attention", f], {}),
        ("attention.json", ["attention", f, "--size", "small", "--context", "128", "--batch",
                            "4", "--format", "json"], {}),
        ("compare.self.json", ["compare", f, f, "--format", "json"], {}),
        ("compare.self.table", ["compare", f, f], {}),
        ("compare.partner.table", ["compare", f, str(partner)], {}),
        ("diff.self.json", ["diff", f, f, "--format", "json"], {}),
        ("diff.self.table", ["diff", f, f], {}),
        ("diff.partner.json", ["diff", f, str(partner), "--format", "json"], {}),
        ("check.json", ["check", f, "--rules", "{rules}", "--format", "json"], {}),
        ("check.table", ["check", f, "--rules", "{rules}"], {}),
        ("multi.kernels.table", ["kernels", f, str(partner)], {}),
        ("multi.dominant.json", ["dominant", f, str(partner), "--format", "json"], {}),
        ("multi.ranges.csv", ["ranges", f, str(partner), "--format", "csv"], {}),
        ("report.md", ["report", f, "--format", "md", "-o", "{tmp}/report.md"], {}),
        ("report.html", ["report", f, "-o", "{tmp}/report.html"], {}),
        ("ranks.table", ["ranks", f], {}),
        ("ranks.json", ["ranks", f, "--format", "json"], {}),
        ("ranks.collectives.csv", ["ranks", f, "--collectives", "--format", "csv"], {}),
    ]
    within = WITHIN.get(fixture.name.split(".")[0])
    if within:
        out += [
            ("within.kernels.json", ["kernels", f, "--within", within, "--format", "json"], {}),
            ("within.ranges.table", ["ranges", f, "--within", within], {}),
            ("within.nvtx-kernels.csv", ["nvtx-kernels", f, "--within", within,
                                         "--format", "csv"], {}),
            ("within.dominant.json", ["dominant", f, "--within", within, "--format", "json"],
             {}),
            ("range.kernels.json", ["kernels", f, "--range", within, "--format", "json"], {}),
            ("range.dominant.text", ["dominant", f, "--range", within, "--format", "text"], {}),
            ("range.compare.json", ["compare", f, "--range", within, "--format", "json"], {}),
            ("range.check.json", ["check", f, "--rules", "{range_rules}", "--format", "json"],
             {}),
            ("within.gpus.json", ["gpus", f, "--within", within, "--format", "json"], {}),
            ("within.gaps.json", ["gaps", f, "--within", within, "--format", "json"], {}),
            ("within.launches.csv", ["launches", f, "--within", within, "--format", "csv"],
             {}),
            ("within.longest.json", ["longest", f, "--within", within, "--format", "json"],
             {}),
        ]
    return out


def folder_runs(folder: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(run name, arguments, extra environment) of every run on a folder of rank exports."""
    d = str(folder)
    return [
        ("ranks.table", ["ranks", d], {}),
        ("ranks.table80", ["ranks", d], {"COLUMNS": "80"}),
        ("ranks.json", ["ranks", d, "--format", "json"], {}),
        ("ranks.csv", ["ranks", d, "--format", "csv"], {}),
        ("ranks.collectives.table", ["ranks", d, "--collectives"], {}),
        ("ranks.collectives.json", ["ranks", d, "--collectives", "--format", "json"], {}),
        ("ranks.workers1.json", ["ranks", d, "--workers", "1", "--format", "json"], {}),
        ("check.ranks.json", ["check", d, "--rules", "{ranks_rules}", "--format", "json"], {}),
        ("check.ranks.table", ["check", d, "--rules", "{ranks_rules}"], {}),
        ("report.md", ["report", d, "--format", "md", "-o", "{tmp}/report.md"], {}),
    ]


RANKS_RULES = """\
[[rule]]
max_late_ms = 0.5

[[rule]]
max_wait_pct = 10

[[rule]]
min_instances = 1
range = "x"
"""


def run_one(exe: str, fixture_dir: Path, name: str, args: list[str], env_extra: dict[str, str],
            cache: Path, rules: Path, range_rules: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace("{tmp}", tmp).replace("{range_rules}", str(range_rules))
                .replace("{ranks_rules}", str(rules.parent / "ranks_rules.toml"))
                .replace("{rules}", str(rules)) for a in args]
        env = {**os.environ, "COLUMNS": "120", "NSYS_MINE_CACHE_DIR": str(cache),
               "NO_COLOR": "1", **env_extra}
        env.pop("FORCE_COLOR", None)
        proc = subprocess.run([exe, *args], capture_output=True, env=env, timeout=600,
                              stdin=subprocess.DEVNULL, cwd=tmp)
        (fixture_dir / f"{name}.out").write_bytes(proc.stdout)
        (fixture_dir / f"{name}.err").write_bytes(proc.stderr.replace(tmp.encode(), b"TMP"))
        (fixture_dir / f"{name}.rc").write_text(f"{proc.returncode}\n")
        for written in sorted(Path(tmp).iterdir()):
            shutil.copyfile(written, fixture_dir / f"{name}.{written.name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--fixtures", type=Path, default=ROOT.parent / "shared" / "fixtures" / "nsys")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", action="append", default=[], help="fixture name (repeatable)")
    ap.add_argument("--exe", default=str(ROOT / ".venv" / "bin" / "nsys-mine"))
    args = ap.parse_args()
    fixtures = sorted(p for p in args.fixtures.iterdir()
                      if p.suffix in (".sqlite", ".nsys-rep")
                      and (not args.only or p.name.split(".")[0] in args.only
                           or p.name in args.only))
    folders = sorted(p for p in args.fixtures.iterdir() if p.is_dir()
                     and (not args.only or p.name in args.only))
    if not fixtures and not folders:
        sys.exit(f"no fixtures in {args.fixtures}")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nsys-mine-snapshot-"))
    rules = work / "rules.toml"
    rules.write_text(CHECK_RULES)
    (work / "ranks_rules.toml").write_text(RANKS_RULES)
    jobs = []
    for i, fixture in enumerate(fixtures):
        partner = fixtures[(i + 1) % len(fixtures)]
        fixture_dir = args.out / fixture.name
        fixture_dir.mkdir(exist_ok=True)
        range_rules = work / f"{fixture.name}.rules.toml"
        within = WITHIN.get(fixture.name.split(".")[0], "")
        range_rules.write_text(
            f'[[rule]]\nrange = "{within}"\nmin_instances = 1\n\n'
            f'[[rule]]\nrange = "{within}"\ncategory = "gemm"\nmax_share_pct = 90\n\n'
            f'[[rule]]\nrange = "{within}"\nmax_gpu_ns_per_instance = 1e6\n')
        for name, run_args, env in runs_for(fixture, partner):
            jobs.append((fixture_dir, name, run_args, env, work / fixture.name, range_rules))
    for folder in folders:
        fixture_dir = args.out / folder.name
        fixture_dir.mkdir(exist_ok=True)
        for name, run_args, env in folder_runs(folder):
            jobs.append((fixture_dir, name, run_args, env, work / folder.name, rules))
    # one fixture's runs in order (its cache goes from cold to warm), fixtures in parallel
    by_fixture: dict[Path, list] = {}
    for job in jobs:
        by_fixture.setdefault(job[0], []).append(job)

    def run_fixture(items: list) -> int:
        for fixture_dir, name, run_args, env, cache, range_rules in items:
            run_one(args.exe, fixture_dir, name, run_args, env, cache, rules, range_rules)
        return len(items)

    with ThreadPoolExecutor(args.jobs) as pool:
        done = sum(pool.map(run_fixture, by_fixture.values()))
    shutil.rmtree(work, ignore_errors=True)
    print(f"{done} runs on {len(fixtures) + len(folders)} fixtures in {args.out}")


if __name__ == "__main__":
    main()
