"""``nsys-mine mcp``: a Model Context Protocol server (the official ``mcp`` SDK's
``MCPServer``) that answers an agent's questions about nsys exports.

One tool per analysis of ``reports.analyses``, made from its declaration: the name is the
command's, the description its help, the input schema its exports (``export``, ``exports``
or ``base``/``cand`` as the command names them), the analysis options it honours and its
parameters (long option names in snake case), and ``top``; the output schema is the JSON
contract (``reports.pipeline.contract.envelope_schema``: the rows are the command's
``--format json`` rows). Besides them: ``report`` (writes the page into the server's pages
folder and returns its path and headline answers) and ``list_exports``; with ``--allow-runs``
also ``profile``, ``sweep`` and ``bench`` (the command line, run as a child process). Every
argument is made from a declaration (``reports.pipeline.options.Param``).

Every answer goes through ``reports.pipeline.ask`` (every hook but ``outputs``: a read-only
server writes no gate files) on one of the server's worker threads (``--calls``, one per core
by default): calls run side by side, and a call whose client cancelled it or went away is
stopped (``nsys_parsers.cancel``). The last exports asked about stay loaded and the last
answers kept between questions (``reports.Memo``, ``--keep-open``; one export's load serves
one call at a time). A path must lie, symlinks resolved, under a root: ``--root`` (default: the
working directory) or, over stdio, a root the client declares (MCP roots). Declarations that
write files (``Param.writes``) or name a program to run (``Param.executes``: ``--nsys``) are
not offered. An error is a tool result whose text is the command line's ``Error: ...``
line; a crash is logged on stderr with its traceback and the client gets one line; the server
keeps serving.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import sys
import traceback
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Literal, Optional
from urllib.parse import unquote, urlparse

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase, FuncMetadata
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ConfigDict, Field, create_model

from nsys_parsers import cancel
from nsys_parsers.errors import BadOption, NsysMineError
from nsys_parsers.export import REPORT_SUFFIXES
from nsys_parsers.paths import check_path, unusable_path
from reports.pipeline.analysis import Analysis, Param, first_paragraph
from reports.pipeline.options import OPTIONS, AnalysisOptions

log = logging.getLogger("nsys-mine.mcp")


EXPORT_SUFFIXES = (".sqlite", *REPORT_SUFFIXES)
LIST_LIMIT = 500  # exports list_exports gives at most
SKIPPED_FOLDERS = {".git", ".venv", "venv", "node_modules", "__pycache__", ".cache", ".tox"}
RUN_COMMANDS = ("profile", "sweep", "bench")  # tools of --allow-runs
RUN_TIMEOUT_S = 3600

INSTRUCTIONS = """\
nsys-mine answers questions about NVIDIA Nsight Systems exports (.sqlite, .nsys-rep) of \
PyTorch and CUDA programs; its numbers equal NVIDIA's `nsys stats` reports. Start with \
list_exports (what is there), info (what an export holds), then dominant (which kernel \
dominates each NVTX range), kernels, ranges, gpus (busy/idle/communication per device), gaps \
(idle GPU time and its cause), launches, diff (run-to-run with verdicts). Answers are the top \
rows (top=20 unless said; top=0 gives all) with notes that explain the numbers; durations are \
in nanoseconds (_ns), shares in percent (_pct). An answer of more than about 1 MB comes in \
pages: call again with offset=next_offset until it is null. Paths are absolute or relative to \
the first root; only files under the server's roots can be read."""

EXPORT_HELP = "An nsys export (.sqlite, or .nsys-rep/.qdrep): absolute, or relative to the " \
              "first root."
EXPORTS_HELP = "nsys exports (.sqlite, .nsys-rep) or sweep folders; several give one table " \
               "with a `config` column."


class OutsideRoots(BadOption):
    """A path outside every folder the server may read."""


@dataclass
class Roots:
    """The folders a server reads under: its own (``--root``) and, where it honours them, the
    client's MCP roots."""

    folders: list[Path]
    client: list[Path] = field(default_factory=list)

    @property
    def all(self) -> list[Path]:
        return list(dict.fromkeys([*self.folders, *self.client]))

    def path(self, given: str | os.PathLike[str], what: str = "a path") -> Path:
        """``given`` (absolute, or relative to the first root) when it lies under a root once
        symlinks are resolved; OutsideRoots otherwise."""
        p = check_path(given, what).expanduser()
        if not p.is_absolute():
            p = self.folders[0] / p
        real = p.resolve()
        if not any(real == r or real.is_relative_to(r) for r in self.all):
            listed = ", ".join(str(r) for r in self.all)
            folder = real if real.is_dir() else real.parent
            raise OutsideRoots(
                f"{given}: outside the folders this server may read ({listed}); give "
                f"{what} inside one of them, or start the server with --root {folder} to "
                f"allow it.")
        return p


