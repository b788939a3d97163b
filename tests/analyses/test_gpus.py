"""Per-device GPU time (``gpus``): against interval arithmetic written independently
(``tests.reference``: a sweep over sorted start/end events in plain Python), on every
fixture with GPU operations (kernels, memory operations and whole CUDA graph launches); the
DDP capture's numbers; ``--within`` windows; the check rules; the report page's section."""

from __future__ import annotations

import sqlite3
from collections import defaultdict

import pytest

from nsys_parsers.errors import MissingData
from reports.categories import categorize
from reports.pipeline.ask import ask
from tests.conftest import CS336, KNOWN
from tests.reference import OPS_SQL, both, covered
from tests.synth import Synth

DDP = "cs336_lizhieffe_ddp53_profile.sqlite"


def reference(export) -> dict[tuple[int, int], dict[str, int]]:
    conn = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    ops = defaultdict(list)
    for table, sql in OPS_SQL.items():
        if table in tables:
            for a, b, pid, dev, name in conn.execute(sql):
                if a > 0:
                    ops[(pid, dev)].append((a, b, name))
    conn.close()
    out = {}
    for key, rows in ops.items():
        every = [(a, b) for a, b, _ in rows]
        comm = [(a, b) for a, b, n in rows if n is not None and
                categorize(n) == "communication"]
        compute = [(a, b) for a, b, n in rows if n is not None and
                   categorize(n) != "communication"]
        span = max(b for _, b in every) - min(a for a, _ in every)
        overlap = both(comm, compute)
        out[key] = {"span_ns": span, "busy_ns": covered(every),
                    "comm_ns": covered(comm), "compute_ns": covered(compute),
                    "overlap_ns": overlap}
    return out


@pytest.mark.parametrize("name", KNOWN + CS336)
def test_gpus_match_interval_arithmetic(name, fx):
    export = fx(name)
    want = reference(export)
    if not want:
        with pytest.raises(MissingData, match="--trace=cuda"):
            ask("gpus", [export])
        return
    rows = ask("gpus", [export]).rows
    assert {(r["pid"], r["device"]) for r in rows} == set(want)
    for r in rows:
        w = want[(r["pid"], r["device"])]
        assert {k: r[k] for k in w} == w, name
        assert r["idle_ns"] == r["span_ns"] - r["busy_ns"]
        assert r["exposed_comm_ns"] == r["comm_ns"] - r["overlap_ns"]


def test_ddp_numbers_of_the_issue(fx):
    """device 0 busy 14.6% of its span, 94% of its NCCL time exposed; device 1 idle 95%."""
    rows = {r["device"]: r for r in ask("gpus", [fx(DDP)]).rows}
    d0, d1 = rows[0], rows[1]
    assert (d0["pid"], d0["span_ns"], d0["busy_ns"], d0["comm_ns"], d0["overlap_ns"]) == (
        13096, 1623254217, 237427211, 209016724, 11909144)
    assert (d0["busy_pct"], d0["exposed_comm_pct"]) == (14.6, 94.3)
    assert (d1["pid"], d1["idle_pct"], d1["exposed_comm_pct"]) == (13097, 95.5, 72.6)
    assert (d0["kernels"], d0["memops"], d0["streams"]) == (2326, 180, 4)
    # idle is the sum of every gap gpu-starv finds (no profiling overhead in this capture)
    gaps = ask("gaps", [fx(DDP)], min_gap_ms=0).rows
    assert sum(g["duration_ns"] for g in gaps if g["device"] == 1) == d1["idle_ns"]


def test_within_measures_inside_the_instances(fx):
    export = fx(DDP)
    rows = {r["device"]: r for r in ask("gpus", [export], within="forward pass").rows}
    conn = sqlite3.connect(f"file:{export}?mode=ro", uri=True)
    for device, pid in ((0, 13096), (1, 13097)):
        (a, b), = conn.execute(
            "SELECT e.start, e.end FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
            "WHERE coalesce(e.text, s.value) = 'forward pass' "
            "AND (e.globalTid >> 24) & 16777215 = ?", (pid,))
        ops = conn.execute(
            "SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE deviceId = ? UNION ALL "
            "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = ? UNION ALL "
            "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE deviceId = ?",
            (device,) * 3).fetchall()
        r = rows[device]
        assert (r["windows"], r["span_ns"]) == (1, b - a)
        assert r["busy_ns"] == covered(ops, (a, b))
    conn.close()
    assert (rows[0]["busy_ns"], rows[0]["comm_ns"]) == (2520851, 0)


T = 1_000_000  # GPU operations at time 0 are not recorded ones (gpu-starv leaves them out)


