"""Answers people can read: every table command at 80 and 120 columns on real exports.

For each shown row, every numeric cell appears in full (never cut to ``12…``), every line
fits the width, the footer counts the rows there are, and columns left out are named. One
check runs in a real pseudo-terminal (``script``), where the width comes from the terminal.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from reports.render import cell, top_rows

DLPROF = "dlprof_pytorch_rtx2070s_nsys2022.1.sqlite"
FASTVIDEO = "fastvideo_wan_h100x2_emitnvtx_nsys2026.2_trimmed.sqlite"
GTLS = "gtls_rtx3060_nsys2023.1.sqlite"
CENTERFORMER = "centerformer_titanrtx_nvtxonly_nsys2022.4.sqlite"


def _views():
    from reports.analyses.dominant import DOMINANT_VIEW
    from reports.analyses.kernels import KERNEL_VIEW
    from reports.analyses.memops import MEMOPS_VIEW
    from reports.analyses.nvtx_kernels import NVTX_KERNEL_VIEW
    from reports.analyses.ranges import RANGE_VIEW

    return {"kernels": KERNEL_VIEW, "ranges": RANGE_VIEW, "nvtx-kernels": NVTX_KERNEL_VIEW,
            "dominant": DOMINANT_VIEW, "memops": MEMOPS_VIEW}


CASES = [
    ("kernels", GTLS), ("kernels", FASTVIDEO), ("kernels", DLPROF),
    ("ranges", FASTVIDEO), ("ranges", CENTERFORMER), ("ranges", DLPROF),
    ("nvtx-kernels", FASTVIDEO), ("nvtx-kernels", DLPROF),
    ("dominant", FASTVIDEO), ("dominant", DLPROF), ("dominant", GTLS),
    ("memops", GTLS),
]


@pytest.fixture
def cli_at(cli, monkeypatch):
    def run(width: int, *args):
        monkeypatch.setenv("COLUMNS", str(width))
        return cli(*args)
    return run


def _table_lines(text: str) -> list[str]:
    """The data lines of the first table: after the header rule, up to the first blank or
    note line."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("─"))
    out = []
    for ln in lines[start + 1:]:
        if not ln.strip() or re.match(r"^\d[\d,]* of [\d,]+ ", ln) or ln.startswith(
                ("every row", "left out", "PyTorch", "only ")):
            break
        out.append(ln)
    return out


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("command,fixture", CASES)
def test_tables_fit_and_numbers_are_whole(command, fixture, width, cli_at, fx):
    path = fx(fixture)
    table = cli_at(width, command, path)
    assert table.exit_code == 0, table.stderr
    rows = json.loads(cli_at(width, command, path, "--format", "json").stdout)
    view = _views()[command]
    shown, footer = top_rows(rows, view, 20)
    text = table.stdout
    assert all(len(ln) <= width for ln in text.splitlines()), "a line is wider than the screen"
    header_end = next(i for i, ln in enumerate(text.splitlines()) if ln.startswith("─"))
    head = " ".join(text.splitlines()[1:header_end])
    numeric = [c for c in view.columns if any(isinstance(r.get(c), (int, float))
                                               and not isinstance(r.get(c), bool) for r in rows)]
    shown_numeric = [c for c in numeric if all(w in head.split() for w in view.header(c).split())]
    assert shown_numeric, "no numeric column left on screen"
    data = _table_lines(text)
    assert len(data) >= len(shown)  # a row may wrap onto more lines (text columns)
    pos = 0
    for row in shown:  # each row's numbers, whole, on one line, in order
        row = {k: (view.null_labels.get(k, v) if v is None else v) for k, v in row.items()}
        cells = [cell(c, row.get(c), human=True) for c in shown_numeric]
        while pos < len(data) and not all(cell in data[pos] for cell in cells):
            pos += 1
        assert pos < len(data), f"numbers {cells} not whole on any line"
        pos += 1
    if footer:
        assert footer in text.replace("\n", " ")
        total = len(rows) - view.pinned
        assert f"of {total:,} " in text
    if "left out to fit" in text:
        note = text[text.index("left out to fit"):].replace("\n", " ")
        named = note.split(":", 1)[1].split(";")[0]
        for name in (n.strip() for n in named.split(",")):
            assert name and name not in head.split("  "), name


def test_top_row_answers_in_full_at_80(cli_at, fx):
    """The answer of each command is on the first line, whole: the biggest kernel's share
    and total, the dominant kernel's share and calls per range."""
    k = cli_at(80, "kernels", fx(GTLS)).stdout
    assert re.search(r"^69\.4\s+1\.531 s\s+26\s", _table_lines(k)[0])
    d = cli_at(80, "dominant", fx(FASTVIDEO)).stdout
    first, second = _table_lines(d)[:2]
    assert first.startswith("(whole export)") and " 69.4 " in first and "gemm" in first
    assert second.startswith("aten::linear") and " 70.9 " in second and " 0.38 " in second


