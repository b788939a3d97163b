"""``micro matmul`` on a GPU: time grows as dim^3 once compute-bound, TFLOP/s sit between 1%
and 110% of the datasheet peak, and bf16 (tensor cores) beats fp32 (PyTorch leaves TF32 off,
which is why ``PEAK_TFLOPS`` gives fp32 the non-tensor-core rate)."""

from __future__ import annotations

import math

import pytest

from nvtx_model.micro_config import DEFAULT_DIMS, MicroSpec

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("gpu")]

# Large enough that even bf16 is compute-bound from the first point (4096^3: 137 GFLOP);
# 16384 needs 3 x 1 GiB (fp32) of operands.
DIMS = "4096,8192,16384"


def test_matmul_scales_as_dim_cubed_near_the_device_peak(gpu, record):
    import torch

    from nvtx_model.micro import matmul_benchmark
    from nvtx_model.micro_config import default_dims

    assert torch.backends.cuda.matmul.allow_tf32 is False  # the fp32 peak assumes it
    assert default_dims("auto") == DEFAULT_DIMS["cuda"]
    precisions = "fp32,bf16" if gpu.bf16 else "fp32"
    rows = matmul_benchmark(MicroSpec(device="cuda", precision=precisions)
                            .matmul_configs(DIMS)).rows
    assert [r["status"] for r in rows] == ["ok"] * len(rows), [r["note"] for r in rows]
    largest = {}
    for r in rows:
        assert (r["device"], r["device_name"]) == ("cuda", gpu.name)
        assert r["repeats"] >= 1 and r["flops"] == 2 * r["dim"] ** 3
        assert math.isfinite(r["mean_s"]) and r["mean_s"] > 0
        assert r["tflops"] == pytest.approx(r["flops"] / r["mean_s"] / 1e12)
        if r["dim"] == max(int(d) for d in DIMS.split(",")):
            largest[r["precision"]] = r
    for precision, r in largest.items():
        exponent = r["exponent"]
        record(**{f"{precision}_exponent": exponent, f"{precision}_tflops": r["tflops"],
                  f"{precision}_mean_s": r["mean_s"]})
        assert 2.5 < exponent < 3.5, (precision, exponent)  # time ~ dim^3
        peak = gpu.peak_tflops(precision)
        if peak is not None:
            mfu = 100 * r["tflops"] / peak
            record(**{f"{precision}_mfu_pct": mfu})
            assert 1 < mfu < 110, (precision, r["tflops"], peak)
    if "bf16" in largest:
        speedup = largest["fp32"]["mean_s"] / largest["bf16"]["mean_s"]
        record(bf16_speedup=speedup)
        assert speedup > 1
        fp32_peak, bf16_peak = gpu.peak_tflops("fp32"), gpu.peak_tflops("bf16")
        if fp32_peak and bf16_peak and bf16_peak / fp32_peak >= 4:  # H100: 14.8x on paper
            assert speedup > 2
