"""The child process that ``nsys-mine profile`` runs under nsys: run workloads in this process
and print one JSON line per config.

    nsys profile --trace=nvtx,osrt --sample=none --cpuctxsw=none -o OUT \\
        python -m profile_cli.run_workload --size tiny --context 64 --mode train --nvtx fine \\
            --warmup 1 --steps 2

Takes the workload options of ``nsys-mine bench`` (``profile_cli.commands.workload``; NVTX
defaults to ``coarse`` here), runs the same harness, and prints each bench row as one JSON
object on its own line of stdout. ``--workload infer`` generates ``--output-length`` tokens
after ``--batch`` prompts of ``--context`` tokens instead (``nvtx_model.infer``, NVTX ranges
``prefill``, ``decode``, ``decode step``) and prints the inference rows. ``--dry-run`` prints
the configs instead of running them. Errors go to stderr as ``Error: ...`` with exit code 1.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer

from nsys_parsers.errors import NsysMineError
from nsys_parsers.plain import jsonable
from nvtx_model.infer_config import (
    DEFAULT_PROFILE_OUTPUT_LENGTH,
    WORKLOAD_KINDS,
    infer_configs_from_workload,
)
from profile_cli.commands.groups import choice, grouped
from profile_cli.commands.workload import WORKLOAD

PROG = "python -m profile_cli.run_workload"

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@app.command(cls=grouped(WORKLOAD(nvtx="coarse", context="128", mode="train", warmup=1,
                                  steps=2)))
def run(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Print the configs as JSON lines; run nothing.")] = False,
    kind: Annotated[str, typer.Option(
        "--workload", help="bench: steps of --mode; infer: KV-cache generation.",
        **choice(WORKLOAD_KINDS))] = "bench",
    output_length: Annotated[int, typer.Option(
        "--output-length", min=1, help="--workload infer: tokens to generate.")
    ] = DEFAULT_PROFILE_OUTPUT_LENGTH,
) -> None:
    """Run the Transformer workload(s) with NVTX ranges; one JSON result line per config."""
    from dataclasses import asdict

    workload = WORKLOAD.of(ctx)
    infer_configs = (infer_configs_from_workload(workload, output_length)
                     if kind == "infer" else None)
    configs: list[Any] = infer_configs if infer_configs is not None else workload.configs()
    if dry_run:
        for cfg in configs:
            sys.stdout.write(json.dumps(jsonable(asdict(cfg))) + "\n")
        return
    from nvtx_model.errors import require_torch

    require_torch(PROG)
    if infer_configs is not None:
        from nvtx_model.infer import run_inference

        result = run_inference(infer_configs)
    else:
        from nvtx_model.bench import benchmark

        # nsys records the GPU itself (and holds CUPTI): no torch.profiler step under it
        result = benchmark(workload.configs(), bound=False)
    for row in result.rows:
        sys.stdout.write(json.dumps(jsonable(row)) + "\n")
    sys.stdout.flush()
    if result.interrupted:
        raise typer.Exit(130)


def main(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name=PROG)
    except NsysMineError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