def root_folders(given: list[Path] | None) -> list[Path]:
    """The server's roots, resolved (default: the working directory); BadOption for one that
    is not a folder."""
    out = []
    for g in given or [Path.cwd()]:
        p = Path(g).expanduser().resolve()
        if not p.is_dir():
            raise BadOption(f"--root {g}: not a folder; give a folder the server may read.")
        out.append(p)
    return list(dict.fromkeys(out))


def file_roots(uris: list[str]) -> list[Path]:
    """Local folders of MCP roots (``file://`` URIs; others are ignored)."""
    out = []
    for uri in uris:
        u = urlparse(uri)
        if u.scheme == "file" and u.netloc in ("", "localhost"):
            out.append(Path(unquote(u.path)).resolve())
    return out


# -- tools made from declarations -------------------------------------------------------------

class _Arguments(ArgModelBase):
    """A tool's arguments: unknown ones are an error (an agent's typo is not ignored)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)


def snake(flag: str) -> str:
    """``--vs-range`` -> ``vs_range``."""
    return flag.lstrip("-").replace("-", "_")


def param_key(p: Param) -> str:
    """The argument name of a parameter: its long option in snake case (an export argument:
    its name)."""
    if p.argument:
        return p.name
    longs = [f for f in p.flags if f.startswith("--")]
    return snake(longs[0]) if longs else p.name


def _param_field(p: Param, default: Any = None) -> tuple[Any, Any]:
    """(annotation, pydantic Field) of a declaration (``default``: another default than its
    own)."""
    base: Any = str if p.type is Path else p.type
    if p.choices:
        base = Literal[p.choices]
    limits: dict[str, Any] = {}
    if is_range(p) and not p.multiple:  # one name, as a list of one like every `range`
        return Optional[list[base]], Field(default=None, max_length=1, description=(
            " ".join(p.help.split()) + " (a list of one name)"))
    if p.multiple:
        base = list[base]
    if p.minimum is not None:
        limits["ge"] = p.minimum
    if p.maximum is not None:
        limits["le"] = p.maximum
    text = " ".join(p.help.split())
    if p.type is Path:
        text += " (a path under the server's roots)"
    if p.required:
        return base, Field(description=text, **limits)
    default = p.default if default is None else default
    default = list(default or []) if p.multiple else default
    if default is None and not p.multiple:
        base = Optional[base]
    return base, Field(default=default, description=text, **limits)


def offered(params: tuple[Param, ...], reach: bool = False) -> list[Param]:
    """The declarations a read-only server offers: none that writes a file or names a program
    to run, and none that connects to another machine or submits jobs unless ``reach``
    (--allow-runs)."""
    return [p for p in params if not p.writes and not p.executes and (reach or not p.reaches)]


def input_fields(a: Analysis, reach: bool = False) -> dict[str, tuple[Any, Any]]:
    """The arguments of ``a``'s tool: its exports, options, parameters (those that reach
    another machine only with ``reach``) and ``top``."""
    from profile_cli.commands.output import OUTPUT_PARAMS
    from reports.pipeline.contract import answers_object, default_top

    fields: dict[str, tuple[Any, Any]] = {}
    if a.inputs == "export":
        fields[a.input_name] = (str, Field(description=EXPORT_HELP))
    elif a.inputs in ("exports", "job"):
        fields["exports"] = (list[str], Field(min_length=1, description=EXPORTS_HELP))
    defaults = AnalysisOptions(**a.defaults)
    for p in offered(OPTIONS):
        if p.name in a.options:
            fields[p.name] = _param_field(p, getattr(defaults, p.name))
    for p in offered(a.params, reach):
        key = param_key(p)
        if key in fields:
            raise ValueError(f"{a.name}: argument {key!r} named twice (an option and a "
                             f"parameter)")
        fields[key] = _param_field(p)
    (top,) = [p for p in OUTPUT_PARAMS if p.name == "top"]
    fields["top"] = _param_field(top, default_top(a))
    if not answers_object(a):
        fields["offset"] = (int, Field(default=0, ge=0, description=(
            "The first row of the page (an answer of more than about 1 MB comes in pages: "
            "call again with the answer's next_offset).")))
    return fields


def answer_help(a: Analysis) -> str:
    """What the tool's answer holds, in which order, and how it pages (the description's
    last paragraph)."""
    from reports.pipeline.contract import answers_object, default_top

    if answers_object(a):
        return "Answer: one object (`object`), every field of the command's --format json."
    view = a.view
    rank = [f"`{c}`" for c in (view.rank_by if view is not None else ())]
    default = default_top(a)
    text = (f"Answer: the top {default} rows by default (top=0: all)." if default else
            "Answer: every row by default (top=N: the first N).")
    if rank:
        by = rank[0] + "".join(f" (where that is 0 in every row: {c})" for c in rank[1:2])
        text += (f" top=N ranks the rows highest first on {by}, as `nsys-mine {a.name} --top "
                 f"N`; top=0 gives every row in the command's own order (its --format json "
                 f"without --top), which need not be that ranking: the first N rows of top=0 "
                 f"are not always the top N.")
    else:
        text += " Rows come in the command's order whatever top is."
    if view is not None and view.pinned:
        text += (" The whole export's row is `total_rows` (one per export), shown whatever "
                 "top is; `rows` holds the top N others (of each export, for several).")
    return text + (" An answer of more than about 1 MB comes in pages: call again with "
                   "offset=next_offset until next_offset is null; the pages' rows together "
                   "are the command's rows in its order.")


def is_range(p: Param) -> bool:
    """A parameter that names NVTX ranges (``--range``, ``--vs-range``): a list of names in
    every tool, one name at most where the command takes one."""
    return any(f in ("--range", "--vs-range") for f in p.flags)


def _annotations(title: str, open_world: bool = False) -> ToolAnnotations:
    return ToolAnnotations(title=title, read_only_hint=True, destructive_hint=False,
                           idempotent_hint=True, open_world_hint=open_world)


def _tool(name: str, description: str, fields: dict[str, tuple[Any, Any]],
          output_schema: dict[str, Any] | None, fn: Callable[..., Any],
          annotations: ToolAnnotations) -> Tool:
    model = create_model(f"{name.replace('-', '_')}_arguments", __base__=_Arguments,
                         **fields)  # type: ignore[call-overload]
    return Tool(fn=fn, name=name, title=annotations.title, description=description,
                parameters=model.model_json_schema(by_alias=True),
                fn_metadata=FuncMetadata(arg_model=model, output_schema=output_schema),
                is_async=True, context_kwarg="ctx", annotations=annotations)


def result(data: dict[str, Any]) -> CallToolResult:
    """A tool's answer: structured content, and the same JSON as text (for clients that show
    only text)."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    return CallToolResult(content=[TextContent(type="text", text=text)],
                          structured_content=data)