def test_footer_counts_and_top(cli_at, fx):
    out = cli_at(120, "ranges", fx(FASTVIDEO)).stdout
    assert "20 of 16,582 ranges; --top 0 shows all" in out
    assert len(_table_lines(out)) == 20
    assert len(_table_lines(cli_at(120, "ranges", fx(FASTVIDEO), "--top", "5").stdout)) == 5
    # --top 0: every row (a smaller export: rich takes ~15 s to lay out 16,582 rows)
    every = json.loads(cli_at(120, "ranges", fx(DLPROF), "-f", "json").stdout)
    everything = cli_at(120, "ranges", fx(DLPROF), "--top", "0").stdout
    assert len(_table_lines(everything)) == len(every) > 20 and " of " not in everything
    rows = json.loads(cli_at(120, "ranges", fx(FASTVIDEO), "-f", "json").stdout)
    assert len(rows) == 16_582  # machine formats: every row unless --top
    top = json.loads(cli_at(120, "ranges", fx(FASTVIDEO), "-f", "json", "--top", "3").stdout)
    assert [r["gpu_inclusive_ns"] for r in top] == sorted(
        (r["gpu_inclusive_ns"] for r in rows), reverse=True)[:3]


def test_top_everywhere(cli_at, fx):
    for command in ("kernels", "ranges", "nvtx-kernels", "dominant", "memops"):
        fixture = GTLS if command == "memops" else DLPROF
        res = cli_at(120, command, fx(fixture), "--top", "2")
        assert res.exit_code == 0, (command, res.stderr)
        assert re.search(r"^2 of [\d,]+ ", res.stdout, re.M), command


def test_wide_keeps_every_column(cli_at, fx):
    out = cli_at(80, "kernels", fx(GTLS), "--wide").stdout
    head = out.splitlines()[1]
    for col in ("stddev", "max", "min", "med"):
        assert col in head
    assert "left out" not in out


def test_emit_nvtx_capture_groups_operators_in_dominant(cli_at, fx):
    out = cli_at(120, "dominant", fx(FASTVIDEO)).stdout
    assert "op_id =" not in out and "grouped per operator" in out
    assert "op_id =" in cli_at(120, "dominant", fx(FASTVIDEO), "--merge-op-ids", "off").stdout
    # the mirrors of nsys reports stay row-for-row nsys by default
    assert "op_id =" in cli_at(120, "ranges", fx(FASTVIDEO)).stdout


def test_pyprof_markers_are_summarised_not_cut(cli_at, fx):
    """DLProf/pyprof ranges are Python dicts hundreds of characters long whose distinctive
    parts (argument shapes, the user's own frame) are deep inside: cutting their middle made
    different ranges read the same. A table shows their summary; json keeps them whole."""
    rows = json.loads(cli_at(120, "dominant", fx(DLPROF), "-f", "json").stdout)
    markers = [r["range"] for r in rows if (r["range"] or "").startswith("{'")]
    assert len(markers) == 4 and min(map(len, markers)) > 200
    lines = _table_lines(cli_at(150, "dominant", fx(DLPROF)).stdout)
    labels = [ln.split("  ")[0] for ln in lines]
    for label in ("conv2d(1x6x30x30, 16x6x5x5, 16)", "conv2d(1x3x32x32, 6x3x3x3, 6)",
                  "conv2d @ dummy_network.py:26", "conv2d @ dummy_network.py:25"):
        assert label in labels, labels
    at80 = [ln.split("  ")[0] for ln in _table_lines(cli_at(80, "dominant", fx(DLPROF)).stdout)]
    assert len(set(at80)) == len(at80)  # still told apart when the middle gives way


def test_marker_summary_leaves_other_names_alone():
    from reports.render.names import marker_summary, shorten_name

    assert marker_summary("{'op': 'linear', 'args': [{'shape': (8, 64)}, {'value': 2}, 3]}") \
        == "linear(8x64, 2, ?)"
    assert marker_summary("{'traceMarker': ['/x/site-packages/a.py:1'], 'funcStack': ''}") \
        == "a.py:1"
    for name in ("aten::mm", "{'op': ", "{'op': 'x'} + __import__('os')", "{'a': 1}",
                 "{1: 2}", "{'op': [1]}"):
        assert marker_summary(name) is None, name
    assert shorten_name("abc", 10, signature=False) == "abc"
    assert shorten_name("abcdefghijkl", 5, signature=False) == "ab…kl"


