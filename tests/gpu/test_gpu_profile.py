"""``profile`` under nsys on a GPU: the CUDA kernels of the measured steps, attributed to the
NVTX ranges torch.cuda.nvtx emitted. Needs an nsys that can profile a CUDA process here
(``working_nsys`` probes for one and skips, with what it tried, when there is none)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("gpu")]

STEPS = 2


def profile(nsys_mine, nsys: Path, out: Path, *args: str) -> dict:
    return nsys_mine("profile", *args, "--nvtx", "fine", "--warmup", "1", "--steps",
                     str(STEPS), "--device", "cuda", "--nsys", nsys, "--out-dir", out,
                     "--timeout", "600", "--format", "json").json()


def test_profile_a_training_step_under_nsys(gpu, working_nsys, nsys_mine, tmp_path, record):
    data = profile(nsys_mine, working_nsys, tmp_path / "profiles", "--size", "small",
                   "--context", "256", "--mode", "train")
    assert Path(data["export"]).is_file() and data["config"]["device"] == "cuda"
    ranges = {r["range"]: r for r in data["ranges"]}
    for name in ("step", "forward", "loss", "backward", "optimizer"):
        assert ranges[name]["instances"] == STEPS, name
    assert ranges["attention"]["instances"] == ranges["ffn"]["instances"] == STEPS * 12
    # every phase ends with a synchronize: its kernels are inside it, and the GPU is busy
    step = ranges["step"]
    assert 0 < step["gpu_inclusive_ns"] <= step["total_ns"]
    for name in ("forward", "backward", "optimizer"):
        assert ranges[name]["kernel_instances"] > 0, name
    kernels = data["kernels"]
    assert kernels and all(k["total_ns"] > 0 and k["instances"] > 0 for k in kernels)
    dominant = {r["range"]: r for r in data["dominant"] if r["range"]}
    for name in ("forward", "backward", "optimizer"):
        assert dominant[name]["kernel"] and 0 < dominant[name]["share_pct"] <= 100, name
    record(gpu_busy_pct=100 * step["gpu_inclusive_ns"] / step["total_ns"],
           kernels=len(kernels),
           forward_kernel=dominant["forward"]["kernel"][:100],
           forward_category=dominant["forward"]["category"],
           forward_share_pct=dominant["forward"]["share_pct"],
           backward_kernel=dominant["backward"]["kernel"][:100],
           optimizer_kernel=dominant["optimizer"]["kernel"][:100])


def test_profile_inference_under_nsys(gpu, working_nsys, nsys_mine, tmp_path, record):
    output_length = 8
    data = profile(nsys_mine, working_nsys, tmp_path / "profiles", "--workload", "infer",
                   "--size", "small", "--context", "128", "--batch", "4", "--output-length",
                   str(output_length))
    ranges = {r["range"]: r for r in data["ranges"]}
    assert ranges["prefill"]["instances"] == ranges["decode"]["instances"] == STEPS
    assert ranges["decode step"]["instances"] == STEPS * (output_length - 1)
    dominant = {r["range"]: r for r in data["dominant"] if r["range"]}
    for name in ("prefill", "decode"):
        assert ranges[name]["kernel_instances"] > 0 and dominant[name]["kernel"], name
    record(prefill_kernel=dominant["prefill"]["kernel"][:100],
           prefill_share_pct=dominant["prefill"]["share_pct"],
           decode_kernel=dominant["decode"]["kernel"][:100],
           decode_share_pct=dominant["decode"]["share_pct"])
