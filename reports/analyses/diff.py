"""``diff BASE CAND``: run-to-run changes of the same workload, with a verdict per row.

Rows (all times in ns per instance of the thing named):

- ``overall``: the *scope*, ``step`` when both exports have it (this project's model), else
  the whole export; time per instance (GPU time of the kernels launched inside it, or CPU time
  without kernels; the whole export: all kernel time).
- ``range``: every range name in both exports (as shown by ``within``/``depth``/``match``),
  the GPU time of the kernels whose innermost range it is, per instance: a range's own time, so
  a change inside ``forward`` is not counted again in ``step`` (CPU time without kernels).
  Instances that launched no kernel count in the time per instance but are no samples of the
  noise test (they say nothing about how fast kernels ran; trimmed captures have many).
- ``kernel``: every kernel family (``compare.kernel_family``): its GPU time per scope instance.
- ``gpu`` (with a scope range): ``idle_pct``, how much of the scope's instances their devices
  are idle, and ``exposed_comm_pct``, how much of their communication no compute hides
  (``gpus``); in ``base_pct``/``cand_pct``, tested on each (instance, device) window.

Verdicts: ``reports.stats.judge`` on samples: range and overall rows on per-instance values;
kernel rows on per-scope-instance totals when the scope has enough instances, else on the
durations of the calls. ``regression`` needs the change past ``threshold_pct`` AND a
Mann-Whitney p-value below ``alpha``; see reports/stats.py for too few samples.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import numpy as np

from nsys_parsers.arrays import ROWS, let_go, let_go_fields, runs_by_code
from nsys_parsers.cache import joined
from nsys_parsers.errors import BadOption, NsysMineError
from nvtx_model.nvtx_ranges import STEP
from reports.families import kernel_family
from reports.pipeline.analysis import VERDICTS_PANEL, Analysis, Param
from reports.pipeline.options import ALPHA
from reports.pipeline.report import Report, r1
from reports.pipeline.rules import CheckKey, CheckRule, RuleOutcome
from reports.pipeline.session import Session
from reports.render import View
from reports.stats import MIN_SAMPLES, VERDICTS, judge

DIFF_COLUMNS = [
    "level", "key", "base_per_instance_ns", "cand_per_instance_ns", "change_pct", "p_value",
    "verdict", "base_instances", "cand_instances", "reason", "base_pct", "cand_pct",
]
DIFF_VIEW = View(
    columns=["level", "verdict", "change_pct", "base_per_instance_ns", "cand_per_instance_ns",
             "base_pct", "cand_pct", "p_value", "base_instances", "cand_instances", "key"],
    drop=("reason", ("base_instances", "cand_instances"), "p_value"),
    noun="rows", pinned=1, hide_if_zero=("base_pct", "cand_pct"),
    headers={"base_per_instance_ns": "base per inst", "cand_per_instance_ns": "cand per inst",
             "base_instances": "base inst", "cand_instances": "cand inst"})
SEVERITY = {v: i for i, v in enumerate(VERDICTS)}  # regression first


class NotComparable(NsysMineError):
    """diff --strict: the two exports differ in GPU, workload config or kernels."""


def comparability(base: Any, cand: Any, min_common_pct: float = 50.0) -> list[str]:
    """What differs between two exports that should be runs of one workload."""
    problems = []
    gb, gc = Counter(base.export.meta.gpus), Counter(cand.export.meta.gpus)
    if gb and gc and gb != gc:
        problems.append(f"GPUs differ: {_gpus(gb)} vs {_gpus(gc)}")
    cb, cc = _sidecar_config(base.export.source), _sidecar_config(cand.export.source)
    if cb is not None and cc is not None:
        keys = sorted(k for k in set(cb) | set(cc) if cb.get(k) != cc.get(k)
                      and k not in ("device",))
        if keys:
            problems.append("workload configs differ: " + ", ".join(
                f"{k} {cb.get(k)} vs {cc.get(k)}" for k in keys))
    kb, kc = base.kernels, cand.kernels
    if kb is not None and kc is not None and len(kb) and len(kc):
        fb, fc = _family_time(kb), _family_time(kc)
        common = set(fb) & set(fc)
        for label, fam in (("base", fb), ("candidate", fc)):
            total = sum(fam.values())
            pct = 100.0 * sum(fam[f] for f in common) / total if total else 100.0
            if pct < min_common_pct:
                problems.append(f"only {pct:.0f}% of the {label}'s kernel time is in kernels "
                                f"the other export also has")
    elif (kb is None or not len(kb)) != (kc is None or not len(kc)):
        problems.append("one export has CUDA kernels, the other none")
    return problems


def _gpus(c: Counter) -> str:
    return ", ".join(f"{n} x {g}" if n > 1 else g for g, n in c.items())


def _sidecar_config(source: Path) -> dict[str, Any] | None:
    """The workload config of an export made by ``nsys-mine profile`` (NAME.json beside it)."""
    side = source.with_suffix(".json")
    try:
        data = json.loads(side.read_text())
    except (OSError, ValueError):
        return None
    cfg = data.get("config") if isinstance(data, dict) else None
    return cfg if isinstance(cfg, dict) else None


def _family_time(k: Any) -> dict[str, float]:
    totals = np.bincount(k.name_code, weights=k.duration, minlength=len(k.names))
    out: dict[str, float] = {}
    for i, name in enumerate(k.names):
        fam = kernel_family(name)
        out[fam] = out.get(fam, 0.0) + float(totals[i])
    return out


def _has_kernels(a: Any) -> bool:
    k = a.kernels
    return k is not None and len(k) > 0


def _has_range(a: Any, name: str) -> bool:
    return a.ranges is not None and a.names().index(name) is not None


def diff_report(base: Session, cand: Session, *, threshold_pct: float = 5.0, alpha: float = 0.05,
                scope: str | None = None, strict: bool = False) -> Report:
    """Rows of DIFF_COLUMNS (overall first, then ranges and kernels, regressions first)."""
    notes = []
    problems = comparability(base, cand)
    if problems:
        if strict:
            raise NotComparable("the exports are not comparable: " + "; ".join(problems)
                                + ". Compare runs of one workload on one machine, or drop "
                                  "--strict to diff anyway.")
        notes += [f"warning: {p}" for p in problems]
    gpu = _has_kernels(base) and _has_kernels(cand)
    if scope is None and _has_range(base, STEP) and _has_range(cand, STEP):
        scope = STEP
    verdict_row = _verdict_rows(threshold_pct, alpha)
    overall = _overall_row(base, cand, scope, gpu, verdict_row, notes)
    rows = [overall, *_range_rows(base, cand, gpu, verdict_row, notes)]
    if gpu and scope is not None:  # GPU utilization per scope instance (a range: per step)
        rows += _utilization_rows(base, cand, scope, verdict_row)
    if gpu:
        rows += _kernel_rows(base, cand, scope, verdict_row)
    head, rest = rows[:1], rows[1:]
    rest.sort(key=lambda r: (SEVERITY[r["verdict"]], -abs(r["change_pct"] or 0), r["level"],
                             r["key"]))
    counts = Counter(r["verdict"] for r in rest)
    tally = ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v])
    notes.append(f"overall: {overall['verdict']}; "
                 + (f"rows: {tally}" if tally else "no range or kernel in both exports")
                 + f" (threshold {threshold_pct:g}%, Mann-Whitney U at alpha {alpha:g}; "
                 f"docs/CI.md)")
    return Report(rows=head + rest, columns=DIFF_COLUMNS, notes=notes,
                  sentences=[_sentence(r) for r in head + rest])


VerdictRow = Callable[..., dict[str, Any]]


def _verdict_rows(threshold_pct: float, alpha: float) -> VerdictRow:
    """``row(level, key, base samples, cand samples, base value, cand value, base instances,
    cand instances)``: one row of DIFF_COLUMNS with the noise-aware verdict
    (``reports.stats.judge``)."""
    def verdict_row(level: str, key: str, b: np.ndarray, c: np.ndarray, bv: float,
                    cv: float, nb: int, nc: int) -> dict[str, Any]:
        v = judge(b, c, base_value=bv, cand_value=cv, threshold_pct=threshold_pct, alpha=alpha)
        return {"level": level, "key": key, "base_per_instance_ns": round(bv, 1),
                "cand_per_instance_ns": round(cv, 1),
                "change_pct": r1(v.change_pct) if v.change_pct is not None else None,
                "p_value": float(f"{v.p_value:.3g}") if v.p_value is not None else None,
                "verdict": v.verdict, "base_instances": nb, "cand_instances": nc,
                "reason": v.reason, "base_pct": None, "cand_pct": None}
    return verdict_row


def _overall_row(base: Session, cand: Session, scope: str | None, gpu: bool,
                 verdict_row: VerdictRow, notes: list[str]) -> dict[str, Any]:
    """The ``overall`` row: GPU (else CPU) time per instance of ``scope``, or all kernel
    time of each export; what it compared goes to ``notes``."""
    if scope is not None:
        if gpu:
            sb, sc = base.instance_gpu_ns(scope, "all"), cand.instance_gpu_ns(scope, "all")
            overall = verdict_row("overall", scope, sb[sb > 0], sc[sc > 0], _mean(sb),
                                  _mean(sc), sb.size, sc.size)
        else:
            sb, sc = base.instance_cpu_ns(scope), cand.instance_cpu_ns(scope)
            overall = verdict_row("overall", scope, sb, sc, _mean(sb), _mean(sc), sb.size,
                                  sc.size)
        notes.append(f"overall: {'GPU' if gpu else 'CPU'} time per {scope!r} instance "
                     f"({sb.size} vs {sc.size} instances).")
        return overall
    if gpu:
        kb, kc = base.kernels, cand.kernels
        assert kb is not None and kc is not None
        notes.append("overall: all kernel time of each export; tested on kernel durations.")
        return verdict_row("overall", "(whole export)", kb.duration, kc.duration,
                           float(kb.duration.sum()), float(kc.duration.sum()), 1, 1)
    raise NotComparable("neither export has CUDA kernels or a `step` range to compare: "
                        "pass --scope RANGE (a range both exports have).")


def _range_rows(base: Session, cand: Session, gpu: bool, verdict_row: VerdictRow,
                notes: list[str]) -> list[dict[str, Any]]:
    """A ``range`` row per range name both exports show: GPU (else CPU) time per instance."""
    if base.ranges is None or cand.ranges is None:
        return []
    rows = []
    nb, nc = base.names(), cand.names()
    for name in sorted(set(nb.names) & set(nc.names)):
        ib, ic = base.instances_of(name), cand.instances_of(name)
        if ib.size == 0 or ic.size == 0:  # filtered out
            continue
        if gpu:
            b, c = base.instance_gpu_ns(name), cand.instance_gpu_ns(name)
            # instances that launched no kernel have no GPU time to compare: they count in
            # the time per instance, not as samples of the noise test
            rows.append(verdict_row("range", name, b[b > 0], c[c > 0], _mean(b), _mean(c),
                                    b.size, c.size))
        else:
            b, c = base.instance_cpu_ns(name), cand.instance_cpu_ns(name)
            rows.append(verdict_row("range", name, b, c, _mean(b), _mean(c), b.size, c.size))
    only = len(set(nb.names) ^ set(nc.names))
    if only:
        notes.append(f"{only} range name(s) exist in one export only: not diffed.")
    return rows


def _utilization_rows(base: Any, cand: Any, scope: str, verdict_row: Any
                      ) -> list[dict[str, Any]]:
    """``gpu`` rows: the idle share of the scope's instances on their devices and the
    exposed share of their communication (``gpus``), tested on the (instance, device)
    windows. Percentages, in ``base_pct``/``cand_pct``."""
    from reports.gpu_time import instance_utilization

    ub, uc = instance_utilization(base, scope), instance_utilization(cand, scope)
    rows = []
    for key, b, c, bv, cv in (
            ("idle_pct", ub.idle_pct, uc.idle_pct, ub.idle_total_pct, uc.idle_total_pct),
            ("exposed_comm_pct", ub.exposed_comm_pct, uc.exposed_comm_pct,
             ub.exposed_total_pct, uc.exposed_total_pct)):
        if bv is None or cv is None:
            continue
        row = verdict_row("gpu", key, b, c, bv, cv, b.size, c.size)
        row.update(base_per_instance_ns=None, cand_per_instance_ns=None, base_pct=r1(bv),
                   cand_pct=r1(cv))
        rows.append(row)
    return rows


def _mean(values: np.ndarray) -> float:
    return float(values.mean()) if values.size else 0.0


def _kernel_rows(base: Any, cand: Any, scope: str | None, verdict_row: Any) -> list[dict]:
    per_instance = (scope is not None and base.instances_of(scope).size >= MIN_SAMPLES
                    and cand.instances_of(scope).size >= MIN_SAMPLES)
    sb, sc = _family_samples(base, scope, per_instance), _family_samples(cand, scope,
                                                                         per_instance)
    nb = base.instances_of(scope).size if scope else 1
    nc = cand.instances_of(scope).size if scope else 1
    rows = []
    for fam in sorted(set(sb) & set(sc)):
        (tb, b), (tc, c) = sb[fam], sc[fam]
        rows.append(verdict_row("kernel", fam, b, c, tb / max(nb, 1), tc / max(nc, 1), nb, nc))
    return rows


def _family_samples(a: Any, scope: str | None, per_instance: bool
                    ) -> dict[str, tuple[float, np.ndarray]]:
    """Per kernel family: (total ns inside the scope, samples): per-scope-instance totals, or
    the call durations. The kernels go a family at a time (``runs_by_code``), not as
    per-kernel copies of their family names and durations."""
    k = a.kernels
    families, fam_of_name = np.unique(np.array([kernel_family(n) for n in k.names] or [""],
                                               dtype=object), return_inverse=True)
    fam_of_name = fam_of_name.astype(np.int32)
    chosen = None
    if scope is not None:
        chosen = np.zeros(len(k), dtype=bool)
        chosen[a.kernels_in(scope)] = True
    code = np.empty(len(k), dtype=np.int32)
    for rows in range(0, len(k), ROWS):
        code[rows:rows + ROWS] = fam_of_name[k.name_code[rows:rows + ROWS]]
        let_go(k.name_code[rows:rows + ROWS])
    order, bounds = runs_by_code(code, families.size, keep=chosen)
    del code, chosen
    kernel_inst = None
    if per_instance:
        inst = a.instances_of(scope)
        pos = np.full(len(a.ranges), -1, dtype=np.int32)
        pos[inst] = np.arange(inst.size)
        p = a.pairs("all")
        sel = pos[p.range_idx] >= 0
        kernel_inst = np.full(len(k), -1, dtype=np.int32)
        kernel_inst[p.kernel_idx[sel]] = pos[p.range_idx[sel]]
        del pos, sel
    out: dict[str, tuple[float, np.ndarray]] = {}
    for f, fam in enumerate(families.tolist()):
        mine = order[bounds[f]:bounds[f + 1]]
        if mine.size == 0:
            continue
        dur = k.end[mine] - k.start[mine]
        let_go(k.end)  # the pages the gathers mapped
        let_go(k.start)
        # the call durations wait for the other side in a scratch file when large
        samples = joined([dur]) if kernel_inst is None else np.bincount(
            kernel_inst[mine], weights=dur, minlength=inst.size)
        out[str(fam)] = (float(dur.sum()), samples)
    let_go_fields(k)
    return out


def _sentence(row: dict[str, Any]) -> str:
    change = f"{row['change_pct']:+.1f}%" if row["change_pct"] is not None else "new"
    p = f", p = {row['p_value']:.2g}" if row["p_value"] is not None else ""
    where = "overall" if row["level"] == "overall" else f"{row['level']} {row['key']}"
    return f"{where}: {row['verdict']} ({change}{p}; {row['reason']})"


def diff(base: Session, cand: Session | None, threshold: float = 5.0, alpha: float = 0.05,
         scope: str | None = None, strict: bool = False, fail_on: str = "never") -> Report:
    assert cand is not None
    report = diff_report(base, cand, threshold_pct=threshold, alpha=alpha, scope=scope,
                         strict=strict)
    report.title = f"{base.export.source.name} -> {cand.export.source.name}"
    return report


def _regression(s: Session, rule: CheckRule, baseline: Session | None, alpha: float) -> RuleOutcome:
    """max_regression_pct: diff's verdict on the GPU (or CPU) time per instance."""
    assert baseline is not None
    k = s.kernels
    gpu = k is not None and len(k) > 0
    if rule.range is None:
        if not gpu:
            raise BadOption(f"rule {rule.index}: max_regression_pct on the whole export needs "
                            f"CUDA kernels; give a range.")
        assert k is not None and baseline.kernels is not None
        b, c = baseline.kernels.duration, k.duration
        bv, cv = float(b.sum()), float(c.sum())
    else:
        if gpu:
            b, c = baseline.instance_gpu_ns(rule.range, "all"), s.instance_gpu_ns(rule.range,
                                                                                  "all")
        else:
            b, c = baseline.instance_cpu_ns(rule.range), s.instance_cpu_ns(rule.range)
        bv, cv = float(b.mean()) if b.size else 0.0, float(c.mean()) if c.size else 0.0
        if gpu:  # as diff: instances without kernels are no samples of the noise test
            b, c = b[b > 0], c[c > 0]
    limit = rule.values["limit"]
    v = judge(b, c, base_value=bv, cand_value=cv, threshold_pct=limit, alpha=alpha)
    change = f"{v.change_pct:+.1f}%" if v.change_pct is not None else "new"
    return RuleOutcome(v.verdict != "regression",
                   round(v.change_pct, 1) if v.change_pct is not None else None,
                   f"<= +{limit:g}%", f"{change} vs baseline: {v.verdict} ({v.reason})")