def error_result(message: str) -> CallToolResult:
    """An error result: the command line's ``Error: ...`` line."""
    return CallToolResult(content=[TextContent(type="text", text=f"Error: {message}")],
                          is_error=True)


# -- the server -------------------------------------------------------------------------------

@dataclass
class ServerConfig:
    roots: list[Path]
    pages: Path  # where `report` writes pages
    transport: str = "stdio"  # or "http"
    allow_runs: bool = False
    keep_open: int = 2  # exports kept loaded between questions (reports.Memo)
    calls: int = 0  # calls answered side by side (0: one per core, at least 2)

    def __post_init__(self) -> None:
        if self.calls <= 0:
            self.calls = default_calls()


def default_calls() -> int:
    """One call per core this process may use (as many as a local ranks cluster's workers),
    at least two (a quick question beside a slow one)."""
    from reports.ranks.cluster import default_workers

    return max(2, default_workers())


class NsysMineServer:
    """The tools and their answers (``build`` makes the ``MCPServer``)."""

    def __init__(self, config: ServerConfig) -> None:
        from reports.pipeline.memo import Memo

        self.config = config
        # calls run side by side on these threads (each call's SQLite reads on the reader
        # threads of its export); one export's load serves one call at a time (the memo)
        self._pool = ThreadPoolExecutor(max_workers=config.calls,
                                        thread_name_prefix="nsys-mine-call")
        self._running: set[cancel.Stop] = set()
        # the last exports asked about stay loaded, the last answers kept
        self.memo = Memo(exports=config.keep_open, answers=32 if config.keep_open else 0)

    # the roots of one call
    async def roots(self, ctx: Context[Any, Any] | None) -> Roots:
        roots = Roots(self.config.roots)
        if ctx is None or self.config.transport != "stdio":
            return roots  # over HTTP any local process may connect: only --root counts
        try:
            caps = ctx.client_capabilities
            if caps is None or caps.roots is None:
                return roots
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                listed = await ctx.session.list_roots()
            roots.client = file_roots([str(r.uri) for r in listed.roots])
        except Exception as exc:  # a client that declared roots but cannot list them
            log.warning("could not list the client's roots: %r", exc)
        return roots

    async def run(self, ctx: Context[Any, Any] | None,
                  work: Callable[[Roots], dict[str, Any]]) -> CallToolResult:
        """``work(roots)`` on one of the server's workers, side by side with other calls
        (``--calls``); NsysMineError -> an error result with its message; anything else ->
        logged with its traceback, one line to the client. A call its client cancelled (or
        left) is stopped: its SQLite statements interrupted, its waits ended, its child
        processes ended (``nsys_parsers.cancel``); the worker is then free."""
        import asyncio

        import anyio  # with the [mcp] extra

        roots = await self.roots(ctx)
        stop = cancel.Stop()

        def job() -> dict[str, Any]:
            with cancel.scope(stop):
                stop.check()  # cancelled while it waited for a worker
                return work(roots)

        future = self._pool.submit(job)
        self._running.add(stop)
        try:
            data = await asyncio.wrap_future(future)
        except anyio.get_cancelled_exc_class():
            stop.cancel()  # the client cancelled the call or went away: nobody waits
            raise
        except NsysMineError as exc:
            return error_result(str(exc))
        except Exception as exc:
            if stop.is_set():  # an interrupted statement, say
                return error_result(cancel.CANCELLED)
            if (said := unusable_path(exc)) is not None:  # a path no check foresaw
                return error_result(said)
            sys.stderr.write("nsys-mine mcp: unexpected error\n")
            traceback.print_exception(exc, file=sys.stderr)
            return error_result(f"internal error ({type(exc).__name__}) in nsys-mine; "
                                f"the server's stderr has the traceback. Please report "
                                f"it with the export's `nsys-mine info`.")
        finally:
            self._running.discard(stop)
        return result(data)

    def close(self) -> None:
        """Stop the calls still running, and close what the memo keeps."""
        for stop in list(self._running):
            stop.cancel()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.memo.close()

    # analyses
    def analysis_tool(self, a: Analysis) -> Tool:
        from reports.pipeline.contract import envelope_schema

        reach = self.config.allow_runs  # ranks --scheduler and Slurm: --allow-runs only
        fields = input_fields(a, reach)

        async def call(ctx: Context[Any, Any] | None = None, **kwargs: Any) -> CallToolResult:
            return await self.run(ctx, lambda roots: self.answer(a, kwargs, roots))

        open_world = reach and any(p.reaches for p in a.params)
        return _tool(a.name, f"{a.help.strip()}\n\n{answer_help(a)}", fields,
                     envelope_schema(a), call,
                     _annotations(a.summary, open_world))

    def answer(self, a: Analysis, kwargs: dict[str, Any], roots: Roots) -> dict[str, Any]:
        """``a``'s answer to a tool call's arguments (``reports.pipeline.ask``, as the command
        line asks it, through the memo), as ``reports.pipeline.contract.envelope``."""
        from profile_cli.runs.targets import export_targets
        from reports.pipeline.contract import envelope
        from reports.pipeline.multi import ExportTarget

        args = dict(kwargs)
        top = int(args.pop("top"))
        offset = int(args.pop("offset", 0))
        if a.inputs == "export":
            sources = [roots.path(args.pop(a.input_name), "an export")]
        elif a.inputs in ("exports", "job"):
            sources = [roots.path(p, "an export") for p in args.pop("exports")]
        else:
            sources = []
        options = replace(AnalysisOptions(**a.defaults), **_values(
            [p for p in offered(OPTIONS) if p.name in a.options], args, roots, key=_name))
        params = _values(offered(a.params, self.config.allow_runs), args, roots, key=param_key)

        def targets(paths: list[Path]) -> list[ExportTarget]:
            found = export_targets(paths)  # a sweep folder's exports must be inside too
            for t in found:
                roots.path(t.path, "an export")
            return found

        # outputs: the files a gate writes (JUnit XML, the GitHub step summary): not here
        report = self.memo.ask(replace(a, outputs=None), sources, options, params,
                               targets=targets)
        return envelope(a, report, a.fill(params), top, offset)

    # report
    def report_tool(self) -> Tool:
        from reports.page import files
        from reports.pipeline.registry import get

        defaults = AnalysisOptions(**dict(files.DEFAULTS))
        fields = {p.name: _param_field(p, getattr(defaults, p.name))
                  for p in offered(OPTIONS) if p.name in files.OPTIONS}
        for p in [*offered(get("attention").params), *offered(files.PARAMS)]:
            fields[param_key(p)] = _param_field(p, "html" if p.name == "format" else None)
        output = {"type": "object", "required": ["path", "answers"], "properties": {
            "path": {"type": "string"}, "format": {"type": "string"},
            "files": {"type": "array", "items": {"type": "string"}},
            "answers": {"type": "array", "items": {"type": "string"}},
            "sections": {"type": "array", "items": {"type": "string"}}}}

        async def call(ctx: Context[Any, Any] | None = None, **kwargs: Any) -> CallToolResult:
            return await self.run(ctx, lambda roots: self.write_page(kwargs, roots))

        description = (f"{first_paragraph(files.HELP)} Written as one file into the server's "
                       f"pages folder ({self.config.pages}); returns its path and the headline "
                       f"answers.")
        annotations = ToolAnnotations(title="Write the report page", read_only_hint=False,
                                      destructive_hint=False, idempotent_hint=True,
                                      open_world_hint=False)
        return _tool("report", description, fields, output, call, annotations)

    def write_page(self, kwargs: dict[str, Any], roots: Roots) -> dict[str, Any]:
        from profile_cli.runs.targets import build_report
        from reports.page import files
        from reports.page.model import Sentences
        from reports.pipeline.registry import get

        args = dict(kwargs)
        target = roots.path(args.pop("export"), "an export or a sweep folder")
        options = replace(AnalysisOptions(**dict(files.DEFAULTS)), **_values(
            [p for p in offered(OPTIONS) if p.name in files.OPTIONS], args, roots, key=_name))
        shape = _values(offered(get("attention").params), args, roots, key=param_key)
        page = build_report(target, options, shape, top=args["top"])
        real = target.resolve()
        digest = hashlib.sha1(str(real).encode()).hexdigest()[:8]
        out = self.config.pages / f"{real.name.rsplit('.', 1)[0]}-{digest}.{args['format']}"
        try:
            written = files.write_page(page, out, args["format"])
        except OSError as exc:
            raise BadOption(f"cannot write the page into {self.config.pages}: {exc.strerror}; "
                            f"start the server with --pages DIR (a writable folder).") from None
        answers = [s for sec in page.sections for b in sec.blocks if isinstance(b, Sentences)
                   for s in b.items]
        return {"path": str(out), "format": args["format"], "files": [str(f) for f in written],
                "answers": [*page.lead, *answers][:40],
                "sections": [s.title for s in page.sections]}

    # list_exports
    def list_tool(self) -> Tool:
        fields: dict[str, tuple[Any, Any]] = {
            "folder": (Optional[str], Field(default=None, description=(
                "The folder to look in (default: the first root)."))),
            "recursive": (bool, Field(default=True, description="Also look in subfolders.")),
        }
        output = {"type": "object", "required": ["folder", "exports", "roots"], "properties": {
            "folder": {"type": "string"},
            "roots": {"type": "array", "items": {"type": "string"}},
            "exports": {"type": "array", "items": {
                "type": "object", "required": ["path", "kind", "size_bytes"],
                "properties": {"path": {"type": "string"}, "kind": {"type": "string"},
                               "size_bytes": {"type": "integer"},
                               "modified": {"type": "string"},
                               "sqlite_cached": {"type": ["boolean", "null"]}}}},
            "sweep_folders": {"type": "array", "items": {"type": "string"}},
            "left_out": {"type": "integer"}}}

        async def call(ctx: Context[Any, Any] | None = None, **kwargs: Any) -> CallToolResult:
            return await self.run(ctx, lambda roots: list_exports(
                roots, kwargs["folder"], kwargs["recursive"]))

        description = ("The nsys exports under a folder (within the server's roots): "
                       ".sqlite, .nsys-rep and .qdrep files with their size, and for a "
                       "report whether its SQLite export is cached already (else the first "
                       "question exports it with nsys); and sweep folders.")
        return _tool("list_exports", description, fields, output, call,
                     _annotations("List the exports under a folder"))

    # profile, sweep, bench (--allow-runs)
    def run_tool(self, command: str) -> Tool:
        fields: dict[str, tuple[Any, Any]] = {
            "args": (list[str], Field(default_factory=list, description=(
                f"The arguments of `nsys-mine {command}`, as on the command line (see "
                f"`nsys-mine {command} --help`)."))),
            "timeout_s": (int, Field(default=RUN_TIMEOUT_S, ge=1, le=86_400, description=(
                "Stop the run (and every process it started) after this many seconds."))),
        }
        output = {"type": "object", "required": ["exit_code", "stdout", "stderr"],
                  "properties": {"exit_code": {"type": ["integer", "null"]},
                                 "timed_out": {"type": "boolean"},
                                 "wall_s": {"type": "number"},
                                 "stdout": {"type": "string"}, "stderr": {"type": "string"}}}

        async def call(ctx: Context[Any, Any] | None = None, **kwargs: Any) -> CallToolResult:
            return await self.run(ctx, lambda roots: run_command(
                command, kwargs["args"], kwargs["timeout_s"], roots.folders[0]))

        annotations = ToolAnnotations(title=f"Run nsys-mine {command}", read_only_hint=False,
                                      destructive_hint=False, idempotent_hint=False,
                                      open_world_hint=False)
        return _tool(command, f"Runs `nsys-mine {command} ARGS` (in the first root, "
                              f"{self.config.roots[0]}): programs run under nsys. Offered "
                              f"because the server was started with --allow-runs.",
                     fields, output, call, annotations)

    def tools(self) -> list[Tool]:
        from reports.pipeline.registry import all_analyses

        tools = [self.analysis_tool(a) for a in all_analyses()]
        tools += [self.report_tool(), self.list_tool()]
        if self.config.allow_runs:
            tools += [self.run_tool(c) for c in RUN_COMMANDS]
        return tools

    def build(self) -> MCPServer[Any]:
        return MCPServer("nsys-mine", title="nsys-mine", version=package_version(),
                         instructions=INSTRUCTIONS, tools=self.tools(), log_level="WARNING")


