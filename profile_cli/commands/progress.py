"""The one progress indicator: a rich bar on stderr, only when stderr is a terminal.

``progress_bar(label)`` yields a callback ``update(done, total, description)`` (or None when
stderr is not a terminal, so CI logs and pipes stay clean); library loops call it as they go.
``progress_bar(label, force=True)`` shows it anyway (tests, or a user who asks; also the
environment variable NSYS_MINE_PROGRESS=1). ``progress_board(label)`` adds one line per item
that runs at the same time (a sweep's configs, local or Slurm jobs): ``update(done, total,
[(name, what it is doing), ...])``. ``status(message)`` is a spinner for reads that take more
than a moment.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable, Iterator, Optional

Update = Callable[[int, int, Optional[str]], None]


@contextlib.contextmanager
def progress_bar(label: str, *, force: bool = False, transient: bool = True
                 ) -> Iterator[Update | None]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    if not _wanted(console, force):
        yield None
        return
    with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.description}", markup=False),
                  console=console, transient=transient) as bar:
        task = bar.add_task("starting", total=None)

        def update(done: int, total: int, description: Optional[str] = None) -> None:
            bar.update(task, completed=done, total=total, description=description or "done")

        yield update


def _wanted(console: Any, force: bool) -> bool:
    """Progress goes to terminals only (not CI logs or pipes) unless asked for, by ``force``
    or the environment variable NSYS_MINE_PROGRESS=1."""
    return console.is_terminal or force or os.environ.get("NSYS_MINE_PROGRESS") == "1"


def _maybe_terminal(stream: Any) -> bool:
    """Whether rich could take ``stream`` for a terminal (it also obeys FORCE_TERMINAL)."""
    if os.environ.get("NSYS_MINE_PROGRESS") == "1" or os.environ.get("FORCE_TERMINAL"):
        return True
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


@contextlib.contextmanager
def status(message: str, *, delay_s: float = 0.8, force: bool = False) -> Iterator[None]:
    """A spinner with ``message`` on stderr while a long read runs: it appears only once the
    work has taken ``delay_s`` (quick answers stay clean) and is gone when it ends."""
    import sys
    import threading

    if not (force or _maybe_terminal(sys.stderr)):
        yield  # a pipe or a CI log: no spinner, and no need to load rich for it
        return
    from rich.console import Console

    console = Console(stderr=True)
    if not _wanted(console, force):
        yield
        return
    from rich.text import Text

    spinner = console.status(Text(message))  # a file called run[1].sqlite is not markup
    lock = threading.Lock()
    state = {"done": False}

    def start() -> None:
        with lock:
            if not state["done"]:
                spinner.start()

    timer = threading.Timer(delay_s, start)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            state["done"] = True
            timer.cancel()
            spinner.stop()


class Board:
    """``update(done, total, active)``: the overall bar plus one line per active item
    (``active`` is a list of (name, what it is doing)); at most ``max_lines`` lines, then
    "... and N more". ``stop()`` ends the display (before a prompt)."""

    def __init__(self, live, overall, items, max_lines: int):
        self._live, self._overall, self._items = live, overall, items
        self._overall_task = overall.add_task("starting", total=None)
        self._tasks: dict[str, Any] = {}
        self._max = max_lines

    def __call__(self, done: int, total: int, active: list[tuple[str, str]]) -> None:
        more = len(active) - self._max if len(active) > self._max else 0
        self._overall.update(self._overall_task, completed=done, total=total,
                             description=f"{len(active)} active" if active else "")
        shown = dict(active[:self._max - 1] if more else active)
        if more:
            shown["…"] = f"and {more + 1} more"
        for name in [n for n in self._tasks if n not in shown]:
            self._items.remove_task(self._tasks.pop(name))
        for name, text in shown.items():
            if name in self._tasks:
                self._items.update(self._tasks[name], description=text)
            else:
                self._tasks[name] = self._items.add_task(text, total=None, name=name)

    def stop(self) -> None:
        self._live.stop()


@contextlib.contextmanager
def progress_board(label: str, *, force: bool = False, max_lines: int = 8
                   ) -> Iterator[Board | None]:
    """An overall bar and a line per running (or queued) item, on stderr, terminals only."""
    from rich.console import Console, Group
    from rich.live import Live
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    console = Console(stderr=True)
    if not _wanted(console, force):
        yield None
        return
    overall = Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), TextColumn("{task.description}", markup=False),
                       console=console)
    items = Progress(SpinnerColumn(), TimeElapsedColumn(),
                     TextColumn("{task.fields[name]}", style="cyan"),
                     TextColumn("{task.description}", markup=False), console=console)
    with Live(Group(overall, items), console=console, refresh_per_second=4,
              transient=False) as live:
        yield Board(live, overall, items, max_lines)
