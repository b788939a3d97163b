"""Append benchmark rows to a SQLite results database (``--db FILE``) with sqlite-utils.

Tables: ``runs`` (one row per command run: time, torch and CUDA versions, device, git commit)
and one table per command (``bench``, ``memory``) whose rows point at their run by ``run_id``.
Tables are created with explicit column types so that a first row with empty cells does not
make a numeric column TEXT; new columns are added as they appear. Open the file with
``datasette FILE`` or ``sqlite-utils rows FILE bench``.
"""

from __future__ import annotations

import platform
import socket
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nsys_parsers.errors import NsysMineError

RUN_COLUMNS: dict[str, type] = {
    "id": int, "created_utc": str, "command": str, "argv": str, "nsys_mine_version": str,
    "torch_version": str, "cuda_version": str, "device_name": str, "torch_threads": int,
    "python_version": str, "platform": str, "hostname": str, "git_commit": str, "git_dirty": int,
}


class ResultsDbError(NsysMineError):
    """The results database cannot be opened or written."""


def git_commit(cwd: Path | None = None) -> tuple[str | None, bool | None]:
    """(HEAD commit, working tree dirty) of the git repository around ``cwd``, or (None, None)."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, timeout=5)
        if head.returncode != 0:
            return None, None
        status = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                                cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None, None
    return head.stdout.strip(), bool(status.stdout.strip()) if status.returncode == 0 else None


def run_metadata(command: str, device_names: list[str]) -> dict[str, Any]:
    """What a row needs to be compared later: when, on what, with which code."""
    import torch

    try:
        from importlib.metadata import version

        own_version = version("nsys-mine")
    except Exception:  # not installed (running from a checkout)
        own_version = None
    commit, dirty = git_commit()
    return {
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "argv": " ".join(sys.argv),
        "nsys_mine_version": own_version,
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "device_name": ", ".join(device_names),
        "torch_threads": torch.get_num_threads(),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "git_commit": commit,
        "git_dirty": None if dirty is None else int(dirty),
    }


class ResultsDb:
    """One run's rows: ``ResultsDb(path, "bench", columns, meta).append(row)``."""

    def __init__(self, path: Path, table: str, columns: dict[str, type],
                 meta: dict[str, Any]) -> None:
        import sqlite3

        import sqlite_utils

        try:
            self.db = sqlite_utils.Database(path)
            self.db.table("runs").create(RUN_COLUMNS, pk="id", if_not_exists=True)
            self.db.table(table).create({"id": int, "run_id": int, **columns}, pk="id",
                                  foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
            self.run_id = self.db.table("runs").insert(meta, alter=True).last_pk
        except (sqlite3.Error, OSError) as exc:
            raise ResultsDbError(f"cannot write the results database {path}: {exc}; "
                                 "check the path, or give another file with --db") from exc
        self.table = table

    def append(self, row: dict[str, Any]) -> None:
        from nsys_parsers.plain import jsonable

        self.db.table(self.table).insert({"run_id": self.run_id, **jsonable(row)}, alter=True)



def update_rows(path: Path, table: str, run_id: int, rows: list[dict[str, Any]],
                columns: tuple[str, ...]) -> None:
    """Set ``columns`` of a run's rows after the fact (values known only once every row is
    in, such as a fitted exponent). ``rows`` are the run's rows in the order they were
    appended."""
    import sqlite3

    import sqlite_utils

    from nsys_parsers.plain import jsonable

    try:
        db = sqlite_utils.Database(path)
        ids = [r["id"] for r in db.query(f"select id from [{table}] where run_id = ? "
                                         "order by id", [run_id])]
        with db.conn:
            for pk, row in zip(ids, rows, strict=False):
                db.table(table).update(pk, jsonable({c: row.get(c) for c in columns}), alter=True)
    except (sqlite3.Error, OSError) as exc:
        raise ResultsDbError(f"cannot update the results database {path}: {exc}") from exc
