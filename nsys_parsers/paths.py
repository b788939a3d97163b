"""Paths people and agents give, checked before any file call: what no file system can hold
(a NUL byte, a name over ``NAME_MAX`` bytes, a path over ``PATH_MAX``) is a ``BadOption`` that
says so, where Python would raise ``ValueError: embedded null byte`` or ``OSError: File name
too long`` from the first ``stat``."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from nsys_parsers.errors import BadOption

NAME_MAX = 255  # bytes of one file or folder name (Linux, macOS)
PATH_MAX = 4096  # bytes of a whole path, its terminating NUL included (Linux)


def shown(text: str, limit: int = 60) -> str:
    """``text`` as a message quotes it: control characters escaped, cut to ``limit``."""
    quoted = repr(text)[1:-1]
    return quoted if len(quoted) <= limit else f"{quoted[:limit - 1]}…"


def check_path(given: str | os.PathLike[str], what: str = "a path") -> Path:
    """``given`` as a Path, or BadOption when no file system can hold it."""
    text = os.fspath(given)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if "\x00" in text:
        raise BadOption(f"{what} '{shown(text)}': a path cannot hold a NUL byte (\\x00); give "
                        f"the file's path as it is on disk.")
    size = len(os.fsencode(text))
    if size >= PATH_MAX:
        raise BadOption(f"{what} '{shown(text)}': {size:,} bytes, longer than any path can be "
                        f"({PATH_MAX - 1:,}); give the file's path as it is on disk.")
    for part in Path(text).parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise BadOption(f"{what} '{shown(text)}': the name '{shown(part, 40)}' is "
                            f"{len(os.fsencode(part)):,} bytes, longer than a file or folder "
                            f"name can be ({NAME_MAX}); give the file's path as it is on disk.")
    return Path(text)


def unusable_path(exc: BaseException) -> str | None:
    """What a path error a check did not foresee says, for the one place that turns errors into
    ``Error: ...`` (None: not such an error)."""
    if isinstance(exc, ValueError) and "embedded null byte" in str(exc):
        return "a path cannot hold a NUL byte (\\x00); give the file's path as it is on disk."
    if isinstance(exc, OSError) and exc.errno == errno.ENAMETOOLONG:
        name = f" '{shown(str(exc.filename))}'" if exc.filename else ""
        return (f"file name too long{name}: give the file's path as it is on disk (a name is "
                f"at most {NAME_MAX} bytes).")
    return None
