"""``nsys-mine mcp`` with a real client of the official MCP SDK: the real server process over
stdio (the SDK's stdio client starts and ends it) and over streamable HTTP on loopback
(started here and ended by its PID). Each transport runs one session of calls (module-scoped
fixtures: one server each); the tests check what came back against the command line's JSON
and ``Error:`` lines."""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import FIXTURES, ROOT, fixture_path, free_port, listening, run_cli
from tests.synth import slowed_copy

pytest.importorskip("mcp")
anyio = pytest.importorskip("anyio")

from mcp import ClientSession  # noqa: E402
from mcp import types as mt  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

SERVER = Path(sys.executable).parent / "nsys-mine"  # the console script of this environment
DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
GTLS = "gtls_rtx3060_nsys2023.1.sqlite"  # 23,419 kernels: a long answer
DDP = "cs336_lizhieffe_ddp53_profile.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
T4 = "vecadd_t4_nsys2022.4.sqlite"
NVTX_ONLY = "centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"  # no CUDA tables
SLOW_RANGE = "aten::_softmax"


class World:
    """Paths of one module's servers: the fixtures (a root), a private root with a slowed
    copy of a fixture and a symlink that leads out of it, a file outside every root."""

    def __init__(self, tmp: Path) -> None:
        for name in (DLPROF, GTLS, DDP, FASTVIDEO, T4, NVTX_ONLY):
            fixture_path(name)  # skips cleanly without the shared fixtures
        self.fixtures = FIXTURES.resolve()
        self.root = tmp / "root"
        self.root.mkdir()
        self.slow = slowed_copy(self.fixtures / FASTVIDEO, self.root / "slow.sqlite",
                                SLOW_RANGE)
        outside = tmp / "outside"
        outside.mkdir()
        self.outside = outside / "vecadd.sqlite"
        shutil.copy(self.fixtures / T4, self.outside)
        self.escape = self.root / "escape.sqlite"
        self.escape.symlink_to(self.outside)
        self.pages = tmp / "pages"
        # a Dask scheduler's address that nothing may connect to without --allow-runs
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.listener.setblocking(False)
        self.scheduler = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.env = {"NSYS_MINE_CACHE_DIR": os.environ.get("NSYS_MINE_CACHE_DIR",
                                                          str(tmp / "columns")),
                    "XDG_CACHE_HOME": str(tmp / "xdg"), "PATH": os.environ["PATH"],
                    **({"NSYS": os.environ["NSYS"]} if "NSYS" in os.environ else {})}

    def fx(self, name: str) -> str:
        return str(self.fixtures / name)

    def args(self, *roots: Path) -> list[str]:
        out = ["mcp", "--pages", str(self.pages)]
        for r in roots or (self.fixtures, self.root):
            out += ["--root", str(r)]
        return out


def roots_callback(*folders: Path):
    async def list_roots(context: Any) -> mt.ListRootsResult:
        return mt.ListRootsResult(roots=[mt.Root(uri=f"file://{f}", name=f.name)
                                         for f in folders])
    return list_roots


async def common_calls(s: ClientSession, w: World) -> dict[str, Any]:
    """The calls both transports make, in this order (an error, then a call that works)."""
    out: dict[str, Any] = {"tools": (await s.list_tools()).tools}

    async def call(key: str, tool: str, **args: Any) -> None:
        out[key] = await s.call_tool(tool, args)

    await call("dominant", "dominant", exports=[w.fx(DLPROF)])
    await call("kernels", "kernels", exports=[w.fx(GTLS)])
    await call("gaps", "gaps", export=w.fx(DDP))
    await call("ranks", "ranks", exports=[w.fx(DDP)])
    await call("diff", "diff", base=w.fx(FASTVIDEO), cand=str(w.slow), scope=SLOW_RANGE,
               fail_on="regression")
    await call("missing", "kernels", exports=[str(w.root / "missing.sqlite")])
    await call("after_missing", "info", export=w.fx(T4))
    await call("outside", "kernels", exports=[str(w.outside)])
    await call("escape", "info", export=str(w.escape))
    await call("after_outside", "info", export=w.fx(T4))
    await call("no_table", "kernels", exports=[w.fx(NVTX_ONLY)])
    await call("no_range", "dominant", exports=[w.fx(DLPROF)], range=["no such range"])
    await call("reach", "ranks", exports=[w.fx(DDP)], scheduler=w.scheduler)
    await call("malformed", "kernels", exports=[w.fx(T4)], bogus=1)
    await call("bad_type", "gaps", export=w.fx(DDP), top="many")
    await call("after_malformed", "gaps", export=w.fx(DDP), top=3)
    return out


