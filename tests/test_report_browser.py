"""The report as people open it: rendered by headless Chromium (Debian's ``chromium``), for a
real fixture export, a CPU ``profile`` export and a small CPU sweep (real nsys 2022.4). The
page text holds the headline answers, the screenshot is a picture, nothing is fetched from
the network (a refusing proxy, and Chromium's own network log shows no request made by the
page), and names that are HTML run nothing.

Chromium missing: skipped here, but a failure when ``NSYS_MINE_REQUIRE_BROWSER=1`` (set by
``.ci/run``, which installs it)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.pages import (
    DLPROF,
    HOSTILE_IMG,
    HOSTILE_RANGE,
    hostile_export,
    nonblank,
    parse,
)

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--hide-scrollbars", "--proxy-server=127.0.0.1:9",  # a port that refuses
         "--host-resolver-rules=MAP * ~NOTFOUND"]


@pytest.fixture(scope="session")
def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("NSYS_MINE_REQUIRE_BROWSER", "") not in ("", "0"):
        pytest.fail("headless Chromium not found and NSYS_MINE_REQUIRE_BROWSER is set "
                    "(apt-get install chromium)")
    pytest.skip("headless Chromium not installed (Debian: apt-get install chromium)")


@dataclass
class Browsed:
    dom: str
    text: str
    screenshot: bytes
    page_requests: list[str]


def _run(argv: list[str]) -> str:
    """Run Chromium in its own session; on a timeout end its process group (ours, by id)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=90)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, argv
    return out


def page_requests(netlog: Path) -> list[str]:
    """URLs the page asked for (not Chromium's own background requests, which carry no
    page origin): requests whose network isolation key or cookie site is the file:// page."""
    data = json.loads(netlog.read_text())
    start = data["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for e in data["events"]:
        p = e.get("params") or {}
        if e["type"] == start and ("file://" in str(p.get("network_isolation_key"))
                                   or "file://" in str(p.get("site_for_cookies"))):
            urls.append(p.get("url"))
    return urls


def browse(chromium: str, page: Path, tmp: Path) -> Browsed:
    """The page's DOM after loading (scripts, had there been any, would have run), a
    screenshot, and the requests the page made, from one Chromium run."""
    netlog, shot = tmp / "net.json", tmp / "shot.png"
    dom = _run([chromium, *FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}",
                f"--log-net-log={netlog}", "--window-size=1280,2200", f"--screenshot={shot}",
                "--dump-dom", page.resolve().as_uri()])
    return Browsed(dom=dom, text=" ".join(" ".join(parse(dom).text).split()),
                   screenshot=shot.read_bytes(), page_requests=page_requests(netlog))


def check_page(b: Browsed) -> None:
    assert b.page_requests == []
    tags = parse(b.dom).tags
    assert not [t for t, _ in tags if t == "script"]
    assert all((a.get("src") or "").startswith("data:") for t, a in tags if t == "img")
    nonblank(b.screenshot, min_colors=20, min_ink=0.02)


def test_the_checks_can_fail(chromium, tmp_path):
    """A control page that fetches an image and runs a script: the network log sees the
    request and the DOM shows what the script did, so the checks below mean something."""
    page = tmp_path / "control.html"
    page.write_text('<!DOCTYPE html><html><head><title>t</title></head><body><p>x</p>'
                    '<img src="http://example.invalid/x.png">'
                    "<script>document.title = 'ran'</script></body></html>")
    b = browse(chromium, page, tmp_path)
    assert b.page_requests == ["http://example.invalid/x.png"]
    assert "<title>ran</title>" in b.dom


def test_fixture_report_in_browser(chromium, cli, fx, tmp_path):
    out = tmp_path / "dlprof.html"
    assert cli("report", fx(DLPROF), "-o", out).exit_code == 0
    b = browse(chromium, out, tmp_path)
    check_page(b)
    assert ("whole export: void cudnn::detail::implicit_convolve_sgemm<…>(…) (gemm), 15% of "
            "GPU time, 6 calls") in b.text
    assert "aten::add_: void at::native::unrolled_elementwise_kernel<…>(…) (elementwise), " \
           "100% of GPU time, 1 call per aten::add_" in b.text
    assert "NVIDIA GeForce RTX 2070 SUPER" in b.text


def test_escaped_names_run_nothing_in_browser(chromium, cli, tmp_path):
    s_export = hostile_export(tmp_path / "x.sqlite")
    out = tmp_path / "x.html"
    assert cli("report", s_export, "-o", out).exit_code == 0
    b = browse(chromium, out, tmp_path)
    check_page(b)
    assert HOSTILE_RANGE in b.text and HOSTILE_IMG in b.text and "<b>bold</b>_gemm" in b.text
    assert not [t for t, _ in parse(b.dom).tags if t == "b"]
    assert "<title>nsys-mine report: x.sqlite</title>" in b.dom  # no script set it


