"""The rules of ``nsys-mine check``, as the analyses declare them: a rule key an analysis
accepts (``CheckKey``: how its value is validated and how an export is judged by it), one rule
of a rules file (``CheckRule``) and how an export fares against it (``RuleOutcome``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

# The keys of a category-share rule (either or both).
SHARE_KEYS = ("min_share_pct", "max_share_pct")


@dataclass
class CheckRule:
    """One rule of a ``check`` rules file: its assertion (a ``CheckKey``'s key), the range it
    is about (None: the whole export), its name and its validated values."""

    index: int  # 1-based, in file order
    assertion: str
    range: str | None
    name: str
    values: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RuleOutcome:
    """How an export fares against one rule."""

    ok: bool
    observed: Any
    expected: str
    message: str


@dataclass(frozen=True)
class CheckKey:
    """A rule key ``check`` accepts (``dominant_category = "gemm"``): how its value is
    validated (``kind``: count, category, regex, share or limit), whether the rule needs a
    range or a baseline, how it is described when it has no name (``describe(range,
    values)``) and how an export is judged by it (``evaluate(session, rule, baseline,
    alpha) -> RuleOutcome``). ``order``: its place in check's messages."""

    key: str
    kind: str
    evaluate: Callable[..., RuleOutcome]
    describe: Callable[[str, dict[str, Any]], str]
    order: int = 100
    needs_range: bool = False
    needs_baseline: bool = False
    # a rule about a job's exports together (the ranks of a multi-GPU run):
    # evaluate_exports(paths, options, rule) -> RuleOutcome; None: about one export only
    evaluate_exports: Callable[..., RuleOutcome] | None = None


def share_bounds(values: dict[str, Any]) -> str:
    """``>= 40% and <= 90%``: the bounds of a share rule."""
    return " and ".join(f"{'>=' if k.startswith('min') else '<='} {values[k]:g}%"
                        for k in SHARE_KEYS if k in values)
