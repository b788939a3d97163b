"""End to end: real nsys captures the range contract of
``python -m profile_cli.run_workload`` on CPU."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")

pytestmark = pytest.mark.nsys
ROOT = Path(__file__).resolve().parent.parent


def test_nsys_sees_the_fine_ranges_with_their_nesting(nsys_bin, tmp_path):
    out = tmp_path / "prof"
    cmd = [str(nsys_bin), "profile", "--trace=nvtx,osrt", "--sample=none", "--cpuctxsw=none",
           "--export=sqlite", "--force-overwrite=true", "-o", str(out),
           sys.executable, "-m", "profile_cli.run_workload", "--size", "tiny", "--vocab", "64",
           "--context", "8", "--batch", "2", "--mode", "train", "--nvtx", "fine",
           "--warmup", "1", "--steps", "2", "--device", "cpu"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["status"] for r in rows] == ["ok"]

    con = sqlite3.connect(out.with_suffix(".sqlite"))
    events = con.execute(
        "SELECT s.value, e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE e.end IS NOT NULL ORDER BY e.start").fetchall()
    counts: dict[str, int] = {}
    for name, _, _ in events:
        counts[name] = counts.get(name, 0) + 1
    steps, layers = 3, 2  # 1 warmup + 2 measured steps, tiny has 2 blocks
    assert counts == {
        "warmup": 1, "measure": 1, "step": steps, "forward": steps, "loss": steps,
        "backward": steps, "optimizer": steps, "attention": steps * layers,
        "ffn": steps * layers, "scaled dot product attention": steps * layers,
        "computing attention scores": steps * layers, "computing softmax": steps * layers,
        "final matmul": steps * layers,
    }

    def inside(child: str, parent: str) -> bool:
        parents = [(s, e) for n, s, e in events if n in parent.split("|")]
        return all(any(ps <= s and e <= pe for ps, pe in parents)
                   for n, s, e in events if n == child)

    for child, parent in [("computing softmax", "scaled dot product attention"),
                          ("scaled dot product attention", "attention"), ("attention", "forward"),
                          ("ffn", "forward"), ("forward", "step"), ("optimizer", "step"),
                          ("step", "warmup|measure")]:
        assert inside(child, parent), f"{child} not inside {parent}"