# --------------------------------------------------------------------------------------------
# a CPU profile and a CPU sweep under the real nsys


@pytest.fixture(scope="module")
def cpu_sweep(tmp_path_factory, nsys_bin):
    pytest.importorskip("torch")
    pytest.importorskip("nvtx")
    from profile_cli.app import main

    out = tmp_path_factory.mktemp("sweep")
    with pytest.raises(SystemExit) as done:
        main(["sweep", "--size", "tiny,custom:d30-f64-L1-h4", "--context", "16,32", "--mode",
              "train", "--warmup", "1", "--steps", "1", "--device", "cpu", "--out-dir",
              str(out), "--nsys", str(nsys_bin), "--timeout", "300", "--format", "json",
              "-o", str(out / "tables.json")])
    assert done.value.code in (0, None)
    return out


def test_cpu_profile_report_in_browser(chromium, cli, cpu_profile, tmp_path):
    out = tmp_path / "cpu.html"
    res = cli("report", cpu_profile, "-o", out)
    assert res.exit_code == 0, res.stderr
    b = browse(chromium, out, tmp_path)
    check_page(b)
    text = b.text
    assert "tiny (d_model 64, 2 layers, 4 heads), context 32, batch 4, train" in text
    assert "only what ran inside the 'measure' range" in text
    for r in ("step", "forward", "backward", "optimizer", "computing softmax"):
        assert f" {r}: " in text and "per instance (CPU time), " in text
    assert "forward: " in text and "3 instances, " in text  # three measured steps
    # attention: FLOPs from the sidecar (B 4, T 32, d 64, h 4) against CPU time
    assert "computing softmax: 81.9 kFLOP and" in text
    assert "computing attention scores: 524 kFLOP and" in text
    assert "(CPU time); 7.2% of the attention FLOPs" in text
    assert text.count("data:image") == 0  # images are not text
    assert len([t for t, _ in parse(b.dom).tags if t == "img"]) == 2


def test_attention_of_a_cpu_profile(cli, cpu_profile):
    rows = json.loads(cli("attention", cpu_profile, "-f", "json").stdout)
    by = {r["range"]: r for r in rows}
    assert by["computing attention scores"]["flop"] == 2 * 4 * 32 * 32 * 64
    assert by["computing softmax"]["flop"] == 5 * 4 * 4 * 32 * 32
    assert {r["time_source"] for r in rows} == {"cpu"}
    assert {r["instances"] for r in rows} == {6}  # 3 measured steps x 2 layers
    assert all(r["time_per_instance_ns"] > 0 and r["achieved_gflops"] > 0 for r in rows)
    shares = [by[n]["time_pct"] for n in ("computing attention scores", "computing softmax",
                                          "final matmul")]
    assert abs(sum(shares) - 100) < 0.2


def test_cpu_sweep_report_in_browser(chromium, cli, cpu_sweep, tmp_path):
    out = tmp_path / "sweep.html"
    res = cli("report", cpu_sweep, "-o", out)
    assert res.exit_code == 0, res.stderr
    b = browse(chromium, out, tmp_path)
    check_page(b)
    text = b.text
    assert "4 configs: 2 ok, 2 failed" in text
    assert "failed: 2 configs (custom:d30-f64-L1-h4 ctx16, custom:d30-f64-L1-h4 ctx32): " \
           "d_model 30 is not divisible by 4 heads" in text
    assert "tiny ctx16: step " in text and "tiny ctx32: step " in text
    imgs = [a["alt"] for t, a in parse(b.dom).tags if t == "img"]
    assert [a.split(" ")[0] for a in imgs] == ["Heatmap", "Lines:"]
    assert "No CUDA kernels in these runs: no dominant-category heatmap" in text


def test_multi_export_tables_of_a_cpu_sweep(cli, cpu_sweep):
    from reports.analyses.ranges import RANGE_COLUMNS

    rows = json.loads(cli("ranges", cpu_sweep, "--within", "measure", "--match", "forward",
                          "-f", "json").stdout)
    assert [list(r) for r in rows] == [["config", *RANGE_COLUMNS]] * 2
    assert [(r["config"], r["range"], r["instances"]) for r in rows] == [
        ("ctx16", "forward", 1), ("ctx32", "forward", 1)]
    res = cli("dominant", cpu_sweep)  # CPU profiles: no kernels in any export
    assert res.exit_code == 1 and "CUPTI_ACTIVITY_KIND_KERNEL" in res.stderr
