"""NVIDIA's own answers: ``nsys stats`` reports of an export, as rows, for the comparisons."""

from __future__ import annotations

import csv
import subprocess
from pathlib import Path


def nsys_stats(nsys: Path, export: Path, report: str, out: Path) -> list[dict] | None:
    """The rows of one ``nsys stats`` report (2022.4 names: gpukernsum, nvtxsum, ...), or None
    when nsys skips it (the export has no such data)."""
    prefix = out / f"{export.stem}"
    proc = subprocess.run([str(nsys), "stats", "--report", report, "--format", "csv",
                           "--force-export", "false", "-o", str(prefix), str(export)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    path = Path(f"{prefix}_{report}.csv")
    if "SKIPPED" in proc.stdout + proc.stderr:  # no such data in the export
        return None
    assert path.exists(), proc.stdout
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def none(v: str) -> str | None:
    """nsys writes a missing value as ``None`` or nothing."""
    return None if v in ("None", "") else v


def close(a: float | str, b: float | str) -> bool:
    return abs(float(a) - float(b)) <= 0.051  # nsys rounds to 0.1


def nsys_answer(nsys: Path, export: Path, command: list[str], name: str, out: Path
                ) -> tuple[list[dict] | None, str]:
    """The rows of an ``nsys stats --report NAME`` or ``nsys analyze --rule NAME[:opts]``
    run (``command``: ``["stats", "--report", NAME]`` or ``["analyze", "--rule", ...]``),
    writing ``{prefix}_{name}.csv``; or None and nsys's reason when it skips the export."""
    prefix = out / f"{export.stem}"
    proc = subprocess.run([str(nsys), *command, "--format", "csv", "--force-export", "false",
                           "-o", str(prefix), str(export)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    said = proc.stdout + proc.stderr
    if "SKIPPED" in said:
        return None, said.split("SKIPPED:", 1)[1].strip()
    path = Path(f"{prefix}_{name}.csv")
    assert path.exists(), said
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh)), ""


def gpu_starv(nsys: Path, export: Path, out: Path, gap_ms: int = 0
              ) -> tuple[list[dict] | None, str]:
    """``nsys analyze --rule gpu-starv`` with every row (``rows=-1``) of gaps over
    ``gap_ms``."""
    rule = f"gpu-starv:gap={gap_ms}:rows=-1"
    return nsys_answer(nsys, export, ["analyze", "--rule", rule], rule.replace(":", "_"),
                       out)
