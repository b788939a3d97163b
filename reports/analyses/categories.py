"""``categories``: the kernel-category rule table (``reports.categories``), user rules first."""

from __future__ import annotations

from pathlib import Path

from reports.categories import CATEGORY_VIEW, CategoryRule, load_rules, rules_table
from reports.pipeline.analysis import Analysis
from reports.pipeline.options import option
from reports.pipeline.report import Report


def rules_report(rules: list[CategoryRule]) -> Report:
    """The rule table as a Report (rows of ``rules_table``)."""
    return Report(rows=rules_table(rules), columns=list(CATEGORY_VIEW.columns))


def _run(rules: Path | None) -> Report:
    return rules_report(load_rules(rules))


ANALYSIS = Analysis(
    name="categories",
    help="""The kernel-category rule table (first match wins; rules of --rules come first).

    Examples: `nsys-mine categories` · `nsys-mine categories --rules my_rules.toml`
    """,
    run=_run, inputs="none", options=(), columns=list(CATEGORY_VIEW.columns),
    view=CATEGORY_VIEW, title="Kernel category rules (first match wins)", order=70,
    default_top=0,
    params=(option("rules"),),
)
