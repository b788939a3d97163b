"""Find (or install) the nsys binary and export .nsys-rep/.qdrep reports to SQLite (cached).

Discovery order: an explicit path (``--nsys``), the ``NSYS`` environment variable, ``nsys`` on
PATH, the usual CUDA and Nsight install folders, the project's own cached install
(``scripts/install_nsys.sh`` -> ``.cache/nsys``), then the user cache (``~/.cache/nsys-mine/nsys``,
where ``nsys-mine profile --install-nsys`` puts it).

Exports go to the user cache (``$XDG_CACHE_HOME/nsys-mine/exports``, default
``~/.cache/nsys-mine/exports``), never into the report's own folder, and are reused while the
report is unchanged. nsys writes to a temporary name first; a failed or partial export is
deleted, never mined.
"""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path

from nsys_parsers.errors import ExportFailed, NsysNotFound
from nsys_parsers.sqlite_file import usable_export

PROJECT_ROOT = Path(__file__).resolve().parent.parent
INSTALL_HINT = (
    "install Nsight Systems (https://developer.nvidia.com/nsight-systems), put `nsys` on PATH or "
    "set NSYS=/path/to/nsys; on Debian/Ubuntu x86-64 `scripts/install_nsys.sh` (in the "
    "nsys-mine repository) installs nsys 2022.4 into .cache/nsys without root changes. Or "
    "export the report elsewhere with `nsys export --type sqlite REPORT.nsys-rep` and pass "
    "the .sqlite file")
EXPORT_TIMEOUT_S = 900


