"""``nsys-mine mcp``: the Model Context Protocol server (``profile_cli.mcp_server``) for coding
agents. Only its options are declared here; the ``mcp`` SDK is imported when the command runs,
so that the command line starts without it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, List, Optional

import typer

from nsys_parsers.errors import NsysMineError


class McpNotInstalled(NsysMineError):
    """The optional ``mcp`` package is missing."""


def mcp(
    root: Annotated[Optional[List[Path]], typer.Option(
        "--root", metavar="DIR", file_okay=False, show_default=False,
        help="A folder whose exports the server may read (repeatable; default: the working "
             "directory). Over stdio the client's MCP roots count too. Paths are checked with "
             "symlinks resolved.")] = None,
    http: Annotated[Optional[str], typer.Option(
        "--http", metavar="HOST:PORT", show_default=False,
        help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (`8765` or "
             "`:8765`: on 127.0.0.1).")] = None,
    pages: Annotated[Optional[Path], typer.Option(
        "--pages", metavar="DIR", file_okay=False, show_default=False,
        help="Where the `report` tool writes pages (default: the user cache dir's `pages`).")
    ] = None,
    allow_runs: Annotated[bool, typer.Option(
        "--allow-runs",
        help="Also offer `profile`, `sweep` and `bench`, which run programs (under nsys). "
             "Without it the server only reads.")] = False,
    keep_open: Annotated[int, typer.Option(
        "--keep-open", metavar="N", min=0,
        help="Keep the last N exports asked about loaded between questions, and the last "
             "answers: the next question about one answers from memory (about the size of "
             "its cache; 0: open each export per question).")] = 2,
    calls: Annotated[int, typer.Option(
        "--calls", metavar="N", min=0,
        help="Answer up to N calls side by side (0: one per core, at least 2); more wait "
             "their turn. A call its client cancels, or whose client goes away, is stopped "
             "and makes room at once.")] = 0,
) -> None:
    """Serve the analyses to coding agents over the Model Context Protocol (stdio).

    One tool per analysis (same name, options and answers: the rows of `--format json`, the
    top 20 by default, in pages of at most about 1 MB), plus `report` and `list_exports`.
    Calls run side by side (--calls); one the client cancels stops. The server only reads
    exports under its roots; errors are the `Error:` lines of the command line.
    docs/AGENTS.md shows how to add it to Claude Code, Cursor and VS Code.

    Examples: `nsys-mine mcp --root ~/profiles` · `nsys-mine mcp --http 127.0.0.1:8765`
    """
    try:
        from profile_cli.mcp_server import serve
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in ("mcp", "mcp_types", "pydantic", "anyio"):
            raise
        raise McpNotInstalled(f"the MCP server needs the `mcp` package ({exc.name} is not "
                              f"installed): pip install 'nsys-mine[mcp]'.") from None
    serve(root, http, pages, allow_runs, keep_open, calls)


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp)