def package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nsys-mine")
    except PackageNotFoundError:
        return "0"


def _name(p: Param) -> str:
    return p.name


def _values(params: list[Param], args: dict[str, Any], roots: Roots,
            key: Callable[[Param], str]) -> dict[str, Any]:
    """The values of ``params`` among a call's ``args`` (each under ``key(p)``), by name:
    paths checked against the roots, lists as the library takes them (tuples)."""
    out: dict[str, Any] = {}
    for p in params:
        if key(p) not in args:
            continue
        value = args.pop(key(p))
        if is_range(p) and not p.multiple and value is not None:
            value = value[0] if value else None  # a list of one name
        if p.type is Path and value is not None:
            value = roots.path(value, "a file")
        out[p.name] = tuple(value) if p.multiple and value is not None else value
    return out


def list_exports(roots: Roots, folder: str | None, recursive: bool) -> dict[str, Any]:
    """The exports under ``folder`` (a root's subfolder), sorted by path."""
    import datetime

    from nsys_parsers.nsys_tool import cached_export_path
    from profile_cli.runs.sweep import INDEX_NAME

    base = roots.path(folder, "a folder") if folder else roots.folders[0]
    if not base.is_dir():
        raise BadOption(f"{folder}: not a folder; give a folder under the server's roots.")
    found: list[dict[str, Any]] = []
    sweeps: list[str] = []
    left = 0
    for top, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_FOLDERS and not d.startswith("."))
        if not recursive:
            dirs[:] = []
        if INDEX_NAME in files:
            sweeps.append(top)
        for name in sorted(files):
            p = Path(top) / name
            if p.suffix.lower() not in EXPORT_SUFFIXES or p.name.startswith("."):
                continue
            if len(found) >= LIST_LIMIT:
                left += 1
                continue
            with contextlib.suppress(OSError):
                st = p.stat()
                cached = None
                if p.suffix.lower() in REPORT_SUFFIXES:
                    cached = cached_export_path(p).exists()
                found.append({"path": str(p), "kind": p.suffix.lower().lstrip("."),
                              "size_bytes": st.st_size,
                              "modified": datetime.datetime.fromtimestamp(
                                  st.st_mtime).isoformat(timespec="seconds"),
                              "sqlite_cached": cached})
    out: dict[str, Any] = {"folder": str(base), "roots": [str(r) for r in roots.all],
                           "exports": found, "sweep_folders": sweeps}
    if left:
        out["left_out"] = left
    return out


