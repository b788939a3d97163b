"""``nsys-mine mcp`` answering several calls at once, with the official SDK's client and the
real server process: a quick question is not held up by a slow one, a cancelled call (or one
whose client left) stops and frees its worker, and an answer too large for one message comes
in pages that together are the command line's rows.

The slow question is a cold one about a 100x export (``benchmarks/scale_export.py``: the DDP
capture's rows repeated 100 times, 150 MB) made once per module; each server gets an empty
column cache, so that its first question reads the export."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, fixture_path, free_port, listening, run_cli

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

SERVER = Path(sys.executable).parent / "nsys-mine"
DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"  # 2 processes
T4 = "vecadd_t4_nsys2022.4.sqlite"
SCALE = 100
SSE_LIMIT = 1_048_576  # the SDK client's largest server-sent event (its default)


@pytest.fixture(scope="module")
def big(tmp_path_factory) -> Path:
    """The 100x export, in a root of its own."""
    from benchmarks.scale_export import scale_export

    src = fixture_path(DDP)
    fixture_path(T4)
    root = tmp_path_factory.mktemp("big")
    scale_export(src, root / f"ddp_x{SCALE}.sqlite", SCALE)
    return root / f"ddp_x{SCALE}.sqlite"


def server_env(tmp: Path) -> dict[str, str]:
    """An empty column cache and user cache: the server's first question is cold."""
    return {"NSYS_MINE_CACHE_DIR": str(tmp / "columns"), "XDG_CACHE_HOME": str(tmp / "xdg"),
            "PATH": os.environ["PATH"]}


def server_args(big: Path, tmp: Path, *more: str) -> list[str]:
    return ["mcp", "--root", str(FIXTURES.resolve()), "--root", str(big.parent),
            "--pages", str(tmp / "pages"), *more]


async def timed(s: ClientSession, tool: str, args: dict[str, Any]) -> tuple[Any, float]:
    t0 = time.monotonic()
    out = await s.call_tool(tool, args)
    return out, time.monotonic() - t0


def no_traceback(log: Path) -> None:
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "Error" not in text, text[-3000:]