async def stdio_session(w: World) -> dict[str, Any]:
    params = StdioServerParameters(command=str(SERVER), args=w.args(), env=w.env,
                                   cwd=str(w.root))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            await s.initialize()
            out = await common_calls(s, w)
            out["relative"] = await s.call_tool("info", {"export": T4})  # the first root's
            out["report"] = await s.call_tool("report", {"export": w.fx(DLPROF)})
            out["listed"] = await s.call_tool("list_exports", {})
            out["listed_root"] = await s.call_tool("list_exports", {"folder": str(w.root)})
    # a server whose only root is the private folder; the client's roots add the fixtures
    # (and --allow-runs: the tools that run programs)
    params = StdioServerParameters(command=str(SERVER), args=[*w.args(w.root), "--allow-runs"],
                                   env=w.env)
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write,
                                 list_roots_callback=roots_callback(w.fixtures)) as s:
            await s.initialize()
            out["client_root"] = await s.call_tool("info", {"export": w.fx(T4)})
            out["client_root_outside"] = await s.call_tool("info", {"export": str(w.outside)})
            tools = (await s.list_tools()).tools
            out["run_tools"] = {t.name for t in tools}
            out["allow_ranks"] = next(t for t in tools if t.name == "ranks")
            out["bench_help"] = await s.call_tool("bench", {"args": ["--help"]})
    return out


async def http_session(url: str, w: World) -> dict[str, Any]:
    async with streamable_http_client(url) as (read, write):
        # over HTTP the client's roots do not widen what the server reads
        async with ClientSession(read, write,
                                 list_roots_callback=roots_callback(w.outside.parent)) as s:
            await s.initialize()
            return await common_calls(s, w)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> World:
    return World(tmp_path_factory.mktemp("mcp"))


@pytest.fixture(scope="module")
def stdio(world) -> dict[str, Any]:
    return anyio.run(stdio_session, world)


@pytest.fixture(scope="module")
def http(world, tmp_path_factory) -> dict[str, Any]:
    port = free_port()
    log = tmp_path_factory.mktemp("http-log") / "server.log"
    with listening([str(SERVER), *world.args(), "--http", f"127.0.0.1:{port}"], port, log,
                   world.env, cwd=str(world.root)):
        out = anyio.run(http_session, f"http://127.0.0.1:{port}/mcp", world)
    out["log"] = log
    return out


@pytest.fixture(params=["stdio", "http"])
def answers(request) -> dict[str, Any]:
    return request.getfixturevalue(request.param)


def cli_rows(*args: Any) -> list[dict[str, Any]]:
    res = run_cli(*args, "--format", "json", "--top", "20")
    assert res.exit_code in (0, 3), res.stderr
    return json.loads(res.stdout)


def cli_error(*args: Any) -> str:
    res = run_cli(*args)
    assert res.exit_code == 1
    return res.stderr.strip()


