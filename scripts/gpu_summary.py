"""Summarize a run of the GPU suite: ``gpu_check.json`` and ``gpu_check.md`` in OUT_DIR.

    python scripts/gpu_summary.py OUT_DIR [--results FILE] [--pytest-exit N]

Reads the per-test record that ``tests/gpu/conftest.py`` writes when NSYS_MINE_GPU_RESULTS is
set (default ``OUT_DIR/gpu_results.json``; a missing file means pytest never got that far)
and the preflight's ``OUT_DIR/preflight.json`` when there is one (scripts/gpu_preflight.py:
imports, the whole suite's collection, carried and image packages), and adds the machine:
device, driver, torch, CUDA, cuDNN, Python, the git commit when there is one. The markdown is
what docs/GPU.md's "Runs" section collects. Standard library only (and torch when it can be
imported): it runs with the GPU machine's own python3.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUTCOMES = ("passed", "failed", "error", "skipped", "unfinished")  # unfinished: stopped
# The numbers a run is read for first (TFLOP/s, MFU, TTFT, TPOT, peak memory).
HEADLINE = ("tflops", "mfu_pct", "ttft_s", "tpot_s", "peak_allocated_bytes")


def _run(argv: list[str]) -> str | None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=ROOT)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def environment() -> dict[str, Any]:
    """What the run ran on; every field is None where it cannot be found out."""
    env: dict[str, Any] = {
        "python": platform.python_version(), "platform": platform.platform(),
        "host": platform.node(), "torch": None, "cuda": None, "cudnn": None, "devices": [],
        "driver": None, "git_commit": None, "git_dirty": None}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        if torch.backends.cudnn.is_available():
            env["cudnn"] = torch.backends.cudnn.version()
        if torch.cuda.is_available():
            for i in range(torch.cuda.device_count()):
                props = torch.cuda.get_device_properties(i)
                env["devices"].append({
                    "index": i, "name": torch.cuda.get_device_name(i),
                    "capability": f"{props.major}.{props.minor}",
                    "memory_bytes": props.total_memory,
                    "sms": props.multi_processor_count})
    except Exception as exc:  # a summary must come out even when torch is broken
        env["torch_error"] = f"{type(exc).__name__}: {exc}"
    if shutil.which("nvidia-smi"):
        out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if out:
            env["driver"] = out.splitlines()[0].strip()
    if shutil.which("git") and (ROOT / ".git").exists():
        env["git_commit"] = _run(["git", "rev-parse", "HEAD"])
        status = _run(["git", "status", "--porcelain", "--untracked-files=no"])
        env["git_dirty"] = None if status is None else bool(status)
    return env


def summarize(results: dict[str, Any] | None, pytest_exit: int | None,
              env: dict[str, Any], preflight: dict[str, Any] | None = None) -> dict[str, Any]:
    tests = list((results or {}).get("tests", []))
    counts = {o: sum(t["outcome"] == o for t in tests) for o in OUTCOMES}
    return {"date_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "pytest_exit": pytest_exit if pytest_exit is not None
            else (results or {}).get("pytest_exit"),
            "counts": counts, "environment": env, "preflight": preflight, "tests": tests}


def preflight_lines(pre: dict[str, Any]) -> list[str]:
    """The preflight in three lines: imports and CLI, the whole suite's collection, and which
    packages came with the wheels and which from the machine's python."""
    imports, cli, coll = pre.get("imports", {}), pre.get("cli", {}), pre.get("collect", {})
    failed = imports.get("failed", {})
    optional = imports.get("needs_optional", {})
    told = (f"{imports.get('imported', 0)} modules import"
            + (f", {len(failed)} do not ({', '.join(failed)})" if failed else "")
            + (f", {len(optional)} need a missing optional extra" if optional else "")
            + f"; `--help` {'ok' if cli.get('ok') else 'failed'}")
    skipped = coll.get("skipped_modules", {})
    collect = (f"{coll.get('collected', 0)} tests, {coll.get('errors', 0)} errors"
               + (f", {len(skipped)} modules skipped ("
                  + "; ".join(f"{m}: {why}" for m, why in skipped.items()) + ")"
                  if skipped else ""))
    carried = [p for p in pre.get("packages", []) if p["origin"] == "carried"]
    image = [p for p in pre.get("packages", []) if p["origin"] != "carried"]
    mine = pre.get("image", {})
    shadowed = [f"{p['name']} {mine[p['name']]}" for p in carried
                if mine.get(p["name"]) not in (None, p["version"])]
    return [f"- preflight (Python {pre.get('python')}): {told}; whole suite collects: "
            f"{collect}",
            "- from the wheels: " + (", ".join(f"{p['name']} {p['version']}" for p in carried)
                                     or "nothing")
            + (f" (first on PYTHONPATH, over the machine's {', '.join(shadowed)})"
               if shadowed else ""),
            "- from the machine's python: " + ", ".join(
                f"{p['name']} {p['version'] or 'MISSING'}" for p in image)]


