"""A stand-in for nsys, for checking where ``sweep --jobs`` runs its configs on a machine
whose nsys cannot write a report (or that has none).

It answers ``--version`` like nsys 2022.4, and for ``profile [OPTIONS] --output BASE
[OPTIONS] CHILD...`` runs CHILD as nsys would (same environment, same stdout and stderr, its
exit status), then writes ``BASE.standin.json``: the CUDA_VISIBLE_DEVICES the child got, the
child's argv and exit status. It writes no export, so nsys-mine records the config as failed
("nsys wrote no SQLite export") after the workload itself ran: its result line is in the
config's sidecar (``workload_row``).
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path
from typing import Any

VERSION_LINE = "NVIDIA Nsight Systems version 2022.4.2.1-stand-in"

SCRIPT = '''\
import json, os, subprocess, sys

args = sys.argv[1:]
if args[:1] == ["--version"]:
    print({version!r})
    sys.exit(0)
if args[:1] != ["profile"]:
    sys.exit("stand-in nsys: only --version and profile are implemented")
i, base = 1, None
while i < len(args) and args[i].startswith("-"):
    if args[i] in ("--output", "-o"):
        base = args[i + 1]
        i += 2
    else:
        i += 1
if base is None or i == len(args):
    sys.exit("stand-in nsys: profile needs --output BASE and a command")
child = args[i:]
code = subprocess.call(child)
with open(base + ".standin.json", "w") as f:
    json.dump({{"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
               "child": child, "returncode": code}}, f)
sys.exit(code)
'''


def write_standin_nsys(folder: Path, python: str = sys.executable) -> Path:
    """An executable stand-in nsys in ``folder``, run by ``python``."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "standin_nsys.py"
    script.write_text(SCRIPT.format(version=VERSION_LINE))
    launcher = folder / "nsys"
    launcher.write_text(f'#!/usr/bin/env bash\nexec "{python}" "{script}" "$@"\n')
    launcher.chmod(launcher.stat().st_mode | stat.S_IXUSR)
    return launcher


def standin_record(sidecar: Path) -> dict[str, Any]:
    """What the stand-in wrote for the config of ``sidecar`` (``OUT/NAME.json``)."""
    return json.loads(sidecar.with_name(sidecar.stem + ".standin.json").read_text())
