#!/usr/bin/env python3
"""An agent's questions through ``nsys-mine mcp``, one after another, with the server keeping
the exports it was asked about loaded and its last answers (``--keep-open 2``, the default:
``reports.Memo``) and without (``--keep-open 0``: each question opens its export and reads
its cache).

    python benchmarks/mcp_benchmark.py EXPORT [EXPORT...] [--repeat 3]

For each export, with its column cache filled first (a fresh cache folder, filled by the
sequence once), a real MCP client (the SDK's stdio client) starts the server and asks
``nvtx-kernels``, ``dominant``, ``ranges``, ``kernels``, ``gpus``, ``gaps`` in turn, then the
same six again ("again": with ``--keep-open 2``, each a kept answer), timing each call on the
client (wall seconds, from the request to the answer). Prints one JSON object per run and a
table of medians; docs/PERFORMANCE.md keeps the table. Every answer is checked equal across
the settings, and asked again equal to the first time.
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


async def one_session(export: Path, keep: int, env: dict[str, str]
                      ) -> tuple[dict[str, float], dict[str, Any]]:
    """(seconds per question, the answers) of one server, asked each question, then each
    again (``again QUESTION``)."""
    params = StdioServerParameters(
        command=str(SERVER), args=["mcp", "--root", str(export.parent), "--keep-open",
                                   str(keep)], env=env)
    times: dict[str, float] = {}
    answers: dict[str, Any] = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for q in [*QUESTIONS, *(f"again {q}" for q in QUESTIONS)]:
                name = q.removeprefix("again ")
                t0 = time.perf_counter()
                res = await s.call_tool(name, arguments(name, export))
                times[q] = time.perf_counter() - t0
                if res.is_error:
                    raise SystemExit(f"{name} on {export}: {res.content[0].text}")
                answers[q] = res.structured_content
    return times, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("exports", nargs="+", type=Path)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    settings = [0, 2]
    asked = [*QUESTIONS, *(f"again {q}" for q in QUESTIONS)]
    table = []
    for export in args.exports:
        export = export.resolve()
        with tempfile.TemporaryDirectory(prefix="mcp-bench-") as cache:
            env = {**os.environ, "NSYS_MINE_CACHE_DIR": cache}
            anyio.run(one_session, export, 0, env)  # fills the cache
            runs: dict[int, list[dict[str, float]]] = {s: [] for s in settings}
            seen: dict[int, dict[str, Any]] = {}
            for i in range(args.repeat):
                for keep in settings:  # interleaved
                    times, answers = anyio.run(one_session, export, keep, env)
                    runs[keep].append(times)
                    seen[keep] = answers
                    print(json.dumps({"export": export.name, "keep_open": keep,
                                      "run": i + 1, "seconds": times}), flush=True)
            for q in asked:
                first = seen[0][q.removeprefix("again ")]["rows"]
                if any(seen[s][q]["rows"] != first for s in settings):
                    raise SystemExit(f"{q} on {export.name}: answers differ")
            for q in asked:
                table.append((export.name, q, *(statistics.median(r[q] for r in runs[s])
                                                for s in settings)))
    heads = [f"--keep-open {k}" for k in settings]
    print("\n| export | question | " + " | ".join(f"{h} s" for h in heads) + " |")
    print("| --- | --- |" + " ---: |" * len(settings))
    for name, q, *secs in table:
        print(f"| {name} | {q} | " + " | ".join(f"{t:.3f}" for t in secs) + " |")


if __name__ == "__main__":
    main()
