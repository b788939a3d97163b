"""How long the path of one question is: the files of ours whose functions one command runs,
and our frames between ``main()`` and the first SQL it executes.

    .venv/bin/python benchmarks/call_path.py dominant EXPORT [--format csv ...]

Counts functions called (a module's own top-level code, run when it is imported, is not a
call), in the four packages of this checkout; the frames are those of our files on the stack
when the first column read (``reads.py``) executes its SQL. Prints the counts, the stack and
the files.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nsys_parsers", "reports", "profile_cli", "nvtx_model")


def ours(frame: FrameType) -> bool:
    path = frame.f_code.co_filename
    return path.startswith(str(ROOT)) and any(f"/{p}/" in path for p in PACKAGES)


def our_stack(frame: FrameType | None) -> list[str]:
    """Our frames from ``frame`` up, outermost first, as ``file:function``."""
    out = []
    while frame is not None:
        if ours(frame):
            where = Path(frame.f_code.co_filename).relative_to(ROOT)
            out.append(f"{where}:{frame.f_code.co_name}")
        frame = frame.f_back
    return out[::-1]


def main(argv: list[str]) -> int:
    files: set[str] = set()
    stacks: list[list[str]] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and ours(frame) and frame.f_code.co_name != "<module>":
            files.add(frame.f_code.co_filename)
        elif event == "c_call" and getattr(arg, "__name__", "") == "execute" and ours(frame):
            stacks.append(our_stack(frame))

    sys.path.insert(0, str(ROOT))
    from profile_cli.app import main as cli

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        cli(argv)
    except SystemExit:
        pass
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    reads = [s for s in stacks if any("nsys_parsers/reads.py" in f for f in s)]
    first = reads[0] if reads else (stacks[0] if stacks else [])
    print(f"files of ours run: {len(files)}", file=sys.stderr)
    print(f"our frames down to the first column read: {len(first)}", file=sys.stderr)
    for f in first:
        print(f"  {f}", file=sys.stderr)
    for f in sorted(files):
        print(f"  file {Path(f).relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
