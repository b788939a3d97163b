"""Make the wheel folder that scripts/gpu_check.sh installs on the offline GPU machine.

    python scripts/gpu_wheels.py [DIR]          (scripts/gpu_wheels.sh runs this; see there)
    python scripts/gpu_wheels.py --list         (the requirements it would resolve, and why)

What is carried is computed, not kept by hand:

1. the core dependencies of pyproject.toml (``[project].dependencies``), their markers read
   for CPython 3.12 on Linux x86-64, less those in ``IMAGE`` (the GPU machine's python has
   them and the run uses its own: torch's numpy, pandas, matplotlib);
2. resolved WITH their dependencies by ``pip download`` for CPython 3.12 on manylinux x86-64
   (compiled wheels included: pydantic-core is one), pinned by a constraints file of the
   versions in ``.venv`` (the versions the tests here ran with), so a new core dependency,
   or a new need of one, is picked up by itself;
3. less every wheel whose project is in ``IMAGE`` (e.g. python-dateutil, which sqlite-utils
   needs and pandas brings there; pluggy with pytest).

So typer, click and rich are carried although the image has some version of them: the
carried ones come first on PYTHONPATH and the CLI runs with the versions CI tested, whatever
the image holds. Standard library only (and pip, which it runs).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The GPU machine's python: CPython 3.12 with torch 2.11 (CUDA 13) on glibc >= 2.28 (torch's
# own wheel is manylinux_2_28), x86-64.
PYTHON_VERSION = "3.12"
ABI = "cp312"
# pip does not widen a manylinux_2_X platform to older ones by itself (only manylinux2014 and
# manylinux2010): every glibc from 2.17 to 2.28 is named.
PLATFORMS = [f"manylinux_2_{minor}_x86_64" for minor in range(28, 16, -1)] + [
    "manylinux2014_x86_64"]
# What the GPU machine's python holds and the run uses as it is, never carried: the compiled
# scientific stack built against its torch, what it needs, the test runner, the installer.
# (The image also has rich, click, typer, shellingham, tabulate: those are carried anyway,
# pinned to what the tests here ran with.)
IMAGE = frozenset({
    "torch", "numpy", "pandas", "matplotlib",
    "python-dateutil", "six", "pytz", "tzdata", "pillow", "fonttools", "kiwisolver",
    "contourpy", "cycler", "pyparsing", "packaging",
    "pytest", "pluggy", "iniconfig",
    "pip", "setuptools", "wheel",
})
# The carry limit of the device tool is 64 MiB for all carried paths together.
MAX_BYTES = 48 * 1024**2
# Markers are read as on the GPU machine.
TARGET_ENV = {"python_version": PYTHON_VERSION, "python_full_version": PYTHON_VERSION + ".0",
              "implementation_name": "cpython", "platform_python_implementation": "CPython",
              "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
              "platform_machine": "x86_64", "extra": ""}


def normalize(name: str) -> str:
    """A project name as PEP 503 compares them (``Typing_Extensions`` -> ``typing-extensions``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _markers():
    try:
        from packaging.markers import Marker
    except ImportError:  # pip carries its own copy
        from pip._vendor.packaging.markers import Marker
    return Marker


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if not match:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalize(match.group(1))


def applies(requirement: str, env: dict[str, str] | None = None) -> bool:
    """Whether the requirement's marker (if any) holds on the GPU machine."""
    if ";" not in requirement:
        return True
    marker = requirement.split(";", 1)[1].strip()
    return bool(_markers()(marker).evaluate({**TARGET_ENV, **(env or {})}))


def core_dependencies(pyproject: str) -> list[str]:
    import tomllib

    return list(tomllib.loads(pyproject)["project"].get("dependencies", []))


def requests(pyproject: str, image: frozenset[str] = IMAGE) -> list[str]:
    """The requirements to resolve: the core dependencies that apply on the GPU machine and
    that its python does not provide itself (markers dropped: they were read here)."""
    out = []
    for requirement in core_dependencies(pyproject):
        if applies(requirement) and requirement_name(requirement) not in image:
            out.append(requirement.split(";", 1)[0].strip())
    return out


def pins(versions: dict[str, str], image: frozenset[str] = IMAGE) -> list[str]:
    """``name==version`` constraints from an environment's distributions: all but the
    project itself, what the image provides, and local builds (``2.13.0+cpu``) that no index
    serves."""
    return sorted(f"{name}=={version}" for name, version in
                  ((normalize(n), v) for n, v in versions.items())
                  if name != "nsys-mine" and name not in image and "+" not in version)


def wheel_name(filename: str) -> str:
    return normalize(filename.split("-", 1)[0])


def _platform_fits(platform: str) -> bool:
    if platform in ("any", "manylinux1_x86_64", "manylinux2010_x86_64", "manylinux2014_x86_64"):
        return True
    match = re.fullmatch(r"manylinux_2_(\d+)_x86_64", platform)
    return bool(match) and int(match.group(1)) <= 28


def fits_target(filename: str) -> bool:
    """Whether a wheel installs on CPython 3.12, manylinux (glibc <= 2.28), x86-64."""
    parts = filename.removesuffix(".whl").split("-")
    if not filename.endswith(".whl") or len(parts) < 5:
        return False
    pythons, abis, platforms = (set(p.split(".")) for p in parts[-3:])
    stable = "abi3" in abis and any(
        re.fullmatch(r"cp3(\d+)", p) and int(p[3:]) <= 12 for p in pythons)
    python_ok = bool(pythons & {"py3", ABI}) or stable
    abi_ok = bool(abis & {"none", "abi3", ABI})
    return python_ok and abi_ok and any(_platform_fits(p) for p in platforms)


def select(filenames: list[str], image: frozenset[str] = IMAGE) -> tuple[list[str], list[str]]:
    """(carried, dropped): the downloaded wheels split by whether the image provides them."""
    carried = sorted((f for f in filenames if wheel_name(f) not in image), key=wheel_name)
    dropped = sorted((f for f in filenames if wheel_name(f) in image), key=wheel_name)
    return carried, dropped


def venv_versions(python: Path) -> dict[str, str]:
    """The distributions installed in the environment of ``python`` (name -> version)."""
    code = ("import importlib.metadata as m, json; print(json.dumps({d.metadata['Name']: "
            "d.version for d in m.distributions() if d.metadata['Name']}))")
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", nargs="?", type=Path, default=ROOT / "gpu_wheels")
    parser.add_argument("--list", action="store_true",
                        help="print the requirements and pins it would resolve, and stop")
    parser.add_argument("--pins-from", type=Path, default=ROOT / ".venv" / "bin" / "python",
                        help="the python whose installed versions pin the wheels "
                        "(default .venv/bin/python; none: unpinned, newest)")
    args = parser.parse_args(argv)
    wanted = requests((ROOT / "pyproject.toml").read_text())
    pinned = pins(venv_versions(args.pins_from)) if args.pins_from.exists() else []
    if args.list:
        print("# core dependencies of pyproject.toml the GPU machine lacks (or that are "
              "carried anyway):")
        print("\n".join(wanted))
        print(f"# the image's own, never carried: {' '.join(sorted(IMAGE))}")
        print(f"# pinned from {args.pins_from}: {len(pinned)} versions" if pinned else
              f"# unpinned: {args.pins_from} not found")
        return 0
    if not pinned:
        print(f"gpu_wheels: {args.pins_from} not found: newest versions, not the ones the "
              "tests ran with (bash scripts/setup.sh dev,torch makes .venv)", file=sys.stderr)
    dest: Path = args.dest
    staging = dest.with_name(dest.name + ".partial")
    if staging.exists():
        subprocess.run(["rm", "-rf", str(staging)], check=True)
    staging.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text("".join(f"{p}\n" for p in pinned))
        argv_pip = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
                    "--only-binary=:all:", "--python-version", PYTHON_VERSION,
                    "--implementation", "cp", "--abi", ABI,
                    *[x for p in PLATFORMS for x in ("--platform", p)],
                    "-c", str(constraints), "-d", str(staging), *wanted]
        proc = subprocess.run(argv_pip, capture_output=True, text=True,
                              env={**os.environ, "PIP_PROGRESS_BAR": "off"})
    if proc.returncode != 0:
        print(proc.stdout[-4000:] + proc.stderr[-4000:], file=sys.stderr)
        print(f"gpu_wheels: pip download failed (exit {proc.returncode})", file=sys.stderr)
        return 1
    carried, dropped = select(sorted(p.name for p in staging.glob("*.whl")))
    for name in dropped:
        (staging / name).unlink()
    misfits = [f for f in carried if not fits_target(f)]
    if misfits:
        print(f"gpu_wheels: not for CPython {PYTHON_VERSION} manylinux x86-64: "
              f"{' '.join(misfits)}", file=sys.stderr)
        return 1
    size = sum((staging / f).stat().st_size for f in carried)
    if size > MAX_BYTES:
        print(f"gpu_wheels: {size / 1024**2:.1f} MiB is over the {MAX_BYTES // 1024**2} MiB "
              "this folder may take (the device tool carries 64 MiB a call)", file=sys.stderr)
        return 1
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    lines = [f"# made by scripts/gpu_wheels.sh on {stamp} for CPython {PYTHON_VERSION} "
             f"manylinux x86-64 from: {' '.join(wanted)}",
             f"# pinned to {args.pins_from}" if pinned else "# unpinned (newest)",
             f"# left to the image: {' '.join(dropped) or 'nothing'}"]
    lines += [f"{sha256(staging / f)}  {f}" for f in carried]
    (staging / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    if dest.exists():
        subprocess.run(["rm", "-rf", str(dest)], check=True)
    staging.rename(dest)
    compiled = [f for f in carried if not f.endswith("-none-any.whl")]
    print("\n".join(carried))
    print(f"gpu_wheels: {len(carried)} wheels, {size / 1024**2:.1f} MiB in {dest} "
          f"({len(compiled)} compiled: {' '.join(compiled) or 'none'}); left to the image: "
          f"{' '.join(wheel_name(f) for f in dropped) or 'nothing'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
