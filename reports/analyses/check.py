"""``check EXPORT --rules rules.toml [--baseline BASE]``: assertions on an export, for CI.

A rules file is TOML, one ``[[rule]]`` table per rule, validated up front (an error names the
rule's number and key). Each rule has at most a ``name``, a ``range`` (omit it for the whole
export) and exactly ONE assertion:

    min_instances = 3                       the range has at least this many instances
    dominant_category = "gemm"              the range's dominant kernel is of this category
    dominant_kernel = "regex"               ... has a name this regex finds (re.search)
    category = "gemm"                       this category's share of the range's GPU time
      min_share_pct = 40 / max_share_pct = 90   (either or both: one assertion)
    max_gpu_ns_per_instance = 5e6           GPU time of the kernels launched inside, per instance
    max_cpu_ns_per_instance = 5e6           CPU (NVTX) time per instance
    max_regression_pct = 10                 vs --baseline: diff's noise-aware verdict on the
                                            GPU (or CPU) time per instance; fails only on a
                                            significant regression past this many percent
    max_idle_pct = 20                       GPU idle inside the range's instances (gpus
                                            --within), on the worst (process, device)
    max_exposed_comm_pct = 30               communication no compute hides, worst device
    max_late_ms = 0.5                       the worst rank's median lateness at collectives
                                            (``ranks`` on the export's GPU processes)
    max_wait_pct = 10                       the worst rank's wait for the others, % of span

Status per rule: ``pass`` or ``fail`` (a rule whose range is missing fails, saying so).
"""

from __future__ import annotations

import html
import math
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from nsys_parsers.errors import BadOption, NsysMineError, closest_names
from reports.pipeline.analysis import VERDICTS_PANEL, Analysis, Param
from reports.pipeline.options import ALPHA, AnalysisOptions
from reports.pipeline.report import Report
from reports.pipeline.rules import SHARE_KEYS, CheckKey, CheckRule, RuleOutcome
from reports.pipeline.session import Session
from reports.render import View

WHOLE = "whole export"  # what a rule without a range is about, in its name
CHECK_COLUMNS = ["rule", "range", "status", "observed", "expected", "message"]
CHECK_VIEW = View(columns=["status", "rule", "observed", "expected", "message"],
                  drop=("expected", "observed"), noun="rules")


class BadRules(BadOption):
    """The rules file is missing, not TOML, or a rule is invalid."""


def check_keys() -> list[CheckKey]:
    """Every rule key the analyses declare, in check's order."""
    from reports.pipeline.registry import all_analyses

    return sorted((k for a in all_analyses() for k in a.checks), key=lambda k: k.order)


def load_check_rules(path: str | os.PathLike[str]) -> list[CheckRule]:
    """Parse and validate a rules file; BadRules names the rule and the key at fault."""
    from reports.categories import CATEGORIES

    try:
        import tomllib
    except ModuleNotFoundError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadRules(f"{p}: no such rules file.") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise BadRules(f"{p}: cannot read the rules file ({exc}).") from None
    except tomllib.TOMLDecodeError as exc:
        raise BadRules(f"{p}: not valid TOML ({exc}).") from None
    unknown_top = sorted(set(data) - {"rule"})
    if unknown_top:
        raise BadRules(f"{p}: unknown top-level key(s) {', '.join(unknown_top)}; write each "
                       f"rule as a [[rule]] table.")
    tables = data.get("rule", [])
    if not isinstance(tables, list) or not tables:
        raise BadRules(f"{p}: no rules; write each rule as a [[rule]] table (see docs/CI.md).")
    keys = {k.key: k for k in check_keys()}
    return [_validate(p, i, t, keys, CATEGORIES) for i, t in enumerate(tables, start=1)]


