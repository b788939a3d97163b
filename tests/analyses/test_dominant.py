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


def test_dominant_by_device_and_process(fx):
    export = fx("cs336_lizhieffe_ddp53_profile.sqlite")
    by_dev = ask("dominant", [export], by="device").rows
    whole = {r["device"]: r for r in by_dev if r["range"] is None}
    kernels = ask("kernels", [export], by="device").rows
    for device, row in whole.items():  # each device's whole-export row: its top kernel
        top = next(k for k in kernels if k["device"] == device)
        assert (row["kernel"], row["total_ns"], row["share_pct"]) == (
            top["name"], top["total_ns"], top["time_pct"])
    assert whole[0]["kernel"].startswith("ncclDevKernel_Broadcast")
    assert whole[1]["kernel"].startswith("ncclDevKernel_AllReduce_Sum_bf16")
    by_pid = {(r["pid"], r["range"]): r for r in ask("dominant", [export], by="process").rows}
    fwd = by_pid[(13096, "forward pass")]
    assert (fwd["range_instances"], fwd["per_range_instance"], fwd["category"]) == (
        1, 60.0, "gemm")
