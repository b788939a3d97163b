"""What ``nsys-mine report`` and the multi-export tables read: an export, several exports, or
a sweep folder (its index, through ``sweeper.sweep_tables``; never written here)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from nsys_parsers.errors import ExportNotFound, MissingData
from profile_cli.runs.sweep import INDEX_NAME, config_labels, sweep_tables
from reports.pipeline.multi import ExportTarget


def _located(folder: Path, stored: str | None) -> str | None:
    """An export path of the index; a sweep folder that was moved (or given relative to
    another directory) still finds its exports beside the index."""
    if not stored:
        return stored
    if Path(stored).exists():
        return stored
    beside = folder / Path(stored).name
    return str(beside) if beside.exists() else stored


def sweep_runs(folder: Path) -> tuple[Any, list[dict[str, Any]]]:
    """The sweep's tables, and its runs with their export paths found."""
    if not (folder / INDEX_NAME).exists():
        raise ExportNotFound(f"{folder}: is a directory, not an export file, and not a sweep "
                             f"folder (no {INDEX_NAME}): give the path of a .sqlite export or "
                             f"a .nsys-rep report, or a folder made by `nsys-mine sweep "
                             f"--out-dir`.")
    tables = sweep_tables(folder)
    runs = [{**r, "sqlite": _located(folder, r.get("sqlite"))} for r in tables.runs]
    return tables, runs


def build_report(target: Path, options: Any, shape: dict[str, Any] | None = None, *,
                 top: int = 20, opener: Any = None) -> Any:
    """The page (``reports.page.model.Page``) of an export, of a sweep folder, or of a folder
    of exports without a sweep index (the ``ranks`` page: a job's exports, one per rank).
    ``shape``: the attention shape (``attention``'s parameters by name)."""
    if target.is_dir():
        if not (target / INDEX_NAME).exists():  # a folder of rank exports: the ranks page
            from reports.ranks.page import is_rank_folder, ranks_page

            if is_rank_folder(target):
                page = ranks_page([target], options, title=f"nsys-mine ranks report: {target}")
                page.lead.insert(0, f"{target} holds nsys exports and no sweep index "
                                    f"({INDEX_NAME}): this is the answer of `nsys-mine ranks "
                                    f"{target}`, one rank per GPU process")
                return page
        tables, runs = sweep_runs(target)
        if tables.kind == "command":
            return command_sweep_page(tables, runs, folder=str(target))
        from reports.page.sweep import sweep_page

        return sweep_page(runs, tables.dominant, tables.mix, tables.range_times, tables.notes,
                          labels=config_labels(runs), folder=str(target))
    from reports.page.export import report_for_export

    return report_for_export(target, options, shape, top=top, opener=opener)


def export_targets(paths: list[Path]) -> list[ExportTarget]:
    """The exports of several paths (files, or sweep folders: their configs that ended ok),
    each labelled by the config fields that vary when every one is a ``profile`` export,
    else by its file name (its path, where names repeat)."""
    from reports.sidecar import read_sidecar

    found: list[tuple[Path, dict[str, Any] | None]] = []
    for p in paths:
        if p.is_dir():
            _, runs = sweep_runs(p)
            ok = [r for r in runs if r["status"] == "ok" and r.get("sqlite")]
            if not ok:
                raise MissingData(f"{p}: no config of this sweep ended ok, so it has no "
                                  f"export to read; `nsys-mine sweep --report {p}` lists "
                                  f"why.")
            for r in ok:
                found.append((Path(r["sqlite"]), r))
        else:
            side = read_sidecar(p)
            found.append((p, (side or {}).get("config")))
    labels: list[str]
    if all(cfg for _, cfg in found):
        by_name = config_labels([{**(cfg or {}), "name": str(i)}
                                 for i, (_, cfg) in enumerate(found)])
        labels = [by_name[str(i)] for i in range(len(found))]
    else:
        labels = []
    if len(set(labels)) != len(found):
        labels = [p.name.rsplit(".", 1)[0] for p, _ in found]
    if len(set(labels)) != len(found):
        labels = [str(p) for p, _ in found]
    # a command's run has no model config: its exports are mined whole (no `measure` range)
    return [ExportTarget(path=p, label=lbl,
                         config=None if (cfg or {}).get("kind") == "command" else cfg)
            for (p, cfg), lbl in zip(found, labels, strict=True)]


def command_sweep_page(tables: Any, runs: list[dict[str, Any]], *, folder: str) -> Any:
    """The page of a sweep over your own command: per config (its grid values) the status,
    exit code, wall time and the whole run's dominant kernel, the dominant kernel per range,
    the range times, and the configs that did not finish. (The model's page plots size x
    context, which a command does not have.)"""
    from profile_cli.runs.sweep import COMMAND_RUN_VIEW, RANGE_TIME_COLUMNS
    from reports.page.model import Page, Section, Sentences, Table, Text
    from reports.render import View

    counts: dict[str, int] = {}
    for r in runs:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    command = runs[0].get("command") if runs else None
    page = Page(title=f"nsys-mine sweep report: {folder}", lead=[
        f"sweep folder: {folder}",
        f"{len(runs)} runs of a command: " + ", ".join(f"{n} {s}" for s, n in counts.items()),
        *([f"first command: {command}"] if command else [])])
    said = []
    for r in runs:
        text = f"{r['config']}: {r['status']}"
        if r.get("exit_code"):
            text += f" (exit code {r['exit_code']})"
        if r.get("wall_s") is not None:
            text += f", {r['wall_s']:g} s under nsys"
        if r.get("dominant_kernel"):
            text += f"; dominant kernel {r['dominant_kernel']} ({r['dominant_share_pct']:g}%)"
        said.append(text)
    counts_note = re.compile(r"^\d+ \w+(, \d+ \w+)*$")  # said in the lead already
    page.sections.append(Section("Answers", "answers", [
        Sentences(said), *[Text(n) for n in tables.notes if not counts_note.match(n)]]))
    if tables.dominant:
        page.sections.append(Section("Dominant kernel per config and range", "dominant", [
            Table(tables.dominant, View(columns=["config", "range", "share_pct",
                                                 "per_range_instance", "category", "kernel"],
                                        noun="rows"), top=0)]))
    if tables.range_times:
        page.sections.append(Section("Range times", "ranges", [
            Table(tables.range_times, View(columns=["config", *RANGE_TIME_COLUMNS[1:]],
                                           noun="rows", hide_if_zero=("gpu_inclusive_ns",)),
                  top=0)]))
    problems = [{"config": r["config"], "status": r["status"], "reason": r.get("reason") or ""}
                for r in runs if r["status"] != "ok"]
    page.sections.append(Section("Configs that did not finish", "problems", [
        Table(problems, View(columns=["config", "status", "reason"], noun="configs"), top=0)
        if problems else Text("Every config finished ok.")]))
    page.sections.append(Section("All configs", "configs", [
        Table(runs, COMMAND_RUN_VIEW, top=0)]))
    return page