FAIL_ON = ("never", "regression")

ANALYSIS = Analysis(
    name="diff", bytes_per_row=6,
    help="""Run-to-run: per range and per kernel, time per instance, change, and a verdict.

    regression / improvement only past --threshold AND beyond the noise (Mann-Whitney U test
    of the per-instance times at --alpha); too few instances to test: inconclusive, unless the
    change is 4x past the threshold. Exit 0, or 3 with --fail-on regression.

    Examples: `nsys-mine diff main.sqlite pr.sqlite` ·
    `nsys-mine diff main.sqlite pr.sqlite --threshold 10 --fail-on regression -f json`
    """,
    run=diff, input_name="base", needs=("kernels", "launches", "ranges"),
    options=("within", "merge_op_ids", "name_kind", "rules", "depth", "match", "nsys",
             "cache", "graph_attribution"),
    defaults={"merge_op_ids": "auto"},
    params=(
        Param("cand", ("CAND",), "The candidate export (the new run).", type=Path,
              argument=True, required=True, export=True),
        Param("threshold", ("--threshold",), "A change smaller than this many percent is "
              "neutral.", type=float, default=5.0, minimum=0.0, metavar="PCT",
              panel=VERDICTS_PANEL),
        ALPHA,
        Param("scope", ("--scope",), "The range the overall verdict and kernel times are per "
              "instance of (default: `step` when both exports have it, else the whole "
              "export).", metavar="RANGE", panel=VERDICTS_PANEL),
        Param("strict", ("--strict",), "Exports that differ in GPU, workload config or "
              "kernels are an error, not a warning.", type=bool, default=False,
              panel=VERDICTS_PANEL),
        Param("fail_on", ("--fail-on",), "regression: exit 3 when the overall verdict is a "
              "regression.", default="never", choices=FAIL_ON, panel=VERDICTS_PANEL),
    ),
    columns=DIFF_COLUMNS, view=DIFF_VIEW, order=110,
    exit_code=lambda report, params: 3 if (params["fail_on"] == "regression" and report.rows
                                           and report.rows[0]["verdict"] == "regression") else 0,
    checks=(CheckKey("max_regression_pct", "limit", _regression, order=7, needs_baseline=True,
                     describe=lambda where, v: f"{where}: no regression over "
                                               f"{v['limit']:g}%"),),
)