def test_depth_and_match_filters(cli_at, fx):
    rows = json.loads(cli_at(120, "ranges", fx(DLPROF), "-f", "json", "--match", "aten::conv*",
                             "--match", "aten::add_*").stdout)
    assert rows and all(r["range"].startswith(("aten::conv", "aten::add_")) for r in rows)
    top = json.loads(cli_at(120, "ranges", fx(DLPROF), "-f", "json", "--depth", "1").stdout)
    every = json.loads(cli_at(120, "ranges", fx(DLPROF), "-f", "json").stdout)
    assert 0 < sum(r["instances"] for r in top) < sum(r["instances"] for r in every)
    dom = json.loads(cli_at(120, "dominant", fx(DLPROF), "-f", "json", "--match",
                            "aten::conv2d*").stdout)
    assert {r["range"] for r in dom[1:]} == {"aten::conv2d"}
    assert cli_at(120, "ranges", fx(DLPROF), "--depth", "0").exit_code == 2


def test_dominant_with_a_filter_that_shows_no_kernels(cli_at, fx):
    """A --match that no range with kernels matches: the whole-export row and a note that
    says the filter left nothing (it raised a ValueError in the category grouping)."""
    res = cli_at(120, "dominant", fx(DLPROF), "-f", "json", "--match", "no-such-range*")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert len(rows) == 1 and rows[0]["range"] is None and rows[0]["total_ns"] > 0
    human = cli_at(120, "dominant", fx(DLPROF), "--match", "no-such-range*")
    assert human.exit_code == 0
    assert "no kernel launch lies inside a shown range" in human.stdout + human.stderr


def test_dominant_text_format_is_one_sentence_per_range(cli_at, fx):
    out = cli_at(80, "dominant", fx(DLPROF), "--format", "text", "--top", "3").stdout
    lines = out.splitlines()
    assert lines[0].startswith("whole export: ") and "% of GPU time" in lines[0]
    assert lines[1].startswith("aten::") and "calls per " in lines[1]


