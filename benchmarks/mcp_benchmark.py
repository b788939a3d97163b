#!/usr/bin/env python3
"""An agent's questions through ``nsys-mine mcp``, one after another, with the server keeping
the exports it was asked about loaded (``--keep-open 2``, the default) and without
(``--keep-open 0``: each question opens its export and reads its cache).

    python benchmarks/mcp_benchmark.py EXPORT [EXPORT...] [--repeat 3]

For each export, with its column cache filled first (a fresh cache folder, filled by the
sequence once), a real MCP client (the SDK's stdio client) starts the server and asks
``nvtx-kernels``, ``dominant``, ``ranges``, ``kernels``, ``gpus``, ``gaps`` in turn, timing
each call on the client (wall seconds, from the request to the answer); with ``--pause S``
also with S seconds between an answer and the next question (the server warms ahead
meanwhile). Prints one JSON object per run and a table of medians; docs/PERFORMANCE.md keeps
the table. Every answer is checked equal across the settings.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

SERVER = Path(sys.executable).parent / "nsys-mine"
QUESTIONS = ("nvtx-kernels", "dominant", "ranges", "kernels", "gpus", "gaps")


def arguments(question: str, export: Path) -> dict[str, Any]:
    from reports.pipeline.registry import get

    a = get(question)
    if a.inputs == "exports":
        return {"exports": [str(export)]}
    return {a.input_name: str(export)}


async def one_session(export: Path, keep: int, env: dict[str, str], pause: float = 0.0
                      ) -> tuple[dict[str, float], dict[str, Any]]:
    """(seconds per question, the answers) of one server, asked each question once,
    ``pause`` seconds after the answer before (an agent thinking)."""
    params = StdioServerParameters(
        command=str(SERVER), args=["mcp", "--root", str(export.parent), "--keep-open",
                                   str(keep)], env=env)
    times: dict[str, float] = {}
    answers: dict[str, Any] = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for i, q in enumerate(QUESTIONS):
                if i and pause:
                    await anyio.sleep(pause)
                t0 = time.perf_counter()
                res = await s.call_tool(q, arguments(q, export))
                times[q] = time.perf_counter() - t0
                if res.is_error:
                    raise SystemExit(f"{q} on {export}: {res.content[0].text}")
                answers[q] = res.structured_content
    return times, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--pause", type=float, default=0.0,
                        help="also time --keep-open 2 with this many seconds between an "
                             "answer and the next question (an agent thinking: the server "
                             "warms ahead meanwhile)")
    args = parser.parse_args()
    settings: list[tuple[int, float]] = [(0, 0.0), (2, 0.0)]
    if args.pause:
        settings.append((2, args.pause))
    table = []
    for export in args.exports:
        export = export.resolve()
        with tempfile.TemporaryDirectory(prefix="mcp-bench-") as cache:
            env = {**os.environ, "NSYS_MINE_CACHE_DIR": cache}
            anyio.run(one_session, export, 0, env)  # fills the cache
            runs: dict[tuple[int, float], list[dict[str, float]]] = {s: [] for s in settings}
            seen: dict[tuple[int, float], dict[str, Any]] = {}
            for i in range(args.repeat):
                for keep, pause in settings:  # interleaved
                    times, answers = anyio.run(one_session, export, keep, env, pause)
                    runs[keep, pause].append(times)
                    seen[keep, pause] = answers
                    print(json.dumps({"export": export.name, "keep_open": keep,
                                      "pause_s": pause, "run": i + 1, "seconds": times}),
                          flush=True)
            for q in QUESTIONS:
                if any(seen[s][q]["rows"] != seen[0, 0.0][q]["rows"] for s in settings):
                    raise SystemExit(f"{q} on {export.name}: answers differ across settings")
            for q in QUESTIONS:
                table.append((export.name, q, *(statistics.median(r[q] for r in runs[s])
                                                for s in settings)))
    heads = [f"--keep-open {k}" + (f", {p:g} s between" if p else "") for k, p in settings]
    print("\n| export | question | " + " | ".join(f"{h} s" for h in heads) + " |")
    print("| --- | --- |" + " ---: |" * len(settings))
    for name, q, *secs in table:
        print(f"| {name} | {q} | " + " | ".join(f"{t:.3f}" for t in secs) + " |")


if __name__ == "__main__":
    main()
