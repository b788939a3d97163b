"""`report` (HTML and markdown pages), `attention` (FLOPs vs runtime) and the multi-export
tables, without nsys: real fixtures, synthetic GPU profiles of the model, a faked GPU sweep.
The browser checks (headless Chromium) and the real CPU profile/sweep are in
test_report_browser.py."""

from __future__ import annotations

import json

import pytest

from tests.pages import (
    DLPROF,
    HOSTILE_IMG,
    HOSTILE_RANGE,
    Tags,
    hostile_export,
    nonblank,
    parse,
)
from tests.synth import model_run

VECADD = "vecadd_t4_nsys2022.4.sqlite"
TINY = ["--size", "tiny", "--context", "128", "--batch", "4"]  # d_model 64, 4 heads


def assert_self_contained(page: str) -> Tags:
    """No scripts, no event handlers, nothing to fetch: every src is a data: URL, every href
    an #anchor, no url() in styles, a CSP that forbids requests."""
    tags = parse(page)
    names = {t for t, _ in tags.tags}
    assert not names & {"script", "iframe", "object", "embed", "link", "base", "form"}, names
    for tag, attrs in tags.tags:
        assert not any(a.lower().startswith("on") for a in attrs), (tag, attrs)
        if "src" in attrs:
            assert (attrs["src"] or "").startswith("data:image/png;base64,"), tag
        if "href" in attrs:
            assert (attrs["href"] or "").startswith("#"), attrs["href"]
    assert "url(" not in page and "@import" not in page
    csp = [a["content"] for t, a in tags.tags
           if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in (csp[0] or "")
    return tags


# --------------------------------------------------------------------------------------------
# attention: FLOPs vs runtime


# --------------------------------------------------------------------------------------------
# plots: one PNG of every type, looked at by a machine too


def test_every_plot_type_is_a_picture():
    from reports.page import plots

    pngs = {
        "category_shares": plots.category_shares_png(
            [("(whole export)", {"gemm": 70.0, "softmax": 20.0, "optimizer": 10.0}),
             ("a very long range name " * 5, {"gemm": 100.0}),
             ("computing softmax", {"softmax": 90.0, "elementwise": 10.0})], title="t"),
        "range_times": plots.range_times_png([("forward", 2e6), ("backward", 4e6)],
                                             title="t", xlabel="ms"),
        "attention": plots.attention_png([
            {"range": "computing attention scores", "flop_pct": 46.4, "time_pct": 40.0,
             "achieved_gflops": 300.0, "time_source": "gpu"},
            {"range": "computing softmax", "flop_pct": 7.2, "time_pct": 30.0,
             "achieved_gflops": 20.0, "time_source": "gpu"}], title="t"),
        "heatmap": plots.heatmap_png([[1.0, 4.0], [2.0, None]], [["1 ms", "4 ms"],
                                                                  ["2 ms", "oom"]],
                                     ["tiny", "small"], ["128", "256"], title="t",
                                     xlabel="context", ylabel="size", colorbar="ms"),
        "category_heatmap": plots.heatmap_png(
            [[60.0, 80.0]], [["gemm\n60%", "softmax\n80%"]], ["tiny"], ["128", "256"],
            title="t", xlabel="context", ylabel="size",
            colors=[[plots.category_color("gemm"), plots.category_color("softmax")]],
            legend=["gemm", "softmax"]),
        "lines": plots.lines_png([("tiny", "forward", [128, 256], [1.0, 3.0]),
                                  ("tiny", "backward", [128, 256], [2.0, 7.0])],
                                 title="t", xlabel="context", ylabel="ms"),
        "module_tree": plots.module_tree_png(
            [("Net", 0, 60.0, "gemm", "60%  ampere_sgemm_128x64_tn"),
             ("body (Linear)", 1, 40.0, "gemm", "40%"),
             ("body (Linear) backward", 1, 15.0, "elementwise", "15%")],
            title="t", xlabel="%"),
    }
    for name, png in pngs.items():
        assert png.startswith(b"\x89PNG"), name
        nonblank(png)
    # one colour per category, the same in every plot; user categories get stable ones
    assert plots.category_color("gemm") == "#4477AA"
    assert plots.category_color("mine") == plots.category_color("mine") != "#BBBBBB"


# --------------------------------------------------------------------------------------------
# the report page of one export


def test_report_of_a_real_fixture(tmp_path, cli, fx):
    out = tmp_path / "r.html"
    res = cli("report", fx(DLPROF), "-o", out)
    assert res.exit_code == 0, res.stderr
    page = out.read_text()
    tags = assert_self_contained(page)
    text = " ".join(tags.text)
    assert ("whole export: void cudnn::detail::implicit_convolve_sgemm<…>(…) (gemm), 15% of "
            "GPU time, 6 calls") in text
    assert "aten::conv2d: void cudnn::detail::implicit_convolve_sgemm<…>(…) (gemm), 15% of GPU " \
           "time, 3 calls per aten::conv2d" in text
    for heading in ("Headline answers", "Top kernels", "NVTX ranges", "Memory operations",
                    "Export"):
        assert f">{heading}</h2>" in page
    assert "memcpy Host-to-Device" in text and "NVIDIA GeForce RTX 2070 SUPER" in text
    assert "2022.1.3.3" in text and "python3" in text
    imgs = [a for t, a in tags.tags if t == "img"]
    assert len(imgs) == 2 and "kernel category" in (imgs[0]["alt"] or "")
    assert (imgs[1]["alt"] or "").startswith("Timeline of one measured window per device")
    assert ">GPU utilization</h2>" in page


def test_report_of_a_gpu_model_profile(tmp_path, cli):
    """A profile of this project's model (sidecar beside it): model ranges in nesting order,
    categories per range, attention FLOPs vs GPU time, the forward vs step mix, measured
    steps only."""
    export = model_run(tmp_path / "run.sqlite", context=256)
    (tmp_path / "run.json").write_text(json.dumps({
        "config": {"size": "tiny", "d_model": 64, "heads": 4, "layers": 2, "context": 256,
                   "batch": 4, "mode": "train", "precision": "fp32", "attention": "naive",
                   "nvtx": "fine", "device": "cuda", "warmup": 1, "steps": 2},
        "command": ["nsys", "profile", "--trace=cuda,nvtx,osrt"]}))
    out = tmp_path / "r.html"
    assert cli("report", export, "-o", out).exit_code == 0
    page = out.read_text()
    tags = assert_self_contained(page)
    text = " ".join(tags.text)
    assert "only what ran inside the 'measure' range" in text
    assert "backward: ampere_sgemm_128x64_nt (gemm), 100% of GPU time, 6 calls per backward" \
        in text
    assert "computing softmax: 1.31 MFLOP" not in text  # context 256: 4x the FLOPs
    assert "computing softmax: 5.24 MFLOP and 56.000 µs per instance (GPU time)" in text
    assert ">Forward vs step: kernel-category mix</h2>" in page
    assert [a["alt"][:20] for t, a in tags.tags if t == "img"] == [
        "Stacked bars: the sh", "Timeline of one meas", "Bars: each attention"]
    assert "pid 1, device 0: busy 94.2% of 1 'measure' instance(s)" in text
    assert "nsys profile --trace=cuda,nvtx,osrt" in text


def test_report_mix_is_compare_and_headline_order(tmp_path):
    from reports.model_ranges import headline_ranges
    from reports.page.model import Table
    from reports.page.sections import PageContext, mix_section
    from reports.pipeline.session import Session

    with Session(model_run(tmp_path / "run.sqlite"), within="measure") as a:
        (section,) = mix_section(PageContext(a, "run"))
    (table,) = [b for b in section.blocks if isinstance(b, Table)]
    mix = {r["category"]: r for r in table.rows}
    # forward: attention matmuls (gemm) and the softmax; the step adds backward GEMMs and the
    # optimizer, so the softmax share drops
    assert sum(r["forward_pct"] for r in mix.values()) == pytest.approx(100, abs=0.3)
    assert sum(r["step_pct"] for r in mix.values()) == pytest.approx(100, abs=0.3)
    assert mix["softmax"]["change_pct"] < 0 < mix["softmax"]["forward_pct"]
    assert mix["optimizer"]["forward_pct"] == 0 < mix["optimizer"]["step_pct"]
    assert headline_ranges(["ffn", "forward", "step", "x"], {}) == ["step", "forward", "ffn"]
    assert headline_ranges(["a", "b", "c"], {"b": 3.0, "c": 2.0}) == ["b", "c", "a"]


def test_report_escapes_everything_from_the_export(tmp_path, cli):
    """Range and kernel names that are HTML show as text and run nothing, in the HTML (the
    browser check of the same page is in test_report_browser.py) and in markdown."""
    export = hostile_export(tmp_path / "x.sqlite")
    out = tmp_path / "x.html"
    assert cli("report", export, "-o", out).exit_code == 0
    page = out.read_text()
    tags = assert_self_contained(page)
    assert "<script" not in page.lower() and "<img src=x" not in page
    assert not [t for t, _ in tags.tags if t == "b"]
    text = "".join(tags.text)
    assert HOSTILE_RANGE in text and HOSTILE_IMG in text and "<b>bold</b>_gemm" in text
    assert "&lt;script&gt;document.title=&#x27;pwned&#x27;&lt;/script&gt;" in page
    md = tmp_path / "x.md"
    assert cli("report", export, "-o", md).exit_code == 0
    text = md.read_text()
    assert "<script" not in text and "<img" not in text and "<b>" not in text
    assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in text


def test_report_markdown_writes_pngs_beside_it(tmp_path, cli):
    export = model_run(tmp_path / "m.sqlite")
    md = tmp_path / "out" / "page.md"
    md.parent.mkdir()
    res = cli("report", export, "--format", "md", "-o", md, *TINY, "--within", "measure")
    assert res.exit_code == 0, res.stderr
    text = md.read_text()
    links = [line.split("](")[1].rstrip(")") for line in text.splitlines()
             if line.startswith("![")]
    assert links == ["page-category-shares.png", "page-timeline.png", "page-attention.png"]
    for name in links:
        nonblank((md.parent / name).read_bytes())
    assert "## Attention: runtime vs FLOPs" in text
    assert "| computing softmax |" in text
    assert "and 3 PNG file(s) beside it" in res.stderr


def test_report_shows_the_module_tree(tmp_path, cli):
    """An export with module ranges (--nvtx modules; synthetic GPU run): a section of its
    own with each module's GPU time, share of all GPU time and dominant kernel, in tree
    order, indented in HTML (kept on one line) and markdown; the ranges table is the tree
    too. Pages of other exports have no such section (test_report_of_a_real_fixture)."""
    from tests.synth import module_run

    export = module_run(tmp_path / "lm.sqlite")
    out = tmp_path / "lm.html"
    assert cli("report", export, "-o", out).exit_code == 0
    page = out.read_text()
    tags = assert_self_contained(page)
    assert [a["href"] for t, a in tags.tags if t == "a"][:3] == [
        "#headline", "#modules", "#gpus"]
    section = page[page.index('<section id="modules">'):page.index('<section id="gpus">')]
    assert "<h2>Module tree</h2>" in section
    heads = [h for h in parse(section).text if h.strip()]
    assert heads[heads.index("range"):heads.index("range") + 7] == [
        "range", "gpu time", "% of all", "dominant %", "calls per range", "category", "kernel"]
    cells = [t for t in parse(section).text if t.strip()]
    at = cells.index("TinyLM backward")
    assert cells[at:at + 7] == ["TinyLM backward", "1.180 ms", "62.0", "90.2", "7", "gemm",
                                "ampere_sgemm_64x64_nt"]
    assert '<td class="name" style="white-space: pre">    layers.0 (Block)</td>' in section
    imgs = [a for t, a in parse(section).tags if t == "img"]
    assert len(imgs) == 1 and (imgs[0]["alt"] or "").startswith("Horizontal bars, one per "
                                                                "module range in tree order")
    ranges = page[page.index('<section id="ranges">'):]
    assert ranges.index(">TinyLM backward<") < ranges.index(">    layers.0 (Block)<")
    md = tmp_path / "lm.md"
    assert cli("report", export, "--format", "md", "-o", md).exit_code == 0
    text = md.read_text()
    assert "## Module tree" in text and "![Horizontal bars" in text
    assert ("| \u00a0\u00a0\u00a0\u00a0layers.0 (Block) | 216.000 µs | 11.3 | 81.5 | 3 | gemm | "
            "ampere\\_sgemm\\_128x64\\_tn |") in text
    nonblank((tmp_path / "lm-module-tree.png").read_bytes())


def test_report_of_exports_without_ranges_or_kernels(tmp_path, cli, fx):
    for name, expect in ((VECADD, "vecAdd"), ("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite",
                                             "per instance (CPU time)")):
        out = tmp_path / f"{name}.html"
        res = cli("report", fx(name), "-o", out)
        assert res.exit_code == 0, res.stderr
        tags = assert_self_contained(out.read_text())
        assert expect in " ".join(tags.text)


def test_report_errors(tmp_path, cli):
    res = cli("report", tmp_path / "missing.sqlite", "-o", tmp_path / "r.html")
    assert res.exit_code == 1 and res.stderr.startswith("Error: ")
    res = cli("report", tmp_path, "-o", tmp_path / "r.html")  # a folder, not a sweep
    assert res.exit_code == 1 and "index.sqlite" in res.stderr
    assert not (tmp_path / "r.html").exists()


# --------------------------------------------------------------------------------------------
# a GPU sweep (profiles faked with synthetic exports of the model, mined for real)


@pytest.fixture
def gpu_sweep(tmp_path, monkeypatch):
    from nvtx_model.workload import WorkloadSpec
    from profile_cli.runs import nsys_run as profiler
    from profile_cli.runs import sweep as sweeper

    def fake_profile(cfg, out_dir, spec, force=False, nsys=None):
        base = out_dir / cfg.name
        if cfg.size == "small" and cfg.context == 256:
            status, reason, sqlite = "oom", "out of memory at size small context 256", None
        else:
            model_run(base.with_suffix(".sqlite"), context=cfg.context,
                      width=cfg.model.d_model / 64)
            status, reason, sqlite = "ok", None, str(base.with_suffix(".sqlite"))
        result = profiler.ProfileResult(
            name=cfg.name, config=cfg.to_dict("cuda"), status=status, reason=reason,
            sqlite=sqlite, nsys_rep=None, sidecar=str(base.with_suffix(".json")), wall_s=2.0,
            command=["nsys"], nsys_version="2024.6", trace="cuda,nvtx,osrt", window="measure")
        base.with_suffix(".json").write_text(json.dumps({"config": result.config}))
        return result

    monkeypatch.setattr(sweeper, "profile_config", fake_profile)
    monkeypatch.setattr(sweeper, "locate_nsys", lambda *a, **k: ("nsys", "2024.6"))
    spec = WorkloadSpec(size="tiny,small,custom:d30-f64-L1-h4", context="128,256",
                        mode="train", nvtx="fine", warmup=1, steps=2)
    sweeper.run_sweep(spec, tmp_path / "sweep", profiler.NsysSpec())
    return tmp_path / "sweep"


def test_report_of_a_gpu_sweep(gpu_sweep, cli, tmp_path):
    out = tmp_path / "s.html"
    res = cli("report", gpu_sweep, "-o", out)
    assert res.exit_code == 0, res.stderr
    page = out.read_text()
    tags = assert_self_contained(page)
    text = " ".join(tags.text)
    assert "6 configs: 3 ok, 1 oom, 2 failed" in text
    alts = [a["alt"] for t, a in tags.tags if t == "img"]
    assert [a.split(" ")[0] for a in alts] == ["Heatmap", "Heatmap", "Lines:"]
    assert "dominant kernel category" in alts[1]
    # the dominant kernel per config, failed configs and their reasons
    assert "out of memory at size small context 256" in text
    assert "not divisible by 4 heads" in text
    assert ">Dominant kernel per config and range</h2>" in page
    assert "small ctx128" in text and "ampere_sgemm_128x64_nt" in text
    assert ">Attention: runtime vs FLOPs per config</h2>" in page
    import base64

    for img in [a for t, a in tags.tags if t == "img"]:
        nonblank(base64.b64decode((img["src"] or "").split(",", 1)[1]))


def test_sweep_page_data(gpu_sweep):
    """The numbers behind the sweep page: step times per size x context, the dominant
    category of a step, attention FLOPs vs GPU time per config."""
    from profile_cli.runs.targets import build_report
    from reports.page.model import Figure, Table

    page = build_report(gpu_sweep, None, None)
    sections = {s.anchor: s for s in page.sections}
    assert list(sections) == ["headline", "heatmaps", "context", "attention", "dominant",
                              "problems", "configs"]
    att = next(b for b in sections["attention"].blocks if isinstance(b, Table)).rows
    soft = {r["config"]: r for r in att if r["range"] == "computing softmax"}
    # softmax: 5 B h T^2 = 1,310,720 FLOPs at T 128; 14 µs of kernel time, 56 µs at T 256
    assert soft["tiny ctx128"]["flop"] == 1_310_720 and soft["tiny ctx256"]["flop"] == 5_242_880
    assert soft["tiny ctx128"]["time_per_instance_ns"] == 14_000.0
    assert soft["tiny ctx256"]["time_per_instance_ns"] == 56_000.0
    assert soft["small ctx128"]["flop"] == 5 * 4 * 12 * 128 * 128  # small: 12 heads
    phases = next(b for b in sections["context"].blocks if isinstance(b, Table)).rows
    assert [r["config"] for r in phases] == ["tiny ctx128", "tiny ctx256", "small ctx128"]
    assert all(r["forward_ns"] < r["step_ns"] for r in phases)
    figures = [b.name for b in sections["heatmaps"].blocks if isinstance(b, Figure)]
    assert figures == ["step-time-all-configs", "dominant-category-all-configs"]
    problems = next(b for b in sections["problems"].blocks if isinstance(b, Table)).rows
    assert [(r["config"], r["status"]) for r in problems] == [
        ("small ctx256", "oom"), ("custom:d30-f64-L1-h4 ctx128", "failed"),
        ("custom:d30-f64-L1-h4 ctx256", "failed")]


def test_multi_export_tables_over_a_sweep_folder(gpu_sweep, cli):
    """One command answers "the dominant forward kernel for every size and context"."""
    from reports.analyses.dominant import DOMINANT_COLUMNS
    from reports.analyses.kernels import KERNEL_COLUMNS
    from reports.analyses.ranges import RANGE_COLUMNS

    res = cli("dominant", gpu_sweep, "--range", "forward", "--within", "measure", "-f", "json")
    assert res.exit_code == 0, res.stderr
    rows = json.loads(res.stdout)
    assert all(list(r) == ["config", *DOMINANT_COLUMNS] for r in rows)
    forward = {r["config"]: r["kernel"] for r in rows if r["range"] == "forward"}
    assert forward == {"tiny ctx128": "ampere_sgemm_128x128_nn",
                       "tiny ctx256": "ampere_sgemm_128x64_tn",
                       "small ctx128": "ampere_sgemm_128x128_nn"}
    text = cli("dominant", gpu_sweep, "--range", "forward", "--within", "measure",
               "-f", "text").stdout
    assert "tiny ctx256: forward: ampere_sgemm_128x64_tn (gemm)" in text
    ks = json.loads(cli("kernels", gpu_sweep, "-f", "json").stdout)
    assert all(list(r) == ["config", *KERNEL_COLUMNS] for r in ks)
    assert {r["config"] for r in ks} == set(forward)
    rs = json.loads(cli("ranges", gpu_sweep, "--within", "measure", "-f", "json").stdout)
    assert all(list(r) == ["config", *RANGE_COLUMNS] for r in rs)
    steps = {r["config"]: r["instances"] for r in rs if r["range"] == "step"}
    assert steps == {c: 2 for c in forward}
    table = cli("kernels", gpu_sweep, "--top", "2").stdout
    assert "the top 2 kernels of each export" in table.replace("\n", " ")
    assert "3 exports" in table


def test_multi_export_tables_of_files(cli, fx):
    from reports.analyses.kernels import KERNEL_COLUMNS

    one = json.loads(cli("kernels", fx(VECADD), "-f", "json").stdout)
    assert list(one[0]) == KERNEL_COLUMNS  # one export: unchanged
    both = cli("kernels", fx(DLPROF), fx(VECADD), "-f", "json")
    rows = json.loads(both.stdout)
    assert {r["config"] for r in rows} == {DLPROF[:-7], VECADD[:-7]}
    assert [r for r in rows if r["config"] == VECADD[:-7]][0] == {"config": VECADD[:-7],
                                                                  **one[0]}
    # an export that cannot answer is left out with a note, unless none can
    res = cli("dominant", fx(DLPROF), fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"))
    assert res.exit_code == 0 and "left out" in res.stdout
    res = cli("dominant", fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"),
              fx("centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"))
    assert res.exit_code == 1 and "CUPTI_ACTIVITY_KIND_KERNEL" in res.stderr


def test_sweep_page_compares_eager_with_compiled(tmp_path, monkeypatch):
    """A GPU sweep with --compile none,reduce-overhead (profiles faked with built exports:
    the compiled one traced at graph level): the page sets each compiled config beside its
    eager twin, with the share of the step that the CUDA graph hides."""
    from nvtx_model.workload import WorkloadSpec
    from profile_cli.runs import nsys_run as profiler
    from profile_cli.runs import sweep as sweeper
    from profile_cli.runs.targets import build_report
    from reports.page.model import Sentences, Table
    from tests.synth import compiled_run

    def fake_profile(cfg, out_dir, spec, force=False, nsys=None):
        base = out_dir / cfg.name
        if cfg.compiled:
            compiled_run(base.with_suffix(".sqlite"), graphs="graph")
        else:
            model_run(base.with_suffix(".sqlite"), context=cfg.context)
        result = profiler.ProfileResult(
            name=cfg.name, config=cfg.to_dict("cuda"), status="ok", reason=None,
            sqlite=str(base.with_suffix(".sqlite")), nsys_rep=None,
            sidecar=str(base.with_suffix(".json")), wall_s=2.0, command=["nsys"],
            nsys_version="2024.6", trace="cuda,nvtx,osrt", window="measure")
        base.with_suffix(".json").write_text(json.dumps({"config": result.config}))
        return result

    monkeypatch.setattr(sweeper, "profile_config", fake_profile)
    monkeypatch.setattr(sweeper, "locate_nsys", lambda *a, **k: ("nsys", "2024.6"))
    spec = WorkloadSpec(size="tiny", context="128", mode="train", nvtx="fine", warmup=1,
                        steps=2, compile="none,reduce-overhead")
    sweeper.run_sweep(spec, tmp_path / "sweep", profiler.NsysSpec())
    page = build_report(tmp_path / "sweep", None, None)
    section = next(s for s in page.sections if s.anchor == "compile")
    (row,) = next(b for b in section.blocks if isinstance(b, Table)).rows
    assert (row["config"], row["compile"], row["compiled_step_ns"]) == (
        "tiny", "reduce-overhead", 900_000)
    assert row["speedup"] == round(row["eager_step_ns"] / 900_000, 2)
    assert row["graph_pct"] == 75.6  # 124 us of graph per 164 us of a step's kernels
    assert row["compiled_mix"] == "cuda graph 75.6%, optimizer 24.4%"
    assert row["eager_mix"].startswith("gemm ")
    (sentence,) = next(b for b in section.blocks if isinstance(b, Sentences)).items
    assert sentence.startswith("tiny: compile reduce-overhead ") and sentence.endswith(
        "; 75.6% of the compiled step's GPU time ran in CUDA graph launches whose kernels "
        "were not recorded")
    heat_titles = [b.name for s in page.sections if s.anchor == "heatmaps" for b in s.blocks
                   if hasattr(b, "name")]
    assert heat_titles[:2] == ["step-time-eager", "dominant-category-eager"]
