#!/usr/bin/env python3
"""What an agent meets at the MCP server's door: how large its answers are (every message
under the 1 MiB a client accepts, the large ones in pages), and how long a quick question
waits while a slow one runs, or after one is cancelled. A real client of the official SDK
talks to the real server process.

    python benchmarks/mcp_concurrency.py sizes [FOLDER]          # the shared fixtures
    python benchmarks/mcp_concurrency.py latency BIG SMALL [--repeat 3]

``sizes``: over streamable HTTP, every analysis tool whose only required arguments are
exports, on every ``.sqlite`` of FOLDER: the default answer and ``top=0`` read page by page;
the bytes of each result message (its JSON-RPC result as the server sends it: the JSON twice,
text and structured content) and the pages. Prints one table row per tool.

``latency``: over stdio, a server with one call at a time (``--calls 1``: how the server
answered before calls ran side by side) and one with the default (one per core, at least 2),
each with an empty column cache: ``info`` of SMALL alone (first, then again), then ``report``
of BIG (cold: SMALL's questions wait for no cache of BIG) and, 0.5 s into it, ``kernels`` and
then ``gaps`` of SMALL (first and next question under load); last, ``ranges`` of BIG (cold)
cancelled by the client after 1 s and ``launches`` of SMALL asked at once (how soon the
cancelled call's room is free). Seconds on the client, medians of ``--repeat`` servers, the
two settings interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

SERVER = Path(sys.executable).parent / "nsys-mine"
LIMIT = 1_048_576  # the SDK client's largest server-sent event
EXPORT_ARGS = ("export", "exports", "base", "cand", "other")


def message_bytes(result: Any) -> int:
    return len(result.model_dump_json(by_alias=True, exclude_none=True).encode())


def tool_arguments(tool: Any, export: str) -> dict[str, Any] | None:
    """Arguments naming ``export`` for every export a tool takes; None when it needs more."""
    schema = tool.input_schema
    args: dict[str, Any] = {}
    for name in schema.get("required", []):
        if name not in EXPORT_ARGS:
            return None
    for name in EXPORT_ARGS:
        if name in schema.get("properties", {}) and (
                name in schema.get("required", []) or name == "other"):
            args[name] = [export] if name == "exports" else export
    return args if args or not schema.get("required") else None


async def sizes_session(url: str, exports: list[Path]) -> list[dict[str, Any]]:
    out = []
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            tools = [t for t in (await s.list_tools()).tools
                     if t.name not in ("report", "list_exports", "ranks")]
            for tool in tools:
                for export in exports:
                    args = tool_arguments(tool, str(export))
                    if args is None:
                        continue
                    first = await s.call_tool(tool.name, args)
                    record = {"tool": tool.name, "export": export.name,
                              "default_bytes": message_bytes(first), "error": first.is_error}
                    if not first.is_error and "offset" in tool.input_schema["properties"]:
                        pages, offset, biggest, total = 0, 0, 0, 0
                        while offset is not None:
                            page = await s.call_tool(tool.name, {**args, "top": 0,
                                                                 "offset": offset})
                            if page.is_error:
                                raise SystemExit(f"{tool.name} {export.name}: "
                                                 f"{page.content[0].text}")
                            size = message_bytes(page)
                            biggest, total, pages = max(biggest, size), total + size, pages + 1
                            offset = page.structured_content["next_offset"]
                        record.update(all_pages=pages, all_bytes=total, all_biggest=biggest)
                    out.append(record)
                    if not tool.input_schema.get("required"):
                        break  # no export: once
    return out


def sizes(folder: Path) -> None:
    exports = sorted(folder.resolve().glob("*.sqlite"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="mcp-sizes-") as cache:
        env = {**os.environ, "NSYS_MINE_CACHE_DIR": cache}
        proc = subprocess.Popen([str(SERVER), "mcp", "--root", str(folder.resolve()), "--http",
                                 f"127.0.0.1:{port}"], env=env, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
                if time.monotonic() > deadline:
                    raise SystemExit("the server did not start")
                time.sleep(0.1)
            records = anyio.run(sizes_session, f"http://127.0.0.1:{port}/mcp", exports)
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    for r in records:
        print(json.dumps(r))
    print(f"\n{len(exports)} exports; bytes of the result message (the JSON twice)\n")
    print("| tool | answered | default: median | default: most | top=0: pages, most | "
          "top=0: all pages' bytes, most | largest message |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for tool in dict.fromkeys(r["tool"] for r in records):
        mine = [r for r in records if r["tool"] == tool and not r["error"]]
        if not mine:
            continue
        default = [r["default_bytes"] for r in mine]
        paged = [r for r in mine if "all_pages" in r]
        largest = max([*default, *(r["all_biggest"] for r in paged)])
        print(f"| `{tool}` | {len(mine)} | {statistics.median(default):,.0f} | "
              f"{max(default):,} | " + (f"{max(r['all_pages'] for r in paged)} | "
                                        f"{max(r['all_bytes'] for r in paged):,} | "
                                        if paged else "(one object) | | ")
              + f"{largest:,} |")
    worst = max(max(r["default_bytes"], r.get("all_biggest", 0)) for r in records)
    print(f"\nlargest message: {worst:,} bytes (the client's limit: {LIMIT:,})")
    if worst >= LIMIT:
        raise SystemExit("a message over the limit")


async def latency_session(big: Path, small: Path, calls: int, env: dict[str, str]
                          ) -> dict[str, float]:
    params = StdioServerParameters(
        command=str(SERVER), args=["mcp", "--root", str(big.parent), "--root",
                                   str(small.parent), "--calls", str(calls),
                                   "--pages", env["NSYS_MINE_CACHE_DIR"]], env=env)
    t: dict[str, float] = {}

    async def timed(key: str, tool: str, args: dict[str, Any]) -> None:
        t0 = time.perf_counter()
        res = await s.call_tool(tool, args)
        t[key] = time.perf_counter() - t0
        if res.is_error:
            raise SystemExit(f"{tool}: {res.content[0].text}")

    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            await timed("info, first", "info", {"export": str(small)})
            await timed("info, next", "info", {"export": str(small)})
            async with anyio.create_task_group() as tg:
                tg.start_soon(timed, "report of BIG (cold), beside them", "report",
                              {"export": str(big)})
                await anyio.sleep(0.5)
                await timed("kernels while the report runs (first)", "kernels",
                            {"exports": [str(small)]})
                await timed("gaps while the report runs (next)", "gaps",
                            {"export": str(small)})
            with anyio.move_on_after(1.0):
                await s.call_tool("ranges", {"exports": [str(big)], "top": 0})
            await timed("launches just after a cancel", "launches", {"export": str(small)})
    return t


def latency(big: Path, small: Path, repeat: int) -> None:
    settings = {"--calls 1": 1, "default": 0}
    runs: dict[str, list[dict[str, float]]] = {k: [] for k in settings}
    for i in range(repeat):
        for name, calls in settings.items():
            with tempfile.TemporaryDirectory(prefix="mcp-latency-") as cache:
                env = {**os.environ, "NSYS_MINE_CACHE_DIR": cache,
                       "XDG_CACHE_HOME": cache}
                times = anyio.run(latency_session, big.resolve(), small.resolve(), calls,
                                  env)
            runs[name].append(times)
            print(json.dumps({"setting": name, "run": i + 1, "seconds": times}), flush=True)
    keys = list(runs["default"][0])
    print(f"\n{big.name} (BIG), {small.name} (SMALL); seconds, medians of {repeat}; "
          f"load average {os.getloadavg()[0]:.2f}\n")
    print("| question | " + " | ".join(settings) + " |")
    print("| --- |" + " ---: |" * len(settings))
    for key in keys:
        print(f"| {key} | " + " | ".join(f"{statistics.median(r[key] for r in runs[s]):.3f}"
                                          for s in settings) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("sizes")
    p.add_argument("folder", type=Path, nargs="?",
                   default=Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
                   / "nsys")
    p = sub.add_parser("latency")
    p.add_argument("big", type=Path)
    p.add_argument("small", type=Path)
    p.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.what == "sizes":
        sizes(args.folder)
    else:
        latency(args.big, args.small, args.repeat)


if __name__ == "__main__":
    main()
