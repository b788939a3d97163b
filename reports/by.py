"""``--by device|process|stream``: one table per device, process or stream in one, with one
more key column (``device``; ``pid``; ``device`` and ``stream``, stream ids being numbered per
device), for ``kernels``, ``dominant`` and ``ranges``.

A kernel's key is where it ran (its device and stream) or the process it ran for (its
globalPid). A range instance's key is its process (its thread's), or the devices and streams
of the kernels launched inside it (``all`` attribution): an instance that launched kernels on
two devices counts on both, one that launched none has no device (key None).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from nsys_parsers.arrays import group_ids
from nsys_parsers.ids import pid_of
from nsys_parsers.kernels import Kernels
from reports.render import View

KEY_COLUMNS = {"device": ["device"], "process": ["pid"], "stream": ["device", "stream"]}


def by_shape(columns: list[str], view: View | None, by: str | None
             ) -> tuple[list[str], View | None]:
    """The columns and view of an answer ``--by`` a key: the key columns first."""
    if by is None:
        return list(columns), view
    keys = KEY_COLUMNS[by]
    people = None
    if view is not None:
        people = replace(view, columns=keys + [c for c in view.columns if c not in keys],
                         hide_if_constant=tuple(c for c in view.hide_if_constant
                                                if c not in keys), pinned=0)
    return keys + [c for c in columns if c not in keys], people


def kernel_keys(k: Kernels, by: str) -> tuple[np.ndarray, list[dict[str, Any]]]:
    """The key code of each kernel and the key columns of each code (codes ordered by key)."""
    assert k.device is not None and k.stream is not None and k.pid is not None, \
        "load the kernel_ids group"
    if by == "device":
        code, (dev,) = group_ids(k.device)
        return code, [{"device": d} for d in dev.tolist()]
    if by == "process":
        pid = np.where(k.pid < 0, -1, pid_of(k.pid))
        code, (p,) = group_ids(pid)
        return code, [{"pid": v} for v in p.tolist()]
    code, (dev, stream) = group_ids(k.device, k.stream)
    return code, [{"device": d, "stream": st} for d, st in zip(dev.tolist(), stream.tolist())]


def key_notes(by: str) -> list[str]:
    if by == "stream":
        return ["one row per kernel and (device, stream); times and shares are per stream."]
    what = "device" if by == "device" else "process"
    return [f"one row per kernel and {what}; shares are of that {what}'s time."]


def notes_once(*note_lists: list[str]) -> list[str]:
    """Notes of several answers, each once, in order."""
    out: list[str] = []
    for notes in note_lists:
        out += [n for n in notes if n not in out]
    return out
