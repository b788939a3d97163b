"""nsys's global ids of threads and processes.

A ``globalTid`` packs the thread id in its low 24 bits and the process id in the next 24 (the
bits above name the machine); the ``globalPid`` of a process is any of its threads'
``globalTid`` with the thread bits cleared. Every reader and analysis takes ids apart here.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np

LOW24 = 0xFFFFFF
Ids = TypeVar("Ids", np.ndarray, int)


def pid_of(global_id: Ids) -> Ids:
    """The process id of a ``globalTid`` or ``globalPid`` (arrays or one int)."""
    return (global_id >> 24) & LOW24


def tid_of(global_tid: Ids) -> Ids:
    """The thread id of a ``globalTid``."""
    return global_tid & LOW24


def global_pid(global_tid: Ids) -> Ids:
    """The ``globalPid`` of the process a ``globalTid`` belongs to (thread bits cleared)."""
    if isinstance(global_tid, np.ndarray):
        return global_tid & ~np.int64(LOW24)
    return (global_tid >> 24) << 24