def _two_gpu_export(path, *, busy_device_1: bool = False):
    """Process 1 on device 0: compute 0-10 ms, NCCL 5-20 ms (a third hidden); process 2 on
    device 1: one kernel 0-2 ms and one 18-20 ms (or one 0-20 ms); a 20 ms `step` range in
    each (all 1 ms later)."""
    s = Synth()
    for pid in (1, 2):
        s.range("step", T, T + 20_000_000, pid=pid, tid=pid)
    s.kernel("gemm_kernel", T, T + 10_000_000, pid=1, tid=1, launch=(T, T + 1), device=0)
    s.kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", T + 5_000_000, T + 20_000_000, pid=1,
             tid=1, launch=(T + 2, T + 3), device=0, stream=9)
    if busy_device_1:
        s.kernel("gemm_kernel", T, T + 20_000_000, pid=2, tid=2, launch=(T, T + 1), device=1)
    else:
        s.kernel("gemm_kernel", T, T + 2_000_000, pid=2, tid=2, launch=(T, T + 1), device=1)
        s.kernel("gemm_kernel", T + 18_000_000, T + 20_000_000, pid=2, tid=2,
                 launch=(T + 4, T + 5), device=1)
    return s.write(path)


def test_synthetic_two_gpus(tmp_path):
    rows = ask("gpus", [_two_gpu_export(tmp_path / "two.sqlite")]).rows
    d0, d1 = rows
    assert (d0["busy_ns"], d0["comm_ns"], d0["overlap_ns"], d0["exposed_comm_ns"]) == (
        20_000_000, 15_000_000, 5_000_000, 10_000_000)
    assert (d0["exposed_comm_pct"], d0["streams"]) == (66.7, 2)
    assert (d1["span_ns"], d1["busy_ns"], d1["idle_pct"], d1["comm_ns"]) == (
        20_000_000, 4_000_000, 80.0, 0)


def test_one_gpu_is_one_row(fx):
    rows = ask("gpus", [fx("vecadd_t4_nsys2022.4.sqlite")]).rows
    assert len(rows) == 1 and rows[0]["comm_ns"] == 0 and rows[0]["exposed_comm_pct"] is None


def test_check_rules_on_idle_and_exposed_communication(tmp_path, cli):
    export = _two_gpu_export(tmp_path / "two.sqlite")
    rules = tmp_path / "rules.toml"
    rules.write_text('[[rule]]\nrange = "step"\nmax_idle_pct = 50\n\n'
                     '[[rule]]\nrange = "step"\nmax_exposed_comm_pct = 70\n\n'
                     '[[rule]]\nmax_exposed_comm_pct = 50\n')
    res = cli("check", export, "--rules", rules, "-f", "json")
    assert res.exit_code == 3, res.stderr
    import json

    rows = json.loads(res.stdout)
    assert [(r["status"], r["observed"]) for r in rows] == [
        ("fail", 80.0), ("pass", 66.7), ("fail", 66.7)]
    assert rows[0]["rule"] == "step: GPU idle <= 50%"
    assert "idle 80% of 'step' on device 1 (pid 2), the most of 2 device(s)" in \
        rows[0]["message"]


def test_diff_gives_utilization_verdicts(tmp_path):
    base = _two_gpu_export(tmp_path / "base.sqlite")
    cand = _two_gpu_export(tmp_path / "cand.sqlite", busy_device_1=True)
    report = ask("diff", [base, cand])
    gpu = {r["key"]: r for r in report.rows if r["level"] == "gpu"}
    # idle: device 0 none of its 20 ms, device 1 16 ms, then none
    assert (gpu["idle_pct"]["base_pct"], gpu["idle_pct"]["cand_pct"]) == (40.0, 0.0)
    assert gpu["idle_pct"]["verdict"] == "improvement"
    assert gpu["exposed_comm_pct"]["verdict"] == "neutral"
    assert gpu["exposed_comm_pct"]["base_pct"] == 66.7


@pytest.mark.parametrize("width", [80, 120])
def test_gpus_read_at_80_and_120_columns(width, cli, fx, monkeypatch):
    monkeypatch.setenv("COLUMNS", str(width))
    res = cli("gpus", fx(DDP))
    assert res.exit_code == 0, res.stderr
    assert all(len(ln) <= width for ln in res.stdout.splitlines())
    assert "14.6" in res.stdout and "95.5" in res.stdout


def test_report_page_has_utilization_and_a_timeline(fx):
    from reports.page.export import export_page
    from reports.pipeline.session import Session

    with Session(fx(DDP)) as s:
        page = export_page(s, label="ddp")
    section = next(x for x in page.sections if x.anchor == "gpus")
    kinds = [type(b).__name__ for b in section.blocks]
    assert kinds == ["Sentences", "Table", "Figure"]
    figure = section.blocks[2]
    assert figure.name == "timeline" and figure.png.startswith(b"\x89PNG")