def test_a_quick_question_is_answered_while_a_cold_report_runs(big, tmp_path):
    """One session: `report` of the 100x export (cold), and 0.5 s later `info` of another
    export: info is answered in under 3 s, while the report still runs."""
    log = tmp_path / "stderr.log"

    async def session() -> dict[str, Any]:
        params = StdioServerParameters(command=str(SERVER), args=server_args(big, tmp_path),
                                       env=server_env(tmp_path))
        out: dict[str, Any] = {}
        with open(log, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()

                    async def report() -> None:
                        out["report"], out["report_s"] = await timed(
                            s, "report", {"export": str(big)})
                        out["report_done"] = time.monotonic()

                    async with anyio.create_task_group() as tg:
                        tg.start_soon(report)
                        await anyio.sleep(0.5)
                        out["info"], out["info_s"] = await timed(
                            s, "info", {"export": str(FIXTURES.resolve() / T4)})
                        out["info_done"] = time.monotonic()
        return out

    out = anyio.run(session)
    assert not out["info"].is_error and not out["report"].is_error, out
    assert out["info"].structured_content["object"]["tables"]["CUPTI_ACTIVITY_KIND_KERNEL"] == 200
    print(f"info: {out['info_s']:.3f} s; report: {out['report_s']:.3f} s")
    assert out["info_s"] < 3.0, out["info_s"]
    assert out["info_done"] < out["report_done"], (out["info_s"], out["report_s"])
    assert Path(out["report"].structured_content["path"]).is_file()
    no_traceback(log)


def test_a_cancelled_call_stops_and_frees_its_worker(big, tmp_path):
    """A server of one call at a time (`--calls 1`): `ranges` of the 100x export (cold) is
    cancelled by the client after 1 s (the SDK sends `notifications/cancelled`); an `info`
    sent then is answered within a second of its usual time: the call's room is free; no
    traceback on stderr."""
    log = tmp_path / "stderr.log"

    async def session() -> dict[str, Any]:
        params = StdioServerParameters(command=str(SERVER),
                                       args=server_args(big, tmp_path, "--calls", "1"),
                                       env=server_env(tmp_path))
        info = {"export": str(FIXTURES.resolve() / T4)}
        out: dict[str, Any] = {}
        with open(log, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    await s.call_tool("info", info)  # modules imported
                    _, out["usual_s"] = await timed(s, "info", info)
                    with anyio.move_on_after(1.0) as scope:
                        await s.call_tool("ranges", {"exports": [str(big)], "top": 0})
                    out["cancelled"] = scope.cancelled_caught
                    out["after"], out["after_s"] = await timed(s, "info", info)
                    # and the server answers the cancelled question when asked again
                    out["again"], out["again_s"] = await timed(
                        s, "ranges", {"exports": [str(big)], "top": 3})
        return out

    out = anyio.run(session)
    assert out["cancelled"]
    print(f"info: {out['usual_s']:.3f} s; after the cancel: {out['after_s']:.3f} s")
    assert not out["after"].is_error
    assert out["after_s"] < out["usual_s"] + 1.0, (out["after_s"], out["usual_s"])
    again = out["again"]
    assert not again.is_error, again.content[0].text
    assert again.structured_content["rows"] == json.loads(
        run_cli("ranges", big, "--top", "3", "-f", "json").stdout)
    no_traceback(log)


def test_over_http_a_client_that_leaves_frees_the_server_and_pages_fit(big, tmp_path):
    """Streamable HTTP with the client's default limits, one call at a time: client A asks `info`,
    then the cold `ranges` of the 100x export, and leaves after 1 s; client B's `info` (A's
    kept answer) is answered at once (the worker is free), and B
    reads `ranges top=0` of the 2-process capture (4.5 MB of JSON) page by page: every page
    under the client's 1 MiB event limit, the pages' rows the command line's, in its order.
    The server's log holds no traceback."""
    log = tmp_path / "server.log"
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    fastvideo = str(FIXTURES.resolve() / FASTVIDEO)

    info = {"export": str(FIXTURES.resolve() / T4)}

    async def client_a() -> bool:
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                await s.call_tool("info", info)  # kept: asked again, it is answered at once
        with anyio.move_on_after(1.0) as scope:
            async with streamable_http_client(url) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    await s.call_tool("ranges", {"exports": [str(big)], "top": 0})
        return scope.cancelled_caught

    async def client_b() -> dict[str, Any]:
        out: dict[str, Any] = {"pages": []}
        async with streamable_http_client(url) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                out["info"], out["info_s"] = await timed(s, "info", info)
                offset: int | None = 0
                while offset is not None:
                    page = await s.call_tool("ranges", {"exports": [fastvideo], "top": 0,
                                                        "offset": offset})
                    assert not page.is_error, page.content[0].text
                    out["pages"].append(page)
                    offset = page.structured_content["next_offset"]
                    assert len(out["pages"]) < 100
        return out

    with listening([str(SERVER), *server_args(big, tmp_path, "--calls", "1"), "--http",
                    f"127.0.0.1:{port}"], port, log, server_env(tmp_path)):
        left = anyio.run(client_a)
        out = anyio.run(client_b)
    assert left
    print(f"info after A left: {out['info_s']:.3f} s")
    assert not out["info"].is_error and out["info_s"] < 1.0, out["info_s"]
    pages = out["pages"]
    assert len(pages) > 1
    rows = [r for p in pages for r in p.structured_content["rows"]]
    assert rows == json.loads(run_cli("ranges", fastvideo, "-f", "json").stdout)
    offsets = [p.structured_content["offset"] for p in pages]
    assert offsets == [0, *[p.structured_content["next_offset"] for p in pages[:-1]]]
    for p in pages:
        # the result as the server's JSON-RPC message carries it (the client read it, under
        # its limit, else the call had failed)
        assert len(p.model_dump_json(by_alias=True, exclude_none=True).encode()) < SSE_LIMIT
    no_traceback(log)
