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

Status per rule: ``pass`` or ``fail`` (a rule whose range is missing fails, saying so).
"""

from __future__ import annotations

import html
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nsys_parsers.errors import BadOption, NsysMineError, closest_names
from reports.common import Report
from reports.render import View, human_ns, shorten_name

CHECK_COLUMNS = ["rule", "range", "status", "observed", "expected", "message"]
CHECK_VIEW = View(columns=["status", "rule", "observed", "expected", "message"],
                  drop=("expected", "observed"), noun="rules")
ASSERTIONS = ("min_instances", "dominant_category", "dominant_kernel", "share",
              "max_gpu_ns_per_instance", "max_cpu_ns_per_instance", "max_regression_pct")
KEYS = {"name", "range", "min_instances", "dominant_category", "dominant_kernel", "category",
        "min_share_pct", "max_share_pct", "max_gpu_ns_per_instance", "max_cpu_ns_per_instance",
        "max_regression_pct"}


class BadRules(BadOption):
    """The rules file is missing, not TOML, or a rule is invalid."""


@dataclass
class Rule:
    index: int  # 1-based, in file order
    assertion: str  # one of ASSERTIONS
    range: str | None
    name: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass
class Outcome:
    rule: Rule
    status: str  # pass | fail
    observed: Any
    expected: str
    message: str


def load_check_rules(path: str | os.PathLike[str]) -> list[Rule]:
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
    return [_validate(p, i, t, CATEGORIES) for i, t in enumerate(tables, start=1)]


def _validate(p: Path, i: int, t: Any, categories: tuple[str, ...]) -> Rule:
    where = f"{p}: rule {i}"
    if not isinstance(t, dict):
        raise BadRules(f"{where}: must be a table of keys ([[rule]]).")
    for key in t:
        if key not in KEYS:
            close = closest_names(key, sorted(KEYS), n=1)
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
    present = [a for a in ASSERTIONS if a in t] + (
        ["share"] if any(k in t for k in ("category", "min_share_pct", "max_share_pct")) else [])
    if not present:
        raise BadRules(f"{where}: no assertion; give one of min_instances, dominant_category, "
                       f"dominant_kernel, category with min_share_pct/max_share_pct, "
                       f"max_gpu_ns_per_instance, max_cpu_ns_per_instance, max_regression_pct.")
    if len(present) > 1:
        raise BadRules(f"{where}: one assertion per rule, found {', '.join(present)}; split it "
                       f"into one rule each (so that each failure names exactly one thing).")
    kind = present[0]
    values: dict[str, Any] = {}
    if kind == "min_instances":
        values["min"] = need("min_instances", (int,), "a whole number")
        if values["min"] < 0:
            raise BadRules(f"{where}: min_instances must be >= 0.")
        if "range" not in t:
            raise BadRules(f"{where}: min_instances needs a range.")
    elif kind == "dominant_category":
        cat = need("dominant_category", (str,), "a category name")
        if cat not in categories:
            raise BadRules(f"{where}: unknown category {cat!r} in dominant_category; use one "
                           f"of {', '.join(categories)}.")
        values["category"] = cat
    elif kind == "dominant_kernel":
        pattern = need("dominant_kernel", (str,), "a regular expression")
        try:
            values["regex"] = re.compile(pattern)
        except re.error as exc:
            raise BadRules(f"{where}: dominant_kernel {pattern!r} is not a valid regular "
                           f"expression ({exc}).") from None
    elif kind == "share":
        if "category" not in t:
            raise BadRules(f"{where}: min_share_pct/max_share_pct need a category.")
        cat = need("category", (str,), "a category name")
        if cat not in categories:
            raise BadRules(f"{where}: unknown category {cat!r}; use one of "
                           f"{', '.join(categories)}.")
        values["category"] = cat
        for key in ("min_share_pct", "max_share_pct"):
            if key in t:
                v = need(key, (int, float), "a number of percent")
                if not 0 <= v <= 100:
                    raise BadRules(f"{where}: {key} must be between 0 and 100, not {v}.")
                values[key] = float(v)
        if not ({"min_share_pct", "max_share_pct"} & set(values)):
            raise BadRules(f"{where}: category {cat!r} needs min_share_pct and/or "
                           f"max_share_pct.")
    else:
        v = need(kind, (int, float), "a positive number")
        if not (v > 0 and math.isfinite(v)):
            raise BadRules(f"{where}: {kind} must be a positive number, not {v}.")
        values["limit"] = float(v)
    rng = t.get("range")
    return Rule(index=i, assertion=kind, range=rng, name=t.get("name") or _describe(kind, rng,
                                                                                   values),
                values=values)


def _describe(kind: str, rng: str | None, v: dict[str, Any]) -> str:
    where = rng if rng is not None else "whole export"
    if kind == "min_instances":
        return f"{where}: at least {v['min']} instances"
    if kind == "dominant_category":
        return f"{where}: dominant kernel is {v['category']}"
    if kind == "dominant_kernel":
        return f"{where}: dominant kernel matches /{v['regex'].pattern}/"
    if kind == "share":
        bounds = " and ".join(f"{'>=' if k.startswith('min') else '<='} {v[k]:g}%"
                              for k in ("min_share_pct", "max_share_pct") if k in v)
        return f"{where}: {v['category']} share {bounds}"
    if kind == "max_regression_pct":
        return f"{where}: no regression over {v['limit']:g}%"
    unit = "GPU" if "gpu" in kind else "CPU"
    return f"{where}: {unit} time per instance <= {human_ns(v['limit'])}"


def run_checks(analysis: Any, rules: list[Rule], baseline: Any = None, *,
               alpha: float = 0.05) -> Report:
    """Evaluate every rule (in file order); one row per rule."""
    if any(r.assertion == "max_regression_pct" for r in rules) and baseline is None:
        first = next(r for r in rules if r.assertion == "max_regression_pct")
        raise BadRules(f"rule {first.index} ({first.name}) needs a baseline: pass --baseline "
                       f"BASE.sqlite (e.g. the export of main's last run).")
    outcomes = [_evaluate(analysis, r, baseline, alpha) for r in rules]
    rows = [{"rule": o.rule.name, "range": o.rule.range, "status": o.status,
             "observed": o.observed, "expected": o.expected, "message": o.message}
            for o in outcomes]
    failed = sum(o.status == "fail" for o in outcomes)
    notes = [f"{len(rules) - failed} of {len(rules)} rules pass"
             + (f"; {failed} fail" if failed else "")]
    notes += analysis.merge_notes()  # what the names mean, when operator calls were grouped
    return Report(rows=rows, columns=CHECK_COLUMNS, notes=notes,
                  sentences=[f"{r['status'].upper()}: {r['rule']}: {r['message']}"
                             for r in rows])


def _evaluate(a: Any, rule: Rule, baseline: Any, alpha: float) -> Outcome:
    v = rule.values
    try:
        if rule.assertion == "min_instances":
            n = int(a.instances_of(rule.range).size)
            return _outcome(rule, n >= v["min"], n, f">= {v['min']}",
                            f"{n} instance(s) of {rule.range!r}")
        if rule.assertion in ("dominant_category", "dominant_kernel", "share"):
            row = _dominant_row(a, rule.range)
            if rule.assertion == "share":
                share = float((row.get("category_shares") or {}).get(v["category"], 0.0))
                ok = (share >= v.get("min_share_pct", -1)) and (
                    share <= v.get("max_share_pct", 101))
                expected = " and ".join(f"{'>=' if k.startswith('min') else '<='} {v[k]:g}%"
                                        for k in ("min_share_pct", "max_share_pct") if k in v)
                return _outcome(rule, ok, share, expected,
                                f"{v['category']} is {share:g}% of the GPU time")
            if row.get("kernel") is None:
                return _outcome(rule, False, None, _expected(rule), "no kernels attributed")
            kernel = shorten_name(row["kernel"], 60)
            if rule.assertion == "dominant_category":
                return _outcome(rule, row["category"] == v["category"], row["category"],
                                v["category"], f"dominant kernel {kernel} "
                                f"({row['category']}, {row['share_pct']:g}%)")
            found = bool(v["regex"].search(row["kernel"]))
            return _outcome(rule, found, row["kernel"], f"/{v['regex'].pattern}/",
                            f"dominant kernel {kernel} ({row['share_pct']:g}%)")
        if rule.assertion == "max_gpu_ns_per_instance":
            per = _gpu_per_instance(a, rule.range)
            return _outcome(rule, per <= v["limit"], per, f"<= {v['limit']:g}",
                            f"{human_ns(per)} of GPU time per instance")
        if rule.assertion == "max_cpu_ns_per_instance":
            if rule.range is None:
                raise BadOption(f"rule {rule.index}: max_cpu_ns_per_instance needs a range.")
            cpu = a.instance_cpu_ns(rule.range)
            per = float(cpu.mean()) if cpu.size else 0.0
            return _outcome(rule, per <= v["limit"], per, f"<= {v['limit']:g}",
                            f"{human_ns(per)} of CPU time per instance")
        return _regression(a, rule, baseline, alpha)
    except NsysMineError as exc:  # a missing range or table: the rule fails, saying why
        return Outcome(rule, "fail", None, _expected(rule), str(exc))


def _expected(rule: Rule) -> str:
    return rule.name.split(": ", 1)[-1]


def _outcome(rule: Rule, ok: bool, observed: Any, expected: str, message: str) -> Outcome:
    return Outcome(rule, "pass" if ok else "fail", observed, expected, message)


def _dominant_row(a: Any, rng: str | None) -> dict[str, Any]:
    report = a.dominant(range_names=[rng] if rng is not None else None)
    return report.rows[1] if rng is not None else report.rows[0]


def _gpu_per_instance(a: Any, rng: str | None) -> float:
    k = a.activity.kernels
    if k is None:
        a.export.require("CUPTI_ACTIVITY_KIND_KERNEL", "GPU time per instance")
    if rng is None:
        return float(k.duration.sum())
    per = a.instance_gpu_ns(rng, "all")
    return float(per.mean()) if per.size else 0.0


def _regression(a: Any, rule: Rule, baseline: Any, alpha: float) -> Outcome:
    from reports.stats import judge

    gpu = a.activity.kernels is not None and len(a.activity.kernels)
    if rule.range is None:
        if not gpu:
            raise BadOption(f"rule {rule.index}: max_regression_pct on the whole export needs "
                            f"CUDA kernels; give a range.")
        b, c = baseline.activity.kernels.duration, a.activity.kernels.duration
        bv, cv = float(b.sum()), float(c.sum())
    else:
        if gpu:
            b, c = baseline.instance_gpu_ns(rule.range, "all"), a.instance_gpu_ns(rule.range,
                                                                                  "all")
        else:
            b, c = baseline.instance_cpu_ns(rule.range), a.instance_cpu_ns(rule.range)
        bv, cv = float(b.mean()) if b.size else 0.0, float(c.mean()) if c.size else 0.0
        if gpu:  # as diff: instances without kernels are no samples of the noise test
            b, c = b[b > 0], c[c > 0]
    v = judge(b, c, base_value=bv, cand_value=cv, threshold_pct=rule.values["limit"],
              alpha=alpha)
    change = f"{v.change_pct:+.1f}%" if v.change_pct is not None else "new"
    return Outcome(rule, "fail" if v.verdict == "regression" else "pass",
                   round(v.change_pct, 1) if v.change_pct is not None else None,
                   f"<= +{rule.values['limit']:g}%",
                   f"{change} vs baseline: {v.verdict} ({v.reason})")


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