@pytest.mark.skipif(not shutil.which("script"), reason="util-linux `script` not installed")
def test_in_a_real_terminal(fx, tmp_path):
    """In a pseudo-terminal of 80 columns (stty), no COLUMNS variable: the table fits the
    terminal and the numbers are whole."""
    exe = os.path.join(os.path.dirname(sys.executable), "nsys-mine")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    cmd = f"stty cols 80 rows 60; {exe} kernels {fx(GTLS)} --top 5"
    out = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, text=True,
                         env=env, timeout=60).stdout
    lines = [re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", ln).rstrip("\r") for ln in out.splitlines()]
    assert all(len(ln) <= 80 for ln in lines), max(lines, key=len)
    assert any(re.search(r"69\.4\s+1\.531 s\s+26", ln) for ln in lines)


def test_names_are_never_read_as_markup():
    """A range called ``step[layer]``, ``[/]`` or ``:smile:`` is shown as it is (rich
    markup ate the first, raised on the second, drew an emoji for the third)."""
    import reports.render as render

    rows = [{"range": n, "total_ns": i + 1} for i, n in enumerate(
        ["step[layer] x", "[/] weird", ":smile: [bold]b[/bold]"] * 30)]
    view = render.View(columns=["range", "total_ns"])
    out = render.render_rows(rows, ["range", "total_ns"], "text", view=view, top=0,
                             width=80, title="[t] ranges").text
    assert out is not None and out.startswith("[t] ranges")
    for name in ("step[layer] x", "[/] weird", ":smile: [bold]b[/bold]"):
        assert name in out, name


def test_every_row_of_a_long_table_is_written(cli_at, fx):
    """`nvtx-kernels --top 0` on the emit_nvtx fixture: all 2,677 (range, kernel) rows,
    each line within 120 columns."""
    out = cli_at(120, "nvtx-kernels", fx(FASTVIDEO), "--top", "0").stdout
    lines = out.splitlines()
    assert sum(1 for ln in lines if re.match(r"\s*[\d.]+ [µmn]?s ", ln)) == 2677
    assert max(len(ln) for ln in lines) <= 120


def _wide_names_export(path):
    """70 ranges whose names are Chinese (two terminal cells a character) and differ only at
    their end, each launching one kernel."""
    from tests.synth import Synth

    s = Synth()
    for i in range(70):
        t = 1_000_000 + i * 10_000
        s.range("前向传播 注意力 计算 分数 " * 3 + f"第{i}层", t, t + 5_000)
        s.kernel("ampere_sgemm_128x64_tn", t + 1_000 + 5_000, t + 9_000,
                 launch=(t + 1_000, t + 1_500))
    return s.write(path)


@pytest.mark.parametrize("command", ["ranges", "nvtx-kernels"])
@pytest.mark.parametrize("width", [80, 120])
def test_wide_characters_are_measured_in_terminal_cells(command, width, cli_at, tmp_path,
                                                        monkeypatch):
    """A Chinese range name takes twice its length in a terminal. The layout measures cells
    (it measured characters: rich then cut the names at their end, and rows that differ only
    there all read the same); names are shortened in the middle, every line fits, each row
    keeps its own end."""
    from rich.cells import cell_len

    path = _wide_names_export(tmp_path / "wide.sqlite")
    lines = cli_at(width, command, path, "--top", "0").stdout.splitlines()
    assert max(cell_len(ln) for ln in lines) <= width
    rows = [ln for ln in lines if "层" in ln]
    assert len(rows) == 70
    assert {re.search(r"第(\d+)层", ln).group(1) for ln in rows} == {str(i) for i in range(70)}
    assert all("…" in ln for ln in rows)  # shortened in the middle, by us
    assert all(re.match(r"\d\.000 µs[ 1]+ \d\.000 µs", ln) for ln in rows)  # numbers whole


def test_middle_shortening_counts_cells():
    from rich.cells import cell_len

    from reports.render import shorten_name

    name = "前向传播注意力计算分数" * 4 + "结束"
    for width in range(1, 40):
        short = shorten_name(name, width, signature=False)
        assert cell_len(short) <= width, (width, short)
        assert cell_len(short) >= width - 1  # a wide character may not fit the last cell
    assert shorten_name(name, 20, signature=False).endswith("结束")
    assert shorten_name("a" * 30, 11, signature=False) == "aaaaa…aaaaa"


CUBLAS = [f"sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize{t}_stage3_warpsize{w}_ffma_aligna4_"
          f"alignc4_execute_{k}kernel__5x_cublas"
          for t, w, k in (("64x256x8", "1x4x1", ""), ("128x128x8", "2x2x1", ""),
                          ("64x256x8", "1x4x1", "split_k_"))]


@pytest.mark.parametrize("width", [8, 16, 20, 26, 32, 40, 60, 140])
def test_names_that_would_read_the_same_are_told_apart(width):
    """Different kernel names that shorten to the same text (cuBLAS names differ in the
    middle) show where they differ instead, in one column and across columns; the text
    keeps to the column's width; names that do not clash are shortened as before."""
    from rich.cells import cell_len

    from reports.render import shorten_columns, shorten_name

    cells = {"kernel": CUBLAS + ["reduce_kernel", CUBLAS[0]], "runner_up_kernel": CUBLAS[1:2]}
    widths = {"kernel": width, "runner_up_kernel": width}
    shown = shorten_columns(cells, widths)
    plain = {c: [shorten_name(v, width) for v in values] for c, values in cells.items()}
    for c in cells:
        assert all(cell_len(v) <= width for v in shown[c]), shown[c]
    assert shown["kernel"][3] == plain["kernel"][3]  # no clash: shortened as before
    assert shown["kernel"][4] == shown["kernel"][0]  # one name, one text
    if width >= 140:  # wide enough for whole names: nothing changes
        assert shown == plain == cells
    elif width >= 16:  # room enough to tell them apart
        texts = shown["kernel"][:3]
        assert len(set(texts)) == 3, texts
        assert shown["runner_up_kernel"][0] == texts[1]
        assert "64x256" in texts[0] and "128x12" in texts[1]
    else:  # too narrow to tell them apart: shortened as before
        assert shown == plain
    assert shorten_columns({"kernel": ["a" * 50, "b" * 50]}, {"kernel": 10})["kernel"] == [
        shorten_name("a" * 50, 10), shorten_name("b" * 50, 10)]


@pytest.mark.parametrize("width", [12, 16, 26, 40])
def test_a_name_that_is_all_common_start_and_end_is_told_apart(width):
    """execute_kernel vs execute_split_k_kernel: the first name's part between the common
    start and end is empty; it shows what follows the common start instead."""
    from reports.render import shorten_columns

    shown = shorten_columns({"kernel": [CUBLAS[0], CUBLAS[2]]}, {"kernel": width})["kernel"]
    assert len(set(shown)) == 2 and not any("……" in v for v in shown), shown
    assert all(len(v) <= width for v in shown)


CUB = [f"void cub::{k}<cub::DeviceReducePolicy<{t}, int, cub::{op}>::Policy600, {rest}>({args})"
       for k, t, op, rest, args in (
           ("DeviceReduceKernel", "cub::KeyValuePair<int, float>", "ArgMin",
            "cub::ArgIndexInputIterator<float *, int, float>, int, cub::ArgMin, "
            "cub::KeyValuePair<int, float>", "T2, T5 *, T3, cub::GridEvenShare<T3>, T4"),
           ("DeviceReduceKernel", "float", "Min", "float *, float *, int, cub::Min, float",
            "T2, T5 *, T3, cub::GridEvenShare<T3>, T4"),
           ("DeviceReduceSingleTileKernel", "cub::KeyValuePair<int, float>", "ArgMin",
            "cub::KeyValuePair<int, float> *, cub::KeyValuePair<int, float> *, int, "
            "cub::ArgMin, cub::KeyValuePair<int, float>, cub::KeyValuePair<int, float>",
            "T2, T3, T4, T5, T6"),
           ("DeviceReduceSingleTileKernel", "float", "Min",
            "float *, float *, int, cub::Min, float, float", "T2, T3, T4, T5, T6"))]


@pytest.mark.parametrize("width", [16, 24, 32, 40, 48, 64, 80])
def test_names_that_read_apart_still_read_apart(width):
    """Telling one clash apart never makes a name read as another one: two cub kernels
    that shorten apart, each with a clash of its own, told apart by the same start
    (``void cub::Device…``) would read the same; such a clash keeps its shortened names."""
    from reports.render import shorten_columns, shorten_name

    names = CUB + CUBLAS
    shown = shorten_columns({"kernel": names}, {"kernel": width})["kernel"]
    plain = [shorten_name(n, width) for n in names]
    for i in range(len(names)):
        for j in range(i):
            if plain[i] != plain[j]:
                assert shown[i] != shown[j], (width, shown[i], names[i], names[j])


def test_told_apart_counts_cells():
    from rich.cells import cell_len

    from reports.render import shorten_columns

    names = ["前向传播注意力" * 3 + tail + "计算分数结束" * 3 for tail in ("甲乙", "丙丁戊")]
    for width in range(8, 40):
        shown = shorten_columns({"range": names}, {"range": width})["range"]
        assert all(cell_len(v) <= width for v in shown), (width, shown)


def test_the_html_tables_tell_kernel_names_apart():
    """The report page's tables shorten kernel names as the terminal's do: a kernel and its
    runner-up that differ only in the middle read differently (the full name in the
    cell's title)."""
    import re

    from reports.page.html import _table
    from reports.page.model import Table
    from reports.render import View

    rows = [{"range": "aten::mm", "kernel": CUBLAS[0], "runner_up": CUBLAS[1]},
            {"range": "aten::bmm", "kernel": CUBLAS[2], "runner_up": "reduce_kernel"}]
    html_text = _table(Table(rows=rows, view=View(columns=["range", "kernel", "runner_up"])))
    cells = re.findall(r'<td class="name"(?: title="([^"]*)")?>([^<]*)<', html_text)
    kernels = {title or text: text for title, text in cells if title or "kernel" in text}
    assert set(kernels) >= set(CUBLAS) and kernels["reduce_kernel"] == "reduce_kernel"
    assert len({kernels[n] for n in CUBLAS}) == 3, kernels
    assert all(len(kernels[n]) <= 64 for n in CUBLAS)


def test_inductor_kernels_say_what_they_fused(cli_at, tmp_path):
    """A compiled model's Triton kernels: people read the fused operators beside the name
    (at any width the label outlives the name's own operator list); JSON keeps nsys's name."""
    from tests.synth import compiled_run

    export = compiled_run(tmp_path / "node.sqlite")
    wide = _table_lines(cli_at(200, "kernels", export).stdout)
    assert any(ln.endswith("triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_3 · fused: "
                           "to_copy, add, mean, mul, pow, rsqrt") for ln in wide)
    narrow = _table_lines(cli_at(80, "kernels", export).stdout)
    assert [ln.rstrip().split("  ")[-1].strip() for ln in narrow if "·" in ln] == [
        "tem_2 · mm", "per_1 · softmax", "poi_0 · add, mul", "red_3 · to_copy, add, me…"]
    assert all(len(ln) <= 80 for ln in narrow)
    names = [r["name"] for r in json.loads(cli_at(80, "kernels", export, "-f", "json").stdout)]
    assert "triton_poi_fused_add_mul_0" in names and not any("·" in n for n in names)
    text = cli_at(100, "dominant", export, "--graph-attribution", "capture", "-f", "text").stdout
    assert "attention: triton_per_fused__softmax_1 · fused: softmax (softmax), 60% of GPU " \
           "time, 2 calls per attention" in text
