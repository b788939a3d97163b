"""Memory operations (``memops``): against nsys's gpumemtimesum and gpumemsizesum on every
fixture that has memcpy or memset rows."""

from __future__ import annotations

import pytest

from nsys_parsers.errors import MissingData
from reports.pipeline.ask import ask
from tests.conftest import KNOWN
from tests.nsys_stats import close, nsys_stats

# nsys's operation names for ours
NSYS_OPERATION = {"memcpy Host-to-Device": "[CUDA memcpy HtoD]",
                  "memcpy Device-to-Host": "[CUDA memcpy DtoH]",
                  "memcpy Device-to-Device": "[CUDA memcpy DtoD]",
                  "memcpy Host-to-Host": "[CUDA memcpy HtoH]",
                  "memcpy Peer-to-Peer": "[CUDA memcpy PtoP]", "memset": "[CUDA memset]"}


@pytest.mark.parametrize("name", KNOWN)
def test_memops_match_gpumemtimesum_and_gpumemsizesum(name, fx, nsys_bin, tmp_path):
    export = fx(name)
    times = nsys_stats(nsys_bin, export, "gpumemtimesum", tmp_path)
    if times is None:
        with pytest.raises(MissingData, match="--trace=cuda"):
            ask("memops", [export])
        return
    sizes = {r["Operation"]: r for r in nsys_stats(nsys_bin, export, "gpumemsizesum",
                                                   tmp_path) or []}
    ours = {NSYS_OPERATION[r["operation"]]: r for r in ask("memops", [export]).rows}
    assert set(ours) == {r["Operation"] for r in times}
    for row in times:
        o = ours[row["Operation"]]
        assert o["instances"] == int(row["Count"])
        assert o["total_ns"] == int(row["Total Time (ns)"])
        assert (o["min_ns"], o["max_ns"]) == (int(row["Min (ns)"]), int(row["Max (ns)"]))
        assert close(o["avg_ns"], row["Avg (ns)"]) and close(o["med_ns"], row["Med (ns)"])
        assert close(o["stddev_ns"], row["StdDev (ns)"])
        assert close(o["time_pct"], row["Time (%)"])
        # nsys gives MB (10^6 bytes) with three decimals
        assert abs(o["total_bytes"] / 1e6 - float(sizes[row["Operation"]]["Total (MB)"])) \
            <= 0.0005 + 1e-9


def test_memops_of_a_real_export(fx):
    rows = ask("memops", [fx("gtls_rtx3060_nsys2023.1.sqlite")]).rows
    assert [(r["operation"], r["instances"], r["total_bytes"]) for r in rows] == [
        ("memcpy Device-to-Device", 5072, 213297888), ("memset", 1, 213287744),
        ("memcpy Host-to-Device", 26, 2545996), ("memcpy Device-to-Host", 7, 90988)]
    assert rows[0]["throughput_gbps"] == 33.463 and rows[0]["time_pct"] == 88.7
