"""The C heap under numpy's arrays and Python's objects: glibc's controls of it, where the
process has glibc (elsewhere, macOS or musl, nothing happens)."""

from __future__ import annotations

import ctypes
import functools
import sys
from typing import Any


@functools.cache
def glibc() -> Any | None:
    """The process's C library when it may be glibc (Linux), loaded once, when first asked."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None)
    except OSError:
        return None


def glibc_call(name: str, *args: int) -> None:
    """Call glibc's ``name`` with ``args``; nothing where it has no such function."""
    fn = getattr(glibc(), name, None)
    if fn is not None:
        fn(*args)


def trim_heap() -> None:
    """Hand the C heap's free pages back to the system (``malloc_trim``): the text a read
    parsed is freed in small blocks among others, and the heap otherwise keeps their pages
    (200-350 MB after the reads of 20 M NVTX ranges)."""
    glibc_call("malloc_trim", 0)
