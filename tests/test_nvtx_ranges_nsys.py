"""End to end: real nsys captures the range contract of
``python -m profile_cli.run_workload`` on CPU (the session's profile, made by
``nsys-mine profile``)."""

from __future__ import annotations

import json
import sqlite3

import pytest

pytest.importorskip("torch")
pytest.importorskip("nvtx")

pytestmark = pytest.mark.nsys


def test_nsys_sees_the_fine_ranges_with_their_nesting(cpu_profile):
    """The session's CPU profile (conftest: ``nsys-mine profile`` runs ``run_workload`` under
    real nsys: tiny model, train, NVTX fine, 1 warmup + 3 measured steps)."""
    side = json.loads(cpu_profile.with_suffix(".json").read_text())
    assert side["status"] == "ok"

    con = sqlite3.connect(f"file:{cpu_profile}?mode=ro", uri=True)
    events = con.execute(
        "SELECT s.value, e.start, e.end FROM NVTX_EVENTS e JOIN StringIds s ON s.id = e.textId "
        "WHERE e.end IS NOT NULL ORDER BY e.start").fetchall()
    counts: dict[str, int] = {}
    for name, _, _ in events:
        counts[name] = counts.get(name, 0) + 1
    steps, layers = 4, 2  # 1 warmup + 3 measured steps, tiny has 2 blocks
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
