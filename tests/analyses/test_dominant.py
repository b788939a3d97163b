"""Which kernel dominates (``dominant``), on real exports."""

from __future__ import annotations

from reports.ask import ask


def test_fastvideo_dominant_per_operator(fx):
    export = fx("fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite")
    rows = {r["range"]: r for r in ask("dominant", [export], merge_op_ids=True).rows}
    linear = rows["aten::linear"]
    assert linear["kernel"] == rows[None]["kernel"] and linear["category"] == "gemm"
    ranges = {r["range"]: r for r in ask("ranges", [export], merge_op_ids=True).rows}
    assert ranges["aten::linear"]["instances"] == linear["range_instances"]
    assert linear["share_pct"] == 70.9
