"""The one progress indicator: a rich bar on stderr, only when stderr is a terminal.

``progress_bar(label)`` yields a callback ``update(done, total, description)`` (or None when
stderr is not a terminal, so CI logs and pipes stay clean); library loops call it as they go.
``progress_bar(label, force=True)`` shows it anyway (tests, or a user who asks).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Optional

Update = Callable[[int, int, Optional[str]], None]


@contextlib.contextmanager
def progress_bar(label: str, *, force: bool = False, transient: bool = True
                 ) -> Iterator[Update | None]:
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn)

    console = Console(stderr=True)
    if not (console.is_terminal or force):
        yield None
        return
    with Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), TextColumn("{task.description}"), console=console,
                  transient=transient) as bar:
        task = bar.add_task("starting", total=None)

        def update(done: int, total: int, description: Optional[str] = None) -> None:
            bar.update(task, completed=done, total=total, description=description or "done")

        yield update


@contextlib.contextmanager
def status(message: str) -> Iterator[None]:
    """A spinner with ``message`` on stderr while a long read runs (terminals only)."""
    from rich.console import Console

    console = Console(stderr=True)
    if not console.is_terminal:
        yield
        return
    with console.status(message):
        yield
