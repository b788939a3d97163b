"""Before the GPU suite: does nsys-mine import, and does the whole suite collect, with this
python and the wheels scripts/gpu_check.sh installed (the same PYTHONPATH)?

    python scripts/gpu_preflight.py OUT_DIR [--carried DIR]

Writes OUT_DIR/preflight.json and OUT_DIR/collect.log:

- ``packages``: each distribution the carried folder holds and each core dependency of
  pyproject.toml, with the version that is imported and where from (``carried``: DIR,
  ``image``: this python's own); ``image``: this python's own distributions (what the
  machine holds, shadowed or not);
- ``imports``: every module of profile_cli, reports, nvtx_model and nsys_parsers imported; a
  module that needs a missing optional extra of pyproject.toml is listed as such, not failed;
- ``cli``: ``python -m profile_cli --help``;
- ``collect``: ``pytest --collect-only -q tests``, all of it: the count, errors, skipped
  modules (a test module that needs an optional extra must ``pytest.importorskip`` it).

Exit status: 0 all good; 1 nsys-mine does not import or its CLI fails (the GPU suite would
fail everywhere); 3 only the collection of the whole suite failed. Standard library only.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import json
import os
import pkgutil
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("profile_cli", "reports", "nvtx_model", "nsys_parsers")


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pyproject() -> dict[str, Any]:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        return {}
    return dict(tomllib.loads((ROOT / "pyproject.toml").read_text()).get("project", {}))


def _requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return normalize(match.group(1)) if match else requirement


def optional_modules(project: dict[str, Any]) -> set[str]:
    """Import names of the optional extras' distributions (a guess from the project name:
    ``dask-jobqueue`` -> ``dask_jobqueue``)."""
    names = {_requirement_name(r) for reqs in project.get("optional-dependencies", {}).values()
             for r in reqs}
    return {n.replace("-", "_") for n in names}


def _origin(dist: metadata.Distribution, carried: Path | None) -> str:
    where = Path(str(dist.locate_file(""))).resolve()
    if carried is not None and where == carried.resolve():
        return "carried"
    return "image"


def _applies(requirement: str) -> bool:
    """Whether a requirement's marker holds for this python (``tomli; python_version <
    '3.11'`` does not on 3.12)."""
    if ";" not in requirement:
        return True
    try:
        from packaging.markers import Marker
    except ImportError:
        try:
            from pip._vendor.packaging.markers import Marker
        except ImportError:
            return True
    return bool(Marker(requirement.split(";", 1)[1]).evaluate())


def packages(project: dict[str, Any], carried: Path | None) -> list[dict[str, Any]]:
    """What is imported, from where: the carried folder's distributions and the core
    dependencies (first match on sys.path wins, as for imports)."""
    names = {_requirement_name(r) for r in project.get("dependencies", []) if _applies(r)}
    if carried is not None:
        names |= {normalize(d.metadata["Name"]) for d in metadata.distributions(path=[
            str(carried)])}
    rows = []
    for name in sorted(names):
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            rows.append({"name": name, "version": None, "origin": "missing"})
            continue
        rows.append({"name": name, "version": dist.version, "origin": _origin(dist, carried)})
    return rows


def image_distributions(carried: Path | None) -> dict[str, str]:
    """This python's own distributions: sys.path without the checkout and the carried
    folder (so a version the carried one shadows is still seen)."""
    skip = {ROOT.resolve()} | ({carried.resolve()} if carried else set())
    path = [p for p in sys.path if p and Path(p).resolve() not in skip]
    out = {}
    for dist in metadata.distributions(path=path):
        name = dist.metadata["Name"]
        if name and normalize(name) not in out:
            out[normalize(name)] = dist.version
    return dict(sorted(out.items()))


def import_all(optional: set[str]) -> dict[str, Any]:
    """Import every module of the project's packages."""
    modules: list[str] = []
    failed: dict[str, str] = {}
    needs_optional: dict[str, str] = {}
    for package in PACKAGES:
        try:
            pkg = importlib.import_module(package)
        except Exception as exc:
            failed[package] = f"{type(exc).__name__}: {exc}"
            continue
        modules.append(package)
        for info in pkgutil.walk_packages(pkg.__path__, package + "."):
            try:
                importlib.import_module(info.name)
            except ModuleNotFoundError as exc:
                top = (exc.name or "").split(".")[0]
                if top in optional:
                    needs_optional[info.name] = top
                else:
                    failed[info.name] = f"ModuleNotFoundError: {exc}"
            except Exception as exc:
                failed[info.name] = f"{type(exc).__name__}: {exc}"
            else:
                modules.append(info.name)
    return {"ok": not failed, "imported": len(modules), "failed": failed,
            "needs_optional": needs_optional}


