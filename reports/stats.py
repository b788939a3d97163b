"""The noise model behind ``diff`` and ``check``'s regression rules.

Two samples of durations (per range instance, or per kernel call) are compared with the
Mann-Whitney U test (two-sided; normal approximation with tie correction and continuity
correction), as asv does for benchmark results: it needs no assumption about the shape of the
distributions, and one outlier cannot make a change significant. A row is a regression only
when its change is past the threshold AND the test rejects "same distribution" at ``alpha``.
With fewer than ``MIN_SAMPLES`` values on a side there is nothing to test: such a row is
``inconclusive`` unless its change is at least ``FAR_FACTOR`` times the threshold (20% with the
default 5%), which no plausible noise explains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MIN_SAMPLES = 3
FAR_FACTOR = 4.0
VERDICTS = ("regression", "improvement", "neutral", "inconclusive")


def mann_whitney_p(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie- and
    continuity-corrected). 1.0 when either sample is empty or every value is equal."""
    a = np.asarray(a, dtype=float)
    b = np.asarray(b, dtype=float)
    n1, n2 = a.size, b.size
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate([a, b])
    order = np.argsort(both, kind="mergesort")
    sorted_vals = both[order]
    ranks = np.empty(both.size)
    # average ranks for ties
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], sorted_vals.size]
    avg = (starts + ends - 1) / 2.0 + 1.0
    ranks[order] = np.repeat(avg, ends - starts)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    tie_sizes = (ends - starts).astype(float)
    tie_term = float((tie_sizes ** 3 - tie_sizes).sum())
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1))) if n > 1 else 0.0
    if var <= 0:
        return 1.0
    mean = n1 * n2 / 2.0
    z = (abs(u1 - mean) - 0.5) / math.sqrt(var)
    if z <= 0:
        return 1.0
    return float(min(1.0, math.erfc(z / math.sqrt(2.0))))


@dataclass(frozen=True)
class Verdict:
    verdict: str
    change_pct: float | None
    p_value: float | None
    reason: str


def judge(base: np.ndarray, cand: np.ndarray, *, base_value: float, cand_value: float,
          threshold_pct: float, alpha: float) -> Verdict:
    """The verdict on one row: ``base_value``/``cand_value`` are the numbers compared (time
    per instance), ``base``/``cand`` the samples the noise test runs on. Higher is slower."""
    if base_value <= 0 and cand_value <= 0:
        return Verdict("neutral", 0.0, None, "no time on either side")
    if base_value <= 0:
        return Verdict("regression" if cand_value > 0 else "neutral", None, None,
                       "new in the candidate")
    change = 100.0 * (cand_value - base_value) / base_value
    direction = "regression" if change > 0 else "improvement"
    if abs(change) < threshold_pct:
        return Verdict("neutral", change, None, f"within the {threshold_pct:g}% threshold")
    if min(len(base), len(cand)) < MIN_SAMPLES:
        if abs(change) >= FAR_FACTOR * threshold_pct:
            return Verdict(direction, change, None,
                           f"too few samples to test, but {abs(change):.1f}% is past "
                           f"{FAR_FACTOR:g}x the threshold")
        return Verdict("inconclusive", change, None,
                       f"fewer than {MIN_SAMPLES} samples on a side: cannot tell from noise")
    p = mann_whitney_p(base, cand)
    if p < alpha:
        return Verdict(direction, change, p, f"Mann-Whitney p = {p:.2g} < {alpha:g}")
    return Verdict("inconclusive", change, p,
                   f"past the threshold, but Mann-Whitney p = {p:.2g} >= {alpha:g}")
