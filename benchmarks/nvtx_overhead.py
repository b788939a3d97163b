#!/usr/bin/env python3
"""What the NVTX instrumentation costs: per range, and per training step of the tiny model.

    .venv/bin/python benchmarks/nvtx_overhead.py [--pairs 200000] [--repeat 5] [--steps 40]
                                                 [--mode train] [--threads 1] [--json FILE]

1. Per-range overhead: ``with nvtx_range("step"): pass`` timed over --pairs iterations for each
   backend: level off (the helper returns a shared null context), the helper with a no-op
   backend at level fine, the recording backend (tests), the PyPI ``nvtx`` package (the CPU
   path) and its raw ``push_range``/``pop_range`` without the helper, and ``torch.cuda.nvtx``
   where CUDA is available. The cost of the empty loop is subtracted; µs per push/pop pair,
   min and median over --repeat runs.
2. Step-time ratio: four copies of the tiny model on CPU (same seed): --nvtx off, off again
   (an A/A control that shows the noise floor), coarse and fine (PyPI nvtx backend), stepped
   side by side in one process (off, off, coarse, fine, off, off, ...) so that machine noise
   hits all alike. Reports each copy's median step time and the median over rounds of its step
   time divided by that of off in the same round, and the overhead predicted from the
   per-range cost.

Without a profiler attached, NVTX calls return almost at once; run the script under
``nsys profile --trace=nvtx --sample=none --cpuctxsw=none -o OUT python
benchmarks/nvtx_overhead.py`` to measure the cost with nsys recording every range.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from timeit import default_timer as timer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nvtx_model import nvtx_ranges as nv  # noqa: E402


def time_pairs(instrumentation: nv.Instrumentation, pairs: int) -> float:
    """Seconds for ``pairs`` push/pop pairs of ``step`` under ``instrumentation``."""
    rng = nv.nvtx_range
    name = nv.STEP
    with nv.activated(instrumentation):
        start = timer()
        for _ in range(pairs):
            with rng(name):
                pass
        return timer() - start


def time_raw_nvtx(pairs: int) -> float:
    import nvtx

    push, pop = nvtx.push_range, nvtx.pop_range
    start = timer()
    for _ in range(pairs):
        push("step")
        pop()
    return timer() - start


def time_empty(pairs: int) -> float:
    start = timer()
    for _ in range(pairs):
        pass
    return timer() - start


def range_overhead(pairs: int, repeat: int) -> list[dict]:
    cases: list[tuple[str, callable]] = [
        ("off (level off, null context)", lambda: time_pairs(nv.OFF, pairs)),
        ("helper + no-op backend (fine)",
         lambda: time_pairs(nv.Instrumentation("fine", nv.NoopBackend()), pairs)),
    ]

    def recording() -> float:
        return time_pairs(nv.Instrumentation("fine", nv.RecordingBackend()), pairs)

    cases.append(("helper + recording backend (tests)", recording))
    try:
        import nvtx  # noqa: F401

        cases.append(("helper + PyPI nvtx (CPU path)",
                      lambda: time_pairs(nv.Instrumentation("fine", nv.PyNvtxBackend()), pairs)))
        cases.append(("raw nvtx.push_range/pop_range", lambda: time_raw_nvtx(pairs)))
    except ImportError:
        pass
    try:
        import torch

        if torch.cuda.is_available():
            cases.append(("helper + torch.cuda.nvtx",
                          lambda: time_pairs(nv.Instrumentation("fine", nv.TorchCudaBackend()),
                                             pairs)))
    except ImportError:
        pass

    rows = []
    for label, run in cases:
        samples = []
        for _ in range(repeat):
            samples.append((run() - time_empty(pairs)) / pairs * 1e6)
        rows.append({"backend": label, "pairs": pairs, "us_per_pair_min": min(samples),
                     "us_per_pair_median": statistics.median(samples)})
    return rows


def step_ratio(steps: int, warmup: int, mode: str, threads: int | None) -> tuple[list[dict], int]:
    import torch

    from nvtx_model.config import PRESETS, ModelConfig, RunConfig
    from nvtx_model.harness import Workload
    from nvtx_model.runtime import CpuRuntime

    if threads:
        torch.set_num_threads(threads)
    runtime = CpuRuntime()
    model = ModelConfig.from_shape(PRESETS["tiny"], context_length=128)
    copies = {"off": "off", "off (A/A control)": "off", "coarse": "coarse", "fine": "fine"}
    work = {}
    for label, level in copies.items():
        cfg = RunConfig(size="tiny", model=model, mode=mode, nvtx=level, device="cpu",
                        warmup=warmup, steps=steps)
        instrumentation = nv.Instrumentation(level)  # PyPI nvtx on CPU, nothing for off
        work[label] = (Workload(cfg, runtime, instrumentation), instrumentation)

    rec = nv.RecordingBackend()  # how many ranges one step opens at level fine
    with nv.activated(nv.Instrumentation("fine", rec)):
        work["fine"][0].step()
    ranges_per_step = len(rec.names())

    times: dict[str, list[float]] = {label: [] for label in copies}
    for i in range(warmup + steps):
        for label in copies:
            workload, instrumentation = work[label]
            with nv.activated(instrumentation):
                t = workload.step().total_s
            if i >= warmup:
                times[label].append(t)
    rows = []
    for label in copies:
        paired = [t / off for t, off in zip(times[label], times["off"], strict=True)]
        rows.append({"nvtx": label, "backend": work[label][1].backend.name, "steps": steps,
                     "median_step_s": statistics.median(times[label]),
                     "min_step_s": min(times[label]), "ratio_to_off": statistics.median(paired)})
    return rows, ranges_per_step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--mode", default="train", choices=("forward", "forward-backward", "train"))
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: steadier on a busy machine; 0: torch's choice)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()

    per_range = range_overhead(args.pairs, args.repeat)
    print(f"### Per-range overhead ({args.pairs} push/pop pairs x {args.repeat}, empty loop "
          "subtracted)\n")
    print("| backend | µs per pair (min) | µs per pair (median) |")
    print("| --- | ---: | ---: |")
    for r in per_range:
        print(f"| {r['backend']} | {r['us_per_pair_min']:.3f} | {r['us_per_pair_median']:.3f} |")

    steps, ranges_per_step = step_ratio(args.steps, args.warmup, args.mode, args.threads or None)
    print()
    print(f"### Step time of the tiny model on CPU, mode {args.mode}, context 128, batch 4 "
          f"(interleaved, {args.steps} steps each)\n")
    print("| nvtx | backend | median step | min step | ratio to off (median of paired) |")
    print("| --- | --- | ---: | ---: | ---: |")
    for r in steps:
        print(f"| {r['nvtx']} | {r['backend']} | {r['median_step_s'] * 1e3:.3f} ms | "
              f"{r['min_step_s'] * 1e3:.3f} ms | {r['ratio_to_off']:.4f} |")
    nvtx_cost = next((r["us_per_pair_median"] for r in per_range
                      if r["backend"].startswith("helper + PyPI")), None)
    if nvtx_cost is not None:
        predicted = ranges_per_step * nvtx_cost * 1e-6 / steps[0]["median_step_s"]
        print(f"\nfine level: {ranges_per_step} ranges per step x {nvtx_cost:.3f} µs = "
              f"{ranges_per_step * nvtx_cost:.1f} µs per step, a predicted "
              f"{100 * predicted:.3f}% of the {steps[0]['median_step_s'] * 1e3:.2f} ms step")
    if args.json:
        args.json.write_text(json.dumps({"per_range": per_range, "steps": steps,
                                         "ranges_per_step": ranges_per_step}, indent=2))


if __name__ == "__main__":
    main()