def user_cache_dir() -> Path:
    """The user cache folder of nsys-mine (``$XDG_CACHE_HOME/nsys-mine``, by default
    ``~/.cache/nsys-mine`` on Linux; the platform's own elsewhere)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("nsys-mine", appauthor=False))


def candidate_paths() -> list[Path]:
    out: list[Path] = []
    env = os.environ.get("NSYS")
    if env:
        out.append(Path(env))
    which = shutil.which("nsys")
    if which:
        out.append(Path(which))
    patterns = [
        "/usr/local/cuda/bin/nsys", "/usr/local/cuda-*/bin/nsys",
        "/opt/nvidia/nsight-systems/*/bin/nsys", "/opt/nvidia/nsight-systems-cli/*/bin/nsys",
        "/usr/lib/nsight-systems/bin/nsys",
        "/opt/nvidia/hpc_sdk/*/*/*/profilers/Nsight_Systems/bin/nsys",
        "/usr/local/cuda/nsight-systems-*/bin/nsys",
    ]
    for pat in patterns:
        out.extend(Path(p) for p in sorted(glob.glob(pat), reverse=True))
    out.append(PROJECT_ROOT / ".cache" / "nsys" / "usr" / "bin" / "nsys")
    out.append(user_cache_dir() / "nsys" / "usr" / "bin" / "nsys")
    return out


def find_nsys(explicit: str | os.PathLike | None = None) -> Path | None:
    """The first nsys that exists and is executable, or None."""
    if explicit:
        p = Path(explicit)
        if p.is_file() and os.access(p, os.X_OK):
            return p
        raise NsysNotFound(f"{p}: not an executable nsys binary; {INSTALL_HINT}.")
    for p in candidate_paths():
        if p.is_file() and os.access(p, os.X_OK):
            return p
    return None


def nsys_version(nsys: Path) -> str:
    try:
        out = subprocess.run([str(nsys), "--version"], capture_output=True, text=True,
                             timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NsysNotFound(f"{nsys} does not run ({exc}); {INSTALL_HINT}.") from None
    m = re.search(r"(\d{4}\.\d+(?:\.\d+)*)", out)
    return m.group(1) if m else out.strip() or "unknown"


def locate_nsys(explicit: str | None = None, *, install: bool = False) -> tuple[Path, str]:
    """The nsys binary to use and its version; installs into the user cache on request."""
    path = find_nsys(explicit)
    if path is None and install:
        path = install_nsys()
    if path is None:
        raise NsysNotFound(f"nsys not found; {INSTALL_HINT}; or pass --install-nsys to fetch "
                           f"nsys 2022.4 into {user_cache_dir() / 'nsys'} (Debian/Ubuntu x86-64).")
    return path, nsys_version(path)


def installer_script() -> Path:
    return Path(__file__).resolve().parent / "install_nsys.sh"


def install_nsys(root: Path | None = None, timeout_s: float = 900) -> Path:
    """Fetch Nsight Systems 2022.4 from Debian's non-free archive into the user cache."""
    root = root or user_cache_dir() / "nsys"
    script = installer_script()
    try:
        proc = subprocess.run(["bash", str(script), str(root)], capture_output=True, text=True,
                              timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NsysNotFound(f"installing nsys failed ({exc}); {INSTALL_HINT}.") from None
    if proc.returncode != 0:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        raise NsysNotFound(f"installing nsys failed ({tail}); {INSTALL_HINT}.")
    return Path(proc.stdout.strip().splitlines()[-1])


_REPORT_MAGIC = b"NVIDIA Tegra Profiler Report "


def report_version(report: Path) -> str | None:
    """The nsys version that recorded a .nsys-rep, from its header: nsys 2023+ writes
    ``NVIDIA Tegra Profiler Report 2026@1@1@...`` (2026.1.1); older reports carry only a
    format number (``... Report 1.``) and give None."""
    try:
        with report.open("rb") as fh:
            head = fh.read(128)
    except OSError:
        return None
    if not head.startswith(_REPORT_MAGIC):
        return None
    m = re.match(rb"(\d{4})@(\d+)@(\d+)", head[len(_REPORT_MAGIC):])
    return ".".join(x.decode() for x in m.groups()) if m else None


def _year_minor(version: str) -> tuple[int, int] | None:
    m = re.match(r"(\d{4})\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def too_new(recorded: str | None, local: str) -> bool:
    """Whether a report recorded by ``recorded`` is newer than the local nsys can read."""
    a, b = _year_minor(recorded or ""), _year_minor(local)
    return a is not None and b is not None and a > b


def cached_export_path(report: Path) -> Path:
    """Where the SQLite export of a report is cached: the user cache, keyed by the report's
    absolute path, size and modification time (nothing is written beside the report)."""
    st = report.stat()
    digest = hashlib.sha1(f"{report.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()
    return user_cache_dir() / "exports" / f"{report.stem}-{digest[:12]}.sqlite"


def export_report(report: Path, *, nsys: str | os.PathLike | None = None,
                  timeout_s: int = EXPORT_TIMEOUT_S) -> Path:
    """SQLite export of an .nsys-rep/.qdrep report: cached if fresh, else made with nsys."""
    target = cached_export_path(report)
    if (target.exists() and target.stat().st_mtime_ns >= report.stat().st_mtime_ns
            and usable_export(target)):
        return target
    binary = find_nsys(nsys)
    if binary is None:
        raise NsysNotFound(f"{report.name} is an nsys report; reading it needs nsys to export "
                           f"it to SQLite, and no nsys was found: {INSTALL_HINT}.")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.stem}.{os.getpid()}.tmp.sqlite")
    tmp.unlink(missing_ok=True)
    cmd = [str(binary), "export", "--type", "sqlite", "--force-overwrite", "true",
           "--output", str(tmp), str(report)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        tmp.unlink(missing_ok=True)
        raise ExportFailed(f"`nsys export` of {report.name} took longer than {timeout_s} s and "
                           f"was stopped.") from None
    except OSError as exc:
        raise NsysNotFound(f"cannot run {binary} ({exc}); {INSTALL_HINT}.") from None
    detail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
    if proc.returncode != 0 or not tmp.exists() or not usable_export(tmp):
        tmp.unlink(missing_ok=True)
        version = nsys_version(binary)
        recorded = report_version(report)
        if recorded is not None and too_new(recorded, version):
            year_minor = ".".join(version.split(".")[:2])
            raise ExportFailed(
                f"{report.name} was recorded by nsys {recorded}; the nsys here ({year_minor}) "
                f"reads reports up to {version.split('.')[0]}.x ({binary}). Export it with nsys "
                f"{'.'.join(recorded.split('.')[:2])} or newer (`nsys export --type sqlite "
                f"{report.name}`) and pass the .sqlite file, or point --nsys/$NSYS at a newer "
                f"nsys. Any partial output was deleted.")
        raise ExportFailed(
            f"`nsys export` (nsys {version}) could not export {report.name} "
            f"(exit {proc.returncode}: {' | '.join(detail) or 'no output'}). The report may be "
            f"truncated or damaged, or recorded by a newer nsys: export it with that nsys (or a "
            f"newer one) and pass the .sqlite file. Any partial output was deleted.")
    os.replace(tmp, target)
    return target