def run_command(command: str, args: list[str], timeout_s: int, cwd: Path) -> dict[str, Any]:
    """``nsys-mine COMMAND ARGS`` as a child process (its own session; it and everything it
    started ended by PID after ``timeout_s``)."""
    from profile_cli.runs.process import run_with_timeout

    argv = [sys.executable, "-c", "from profile_cli.app import main; main()", command, *args]
    stop = cancel.current_stop()
    try:
        outcome = run_with_timeout(argv, timeout_s, cwd=str(cwd),
                                   stop=stop.event if stop is not None else None)
    except KeyboardInterrupt:  # what a set stop raises: the call was cancelled
        raise cancel.Cancelled("the run was cancelled; its processes were ended.") from None
    return {"exit_code": outcome.returncode, "timed_out": outcome.timed_out,
            "wall_s": round(outcome.wall_s, 3), "stdout": outcome.stdout[-20_000:],
            "stderr": outcome.stderr[-8_000:]}


def parse_http(value: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (host 127.0.0.1) -> (host, port)."""
    host, _, port = value.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise BadOption(f"--http {value}: give HOST:PORT (e.g. 127.0.0.1:8765) or a port.")
    return host, number


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(roots: list[Path] | None, http: str | None, pages: Path | None,
          allow_runs: bool, keep_open: int = 2, calls: int = 0) -> None:
    """Run the server until its client goes (stdio) or it is stopped (HTTP)."""
    from nsys_parsers.nsys_tool import user_cache_dir

    folders = root_folders(roots)
    config = ServerConfig(roots=folders, pages=(pages or user_cache_dir() / "pages").resolve(),
                          transport="http" if http else "stdio", allow_runs=allow_runs,
                          keep_open=keep_open, calls=calls)
    if allow_runs:
        # dask_jobqueue sets a signal handler as it is imported, which only the main thread
        # may: imported here, so that `ranks` with Slurm can run on a worker thread
        from reports.ranks.cluster import import_slurm_cluster

        with contextlib.suppress(NsysMineError):
            import_slurm_cluster()
    # a gate's files are never written here: not even the GitHub step summary
    os.environ.pop("GITHUB_STEP_SUMMARY", None)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING,
                        format="nsys-mine mcp: %(message)s")
    tools = NsysMineServer(config)
    server = tools.build()
    listed = ", ".join(str(f) for f in folders)
    try:
        if http is None:
            server.run("stdio")
            return
        host, port = parse_http(http)
        if not is_loopback(host):
            sys.stderr.write(f"nsys-mine mcp: listening on {host}, not a loopback address: "
                             f"anyone who reaches it can read the exports under {listed}.\n")
        sys.stderr.write(f"nsys-mine mcp: http://{host}:{port}/mcp (roots: {listed})\n")
        # stateless: each call is its own exchange, so a client that goes away (its POST
        # closed) cancels its call; nothing of a session is needed (the client's roots do
        # not count over HTTP, and the server sends no requests or notifications of its own)
        server.run("streamable-http", host=host, port=port, stateless_http=True)
    finally:
        tools.close()
