#!/usr/bin/env python3
"""Where the time of one nsys-mine command goes: cProfile, cold (empty cache) then warm.

    .venv/bin/python benchmarks/profile_breakdown.py FILE [--command nvtx-kernels]
        [--format json]      (the page: --command report --format html)

Runs ``python -m cProfile -m profile_cli COMMAND FILE --format FORMAT`` twice in a fresh
cache folder (cold: it reads the export; warm: from the cache) and prints the cumulative
time of the stages (imports, reading, the launch join, attribution, names, the report,
rendering). cProfile slows Python-level code down, and it sees only the main thread: the
reading threads show up as the main thread waiting for them.
"""
from __future__ import annotations

import argparse
import os
import pstats
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# (label, file suffix, function name): cumulative time of the first match
STAGES = [
    ("whole command", "/entry.py", "<module>"),
    ("imports at start (typer)", "profile_cli/app.py", "<module>"),
    ("building the commands (every analysis imported)", "profile_cli/app.py", "new_app"),
    ("load: the column groups the analysis needs", "reports/pipeline/session.py", "load"),
    ("  of which reading threads (waited for)", "nsys_parsers/trace.py", "_read"),
    ("  of which the launch join", "nsys_parsers/kernels.py", "join_launches"),
    ("  of which writing the cache", "nsys_parsers/cache.py", "put"),
    ("attribution pairs", "nsys_parsers/attribution.py", "attribute"),
    ("names of ranges (by rowid or by a scan)", "nsys_parsers/trace.py", "range_names"),
    ("report (nvtx-kernels)", "reports/analyses/nvtx_kernels.py", "nvtx_kernel_report"),
    ("report (ranges)", "reports/analyses/ranges.py", "range_report"),
    ("report (dominant)", "reports/analyses/dominant.py", "dominant_report"),
    ("report (kernels)", "reports/analyses/kernels.py", "summarize_kernels"),
    ("rendering", "reports/render/__init__.py", "render_rows"),
    ("page (report): every section", "reports/page/export.py", "export_page"),
    ("  of which the timeline", "reports/page/timeline.py", "timeline_figures"),
    ("  of which PNG files written", "reports/page/plots.py", "_png"),
]


PAGE = "page (report): every section"
BUILD = "building the commands (every analysis imported)"
OTHER = "everything else (numpy and report imports, option parsing, opening the export)"


def stage_times(prof: Path) -> list[tuple[str, float]]:
    stats = pstats.Stats(str(prof)).stats  # type: ignore[attr-defined]
    out = []
    for label, suffix, func in STAGES:
        best = None
        for (file, _line, name), (_cc, _nc, _tt, ct, _callers) in stats.items():
            if name == func and file.replace("\\", "/").endswith(suffix):
                best = ct if best is None else max(best, ct)
        if best is not None:
            out.append((label, best))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", type=Path)
    ap.add_argument("--command", default="nvtx-kernels")
    ap.add_argument("--format", default="json")
    a = ap.parse_args(argv)
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        env["NSYS_MINE_CACHE_DIR"] = str(Path(tmp) / "cache")
        rows = {}
        entry = Path(tmp) / "entry.py"
        entry.write_text("import sys\nfrom profile_cli.app import main\nmain(sys.argv[1:])\n")
        for run in ("cold", "warm"):
            prof = Path(tmp) / f"{run}.prof"
            subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), str(entry),
                            a.command, str(a.file), "--format", a.format,
                            "--output", str(Path(tmp) / "out")], env=env, cwd=ROOT,
                           check=True)
            rows[run] = dict(stage_times(prof))
    print(f"| stage ({a.command} --format {a.format}, {a.file.name}) | cold s | warm s |")
    print("| --- | ---: | ---: |")
    for run in ("cold", "warm"):  # what no stage names: imports inside the command, ...
        top = [v for k, v in rows[run].items() if k not in (
            "whole command", "imports at start (typer)") and not k.startswith(" ")]
        if PAGE in rows[run]:  # the page holds the loads and reports above
            top = [rows[run][k] for k in (PAGE, BUILD) if k in rows[run]]
        rows[run][OTHER] = rows[run].get("whole command", 0.0) - sum(top)
    for label in [s[0] for s in STAGES] + [OTHER]:
        c, w = rows["cold"].get(label), rows["warm"].get(label)
        if c is None and w is None:
            continue
        print(f"| {label} | {'-' if c is None else f'{c:.2f}'} | "
              f"{'-' if w is None else f'{w:.2f}'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