def run_cli_help() -> dict[str, Any]:
    proc = subprocess.run([sys.executable, "-m", "profile_cli", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
    return {"ok": proc.returncode == 0 and "Usage" in proc.stdout,
            "exit": proc.returncode, "tail": tail if proc.returncode else []}


def parse_collect(output: str) -> dict[str, Any]:
    """Counts from ``pytest --collect-only -q -rs`` output."""
    def count(word: str) -> int:
        found = re.findall(rf"(\d+) {word}", output.splitlines()[-1] if output.strip() else "")
        return int(found[-1]) if found else 0
    skipped = re.findall(r"^SKIPPED \[\d+\] (\S+?):\d+: (.*)$", output, re.M)
    errors = re.findall(r"^ERROR (\S+)", output, re.M)
    return {"collected": count("tests? collected"), "errors": count("errors?"),
            "error_modules": sorted(set(errors)),
            "skipped_modules": {path: why for path, why in skipped}}


def collect(out: Path) -> dict[str, Any]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-rs",
                           "-p", "no:cacheprovider", "tests"], cwd=ROOT, capture_output=True,
                          text=True, timeout=900)
    text = proc.stdout + proc.stderr
    (out / "collect.log").write_text(text)
    result = parse_collect(proc.stdout)
    result.update(exit=proc.returncode, seconds=round(time.monotonic() - t0, 1))
    result["ok"] = proc.returncode == 0 and result["collected"] > 0 and not result["errors"]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--carried", type=Path, help="the folder the wheels went into")
    args = parser.parse_args(argv)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    project = _pyproject()
    t0 = time.monotonic()
    report: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable}
    report["imports"] = import_all(optional_modules(project))
    report["import_seconds"] = round(time.monotonic() - t0, 1)
    report["packages"] = packages(project, args.carried)
    report["image"] = image_distributions(args.carried)
    report["cli"] = run_cli_help()
    if os.environ.get("NSYS_MINE_PREFLIGHT_COLLECT", "1") == "0":  # a test of the script
        report["collect"] = {"collected": 0, "errors": 0, "error_modules": [],
                             "skipped_modules": {}, "exit": None, "seconds": 0.0, "ok": True,
                             "skipped": "NSYS_MINE_PREFLIGHT_COLLECT=0"}
    else:
        report["collect"] = collect(args.out_dir)
    (args.out_dir / "preflight.json").write_text(json.dumps(report, indent=1) + "\n")

    imports, cli, coll = report["imports"], report["cli"], report["collect"]
    used = ", ".join(f"{p['name']} {p['version']} ({p['origin']})" for p in report["packages"])
    print(f"preflight: {used}", file=sys.stderr)
    print(f"preflight: {imports['imported']} modules imported in {report['import_seconds']} s"
          + "".join(f"; {m} needs the optional {x}" for m, x in
                    imports["needs_optional"].items()), file=sys.stderr)
    for module, why in imports["failed"].items():
        print(f"preflight: import {module} FAILED: {why}", file=sys.stderr)
    print(f"preflight: python -m profile_cli --help: "
          f"{'ok' if cli['ok'] else 'FAILED ' + ' | '.join(cli['tail'])}", file=sys.stderr)
    print(f"preflight: whole suite: {coll['collected']} tests collected, {coll['errors']} "
          f"errors, {len(coll['skipped_modules'])} modules skipped, in {coll['seconds']} s"
          + "".join(f"\n  skipped {m}: {why}" for m, why in coll["skipped_modules"].items())
          + "".join(f"\n  ERROR {m}" for m in coll["error_modules"]), file=sys.stderr)
    if not (imports["ok"] and cli["ok"]):
        return 1
    return 0 if coll["ok"] else 3


if __name__ == "__main__":
    sys.exit(main())
