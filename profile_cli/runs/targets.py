"""What ``nsys-mine report`` and the multi-export tables read: an export, several exports, or
a sweep folder (its index, through ``sweeper.sweep_tables``; never written here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsys_parsers.errors import ExportNotFound, MissingData
from profile_cli.runs.sweep import INDEX_NAME, config_labels, sweep_tables
from reports.multi import ExportTarget


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


def build_report(target: Path, options: Any, shape: Any, *, top: int = 20,
                 opener: Any = None) -> Any:
    """The page (``reports.page.Page``) of an export or of a sweep folder."""
    if target.is_dir():
        from reports.page.sweep import sweep_page

        tables, runs = sweep_runs(target)
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
    return [ExportTarget(path=p, label=lbl, config=cfg)
            for (p, cfg), lbl in zip(found, labels, strict=True)]
