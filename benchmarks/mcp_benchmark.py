#!/usr/bin/env python3
"""An agent's questions through ``nsys-mine mcp``, one after another, with the server keeping
the exports it was asked about loaded (``--keep-open 2``, the default) and without
(``--keep-open 0``: each question opens its export and reads its cache).

    python benchmarks/mcp_benchmark.py EXPORT [EXPORT...] [--repeat 3]

For each export, with its column cache filled first (a fresh cache folder, filled by the
sequence once), a real MCP client (the SDK's stdio client) starts the server and asks
``nvtx-kernels``, ``dominant``, ``ranges``, ``kernels``, ``gpus``, ``gaps`` in turn, timing
each call on the client (wall seconds, from the request to the answer). Prints one JSON object
per run and a table of medians; docs/PERFORMANCE.md keeps the table. Every answer is checked
equal across the two settings.
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
    from reports.analyses import get

    a = get(question)
    if a.inputs == "exports":
        return {"exports": [str(export)]}
    return {a.input_name: str(export)}


async def one_session(export: Path, keep: int, env: dict[str, str]
                      ) -> tuple[dict[str, float], dict[str, Any]]:
    """(seconds per question, the answers) of one server, asked each question once."""
    params = StdioServerParameters(
        command=str(SERVER), args=["mcp", "--root", str(export.parent), "--keep-open",
                                   str(keep)], env=env)
    times: dict[str, float] = {}
    answers: dict[str, Any] = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for q in QUESTIONS:
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
    args = parser.parse_args()
    table = []
    for export in args.exports:
        export = export.resolve()
        with tempfile.TemporaryDirectory(prefix="mcp-bench-") as cache:
            env = {**os.environ, "NSYS_MINE_CACHE_DIR": cache}
            anyio.run(one_session, export, 0, env)  # fills the cache
            runs: dict[int, list[dict[str, float]]] = {0: [], 2: []}
            seen: dict[int, dict[str, Any]] = {}
            for i in range(args.repeat):
                for keep in (0, 2):  # interleaved
                    times, answers = anyio.run(one_session, export, keep, env)
                    runs[keep].append(times)
                    seen[keep] = answers
                    print(json.dumps({"export": export.name, "keep_open": keep, "run": i + 1,
                                      "seconds": times}), flush=True)
            for q in QUESTIONS:
                if seen[0][q]["rows"] != seen[2][q]["rows"]:
                    raise SystemExit(f"{q} on {export.name}: answers differ with --keep-open")
            for q in QUESTIONS:
                table.append((export.name, q, *(statistics.median(r[q] for r in runs[k])
                                                for k in (0, 2))))
    print("\n| export | question | --keep-open 0 s | --keep-open 2 s |")
    print("| --- | --- | ---: | ---: |")
    for name, q, closed, held in table:
        print(f"| {name} | {q} | {closed:.3f} | {held:.3f} |")


if __name__ == "__main__":
    main()
