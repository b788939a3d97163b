"""Every table command on every shared fixture: wall time in table format vs JSON, side by side.

    .venv/bin/python benchmarks/human_output.py [--repeat 3] [--fixtures DIR]

Targets (issue: answers people can read): every table command answers in under 3 s on every
shared fixture, and human output is no slower than JSON (it renders the top 20 rows only).
Prints one row per (command, fixture): median wall seconds of `-f table` and `-f json` (each a
fresh process, as a user runs it, COLUMNS=120, stdout to /dev/null) and their ratio. Then every
row (`--top 0`) of the largest tables: the emit_nvtx fixture with one row per operator call.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = ["info", "kernels", "ranges", "nvtx-kernels", "dominant", "memops"]


def wall(args: list[str]) -> tuple[float, int]:
    env = dict(os.environ, COLUMNS="120")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "profile_cli", *args], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0, proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--fixtures", type=Path, default=ROOT.parent / "shared" / "fixtures" / "nsys")
    args = ap.parse_args()
    fixtures = sorted(args.fixtures.glob("*.sqlite"))
    if not fixtures:
        print(f"no fixtures in {args.fixtures}", file=sys.stderr)
        return 1
    print(f"{'command':13s} {'fixture':58s} {'table s':>8s} {'json s':>8s} {'table/json':>10s}")
    worst = 0.0
    for command in COMMANDS:
        for fx in fixtures:
            times: dict[str, list[float]] = {"table": [], "json": []}
            codes = set()
            for _ in range(args.repeat):
                for fmt in ("table", "json"):
                    t, code = wall([command, str(fx), "-f", fmt])
                    times[fmt].append(t)
                    codes.add(code)
            if codes != {0}:  # e.g. memops on an export without memcpy: an explained error
                print(f"{command:13s} {fx.name:58s} {'(error: exit ' + str(codes) + ')':>28s}")
                continue
            t_table = statistics.median(times["table"])
            t_json = statistics.median(times["json"])
            worst = max(worst, t_table)
            print(f"{command:13s} {fx.name:58s} {t_table:8.2f} {t_json:8.2f} "
                  f"{t_table / t_json:10.2f}")
    print(f"slowest table answer: {worst:.2f} s (target: under 3 s)")
    big = [fx for fx in fixtures if fx.name.startswith("fastvideo")]
    for fx in big:
        print(f"\nevery row (--top 0 --merge-op-ids off), {fx.name}:")
        for command in ("ranges", "nvtx-kernels", "dominant"):
            t = {fmt: statistics.median(
                wall([command, str(fx), "--top", "0", "--merge-op-ids", "off", "-f", fmt])[0]
                for _ in range(args.repeat)) for fmt in ("table", "json")}
            print(f"{command:13s} {'':58s} {t['table']:8.2f} {t['json']:8.2f} "
                  f"{t['table'] / t['json']:10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
