"""The memory an answer may take, and what an answer will need before it reads anything.

An answer holds the columns of the tables it reads (mapped from the cache's files, or in
memory without a cache), so its peak grows with the export (about ``bytes_per_row`` for each
row of those tables, measured per analysis: docs/PERFORMANCE.md).
Rather than be killed by the system, or swap for minutes, on a machine smaller than that, a
question whose estimate is over the budget stops before it reads, saying how much it needs.

The budget is ``NSYS_MINE_MEMORY_MB`` (megabytes) when set, else the memory the machine has
available now (``MemAvailable``, and the cgroup's limit when the process runs in one, as on
CI runners and in containers). ``NSYS_MINE_MEMORY_MB=0`` turns the check off.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nsys_parsers import queries as Q
from nsys_parsers.errors import BadOption, OverBudget
from nsys_parsers.export import Export
from nsys_parsers.reads import rowid_span

ENV = "NSYS_MINE_MEMORY_MB"
MB = 1 << 20
# An answer's fixed cost: Python, numpy and the command line (about 64 MiB), the reader
# threads' chunks, the values below SCRATCH_BYTES held in memory, the heap the reads leave:
# the NVTX answers take 230-290 MiB cold at x300 (docs/PERFORMANCE.md, "Memory").
BASE_BYTES = 256 * MB
# How much more an answer holds per row when its columns are read into memory rather than
# into the cache's files (no cache): enough for every answer measured both ways at x1200
# (the most: diff of two files, 562 MiB in memory, 319 cached: 1.7 times its per-row cost).
IN_MEMORY = 2.2
# What a table's rows are called in the message, in the order the message names them.
NOUNS = {"kernel": "kernels", "graph": "graph launches", "api": "API calls",
         "memcpy": "memcpys", "memset": "memsets", "nvtx": "NVTX rows", "gnode": "graph nodes",
         "gevent": "graph events", "nccl": "NCCL rows"}


@dataclass(frozen=True)
class Budget:
    bytes: int  # 0: no limit
    source: str  # where it came from, for the message

    @property
    def limited(self) -> bool:
        return self.bytes > 0


def budget(env: dict[str, str] | None = None) -> Budget:
    """The budget of this process: ``NSYS_MINE_MEMORY_MB`` or the memory available."""
    value = (os.environ if env is None else env).get(ENV, "").strip()
    if value:
        try:
            mb = int(value)
        except ValueError:
            mb = -1
        if mb < 0:
            raise BadOption(f"{ENV}={value!r}: give the megabytes an answer may use, e.g. "
                            f"{ENV}=4096 (0: no limit)")
        return Budget(mb * MB, f"{ENV}={mb}")
    free = available_bytes()
    return Budget(free, "the memory available") if free else Budget(0, "no limit")


def available_bytes(root: Path = Path("/")) -> int:
    """What this process may still allocate: ``MemAvailable`` of /proc/meminfo, less when the
    process's cgroup (v2) has a lower limit; 0 when neither can be read (not Linux)."""
    free = 0
    try:
        for line in (root / "proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        return 0
    try:
        group = (root / "proc/self/cgroup").read_text().strip().split("::", 1)[1]
        folder = root / "sys/fs/cgroup" / group.lstrip("/")
        limit = (folder / "memory.max").read_text().strip()
        if limit != "max":
            used = int((folder / "memory.current").read_text().strip())
            free = min(free, max(0, int(limit) - used))
    except (OSError, ValueError, IndexError):
        pass
    return free


def table_rows(export: Export, tables: set[str]) -> dict[str, int]:
    """The rows (by rowid span: one b-tree seek each end) of each of ``tables`` (row source
    prefixes: ``Resolver.tables_of``), in the order of ``NOUNS``."""
    rows: dict[str, int] = {}
    for prefix in sorted(tables, key=list(NOUNS).index):
        n = 0
        for source in Q.SOURCES[prefix](export):
            span = rowid_span(export.db, source.table)
            n += span[1] - span[0] if span else 0
        if n:
            rows[prefix] = n
    return rows


def need_bytes(rows: dict[str, int], bytes_per_row: int, in_memory: bool = False) -> int:
    """The estimate: the base, and ``bytes_per_row`` for each row of the tables read (times
    IN_MEMORY when the columns are read into memory)."""
    per_row = bytes_per_row * (IN_MEMORY if in_memory else 1.0)
    return BASE_BYTES + int(per_row * sum(rows.values()))


def check_need(export: Export, tables: set[str], bytes_per_row: int, what: str,
               limit: Budget | None = None, in_memory: bool = False) -> None:
    """Raise OverBudget when ``what`` (e.g. "`nvtx-kernels`") of ``export``, reading
    ``tables``, needs more than the budget (``in_memory``: with no cache to read the
    columns into)."""
    limit = budget() if limit is None else limit
    if not limit.limited or bytes_per_row <= 0:
        return
    rows = table_rows(export, tables)
    need = need_bytes(rows, bytes_per_row, in_memory)
    if need <= limit.bytes:
        return
    counts = ", ".join(f"{n:,} {NOUNS[p]}" for p, n in rows.items())
    need_mb = -(-need // MB)
    raise OverBudget(
        f"{export.label}: {what} needs about {need_mb:,} MB of memory ({counts}), more than "
        f"the budget of {limit.bytes // MB:,} MB ({limit.source}). Set {ENV}={need_mb} on a "
        f"machine that has it ({ENV}=0: no check), or profile a shorter span "
        f"(nsys profile --capture-range=cudaProfilerApi or --duration).")
