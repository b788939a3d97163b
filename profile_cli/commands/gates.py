"""``compare``, ``diff`` and ``check``: kernel mixes side by side, run-to-run verdicts, CI gates.

Thin commands over ``reports.compare``, ``reports.diff`` and ``reports.check`` (each export
opened once with ``reports.analysis.ExportAnalysis``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from nsys_parsers.errors import BadOption
from profile_cli.commands.options import ANALYSIS_PANEL, analysis_options
from profile_cli.commands.output import (
    ExportArg,
    OutputSpec,
    choice,
    emit_report,
    open_analysis,
    output_options,
)
from reports.options import AnalysisOptions

GATE_PANEL = "Verdicts"
FAIL_ON = ("never", "regression")

ThresholdOpt = Annotated[float, typer.Option(
    "--threshold", min=0.0, metavar="PCT", rich_help_panel=GATE_PANEL,
    help="A change smaller than this many percent is neutral.")]
AlphaOpt = Annotated[float, typer.Option(
    "--alpha", min=1e-6, max=0.5, rich_help_panel=GATE_PANEL,
    help="Significance level of the Mann-Whitney U test a regression must pass.")]


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
    app.command("diff")(diff)
    app.command("check")(check)


def _open(path: Path, analysis: AnalysisOptions) -> Any:
    """The export opened for the gate's questions. Each gate's first question loads the
    kernels, launches and ranges without names (``activity``), so those reads start before
    numpy and the analysis modules are imported (as for the mining commands)."""
    return open_analysis(path, analysis, need_names=False)


@analysis_options(merge_op_ids="auto")
@output_options()
def compare(
    export: ExportArg,
    analysis: AnalysisOptions,
    out: OutputSpec,
    other: Annotated[Optional[Path], typer.Argument(
        help="A second export to compare with the first (fp32 vs bf16, before vs after).",
        show_default=False, metavar="[EXPORT_B]")] = None,
    range_a: Annotated[Optional[str], typer.Option(
        "--range", metavar="NAME", rich_help_panel=ANALYSIS_PANEL,
        help="Side a: this range (default: the whole export).")] = None,
    range_b: Annotated[Optional[str], typer.Option(
        "--vs-range", metavar="NAME", rich_help_panel=ANALYSIS_PANEL,
        help="Side b: this range (default: --range of the second export, or the whole "
             "export).")] = None,
) -> None:
    """How the kernel mix changes: two ranges of one export, or two exports, side by side.

    By kernel category and by kernel (matched on a name without template arguments and tile
    shapes): share of the side's GPU time, calls per range instance, the change.

    Examples: `nsys-mine compare run.sqlite --range forward --vs-range step` ·
    `nsys-mine compare fp32.sqlite bf16.sqlite --range forward`
    """
    from reports.compare import COMPARE_COLUMNS, COMPARE_VIEW, compare_sides, side_of

    if other is None and range_a is None and range_b is None:
        raise BadOption("compare needs two sides: --range NAME and/or --vs-range NAME of one "
                        "export (e.g. --range forward --vs-range step), or a second export.")
    with _open(export, analysis) as a:
        if other is None:
            side_a = side_of(a, range_a, range_a or "the whole export")
            side_b = side_of(a, range_b, range_b or "the whole export")
            title = f"Kernel mix of {export.name}: a = {side_a.label}, b = {side_b.label}"
        else:
            rb = range_b if range_b is not None else range_a
            side_a = side_of(a, range_a, f"{range_a or 'whole export'} of {export.name}")
            with _open(other, analysis) as b:
                side_b = side_of(b, rb, f"{rb or 'whole export'} of {other.name}")
            title = f"Kernel mix: a = {side_a.label}, b = {side_b.label}"
    emit_report(compare_sides(side_a, side_b), COMPARE_COLUMNS, COMPARE_VIEW, out, title=title)


@analysis_options(merge_op_ids="auto")
@output_options()
def diff(
    base: ExportArg,
    analysis: AnalysisOptions,
    out: OutputSpec,
    cand: Annotated[Path, typer.Argument(
        help="The candidate export (the new run).", show_default=False, metavar="CAND")],
    threshold: ThresholdOpt = 5.0,
    alpha: AlphaOpt = 0.05,
    scope: Annotated[Optional[str], typer.Option(
        "--scope", metavar="RANGE", rich_help_panel=GATE_PANEL,
        help="The range the overall verdict and kernel times are per instance of (default: "
             "`step` when both exports have it, else the whole export).")] = None,
    strict: Annotated[bool, typer.Option(
        "--strict", rich_help_panel=GATE_PANEL,
        help="Exports that differ in GPU, workload config or kernels are an error, not a "
             "warning.")] = False,
    fail_on: Annotated[str, typer.Option(
        "--fail-on", rich_help_panel=GATE_PANEL, **choice(FAIL_ON),
        help="regression: exit 3 when the overall verdict is a regression.")] = "never",
) -> None:
    """Run-to-run: per range and per kernel, time per instance, change, and a verdict.

    regression / improvement only past --threshold AND beyond the noise (Mann-Whitney U test
    of the per-instance times at --alpha); too few instances to test: inconclusive, unless the
    change is 4x past the threshold. Exit 0, or 3 with --fail-on regression.

    Examples: `nsys-mine diff main.sqlite pr.sqlite` ·
    `nsys-mine diff main.sqlite pr.sqlite --threshold 10 --fail-on regression -f json`
    """
    from reports.diff import DIFF_COLUMNS, DIFF_VIEW, diff_report

    with _open(base, analysis) as b, _open(cand, analysis) as c:
        report = diff_report(b, c, threshold_pct=threshold, alpha=alpha, scope=scope,
                             strict=strict)
    emit_report(report, DIFF_COLUMNS, DIFF_VIEW, out, title=f"{base.name} -> {cand.name}")
    if fail_on == "regression" and report.rows[0]["verdict"] == "regression":
        raise typer.Exit(3)


@analysis_options(merge_op_ids="auto",
                  only=("within", "merge_op_ids", "name_kind", "depth", "match", "nsys"))
@output_options(top=0)
def check(
    export: ExportArg,
    analysis: AnalysisOptions,
    out: OutputSpec,
    rules: Annotated[Path, typer.Option(
        "--rules", dir_okay=False, metavar="FILE", rich_help_panel=GATE_PANEL,
        help="TOML rules file ([[rule]] tables; see docs/CI.md).")],
    baseline: Annotated[Optional[Path], typer.Option(
        "--baseline", dir_okay=False, metavar="EXPORT", rich_help_panel=GATE_PANEL,
        help="Baseline export for max_regression_pct rules (e.g. main's last run).")] = None,
    junit: Annotated[Optional[Path], typer.Option(
        "--junit", dir_okay=False, metavar="FILE", rich_help_panel=GATE_PANEL,
        help="Also write JUnit XML (one testcase per rule) for CI test reporters.")] = None,
    alpha: AlphaOpt = 0.05,
) -> None:
    """CI gate: assert rules on an export; exit 0 (all pass), 3 (a rule failed), 1 (error).

    Rules: range instances, dominant kernel or category, category share, GPU/CPU time per
    instance, and regression against a baseline (noise-aware, as diff). With
    $GITHUB_STEP_SUMMARY set, a markdown summary is appended to it.

    Examples: `nsys-mine check run.sqlite --rules perf.toml` ·
    `nsys-mine check pr.sqlite --rules perf.toml --baseline main.sqlite --junit check.xml`
    """
    from reports.check import (
        CHECK_COLUMNS,
        CHECK_VIEW,
        junit_xml,
        load_check_rules,
        run_checks,
        step_summary,
    )

    rule_list = load_check_rules(rules)  # a bad rules file fails before any export is read
    with _open(export, analysis) as a:
        if baseline is not None:
            with _open(baseline, analysis) as b:
                report = run_checks(a, rule_list, b, alpha=alpha)
        else:
            report = run_checks(a, rule_list, alpha=alpha)
    if junit is not None:
        junit.write_text(junit_xml(report), encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(step_summary(report, str(export)))
    emit_report(report, CHECK_COLUMNS, CHECK_VIEW, out, title=f"check {export.name}")
    if any(r["status"] == "fail" for r in report.rows):
        raise typer.Exit(3)
