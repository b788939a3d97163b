"""Warming ahead for ``nsys-mine serve``, in a process of its own: the questions people ask
most (``reports.ask.HeldSessions.AHEAD``) answered of one export, as the command line asks
them without options, and their answers handed back to the server in a file.

The server (``profile_cli.serve``) starts it a second after a question, in that client's
folder and environment, for the export asked about last (``HeldSessions.warm_target``):

    python -m profile_cli.ahead SPEC OUT

SPEC is JSON: ``path``, ``name_kind``, ``cache``, ``nsys`` (what the server's load of the
export depends on: the worker's answers are keyed as the server keys them). OUT is written
once, when every question was asked: a pickle of ``{"steps": [[question, seconds, error or
None], ...], "answers": {key: Report}}`` (the answers that pickle; the server keeps those
whose export it still holds in the same state, ``HeldSessions.adopt``). The worker loads
the export itself (from the column cache the server's question filled), so the server goes
on answering while it runs; it prints nothing and exits 0, or 1 with the reason on stderr.
"""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path
from typing import Any


def warm(spec: dict[str, Any], out: Path) -> None:
    """Answer ``HeldSessions.AHEAD`` of the export ``spec`` names; write OUT."""
    from reports.ask import HeldSessions
    from reports.options import AnalysisOptions

    held = HeldSessions(keep=1, answers=len(HeldSessions.AHEAD))
    options = AnalysisOptions(name_kind=spec["name_kind"], cache=bool(spec["cache"]),
                              nsys=spec.get("nsys"))
    try:
        with held.opener(Path(spec["path"]), options):
            pass  # loaded lazily: held for the steps
        steps = [[name, seconds, error] for name, seconds, error in held.ahead()]
        answers = {}
        for key, report in held._answers.items():
            try:
                pickle.dumps(report)
            except Exception:  # a value that does not pickle: the server computes it
                continue
            answers[key] = report
    finally:
        held.close()
    partial = out.with_name(out.name + ".partial")
    with open(partial, "wb") as fh:
        pickle.dump({"steps": steps, "answers": answers}, fh)
    partial.replace(out)


def main(argv: list[str] | None = None) -> int:
    from nsys_parsers.errors import NsysMineError
    from profile_cli.app import one_malloc_arena

    args = sys.argv[1:] if argv is None else argv
    one_malloc_arena()
    try:
        warm(json.loads(args[0]), Path(args[1]))
    except NsysMineError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