def _validate(p: Path, i: int, t: Any, keys: dict[str, CheckKey],
              categories: tuple[str, ...]) -> CheckRule:
    where = f"{p}: rule {i}"
    if not isinstance(t, dict):
        raise BadRules(f"{where}: must be a table of keys ([[rule]]).")
    allowed = {"name", "range", *keys, *SHARE_KEYS}
    for key in t:
        if key not in allowed:
            close = closest_names(key, sorted(allowed), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise BadRules(f"{where}: unknown key {key!r}{hint}.")

    def need(key: str, kinds: tuple[type, ...], what: str) -> Any:
        value = t[key]
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise BadRules(f"{where}: {key} must be {what}, not {value!r}.")
        return value

    for key in ("name", "range"):
        if key in t:
            need(key, (str,), "a string")
    present = [k for k in keys.values() if k.key in t or (
        k.kind == "share" and any(s in t for s in SHARE_KEYS))]
    if not present:
        listed = ", ".join(f"{k.key} with {'/'.join(SHARE_KEYS)}" if k.kind == "share"
                           else k.key for k in keys.values())
        raise BadRules(f"{where}: no assertion; give one of {listed}.")
    if len(present) > 1:
        found = ", ".join("share" if k.kind == "share" else k.key for k in present)
        raise BadRules(f"{where}: one assertion per rule, found {found}; split it into one "
                       f"rule each (so that each failure names exactly one thing).")
    spec = present[0]
    values: dict[str, Any] = {}
    if spec.kind == "count":
        values["min"] = need(spec.key, (int,), "a whole number")
        if values["min"] < 0:
            raise BadRules(f"{where}: {spec.key} must be >= 0.")
    elif spec.kind == "category":
        cat = need(spec.key, (str,), "a category name")
        if cat not in categories:
            raise BadRules(f"{where}: unknown category {cat!r} in {spec.key}; use one "
                           f"of {', '.join(categories)}.")
        values["category"] = cat
    elif spec.kind == "regex":
        pattern = need(spec.key, (str,), "a regular expression")
        try:
            values["regex"] = re.compile(pattern)
        except re.error as exc:
            raise BadRules(f"{where}: {spec.key} {pattern!r} is not a valid regular "
                           f"expression ({exc}).") from None
    elif spec.kind == "share":
        if spec.key not in t:
            raise BadRules(f"{where}: {'/'.join(SHARE_KEYS)} need a {spec.key}.")
        cat = need(spec.key, (str,), "a category name")
        if cat not in categories:
            raise BadRules(f"{where}: unknown category {cat!r}; use one of "
                           f"{', '.join(categories)}.")
        values["category"] = cat
        for key in SHARE_KEYS:
            if key in t:
                v = need(key, (int, float), "a number of percent")
                if not 0 <= v <= 100:
                    raise BadRules(f"{where}: {key} must be between 0 and 100, not {v}.")
                values[key] = float(v)
        if not (set(SHARE_KEYS) & set(values)):
            raise BadRules(f"{where}: category {cat!r} needs {' and/or '.join(SHARE_KEYS)}.")
    else:
        v = need(spec.key, (int, float), "a positive number")
        if not (v > 0 and math.isfinite(v)):
            raise BadRules(f"{where}: {spec.key} must be a positive number, not {v}.")
        values["limit"] = float(v)
    if spec.needs_range and spec.kind == "count" and "range" not in t:
        raise BadRules(f"{where}: {spec.key} needs a range.")
    rng = t.get("range")
    return CheckRule(index=i, assertion=spec.key, range=rng,
                name=t.get("name") or spec.describe(rng if rng is not None else WHOLE,
                                                    values),
                values=values)


NEEDS = ("kernels", "launches", "ranges")


def run_checks(session: Session, rules: list[CheckRule], baseline: Session | None = None, *,
               alpha: float = 0.05) -> Report:
    """Evaluate every rule (in file order) on one export; one row per rule."""
    keys = {k.key: k for k in check_keys()}
    needing = [r for r in rules if keys[r.assertion].needs_baseline]
    if needing and baseline is None:
        first = needing[0]
        raise BadRules(f"rule {first.index} ({first.name}) needs a baseline: pass --baseline "
                       f"BASE.sqlite (e.g. the export of main's last run).")
    report = _judged(rules, lambda rule: keys[rule.assertion].evaluate(session, rule, baseline,
                                                                       alpha))
    report.notes += session.operator_notes()  # what the names mean, when calls were grouped
    return report


def run_checks_on_exports(paths: list[Path], options: AnalysisOptions,
                          rules: list[CheckRule]) -> Report:
    """Evaluate every rule on a job's exports together (a folder of rank exports): the rules
    about the ranks (``CheckKey.evaluate_exports``); the others fail, saying they judge one
    export."""
    keys = {k.key: k for k in check_keys()}
    together = sorted(k.key for k in keys.values() if k.evaluate_exports is not None)
    # a rule without a range is about the whole job here, not one "whole export"
    rules = [replace(r, name=r.name.removeprefix(f"{WHOLE}: ")) if r.range is None else r
             for r in rules]

    def judge(rule: CheckRule) -> RuleOutcome:
        spec = keys[rule.assertion]
        if spec.evaluate_exports is None:
            return RuleOutcome(False, None, rule.name.split(": ", 1)[-1],
                               f"{rule.assertion} judges one export: give check one export "
                               f"for it (several exports take {', '.join(together)})")
        return spec.evaluate_exports(paths, options, rule)
    return _judged(rules, judge)


def _judged(rules: list[CheckRule], judge: Callable[[CheckRule], RuleOutcome]) -> Report:
    """One row per rule with its status (a rule whose range or table is missing fails,
    saying why), and the tally."""
    rows = []
    for rule in rules:
        try:
            v = judge(rule)
            status, observed, expected, message = ("pass" if v.ok else "fail", v.observed,
                                                   v.expected, v.message)
        except NsysMineError as exc:  # a missing range or table: the rule fails, saying why
            status, observed, expected, message = ("fail", None,
                                                   rule.name.split(": ", 1)[-1], str(exc))
        rows.append({"rule": rule.name, "range": rule.range, "status": status,
                     "observed": observed, "expected": expected, "message": message})
    failed = sum(r["status"] == "fail" for r in rows)
    notes = [f"{len(rules) - failed} of {len(rules)} rules pass"
             + (f"; {failed} fail" if failed else "")]
    return Report(rows=rows, columns=CHECK_COLUMNS, notes=notes,
                  sentences=[f"{r['status'].upper()}: {r['rule']}: {r['message']}"
                             for r in rows])


def check(s: Session, rules: list[CheckRule], baseline: Session | None = None,
          junit: Path | None = None, alpha: float = 0.05) -> Report:
    """``check EXPORT --rules FILE [--baseline BASE]``: every rule (as ``validate`` read them:
    ``load_check_rules``) on one export (the baseline opened with the same options)."""
    report = run_checks(s, rules, baseline, alpha=alpha)
    report.title = f"check {s.export.source.name}"
    return report


def check_job(paths: list[Path], options: AnalysisOptions, rules: list[CheckRule],
              baseline: Path | None = None, junit: Path | None = None,
              alpha: float = 0.05) -> Report:
    """``check DIR --rules FILE``: a folder of rank exports, or several exports: the rules
    about a job's ranks on all of them (``run_checks_on_exports``)."""
    report = run_checks_on_exports(paths, options, rules)
    report.title = f"check {paths[0].name if len(paths) == 1 else f'{len(paths)} exports'}"
    return report


def _ci_outputs(report: Report, params: dict[str, Any], source: Path) -> None:
    """JUnit XML (--junit) and the GitHub step summary ($GITHUB_STEP_SUMMARY)."""
    if params.get("junit") is not None:
        Path(params["junit"]).write_text(junit_xml(report), encoding="utf-8")
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(step_summary(report, str(source)))


ANALYSIS = Analysis(
    name="check", bytes_per_row=5,
    help="""CI gate: assert rules on an export; exit 0 (all pass), 3 (a rule failed), 1 (error).

    Rules: range instances, dominant kernel or category, category share, GPU/CPU time per
    instance, regression against a baseline (noise-aware, as diff), GPU idle and exposed
    communication, and across ranks (max_late_ms, max_wait_pct: also on a folder of rank
    exports, or several exports, which take only those). With $GITHUB_STEP_SUMMARY set, a
    markdown summary is appended to it.

    Examples: `nsys-mine check run.sqlite --rules perf.toml` ·
    `nsys-mine check pr.sqlite --rules perf.toml --baseline main.sqlite --junit check.xml` ·
    `nsys-mine check ranks/ --rules ranks.toml`
    """,
    run=check, run_job=check_job, inputs="job", needs=NEEDS,
    options=("within", "merge_op_ids", "name_kind", "depth", "match", "nsys",
             "graph_attribution"),
    defaults={"merge_op_ids": "auto"},
    params=(
        Param("rules", ("--rules",), "TOML rules file ([[rule]] tables; see docs/CI.md).",
              type=Path, metavar="FILE", panel=VERDICTS_PANEL, required=True),
        Param("baseline", ("--baseline",), "Baseline export for max_regression_pct rules "
              "(e.g. main's last run).", type=Path, metavar="EXPORT", panel=VERDICTS_PANEL,
              export=True),
        Param("junit", ("--junit",), "Also write JUnit XML (one testcase per rule) for CI "
              "test reporters.", type=Path, metavar="FILE", panel=VERDICTS_PANEL, writes=True),
        ALPHA,
    ),
    validate=lambda params, sources: {**params, "rules": load_check_rules(params["rules"])},
    columns=CHECK_COLUMNS, view=CHECK_VIEW, order=120, default_top=0,
    exit_code=lambda report, params: 3 if any(r["status"] == "fail"
                                              for r in report.rows) else 0,
    outputs=_ci_outputs,
)


# -- CI outputs --------------------------------------------------------------------------

def junit_xml(report: Report, suite: str = "nsys-mine check") -> str:
    """JUnit XML: one testcase per rule, a failure element with the message."""
    failures = sum(r["status"] == "fail" for r in report.rows)
    out = ['<?xml version="1.0" encoding="UTF-8"?>',
           f'<testsuites name="{_x(suite)}" tests="{len(report.rows)}" failures="{failures}">',
           f'  <testsuite name="{_x(suite)}" tests="{len(report.rows)}" '
           f'failures="{failures}" errors="0" skipped="0">']
    for r in report.rows:
        case = (f'    <testcase classname="{_x("nsys-mine.check." + (r["range"] or "export"))}"'
                f' name="{_x(r["rule"])}"')
        if r["status"] == "fail":
            out += [case + ">", f'      <failure message="{_x(r["message"])}" type="fail">'
                    f'{_x("observed: " + str(r["observed"]) + "; expected: " + r["expected"])}'
                    f'</failure>', "    </testcase>"]
        else:
            out.append(case + " />")
    out += ["  </testsuite>", "</testsuites>"]
    return "\n".join(out) + "\n"


def _x(text: Any) -> str:
    """XML-escaped text (attributes and content), control characters dropped."""
    cleaned = "".join(ch for ch in str(text) if ch in "\t\n\r" or ord(ch) >= 32)
    return html.escape(cleaned, quote=True)


def step_summary(report: Report, export: str) -> str:
    """A short markdown summary for $GITHUB_STEP_SUMMARY: the verdict, failed rules first.
    Names are escaped so that a `|` or a backtick in a range name cannot break the table."""
    rows = sorted(report.rows, key=lambda r: r["status"] != "fail")
    failed = sum(r["status"] == "fail" for r in rows)
    verdict = (f"**FAIL**: {failed} of {len(rows)} rules failed" if failed
               else f"**PASS**: all {len(rows)} rules passed")
    lines = [f"### nsys-mine check: {_md(Path(export).name)}", "", verdict, "",
             "| status | rule | observed | expected |", "| --- | --- | --- | --- |"]
    for r in rows:
        status = "❌ fail" if r["status"] == "fail" else "✅ pass"
        lines.append(f"| {status} | {_md(r['rule'])} | {_md(_fmt(r['observed']))} | "
                     f"{_md(r['expected'])} |")
    return "\n".join(lines) + "\n\n"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.1f}"
    return "" if value is None else str(value)


def _md(text: Any) -> str:
    """Text safe inside a markdown table cell: no pipe, backtick, newline or HTML."""
    s = html.escape(str(text), quote=False)
    s = s.replace("\\", "\\\\").replace("|", "\\|").replace("`", "\\`")
    return " ".join(s.split())
