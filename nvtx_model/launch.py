"""Run a Python program unchanged, with NVTX ranges added when it imports torch.

    python -m nvtx_model.launch [--nvtx SPEC] [--report FILE] [--] SCRIPT [ARGS...]
    python -m nvtx_model.launch [--nvtx SPEC] [--report FILE] -m MODULE [ARGS...]
    python -m nvtx_model.launch [--nvtx SPEC] [--report FILE] -c CODE [ARGS...]
    python /path/to/nvtx_model/launch.py ...      (any Python with torch: nsys-mine need not be
                                                   installed in it)

``nsys-mine profile --nvtx modules,steps -- python train.py --bs 8`` runs
``nsys profile ... python .../nvtx_model/launch.py --nvtx modules,steps --report R -- train.py
--bs 8``. The program runs in this process as ``__main__``, as Python itself would run it:
``sys.argv``, ``sys.path[0]`` (the script's folder, the working directory for ``-m``, ``''``
for ``-c``; nothing under ``-P``/``-I``), ``__file__``, ``__spec__`` and the exit code are the
same, and an uncaught exception prints the program's own traceback (no frame of this
launcher) and exits 1. A ``sys.meta_path`` finder watches for ``import torch``; once torch is
imported, ``nvtx_model.program_nvtx.ProgramHooks`` are installed (SPEC: ``modules[:DEPTH]``,
``ops``, ``steps``). A program that never imports torch runs untouched.

``--report FILE`` gets a JSON object, rewritten as the run goes (started, torch imported,
ended), so that an ``os._exit`` still leaves what was known: the hooks' counts, the backend,
notes (e.g. ``--nvtx ops`` without a CUDA build), and the exit code.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_HERE)
USAGE = ("usage: python -m nvtx_model.launch [--nvtx SPEC] [--report FILE] [--] "
         "(SCRIPT | -m MODULE | -c CODE) [ARGS...]")


def _own_imports():
    """Import what the hooks need while this project's root is on sys.path (as a file, the
    launcher may run under a Python where nsys-mine is not installed), then leave sys.path
    as Python made it for the launcher, minus the launcher's own folder."""
    by_path = __name__ == "__main__" and not __package__
    if by_path and sys.path and os.path.realpath(sys.path[0] or ".") == os.path.realpath(_HERE):
        del sys.path[0]  # Python put the launcher's folder first: the program's goes there
    sys.path.insert(0, _ROOT)
    try:
        import nsys_parsers.errors  # noqa: F401 - nvtx_model.errors needs it, later
        import nvtx_model.errors  # noqa: F401
        import nvtx_model.nvtx_ranges  # noqa: F401
        from nvtx_model import program_nvtx
    finally:
        sys.path.remove(_ROOT)
    return program_nvtx, by_path


def _usage_error(message):
    sys.stderr.write(f"{USAGE}\nerror: {message}\n")
    raise SystemExit(2)


def _parse(argv):
    """(nvtx text, report path, kind, target, program args). kind: script, module, code."""
    nvtx = report = None
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("--nvtx", "--report"):
            if i + 1 >= len(argv):
                _usage_error(f"{arg} needs a value")
            if arg == "--nvtx":
                nvtx = argv[i + 1]
            else:
                report = argv[i + 1]
            i += 2
        elif arg.startswith("--nvtx="):
            nvtx, i = arg.split("=", 1)[1], i + 1
        elif arg.startswith("--report="):
            report, i = arg.split("=", 1)[1], i + 1
        elif arg == "--":
            i += 1
            break
        elif arg in ("-h", "--help"):
            print(__doc__.strip())
            raise SystemExit(0)
        else:
            break
    rest = argv[i:]
    if not rest:
        _usage_error("no program to run")
    first = rest[0]
    if first in ("-m", "-c"):
        if len(rest) < 2:
            _usage_error(f"{first} needs a value")
        return nvtx, report, "module" if first == "-m" else "code", rest[1], rest[2:]
    if first.startswith(("-m", "-c")) and len(first) > 2:
        return nvtx, report, "module" if first[1] == "m" else "code", first[2:], rest[1:]
    if first.startswith("-") and first != "-":
        _usage_error(f"unknown option {first!r}")
    if first == "-":
        _usage_error("a program on stdin cannot be launched; give a file")
    return nvtx, report, "script", first, rest[1:]


class _Report:
    """The JSON report, written atomically each time something is learned."""

    def __init__(self, path):
        self.path = path
        self.notes: list = []
        self.data = {"launcher": 1, "pid": os.getpid(), "python": sys.version.split()[0],
                     "torch_imported": False, "notes": self.notes}

    def write(self):
        if not self.path:
            return
        import json

        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(self.data, fh, indent=1, default=str)
            os.replace(tmp, self.path)
        except OSError:
            pass


