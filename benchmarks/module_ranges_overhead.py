#!/usr/bin/env python3
"""What ``--nvtx modules`` costs a program: the built-in model's ``nsys-mine bench`` with module
ranges on and off, with an A/A control (off vs off) for the noise.

    .venv/bin/python benchmarks/module_ranges_overhead.py [--rounds 5] [--steps 20]
        [--size tiny] [--mode train] [--nsys PATH] [--no-nsys] [--json FILE]

Each round runs, one after the other in separate processes, the same bench (``python -m
profile_cli bench --nvtx off ...``, the model's own ranges off) as

- ``off``:      the plain command,
- ``off (A/A)``: the plain command again,
- ``modules``:  the command through ``nvtx_model/launch.py --nvtx modules`` (a range around
  every nn.Module call and its backward),
- ``modules,steps``: the same with step and optimizer ranges,

first without a profiler (the hooks' own cost: NVTX calls return at once) and then under nsys
(``nsys-mine profile -- ...``, nsys recording every range). A run's time is the bench's median
step time; a variant's ratio is the median over rounds of its time divided by ``off``'s in the
same round, so that a slow moment of the machine hits all variants of a round alike.

Separate processes differ by more than the hooks cost on a small shared machine, so the same
comparison is also made inside one process: four copies of the bench's workload (same seed)
stepped side by side (off, off, modules, modules+steps, off, ...), the hooks installed around
the steps of the copies that have them, with the PyPI nvtx backend (``--interleaved-steps``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCHER = ROOT / "nvtx_model" / "launch.py"
VARIANTS = {"off": None, "off (A/A)": None, "modules": "modules", "modules,steps": "modules,steps"}


def bench_argv(args: argparse.Namespace) -> list[str]:
    return ["-m", "profile_cli", "bench", "--size", args.size, "--context", str(args.context),
            "--mode", args.mode, "--nvtx", "off", "--warmup", str(args.warmup), "--steps",
            str(args.steps), "--device", "cpu", "--threads", str(args.threads), "--format",
            "json"]


def rows_in(text: str) -> list[dict]:
    """The bench's JSON rows in a program's output (nsys's own lines around them)."""
    start = text.index("[")
    return json.loads(text[start:text.index("\n]", start) + 2])


def run_plain(nvtx: str | None, args: argparse.Namespace) -> float:
    launch = [str(LAUNCHER), "--nvtx", nvtx] if nvtx else []
    proc = subprocess.run([sys.executable, *launch, *bench_argv(args)], cwd=ROOT,
                          capture_output=True, text=True, check=True, timeout=600)
    return rows_in(proc.stdout)[0]["median_s"]


def run_nsys(nvtx: str | None, args: argparse.Namespace, out: Path) -> float:
    argv = [sys.executable, "-m", "profile_cli", "profile", "--out-dir", str(out), "--force",
            "--nvtx", nvtx or "off", "--format", "json", "--timeout", "600"]
    if args.nsys:
        argv += ["--nsys", args.nsys]
    proc = subprocess.run([*argv, "--", sys.executable, *bench_argv(args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"nsys-mine profile failed:\n{proc.stderr}")
    sidecar = json.loads(Path(json.loads(proc.stdout)["export"]).with_suffix(".json")
                         .read_text())
    return rows_in(Path(sidecar["log"]).read_text())[0]["median_s"]


def measure(run, rounds: int) -> dict[str, dict]:
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for r in range(rounds):
        for label, nvtx in VARIANTS.items():
            times[label].append(run(nvtx))
        print(f"  round {r + 1}/{rounds}: " + ", ".join(
            f"{k} {v[-1] * 1e3:.2f} ms" for k, v in times.items()), file=sys.stderr)
    out = {}
    for label in VARIANTS:
        ratios = [t / off for t, off in zip(times[label], times["off"], strict=True)]
        out[label] = {"median_step_ms": statistics.median(times[label]) * 1e3,
                      "min_step_ms": min(times[label]) * 1e3,
                      "ratio_to_off": statistics.median(ratios),
                      "ratio_min": min(ratios), "ratio_max": max(ratios)}
    return out


def module_calls(args: argparse.Namespace) -> tuple[int, int]:
    """(module calls, backward ranges) of one step of the bench's model."""
    import torch

    from nvtx_model import nvtx_ranges as nv
    from nvtx_model.config import PRESETS, ModelConfig, RunConfig
    from nvtx_model.harness import Workload
    from nvtx_model.program_nvtx import ProgramHooks, ProgramNvtx
    from nvtx_model.runtime import CpuRuntime

    model = ModelConfig.from_shape(PRESETS[args.size], context_length=args.context)
    cfg = RunConfig(size=args.size, model=model, mode=args.mode, nvtx="off", device="cpu",
                    warmup=0, steps=1)
    work = Workload(cfg, CpuRuntime(), nv.Instrumentation("off"))
    hooks = ProgramHooks(ProgramNvtx(modules=True), backend=nv.RecordingBackend())
    hooks.install(torch)
    try:
        work.step()
    finally:
        hooks.remove()
    return hooks.forward_ranges, hooks.backward_ranges


def interleaved(args: argparse.Namespace) -> dict[str, dict]:
    """Step times of four copies of the bench's workload stepped side by side in this
    process; the hooks are installed around the steps of the copies that have them."""
    import torch

    from nvtx_model import nvtx_ranges as nv
    from nvtx_model.config import PRESETS, ModelConfig, RunConfig
    from nvtx_model.harness import Workload
    from nvtx_model.program_nvtx import ProgramHooks, ProgramNvtx
    from nvtx_model.runtime import CpuRuntime

    torch.set_num_threads(args.threads)
    model = ModelConfig.from_shape(PRESETS[args.size], context_length=args.context)
    work = {}
    for label in VARIANTS:
        cfg = RunConfig(size=args.size, model=model, mode=args.mode, nvtx="off", device="cpu",
                        warmup=0, steps=1)
        work[label] = Workload(cfg, CpuRuntime(), nv.Instrumentation("off"))
    backend = nv.PyNvtxBackend()
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for i in range(args.warmup + args.interleaved_steps):
        for label, nvtx in VARIANTS.items():
            hooks = None
            if nvtx:
                hooks = ProgramHooks(ProgramNvtx.parse(nvtx), backend=backend)
                hooks.install(torch)
            try:
                t = work[label].step().total_s
            finally:
                if hooks is not None:
                    hooks.remove()
            if i >= args.warmup:
                times[label].append(t)
    out = {}
    for label in VARIANTS:
        ratios = [t / off for t, off in zip(times[label], times["off"], strict=True)]
        out[label] = {"median_step_ms": statistics.median(times[label]) * 1e3,
                      "min_step_ms": min(times[label]) * 1e3,
                      "ratio_to_off": statistics.median(ratios),
                      "ratio_min": min(ratios), "ratio_max": max(ratios)}
    return out


def per_call(repeat: int = 7, iters: int = 200, width: int = 32) -> list[dict]:
    """µs per module call that the hooks add: a chain of ``width`` small Linear layers (so
    that the hooks, not the arithmetic, dominate), forward under no_grad and forward +
    backward, without hooks and with modules ranges (no-op and PyPI nvtx backends); the
    minimum over ``repeat`` runs of ``iters`` passes."""
    from timeit import default_timer as timer

    import torch

    from nvtx_model import nvtx_ranges as nv
    from nvtx_model.program_nvtx import ProgramHooks, ProgramNvtx

    torch.set_num_threads(1)
    chain = torch.nn.Sequential(*(torch.nn.Linear(8, 8) for _ in range(width)))
    x = torch.randn(1, 8)
    calls = width + 1  # the chain and its layers

    def forward() -> None:
        with torch.no_grad():
            chain(x)

    def train() -> None:
        chain(x).sum().backward()

    def best(fn) -> float:
        fn()
        out = []
        for _ in range(repeat):
            t = timer()
            for _ in range(iters):
                fn()
            out.append((timer() - t) / iters)
        return min(out)

    rows = []
    for name, fn in (("forward (no_grad)", forward), ("forward + backward", train)):
        base = best(fn)
        for label, backend in (("no-op backend", nv.NoopBackend()),
                               ("PyPI nvtx", nv.PyNvtxBackend())):
            hooks = ProgramHooks(ProgramNvtx(modules=True), backend=backend)
            hooks.install(torch)
            try:
                with_hooks = best(fn)
            finally:
                hooks.remove()
            rows.append({"pass": name, "backend": label, "base_us_per_call": base / calls * 1e6,
                         "added_us_per_call": (with_hooks - base) / calls * 1e6})
    return rows


def table(title: str, results: dict[str, dict], over: str = "rounds") -> None:
    print(f"\n### {title}\n")
    print(f"| variant | median step | min step | ratio to off (median, min-max over {over}) |")
    print("| --- | ---: | ---: | ---: |")
    for label, r in results.items():
        print(f"| {label} | {r['median_step_ms']:.2f} ms | {r['min_step_ms']:.2f} ms | "
              f"{r['ratio_to_off']:.4f} ({r['ratio_min']:.3f}-{r['ratio_max']:.3f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--context", type=int, default=128)
    parser.add_argument("--mode", default="train")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--interleaved-steps", type=int, default=40,
                        help="steps of each copy in the one-process comparison (0: skip it)")
    parser.add_argument("--nsys", help="the nsys binary (default: as nsys-mine finds it)")
    parser.add_argument("--no-nsys", action="store_true", help="only the runs without nsys")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--per-call-only", action="store_true",
                        help="only the cost per module call (seconds, not minutes)")
    args = parser.parse_args()

    forward, backward = module_calls(args)
    print(f"bench: {args.size}, context {args.context}, batch 4, {args.mode}, CPU, "
          f"{args.threads} thread(s), {args.warmup} warmup + {args.steps} measured steps; "
          f"--nvtx modules adds {forward} forward and {backward} backward ranges per step")
    results: dict = {"module_ranges_per_step": {"forward": forward, "backward": backward}}
    results["per_call"] = per_call()
    print("\n### Cost per module call (a chain of 32 Linear(8, 8), batch 1, min of 7 x 200)\n")
    print("| pass | backend | µs per call without hooks | µs added by the hooks |")
    print("| --- | --- | ---: | ---: |")
    for r in results["per_call"]:
        print(f"| {r['pass']} | {r['backend']} | {r['base_us_per_call']:.1f} | "
              f"{r['added_us_per_call']:.1f} |")
    if args.per_call_only:
        return
    if args.interleaved_steps:
        results["interleaved"] = interleaved(args)
        table(f"In one process, side by side ({args.interleaved_steps} steps of each copy, "
              f"no profiler)", results["interleaved"], over="steps")
    print("without a profiler:", file=sys.stderr)
    results["plain"] = measure(lambda nvtx: run_plain(nvtx, args), args.rounds)
    table(f"Without a profiler ({args.rounds} rounds)", results["plain"])
    if not args.no_nsys:
        print("under nsys:", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            results["nsys"] = measure(lambda nvtx: run_nsys(nvtx, args, Path(tmp)),
                                      args.rounds)
        table(f"Under nsys, recording the ranges ({args.rounds} rounds)", results["nsys"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
