"""``memory`` on a GPU: the allocator's peak against the exact parameter, gradient and AdamW
bytes, and the ``_record_memory_history`` snapshot read back the way memory_viz reads it
(``torch.cuda._memory_viz``: the pickle of ``torch.cuda.memory._snapshot()``)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("gpu")]


def test_memory_peak_and_snapshot_of_a_training_step(gpu, nsys_mine, tmp_path, record):
    snaps = tmp_path / "snaps"
    precisions = "fp32,bf16" if gpu.bf16 else "fp32"
    rows = nsys_mine("memory", "--size", "small", "--context", "256", "--batch", "4",
                     "--mode", "train", "--precision", precisions, "--device", "cuda",
                     "--snapshot-dir", snaps, "--max-entries", "100000", "--format",
                     "json").json()
    assert len(rows) == len(precisions.split(","))
    for r in rows:
        p = r["precision"]
        assert r["status"] == "ok", r["note"]
        assert (r["device"], r["measured"]) == ("cuda", "cuda allocator peak")
        assert r["rss_growth_bytes"] is None
        exact = r["params_bytes"] + r["grads_bytes"] + r["optimizer_bytes"]
        assert r["params_bytes"] == 4 * r["params"]
        # weights, gradients and both AdamW moments all live during the optimizer step
        assert r["peak_allocated_bytes"] > exact > r["params_bytes"]
        assert r["peak_reserved_bytes"] >= r["peak_allocated_bytes"]
        ratio = r["peak_allocated_bytes"] / r["total_est_bytes"]
        record(**{f"{p}_peak_allocated_bytes": r["peak_allocated_bytes"],
                  f"{p}_peak_reserved_bytes": r["peak_reserved_bytes"],
                  f"{p}_total_est_bytes": r["total_est_bytes"],
                  f"{p}_peak_over_estimate": ratio})
        assert 1 / 3 < ratio < 3, ratio  # the estimate (docs/MODEL.md) is in the right range
        path = Path(r["snapshot"])
        assert path == snaps / f"small_ctx256_b4_train_{p}_naive_nvtx-off_w1s1.pickle"
        check_snapshot(path, gpu.index, r, record, p)


def check_snapshot(path: Path, device: int, row: dict, record, label: str) -> None:
    """What memory_viz needs of a snapshot: segments whose blocks account for every byte,
    and a trace of allocator events for the device; torch's own viewers read it."""
    from torch.cuda import _memory_viz

    with path.open("rb") as f:
        snapshot = pickle.load(f)
    assert isinstance(snapshot, dict) and {"segments", "device_traces"} <= set(snapshot)
    segments = snapshot["segments"]
    assert segments, "no segments: the allocator held nothing when the snapshot was taken"
    for seg in segments:
        assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    reserved = sum(seg["total_size"] for seg in segments)
    assert 0 < reserved <= row["peak_reserved_bytes"]
    trace = snapshot["device_traces"][device]
    actions = {e["action"] for e in trace}
    allocs = [e for e in trace if e["action"] == "alloc"]
    assert allocs and "free_requested" in actions  # the measured step allocated and freed
    assert max(e["size"] for e in allocs) > 0
    assert any(e.get("frames") for e in allocs)  # stack traces, for the viewer's tooltips
    record(**{f"{label}_snapshot_events": len(trace), f"{label}_snapshot_bytes":
              path.stat().st_size})
    viewers = []
    if hasattr(_memory_viz, "segsum"):  # `python -m torch.cuda._memory_viz stats FILE`
        assert "total_reserved" in _memory_viz.segsum(snapshot)
        viewers.append("segsum")
    if hasattr(_memory_viz, "trace"):  # `... trace FILE`
        assert f"Device {device}" in _memory_viz.trace(snapshot)
        viewers.append("trace")
    if hasattr(_memory_viz, "trace_plot"):  # `... trace_plot FILE`: the memory_viz page
        assert "<html" in _memory_viz.trace_plot(snapshot).lower()
        viewers.append("trace_plot")
    assert viewers, "torch.cuda._memory_viz has none of segsum, trace, trace_plot"
