"""``nsys-mine serve``: the command line's answer server (``profile_cli.serve``, the client's
side in ``profile_cli.client``). Only its options are declared here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer


def serve_command(
    socket_path: Annotated[Optional[Path], typer.Option(
        "--socket", metavar="PATH", dir_okay=False, show_default=False,
        help="The Unix socket to answer on (default: $NSYS_MINE_SERVER, else "
             "nsys-mine-UID/serve.sock in $XDG_RUNTIME_DIR or /tmp). Commands find the "
             "server there; set NSYS_MINE_SERVER for another.")] = None,
    idle_timeout: Annotated[float, typer.Option(
        "--idle-timeout", metavar="MIN", min=0,
        help="Stop after this many minutes without a question (0: never).")] = 60.0,
    keep_open: Annotated[int, typer.Option(
        "--keep-open", metavar="N", min=1,
        help="Keep the last N exports asked about loaded between questions (memory: about "
             "the size of their cache each).")] = 2,
    ahead: Annotated[bool, typer.Option(
        "--ahead/--no-ahead",
        help="After a second without a question, answer the questions asked most (kernels, "
             "gpus, nvtx-kernels, dominant, ranges, gaps) of the export asked about last (up "
             "to 512 MB), without options and with the --within, --depth, --match given "
             "last, in a process of its own and keep their answers, so that the next one is "
             "instant (a question asked meanwhile is answered as ever, that process "
             "paused).")] = True,
    stop: Annotated[bool, typer.Option(
        "--stop", help="Stop the server that answers on the socket, and exit.")] = False,
) -> None:
    """Answer the command line's questions from one resident process (opt-in).

    While it runs, `nsys-mine QUESTION ...` in any terminal of yours hands its command line
    to it and prints its answer: the same output (--format, --output) and exit code,
    without paying Python's imports again (about 0.2 s), with the last exports asked about
    still loaded and their last answers kept (the same question in another format is
    instant); while you read an answer it answers the questions asked most of that export
    (--no-ahead: not). A changed export is loaded afresh. Commands that run programs
    (profile, sweep, bench, memory, infer, micro), `ranks`, `mcp` and --help always run in
    their own process; NSYS_MINE_SERVER=off runs every command there. With
    NSYS_MINE_SERVER=auto (or auto:PATH) the first command that finds no server starts one
    (it stops after 30 idle minutes). It stops after --idle-timeout, on Ctrl-C, with --stop,
    or when nsys-mine is upgraded.

    Examples: `nsys-mine serve &` · `nsys-mine serve --idle-timeout 0 --keep-open 4` ·
    `nsys-mine serve --stop`
    """
    from profile_cli import client
    from profile_cli.serve import serve_answers

    path = socket_path or client.socket_path()
    if path is None:
        from nsys_parsers.errors import BadOption

        raise BadOption(f"{client.SERVER_ENV}=off: give the socket with --socket PATH.")
    if stop:
        stopped = client.stop(str(path))
        typer.echo(f"stopped the server at {path}" if stopped else f"no server answers at {path}")
        return
    serve_answers(Path(path), idle_timeout_s=idle_timeout * 60.0, keep_open=keep_open,
                  ahead=ahead)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)
