"""Paths no file system can hold, and any other text, given where a path goes: on the command
line and to the MCP server's tools (a real server and the SDK's client), an answer or an
``Error:`` line that says what is wrong, never a traceback or "internal error", and the
server goes on. (Paths that name the root folder itself are left out of the tools' fuzz: a
folder of exports is a job, and its page is a real answer.) Then every other argument of
every tool, drawn from its input schema and from anything at all."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, fixture_path, run_cli

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

T4 = "vecadd_t4_nsys2022.4.sqlite"

# what a path argument may be given: any text (NUL bytes included), names and paths longer
# than a file system holds, and the odd ones a shell lets through
PATHS = st.one_of(
    st.text(max_size=40),
    st.text(st.characters(blacklist_categories=("Cs",)), min_size=200, max_size=300),
    st.integers(256, 6000).map(lambda n: "a" * n),
    st.integers(1000, 3000).map(lambda n: "a/" * n),
    st.text(max_size=20).map(lambda t: f"x\x00{t}"),
    st.sampled_from(["", "..", "\x00", "a\x00b.sqlite", "~nobody/x.sqlite", "/dev/null",
                     "*.sqlite", "[", "x" * 255 + ".sqlite", "é" * 200]),
)


def no_traceback(res) -> None:
    assert "Traceback" not in res.stdout + res.stderr, res.stderr
    if res.exit_code:
        first = res.stderr.lstrip().splitlines()[0] if res.stderr.strip() else ""
        assert first.startswith(("Error: ", "Usage: ")), res.stderr


@settings(max_examples=60, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=PATHS, command=st.sampled_from(["info", "kernels", "dominant", "report", "diff",
                                            "check-baseline", "compare"]))
def test_a_path_on_the_command_line_is_an_error_line_never_a_traceback(path, command, tmp_path):
    good = str(fixture_path(T4))
    if command == "report" and path.count("/") > 20:
        path = path.replace("/", "_")  # a deep --output is made as asked: not a folder tree here
    args = {"info": ["info", path], "kernels": ["kernels", "--", path],
            "dominant": ["dominant", "--", path],
            "report": ["report", good, "--output", path],
            "diff": ["diff", good, path], "compare": ["compare", path, good],
            "check-baseline": ["check", good, "--baseline", path]}[command]
    cwd = os.getcwd()
    os.chdir(tmp_path)  # where a relative --output goes
    try:
        no_traceback(run_cli(*args))
    finally:
        os.chdir(cwd)


def test_the_messages_say_what_is_wrong(tmp_path):
    long_name = "a" * 300 + ".sqlite"
    res = run_cli("kernels", tmp_path / long_name)
    assert res.exit_code == 1 and res.stderr.startswith("Error: the export '")
    assert "is 307 bytes, longer than a file or folder name can be (255)" in res.stderr
    res = run_cli("kernels", "a/" * 3000)
    assert "5,999 bytes, longer than any path can be (4,095)" in res.stderr  # no last /"
    res = run_cli("check", fixture_path(T4), "--baseline", "x\x00y")
    assert res.exit_code == 1
    assert res.stderr == ("Error: --baseline 'x\\x00y': a path cannot hold a NUL byte (\\x00); "
                          "give the file's path as it is on disk.\n")


# -- the MCP server, through the official SDK's client ---------------------------------------

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402

SERVER = Path(sys.executable).parent / "nsys-mine"


async def ask_all(calls: list[tuple[str, dict[str, Any]]], root: Path, env: dict[str, str]
                  ) -> list[Any]:
    params = StdioServerParameters(command=str(SERVER), args=["mcp", "--root", str(root)],
                                   env=env, cwd=str(root))
    out = []
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            for tool, args in calls:
                out.append(await s.call_tool(tool, args))
    return out


@settings(max_examples=1, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=st.lists(PATHS.filter(lambda p: p.strip(" ./") != ""), min_size=40, max_size=40))
def test_a_path_to_any_tool_is_an_error_result_and_the_server_goes_on(paths, tmp_path):
    fixture_path(T4)
    good = str(FIXTURES.resolve() / T4)
    tools = [("info", lambda p: {"export": p}), ("kernels", lambda p: {"exports": [p]}),
             ("diff", lambda p: {"base": good, "cand": p}),
             ("report", lambda p: {"export": p}), ("gaps", lambda p: {"export": p})]
    calls = [(tools[i % len(tools)][0], tools[i % len(tools)][1](p))
             for i, p in enumerate(paths)]
    calls.append(("info", {"export": good}))
    env = {"NSYS_MINE_CACHE_DIR": os.environ["NSYS_MINE_CACHE_DIR"], "PATH": os.environ["PATH"],
           "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    results = anyio.run(ask_all, calls, FIXTURES.resolve(), env)
    for (tool, args), res in zip(calls[:-1], results[:-1]):
        text = res.content[0].text  # a path that names something may answer; else Error:
        assert not res.is_error or (text.startswith("Error: ") and "internal error" not in text), \
            (tool, args, text)
    last = results[-1]
    assert not last.is_error and last.structured_content["object"]["kernel_count"] == 200


# -- every argument of every tool ------------------------------------------------------------

EXPORT_KEYS = ("export", "exports", "base", "cand", "other")
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(-10**15, 10**15), st.floats(allow_nan=False,
                                                                       allow_infinity=False),
    st.text(max_size=30), st.lists(st.text(max_size=10), max_size=3),
    st.sampled_from(["", "\x00", "-1", "0", "auto", "forward pass", "a" * 300, "*", "..",
                     "measure"]))


def plausible(schema: dict[str, Any]) -> Any:
    """Values of the type a property declares (enums: their values; numbers near and past
    their bounds), which pass the SDK's validation and reach the analysis."""
    options = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    s = options[0] if options else schema
    if "enum" in s:
        return st.sampled_from(s["enum"])
    kind = s.get("type")
    if kind == "integer":
        lo = s.get("minimum", -10**6)
        return st.integers(lo, lo + 10**6) | st.just(lo)
    if kind == "number":
        return st.floats(s.get("minimum", -1e9), 1e9, allow_nan=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(plausible(s.get("items", {"type": "string"})), max_size=s.get(
            "maxItems", 3))
    return st.text(max_size=20) | st.sampled_from(["forward pass", "measure", "gemm", "0"])


DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"  # NVTX ranges: every analysis answers


def test_any_argument_to_any_tool_is_an_answer_or_an_error_that_says_what(tmp_path):
    """One server, 150 calls drawn by hypothesis: any tool but `ranks` (whose arguments
    start Dask clusters) on an export with NVTX ranges, with up to three of its other
    arguments, each well typed (enums, numbers near and past their bounds, range names) or
    anything at all. A call is an answer, an `Error:` result, or the SDK's validation error
    naming the argument; never "internal error"; and the server still answers at the end."""
    from contextlib import asynccontextmanager

    fixture_path(DLPROF)
    good = str(FIXTURES.resolve() / DLPROF)
    env = {"NSYS_MINE_CACHE_DIR": os.environ["NSYS_MINE_CACHE_DIR"], "PATH": os.environ["PATH"],
           "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    params = StdioServerParameters(
        command=str(SERVER), args=["mcp", "--root", str(FIXTURES.resolve()), "--pages",
                                   str(tmp_path / "pages")], env=env, cwd=str(tmp_path))

    @asynccontextmanager
    async def session():
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                yield s

    outcomes: dict[str, int] = {"answer": 0, "error": 0, "validation": 0}
    with anyio.from_thread.start_blocking_portal() as portal:
        with portal.wrap_async_context_manager(session()) as s:
            tools = [t for t in portal.call(s.list_tools).tools if t.name != "ranks"]

            @settings(max_examples=150, deadline=None, derandomize=True, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(data=st.data())
            def call(data: Any) -> None:
                tool = data.draw(st.sampled_from(tools))
                props = tool.input_schema.get("properties", {})
                args: dict[str, Any] = {k: ([good] if k == "exports" else good)
                                        for k in EXPORT_KEYS if k in props}
                others = sorted(k for k in props if k not in EXPORT_KEYS)
                for key in data.draw(st.lists(st.sampled_from(others), max_size=3,
                                              unique=True)) if others else []:
                    args[key] = data.draw(st.one_of(plausible(props[key]), ANY_VALUE))
                res = portal.call(s.call_tool, tool.name, args)
                text = res.content[0].text if res.content else ""
                if not res.is_error:
                    outcomes["answer"] += 1
                elif text.startswith("Error: "):
                    outcomes["error"] += 1
                else:
                    assert text.startswith(f"Error executing tool {tool.name}:") and \
                        "validation error" in text, (tool.name, args, text)
                    outcomes["validation"] += 1
                assert "internal error" not in text and "Traceback" not in text, \
                    (tool.name, args, text)

            call()
            last = portal.call(s.call_tool, "info", {"export": good})
    assert not last.is_error and last.structured_content["object"]["nsys_version"]
    # the fuzz reaches the analyses and their own checks, not only the SDK's validation
    assert min(outcomes.values()) >= 10, outcomes
