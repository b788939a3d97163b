"""docs/AGENTS.md runs as written: every way it gives to start the server (the set-up lines,
Claude Code's, Cursor's and VS Code's configurations, over stdio and HTTP) starts one that a
real client of the official MCP SDK can use, and the worked example, asked as written, gets
the answer shown.

Placeholders are filled in as a user would: a folder of profiles (``~/profiles``,
``/abs/path/to/profiles``, VS Code's ``${workspaceFolder}``) is the shared fixtures folder, a
configuration without ``--root`` runs in it (its project folder), and the HTTP port is a free
one instead of 8765 (the page's, which another process may hold)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, ROOT, fixture_path, free_port, listening

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

DOC = ROOT / "docs" / "AGENTS.md"
BIN = Path(sys.executable).parent  # where `nsys-mine` is: on the PATH the servers get
PLACEHOLDERS = ("~/profiles", "/abs/path/to/profiles", "${workspaceFolder}")
EXAMPLE_EXPORT = "cs336_bolongcheng_small_fwd_A100.sqlite"
PORT = "8765"


def blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def section(text: str, title: str) -> str:
    """The text of the section headed ``title`` (to the next heading of its level or
    higher)."""
    m = re.search(rf"^(#+) {re.escape(title)}.*?$", text, flags=re.M)
    assert m, title
    level = len(m.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", flags=re.M).search(text, m.end())
    return text[m.end():end.start() if end else len(text)]


def lines(block: str) -> list[str]:
    """The commands of a bash block (comments dropped)."""
    out = []
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if line and not line.startswith("#"):
            out.append(line)
    return out


def filled(arg: str, folder: Path) -> str:
    for p in PLACEHOLDERS:
        arg = arg.replace(p, str(folder))
    return arg


def env() -> dict[str, str]:
    return {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
            "HOME": os.environ.get("HOME", "/root"),
            **{k: os.environ[k] for k in ("NSYS_MINE_CACHE_DIR", "XDG_CACHE_HOME", "NSYS")
               if k in os.environ}}


async def use(s: ClientSession) -> dict[str, Any]:
    """What each server is asked: the exports it sees, and one answer by a relative path."""
    await s.initialize()
    listed = await s.call_tool("list_exports", {"recursive": False})
    info = await s.call_tool("info", {"export": EXAMPLE_EXPORT})
    assert not listed.is_error and not info.is_error, (listed.content, info.content)
    return {"listed": {Path(e["path"]).name for e in listed.structured_content["exports"]},
            "info": info.structured_content["object"]}


async def over_stdio(command: str, args: list[str], cwd: Path) -> dict[str, Any]:
    params = StdioServerParameters(command=command, args=args, env=env(), cwd=str(cwd))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            return await use(s)


async def over_http(url: str) -> dict[str, Any]:
    async with streamable_http_client(url) as (read, write):
        async with ClientSession(read, write) as s:
            return await use(s)


@pytest.fixture(scope="module")
def doc() -> str:
    fixture_path(EXAMPLE_EXPORT)  # skips cleanly without the shared fixtures
    return DOC.read_text(encoding="utf-8")


def stdio_configs(doc: str) -> list[tuple[str, str, list[str]]]:
    """(where, command, args) of every stdio set-up the page gives."""
    out = []
    setup = section(doc, "Setup")
    for line in lines(blocks(setup, "bash")[0]):
        argv = shlex.split(line)
        if argv[:2] == ["nsys-mine", "mcp"] and "--http" not in argv:
            out.append(("Setup", argv[0], argv[1:]))
    for line in lines(blocks(section(doc, "Claude Code"), "bash")[0]):
        argv = shlex.split(line)
        if "--" in argv:  # claude mcp add [--scope S] NAME -- COMMAND ARGS
            cmd = argv[argv.index("--") + 1:]
            out.append(("Claude Code", cmd[0], cmd[1:]))
    cursor = json.loads(blocks(section(doc, "Cursor"), "json")[0])["mcpServers"]["nsys-mine"]
    out.append(("Cursor", cursor["command"], cursor["args"]))
    vscode = json.loads(blocks(section(doc, "VS Code"), "json")[0])["servers"]["nsys-mine"]
    assert vscode["type"] == "stdio"
    out.append(("VS Code", vscode["command"], vscode["args"]))
    return out


def test_every_stdio_set_up_starts_a_server_a_client_can_use(doc):
    configs = stdio_configs(doc)
    assert {w for w, *_ in configs} == {"Setup", "Claude Code", "Cursor", "VS Code"}
    assert len(configs) == 5
    folder = FIXTURES.resolve()
    for where, command, args in configs:
        args = [filled(a, folder) for a in args]
        assert command == "nsys-mine", where
        # a configuration without --root reads its project folder: it runs there
        got = anyio.run(over_stdio, command, args, folder)
        assert EXAMPLE_EXPORT in got["listed"], (where, args)
        assert got["info"]["gpus"], where


def test_the_http_set_up_serves_the_url_the_clients_are_given(doc, tmp_path):
    setup = section(doc, "Setup")
    (line,) = [x for x in lines(blocks(setup, "bash")[0]) if "--http" in x]
    urls = set(re.findall(r"http://127\.0\.0\.1:\d+/mcp", doc))
    claude = [x for x in lines(blocks(section(doc, "Claude Code"), "bash")[0])
              if "--transport http" in x]
    assert len(claude) == 1 and shlex.split(claude[0])[-1] in urls
    assert urls == {f"http://127.0.0.1:{PORT}/mcp"}, urls
    assert '"url": "http://127.0.0.1:8765/mcp"' in section(doc, "VS Code")
    port = str(free_port())
    argv = [a.replace(PORT, port) for a in shlex.split(line)]
    log = tmp_path / "server.log"
    # default root: the working directory
    with listening(argv, int(port), log, env(), cwd=str(FIXTURES.resolve())):
        got = anyio.run(over_http, next(iter(urls)).replace(PORT, port))
    assert EXAMPLE_EXPORT in got["listed"]
    assert "Traceback" not in log.read_text(errors="replace")


def test_the_worked_example_gets_the_answer_shown(doc):
    example = section(doc, "A worked example")
    (start,) = lines(blocks(example, "bash")[0])
    call, shown = (json.loads(b) for b in blocks(example, "json"))
    argv = shlex.split(start)
    # started from the project root, as the page says
    if not (ROOT / argv[argv.index("--root") + 1]).is_dir():
        pytest.skip("the shared fixtures are not at ../shared/fixtures/nsys of the project")

    async def ask() -> Any:
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env(),
                                       cwd=str(ROOT))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                return await s.call_tool(call["name"], call["arguments"])

    result = anyio.run(ask)
    assert not result.is_error, result.content[0].text
    got = result.structured_content
    # abridged as the page says: `columns`, `units` and the rows' `category_shares` left out
    assert set(got) - set(shown) == {"columns", "units"}
    for key, value in shown.items():
        if key in ("rows", "total_rows"):
            assert [{k: r[k] for k in row} for r, row in zip(got[key], value)] == value
            assert len(got[key]) == len(value)
            assert all(set(r) - set(row) == {"category_shares"}
                       for r, row in zip(got[key], value))
        else:
            assert got[key] == value, key