class _TorchWatcher:
    """A ``sys.meta_path`` finder that lets the other finders find ``torch`` and runs
    ``after(module)`` once torch's ``__init__`` has run. Removes itself then."""

    def __init__(self, after):
        self.after = after

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module
        watcher = self

        def exec_module(module):
            try:
                original(module)
            finally:
                try:
                    del loader.exec_module  # back to the class's method
                except AttributeError:
                    pass
                if watcher in sys.meta_path:
                    sys.meta_path.remove(watcher)
            watcher.after(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec

    def invalidate_caches(self):
        pass


def _program_path_entry(kind, target):
    """What Python puts first on sys.path for this program (None: nothing, -P/-I)."""
    if getattr(sys.flags, "safe_path", False) or sys.flags.isolated:
        return None
    if kind == "script":
        return os.path.dirname(os.path.realpath(target))
    if kind == "module":
        return os.getcwd()
    return ""


def _run(kind, target, args, by_path):
    entry = _program_path_entry(kind, target)
    if entry is not None:
        if not by_path and sys.path and sys.path[0] == os.getcwd():
            sys.path[0] = entry  # python -m nvtx_model.launch put the working directory first
        else:
            sys.path.insert(0, entry)
    if kind == "module":
        import runpy

        sys.argv = [target, *args]  # run_module sets argv[0] to the module's file
        runpy.run_module(target, run_name="__main__", alter_sys=True)
        return

    import builtins
    import types

    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, __cached__=None, __spec__=None,
                         __package__=None)
    if kind == "code":
        sys.argv = ["-c", *args]
        code = compile(target, "<string>", "exec")
    else:
        if os.path.isdir(target) or not os.path.isfile(target):
            if not os.path.exists(target):
                sys.stderr.write(f"{sys.executable}: can't open file {os.path.abspath(target)!r}"
                                 f": [Errno 2] No such file or directory\n")
                raise SystemExit(2)
            import runpy  # a folder or a zip file with __main__.py

            sys.argv = [target, *args]
            runpy.run_path(target, run_name="__main__")
            return
        path = os.path.abspath(target)
        sys.argv = [target, *args]
        from importlib.machinery import SourceFileLoader

        main.__dict__.update(__file__=path, __loader__=SourceFileLoader("__main__", path))
        with open(path, "rb") as fh:
            source = fh.read()
        code = compile(source, path, "exec", dont_inherit=True)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _without_launcher_frames(tb):
    """The traceback from the program's first frame on (this file and runpy left out)."""
    skip = (os.path.realpath(__file__), os.path.realpath(__file__).rstrip("c"))
    while tb is not None:
        name = os.path.realpath(tb.tb_frame.f_code.co_filename)
        if name in skip or os.path.basename(name) == "runpy.py" or name.startswith("<frozen"):
            tb = tb.tb_next
            continue
        break
    return tb


def main(argv=None):
    program_nvtx, by_path = _own_imports()
    nvtx_text, report_path, kind, target, args = _parse(
        sys.argv[1:] if argv is None else argv)
    report = _Report(report_path)
    try:
        spec = program_nvtx.ProgramNvtx.parse(nvtx_text)
    except Exception as exc:  # noqa: BLE001 - BadOption: say it as Python would
        _usage_error(str(exc))
    report.data.update(nvtx=str(spec), kind=kind, target=target)
    hooks = program_nvtx.ProgramHooks(spec, report.data)

    def torch_imported(torch):
        try:
            hooks.install(torch)
        except Exception as exc:  # noqa: BLE001 - never break the program
            report.notes.append(f"the NVTX hooks could not be installed: "
                                        f"{type(exc).__name__}: {exc}")
            sys.stderr.write(f"nsys-mine launcher: NVTX hooks not installed: {exc}\n")
        report.write()

    if not spec.off:
        if "torch" in sys.modules:
            torch_imported(sys.modules["torch"])
        else:
            sys.meta_path.insert(0, _TorchWatcher(torch_imported))
    report.write()
    code: object = 0
    try:
        _run(kind, target, args, by_path)
    except SystemExit as exc:
        code = exc.code
        raise
    except KeyboardInterrupt:
        code = "interrupted"
        raise
    except BaseException as exc:
        code = 1
        report.data["exception"] = f"{type(exc).__name__}: {exc}"[:500]
        tb = _without_launcher_frames(exc.__traceback__)
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
        raise SystemExit(1) from None
    finally:
        try:
            hooks.finish()
        except Exception as exc:  # noqa: BLE001
            report.notes.append(f"ending the NVTX ranges failed: {exc}")
        report.data["exit_code"] = _exit_status(code)
        if not report.data.get("torch_imported") and not spec.off:
            report.notes.append(
                "the program never imported torch: no module, step or operator ranges were "
                "added")
        report.write()


def _exit_status(code):
    """The process exit status a SystemExit code gives (as Python computes it)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    if code == "interrupted":
        return "interrupted"
    return 1  # a message: printed to stderr, status 1


if __name__ == "__main__":
    main()