# ---- markdown ------------------------------------------------------------------------------
def human(name: str, value: Any) -> str:
    """A recorded number for people, by the unit its name ends with."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if name.endswith("_bytes"):
        for scale, unit in ((1024**3, "GiB"), (1024**2, "MiB"), (1024, "KiB")):
            if abs(value) >= scale:
                return f"{value / scale:.2f} {unit}"
        return f"{value} B"
    if name.endswith("_per_s"):  # a rate (tokens_per_s), not a duration
        return f"{value:.4g}/s"
    if name.endswith("_s"):
        for scale, unit in ((1, "s"), (1e-3, "ms"), (1e-6, "µs")):
            if abs(value) >= scale:
                return f"{value / scale:.3g} {unit}"
        return f"{value * 1e9:.3g} ns"
    if name.endswith("_pct"):
        return f"{value:.3g} %"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _module(test: dict[str, Any]) -> str:
    return Path(test["test"].split("::", 1)[0]).stem.removeprefix("test_gpu_")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def device_line(env: dict[str, Any]) -> str:
    devices = env.get("devices") or []
    if not devices:
        return "no CUDA device"
    first = devices[0]
    line = (f"{first['name']} (compute capability {first['capability']}, "
            f"{first['memory_bytes'] / 1024**3:.1f} GiB, {first['sms']} SMs)")
    return line + (f", {len(devices)} visible" if len(devices) > 1 else "")


def markdown(summary: dict[str, Any]) -> str:
    env, counts = summary["environment"], summary["counts"]
    told = ", ".join(f"{counts[o]} {o}" for o in OUTCOMES if counts[o]) or "no test ran"
    lines = [f"### GPU check {summary['date_utc'][:10]}: {device_line(env)}", "",
             f"- result: {told} (pytest exit status {summary['pytest_exit']})",
             f"- device: {device_line(env)}; driver {env.get('driver') or 'unknown'}",
             f"- torch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}, "
             f"Python {env.get('python')}",
             f"- date (UTC): {summary['date_utc']}; host {env.get('host')}; commit "
             f"{(env.get('git_commit') or 'unknown')[:12]}"
             f"{' (uncommitted changes)' if env.get('git_dirty') else ''}", ""]
    if env.get("torch_error"):
        lines[-1:-1] = [f"- torch could not be inspected: {env['torch_error']}"]
    if summary.get("preflight"):
        lines[-1:-1] = preflight_lines(summary["preflight"])
    if not summary["tests"]:
        lines.append("pytest recorded no test (see pytest.log).")
        return "\n".join(lines) + "\n"
    headline = [f"{_module(t)} {k} {human(k, v)}" for t in summary["tests"]
                for k, v in t["properties"].items() if any(h in k for h in HEADLINE)]
    if headline:
        lines += ["Headline numbers: " + "; ".join(headline) + ".", ""]
    lines += ["| test | outcome | time | key numbers |", "| --- | --- | ---: | --- |"]
    for t in summary["tests"]:
        name = t["test"].split("::", 1)[-1]
        numbers = "; ".join(f"{k} {human(k, v)}" for k, v in t["properties"].items())
        lines.append(f"| {_cell(_module(t) + ': ' + name)} | {t['outcome']} | "
                     f"{t['duration_s']:.1f} s | {_cell(numbers)} |")
    told_why = [t for t in summary["tests"] if t["outcome"] != "passed" and t["message"]]
    if told_why:
        lines += ["", "Not passed:", ""]
        lines += [f"- `{t['test'].split('::', 1)[-1]}` ({t['outcome']}): "
                  f"{_cell(t['message'])[:500]}" for t in told_why]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--results", type=Path, help="default: OUT_DIR/gpu_results.json")
    parser.add_argument("--pytest-exit", type=int)
    args = parser.parse_args(argv)
    results_path = args.results or args.out_dir / "gpu_results.json"
    results = json.loads(results_path.read_text()) if results_path.exists() else None
    pre_path = args.out_dir / "preflight.json"
    preflight = json.loads(pre_path.read_text()) if pre_path.exists() else None
    summary = summarize(results, args.pytest_exit, environment(), preflight)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "gpu_check.json").write_text(json.dumps(summary, indent=1) + "\n")
    (args.out_dir / "gpu_check.md").write_text(markdown(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
