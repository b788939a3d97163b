"""The datasheet peaks behind the MFU column: a GPU's name finds its own row only."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from nvtx_model.runtime import peak_tflops  # noqa: E402


@pytest.mark.parametrize("name, precision, peak", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),
    ("NVIDIA H100 PCIe", "fp32", 51.2),
    ("NVIDIA H100 NVL", "bf16", 835.5),
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA GH200 480GB", "fp32", 66.9),
    ("NVIDIA A100-SXM4-80GB", "fp32", 19.5),
    ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA L40S", "bf16", 362.1),
    ("NVIDIA GeForce RTX 4090", "fp32", 82.6),
])
def test_known_gpus(name, precision, peak):
    assert peak_tflops(name, precision) == peak


@pytest.mark.parametrize("name", ["NVIDIA L40", "NVIDIA RTX A1000", "NVIDIA A10",
                                  "NVIDIA GeForce RTX 40900", "AMD EPYC 7763"])
def test_a_name_that_only_contains_a_known_one_is_unknown(name):
    # "L4" is not the L40 (whose bf16 peak is 181, not 121): better no MFU than a wrong one
    assert peak_tflops(name, "bf16") is None