def ok(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content[0].text
    data = result.structured_content
    assert json.loads(result.content[0].text) == data  # the same JSON as text
    return data


# -- the tools ------------------------------------------------------------------------------

def test_every_analysis_is_a_tool_and_nothing_runs_a_program(answers):
    from profile_cli.mcp_server import answer_help
    from reports.pipeline.contract import envelope_schema
    from reports.pipeline.registry import all_analyses

    tools = {t.name: t for t in answers["tools"]}
    assert set(tools) == {a.name for a in all_analyses()} | {"report", "list_exports"}
    for a in all_analyses():
        t = tools[a.name]
        assert t.description == f"{a.help.strip()}\n\n{answer_help(a)}"
        assert t.output_schema == envelope_schema(a)
        assert t.annotations.read_only_hint is True
        assert "top" in t.input_schema["properties"]
    assert "junit" not in tools["check"].input_schema["properties"]  # writes a file
    assert "nsys" not in tools["kernels"].input_schema["properties"]  # runs a program
    assert set(tools["diff"].input_schema["required"]) == {"base", "cand"}
    # `range` is a list of names everywhere: of one name where the command takes one
    for name, most in (("dominant", None), ("kernels", 1), ("compare", 1)):
        ranges = tools[name].input_schema["properties"]["range"]
        arrays = [s for s in ranges.get("anyOf", [ranges]) if s.get("type") == "array"]
        assert len(arrays) == 1 and arrays[0]["items"]["type"] == "string", name
        assert arrays[0].get("maxItems") == most, name


def test_rows_are_the_command_lines(answers, world):
    dominant = ok(answers["dominant"])
    # the whole export's row in its own field, then the top 20 others: the command's rows
    (whole,) = dominant["total_rows"]
    assert [whole, *dominant["rows"]] == cli_rows("dominant", world.fx(DLPROF))
    assert whole["range"] is None and len(dominant["rows"]) == dominant["rows_total"] == 9
    assert whole["total_ns"] == 51840 and whole["instances"] == 6
    assert dominant["units"]["share_pct"] == "%"
    gaps = ok(answers["gaps"])
    assert gaps["rows"] == cli_rows("gaps", world.fx(DDP))
    assert gaps["rows_total"] == len(json.loads(run_cli("gaps", world.fx(DDP), "-f",
                                                        "json").stdout))
    ranks = ok(answers["ranks"])  # one export of two processes: no cluster started
    assert ranks["rows"] == cli_rows("ranks", world.fx(DDP))
    assert [(r["rank"], r["straggler"]) for r in ranks["rows"]] == [(0, False), (1, True)]
    assert ranks["answers"][0].startswith("rank 1 arrives 97.681 µs late at 197 of 230")


def test_a_long_answer_says_what_was_left_out(answers, world):
    kernels = ok(answers["kernels"])
    assert kernels["rows"] == cli_rows("kernels", world.fx(GTLS))
    assert len(kernels["rows"]) == 20 and kernels["rows_total"] > 20
    assert kernels["rows_left_out"] == kernels["rows_total"] - 20
    assert "top=0" in kernels["notes"][0]
    assert len(answers["kernels"].content[0].text) < 20_000  # fits an agent's context


def test_a_gate_verdict_is_a_field_not_an_error(answers, world):
    diff = ok(answers["diff"])
    assert diff["exit_code"] == 3  # --fail-on regression, and it regressed
    (overall,) = diff["total_rows"]  # the overall row, in its own field
    assert [overall, *diff["rows"]] == cli_rows("diff", world.fx(FASTVIDEO), world.slow,
                                                "--scope", SLOW_RANGE, "--fail-on",
                                                "regression")
    assert overall["level"] == "overall" and overall["verdict"] == "regression"


def test_errors_are_the_command_lines_and_the_server_goes_on(answers, world):
    missing = answers["missing"]
    assert missing.is_error
    assert missing.content[0].text == cli_error("kernels", world.root / "missing.sqlite")
    assert answers["no_table"].content[0].text == cli_error("kernels", world.fx(NVTX_ONLY))
    assert answers["no_range"].content[0].text == cli_error("dominant", world.fx(DLPROF),
                                                            "--range", "no such range")
    for key in ("missing", "no_table", "no_range"):
        assert "Traceback" not in answers[key].content[0].text
    for key in ("after_missing", "after_outside"):
        assert ok(answers[key])["object"]["kernel_count"] == 200


def test_a_path_outside_the_roots_is_refused(answers, world):
    for key in ("outside", "escape"):  # the symlink is resolved before the check
        res = answers[key]
        assert res.is_error
        assert res.content[0].text.startswith("Error: ")
        assert "outside the folders this server may read" in res.content[0].text


def test_a_malformed_call_gets_the_sdks_validation_error(answers):
    for key, field in (("malformed", "bogus"), ("bad_type", "top")):
        res = answers[key]
        assert res.is_error and "validation error" in res.content[0].text
        assert field in res.content[0].text
    after = ok(answers["after_malformed"])
    assert len(after["rows"]) == 3


# -- stdio only -----------------------------------------------------------------------------

def test_relative_paths_are_under_the_first_root(stdio):
    assert ok(stdio["relative"])["object"]["gpus"] == ["Tesla T4"]


def test_report_writes_the_page_into_the_pages_folder(stdio, world):
    page = ok(stdio["report"])
    path = Path(page["path"])
    assert path.parent == world.pages.resolve() and path.suffix == ".html"
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert page["answers"]


def test_list_exports(stdio, world):
    listed = ok(stdio["listed"])
    by_name = {Path(e["path"]).name: e for e in listed["exports"]}
    assert DLPROF in by_name and by_name[DLPROF]["kind"] == "sqlite"
    assert by_name[DLPROF]["size_bytes"] == (world.fixtures / DLPROF).stat().st_size
    rep = by_name["dlprof_pytorch_rtx2070s_nsys2022.1.nsys-rep"]
    assert rep["kind"] == "nsys-rep" and rep["sqlite_cached"] in (True, False)
    assert by_name[DLPROF]["sqlite_cached"] is None
    mine = {Path(e["path"]).name for e in ok(stdio["listed_root"])["exports"]}
    assert mine == {"slow.sqlite", "escape.sqlite"}


def test_the_clients_roots_count_over_stdio(stdio):
    assert ok(stdio["client_root"])["object"]["kernel_count"] == 200
    assert stdio["client_root_outside"].is_error


def test_allow_runs_offers_the_commands_that_run_programs(stdio):
    assert {"profile", "sweep", "bench"} <= stdio["run_tools"]
    bench = ok(stdio["bench_help"])
    assert bench["exit_code"] == 0 and "Usage: nsys-mine bench" in bench["stdout"]


def test_read_only_reaches_no_other_machine(answers, stdio, world):
    """Without --allow-runs the ranks tool has no --scheduler or Slurm argument (a call that
    names one is refused before anything runs) and nothing connected to the listening
    address; with it, they are offered and the tool says it reaches out (openWorldHint)."""
    ranks = next(t for t in answers["tools"] if t.name == "ranks")
    assert not {"scheduler", "slurm_partition", "slurm_arg"} & set(ranks.input_schema["properties"])
    assert ranks.annotations.open_world_hint is False and ranks.annotations.read_only_hint
    res = answers["reach"]
    assert res.is_error and "validation error" in res.content[0].text
    assert "scheduler" in res.content[0].text
    with pytest.raises(BlockingIOError):  # no connection is waiting
        world.listener.accept()
    allowed = stdio["allow_ranks"]
    assert {"scheduler", "slurm_partition", "slurm_arg"} <= set(allowed.input_schema["properties"])
    assert allowed.annotations.open_world_hint is True


def test_the_http_server_listens_on_loopback(http):
    assert "http://127.0.0.1:" in http["log"].read_text()


def test_the_command_line_starts_the_server_only_when_asked():
    """`nsys-mine --help` lists `mcp` without importing the SDK."""
    import subprocess as sp

    code = ("import sys, profile_cli.app; profile_cli.app.app; "
            "print(','.join(m for m in ('mcp', 'pydantic', 'starlette') if m in sys.modules))")
    out = sp.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                 check=True).stdout.strip()
    assert out == ""
    assert "mcp" in run_cli("--help").stdout


