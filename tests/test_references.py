"""Every dotted reference to our modules in the code (``reports.page.model.Page`` in a
docstring, ``nsys_parsers.trace.GROUPS`` in a comment) and in every doc (README.md,
docs/*.md, benchmarks/README.md) names something that exists: a module, or an attribute of
one; and every path of the project they name (``reports/pipeline/ask.py``,
``scripts/main.sh``, ``docs/CLI.md``) is there."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("nsys_parsers", "reports", "profile_cli", "nvtx_model")
REFERENCE = re.compile(r"\b((?:" + "|".join(PACKAGES) + r")(?:\.[A-Za-z_][A-Za-z0-9_]*)+)")
FOLDERS = (*PACKAGES, "docs", "scripts", "tests", "benchmarks", ".ci")
# a path of the project: a top folder of it, then names (a trailing slash: a folder)
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(re.escape(f) for f in FOLDERS)
                  + r")/[\w.-]*(?:/[\w.-]+)*/?)")


def resolves(ref: str) -> bool:
    """Whether the longest importable module prefix of ``ref`` has the rest as attributes
    (a torch-only module that cannot be imported here counts as resolved)."""
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name or (exc.name or "").startswith(name + "."):
                continue  # not a module of ours: a shorter prefix may be
            return True  # ours, but needs an optional library (torch) to import
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def sources() -> list[Path]:
    """The code of the packages and every doc."""
    return ([p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))]
            + [ROOT / "README.md", ROOT / "benchmarks" / "README.md",
               *sorted((ROOT / "docs").glob("*.md"))])


def references() -> list[tuple[str, str]]:
    found = []
    for path in sources():
        for m in REFERENCE.finditer(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(ROOT)), m.group(1).rstrip(".")))
    return sorted(set(found))


def paths() -> list[tuple[str, str]]:
    """(file, path of the project it names)."""
    found = []
    for path in sources():
        for m in PATH.finditer(path.read_text(encoding="utf-8")):
            found.append((str(path.relative_to(ROOT)), m.group(1).rstrip(".")))
    return sorted(set(found))


def test_there_are_references_to_check():
    assert len(references()) > 100


def test_every_dotted_reference_to_our_modules_resolves():
    broken = [f"{path}: {ref}" for path, ref in references() if not resolves(ref)]
    assert not broken, broken


def test_every_path_a_doc_or_the_code_names_is_there():
    """A path of the project in a doc or a docstring names a file or folder of it (a path
    that only ever exists while a command runs, a result folder, is in .gitignore; one whose
    last name is a placeholder in capitals, ``docs/schema/CMD.json``, is a pattern)."""
    ignored = [line.strip().strip("/") for line in
               (ROOT / ".gitignore").read_text().splitlines() if line.strip()]
    missing = [f"{file}: {p}" for file, p in paths()
               if not (ROOT / p).exists() and not any(p.startswith(g) for g in ignored)
               and not re.fullmatch(r"[A-Z_]+(\.\w+)?", p.rstrip("/").rsplit("/", 1)[-1])]
    assert len(paths()) > 50
    assert not missing, missing
