"""Sweeps on a GPU: a config that cannot fit becomes an ``oom`` row and the next config runs
on a clean device; ``sweep --jobs`` pins each config to a GPU through CUDA_VISIBLE_DEVICES.

The ``--jobs`` tests run the real sweep and the real workload on the GPU under a stand-in
nsys (``tests/gpu/standin.py``), because a GPU machine may have no nsys that writes a report:
what they check is where each config ran, as the index, the sidecar and the child itself
saw it, not the profile.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.gpu.standin import standin_record, write_standin_nsys

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("gpu")]

# 4 blocks of width 65536: each SwiGLU weight alone is 64 GiB in fp32, the model ~1 TiB.
IMPOSSIBLE = "custom:d65536-f262144-L4-h512"
GIB = 1024**3


@pytest.mark.parametrize("command", ["bench", "memory"])
def test_an_impossible_size_is_an_oom_row_and_the_sweep_goes_on(gpu, command, nsys_mine,
                                                                 record):
    rows = nsys_mine(command, "--size", f"{IMPOSSIBLE},tiny", "--context", "64", "--mode",
                     "train", "--device", "cuda", "--warmup", "1", "--steps", "2",
                     "--format", "json").json()
    assert [(r["size"], r["status"]) for r in rows] == [(IMPOSSIBLE, "oom"), ("tiny", "ok")]
    oom, ok = rows
    assert oom["note"].startswith("out of memory: "), oom["note"]  # torch's first line follows
    assert oom["device"] == ok["device"] == "cuda"
    record(oom_note=oom["note"][:120])
    if command == "memory":
        # the OOM's tensors were released: the tiny model's step starts on an empty device
        assert oom["params_bytes"] > 500 * GIB  # the estimate is kept for the oom row
        assert ok["peak_allocated_bytes"] < GIB, ok
        record(after_oom_peak_allocated_bytes=ok["peak_allocated_bytes"])
    else:
        assert ok["mean_s"] > 0 and ok["tflops"] > 0


def sweep_with_standin(nsys_mine, tmp_path: Path, contexts: str, jobs: int | None):
    standin = write_standin_nsys(tmp_path / "standin")
    out = tmp_path / "sweep"
    args = ["sweep", "--size", "tiny", "--context", contexts, "--mode", "forward",
            "--device", "cuda", "--nvtx", "coarse", "--warmup", "1", "--steps", "2",
            "--nsys", standin, "--out-dir", out, "--timeout", "600", "--format", "json"]
    if jobs is not None:
        args += ["--jobs", str(jobs)]
    res = nsys_mine(*args)
    res.ok()
    conn = sqlite3.connect(out / "index.sqlite")
    conn.row_factory = sqlite3.Row
    rows = [dict(r) for r in conn.execute("SELECT * FROM runs ORDER BY context")]
    conn.close()
    return res, rows


def check_where_each_config_ran(gpu, rows: list[dict]) -> list[str]:
    """Each config's GPU as the index records it = as its sidecar records it = the
    CUDA_VISIBLE_DEVICES its workload got; and the workload ran on CUDA."""
    gpus = []
    for row in rows:
        sidecar = json.loads(Path(row["sidecar"]).read_text())
        seen = standin_record(Path(row["sidecar"]))
        assert row["gpu"] in gpu.visible, (row["gpu"], gpu.visible)
        assert sidecar["gpu"] == seen["CUDA_VISIBLE_DEVICES"] == row["gpu"]
        workload = sidecar["workload_row"]
        assert seen["returncode"] == 0 and workload["status"] == "ok", sidecar
        assert workload["device"] == "cuda" and workload["mean_s"] > 0
        # the stand-in writes no export, so nsys-mine marks the config failed after it ran
        assert row["status"] == "failed" and "no SQLite export" in row["reason"]
        gpus.append(row["gpu"])
    return gpus


def test_sweep_jobs_pins_each_config_to_a_gpu(gpu, nsys_mine, tmp_path, record):
    """--jobs 2 on however many GPUs there are: with one, both configs share it (and the
    sweep says so); with more, each has its own."""
    res, rows = sweep_with_standin(nsys_mine, tmp_path, "32,64", jobs=2)
    assert [r["context"] for r in rows] == [32, 64]
    gpus = check_where_each_config_ran(gpu, rows)
    if len(gpu.visible) == 1:
        assert gpus == [gpu.visible[0]] * 2
        assert "--jobs 2 with 1 GPU(s): configs share GPUs" in res.stderr
    else:
        assert len(set(gpus)) == 2
    record(visible_gpus=",".join(gpu.visible), gpus=",".join(gpus))


def test_sweep_gives_each_gpu_one_config(gpu, nsys_mine, tmp_path, record):
    """--jobs defaults to the GPU count: as many configs as GPUs run at once, one per GPU."""
    if len(gpu.visible) < 2:
        pytest.skip(f"needs 2 or more CUDA GPUs to see configs spread over GPUs; this machine "
                    f"has {len(gpu.visible)} ({gpu.name})")
    n = min(len(gpu.visible), 4)
    contexts = ",".join(str(16 * (i + 1)) for i in range(n))
    _, rows = sweep_with_standin(nsys_mine, tmp_path, contexts, jobs=None)
    gpus = check_where_each_config_ran(gpu, rows)
    assert sorted(gpus) == sorted(gpu.visible[:n])
    record(gpus=",".join(gpus))