def test_a_question_asked_again_is_the_kept_answer(world, tmp_path):
    """The server keeps the last answers (``reports.Memo``): asked again, with every argument
    as the SDK fills it in, a question is its kept answer, equal to the command line's rows;
    another question of that export answers from the export it loaded."""
    from profile_cli.mcp_server import NsysMineServer, ServerConfig, input_fields
    from reports.pipeline.registry import get

    export = world.fx(DDP)
    questions = ("kernels", "gpus", "nvtx-kernels", "dominant", "ranges", "gaps")

    async def session() -> tuple[NsysMineServer, list[dict[str, Any]], list[dict[str, Any]]]:
        tools = NsysMineServer(ServerConfig(roots=[world.fixtures], pages=tmp_path))
        try:
            def ask_one(name: str) -> Any:
                a = get(name)  # every argument as the SDK fills it in: its default
                args = {k: f.default for k, (_, f) in input_fields(a).items()
                        if not f.is_required()}
                args.update({"top": 20, a.input_name if a.inputs == "export" else "exports":
                             export if a.inputs == "export" else [export]})
                return tools.run(None, lambda roots: tools.answer(a, args, roots))

            def rows(answer: Any) -> list[dict[str, Any]]:
                data = answer.structured_content
                return [*data.get("total_rows", []), *data["rows"]]

            first = [rows(await ask_one(n)) for n in questions]
            again = [rows(await ask_one(n)) for n in questions]
            return tools, first, again
        finally:
            tools.close()

    tools, first, again = anyio.run(session)
    assert again == first and tools.memo.recalled == len(questions)
    assert tools.memo.opened == 1
    for name, got in zip(questions, first):
        assert got == cli_rows(name, export), name


def test_every_tool_argument_is_made_from_a_declaration():
    """The tools' arguments are the declarations' (``reports.pipeline.options.Param``): the
    analysis options a tool's analysis honours, its own parameters and ``top``, each with the
    declaration's help, and ``offset`` (the page) for the answers of rows; none that writes a
    file, names a program to run (``--nsys``) or
    reaches another machine (``ranks --scheduler``: only with --allow-runs)."""
    from profile_cli.commands.output import OUTPUT_PARAMS
    from profile_cli.mcp_server import input_fields, param_key
    from reports.pipeline.contract import answers_object
    from reports.pipeline.options import OPTIONS
    from reports.pipeline.registry import all_analyses

    for a in all_analyses():
        declared = [p for p in OPTIONS if p.name in a.options and not p.executes]
        keyed = {p.name: p for p in declared}
        keyed.update({param_key(p): p for p in a.params
                      if not p.writes and not p.executes and not p.reaches})
        keyed["top"] = next(p for p in OUTPUT_PARAMS if p.name == "top")
        fields = input_fields(a)
        exports = {"export": a.input_name, "exports": "exports", "job": "exports"}.get(a.inputs)
        paging = set() if answers_object(a) else {"offset"}
        assert set(fields) == set(keyed) | ({exports} if exports else set()) | paging, a.name
        for key, p in keyed.items():
            assert fields[key][1].description.startswith(" ".join(p.help.split())), (a.name, key)
        assert "nsys" not in fields and "junit" not in fields, a.name
