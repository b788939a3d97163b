"""The engine that mines many exports at once: Dask (``dask.distributed``).

``dask_client(engine)`` gives a ``distributed.Client``:

* ``local`` (the default): a ``LocalCluster`` of worker processes on this machine, one thread
  each, as many as the cores (``workers``), ended when the block ends;
* an address (``tcp://host:8786``): a running Dask scheduler and its workers, left running;
* ``slurm``: workers started as Slurm jobs by ``dask_jobqueue.SLURMCluster`` with the sweep's
  Slurm options (partition, time, memory, extra ``#SBATCH`` lines), cancelled at the end; their
  logs under ``~/.cache/nsys-mine/ranks-slurm/`` (``slurm_log_folder``).

``map_exports(client, fn, paths, ...)`` runs ``fn(path, *args)`` once per export on the
workers and yields, as each ends, the path and its result or the error it raised: one bad
export never sinks the others. Dask reruns a task whose worker died (up to its
``allowed-failures``). Only the results travel back: the exports and their column caches stay
where the workers run. Progress goes to ``PROGRESS`` (a callback ``update(done, total, what)``
the command line sets while it runs; None: no progress).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from nsys_parsers.errors import BadOption, NsysMineError

SCHEDULERS = ("local", "slurm")  # or an address
Update = Callable[[int, int, Optional[str]], None]
PROGRESS: contextvars.ContextVar[Update | None] = contextvars.ContextVar("ranks_progress",
                                                                         default=None)
INSTALL_HINT = ("install the Dask extra: pip install 'nsys-mine[dask]' (dask, distributed, "
                "dask-jobqueue)")
CONNECT_TIMEOUT_S = 30
SLURM_JOBS = 16  # Slurm worker jobs when --workers is not given (fewer with fewer exports)
SLURM_MEM = "4GB"
SLURM_TIME = "01:00:00"
SLURM_WAIT_S = 300.0


class EngineError(NsysMineError):
    """The Dask engine cannot start or be reached."""


@dataclass(frozen=True)
class Engine:
    """Where the work runs (see the module docstring)."""

    scheduler: str = "local"
    workers: int | None = None
    slurm_partition: str | None = None
    slurm_time: str | None = None
    slurm_mem: str | None = None
    slurm_args: tuple[str, ...] = field(default_factory=tuple)

    def check(self) -> None:
        s = self.scheduler
        if s not in SCHEDULERS and "://" not in s and ":" not in s:
            raise BadOption(f"--scheduler {s!r}: use local, slurm, or the address of a running "
                            f"Dask scheduler (tcp://host:8786).")
        if self.workers is not None and self.workers < 1:
            raise BadOption("--workers must be 1 or more")
        slurm_given = [o for o, v in (("--slurm-partition", self.slurm_partition),
                                      ("--slurm-time", self.slurm_time),
                                      ("--slurm-mem", self.slurm_mem),
                                      ("--slurm-arg", self.slurm_args)) if v]
        if slurm_given and s != "slurm":
            raise BadOption(f"{', '.join(slurm_given)} only apply with --scheduler slurm.")

    @property
    def label(self) -> str:
        return self.scheduler if self.scheduler in SCHEDULERS else f"scheduler {self.scheduler}"


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise EngineError(f"the ranks question runs on Dask, which is not installed: "
                          f"{INSTALL_HINT}.") from None
    return distributed


def default_workers() -> int:
    """Worker processes of a local cluster: one per core this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


# A Dask worker samples its threads' stacks (sys._current_frames) every 10 ms. On CPython
# 3.11 before 3.11.9 that can deadlock against a thread being started (cpython#116969,
# distributed#8616): a worker hung in Thread.start while opening an export. The profiles are
# never looked at here, so the workers take none.
NO_PROFILE_ENV = "DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED"


def _no_worker_profile() -> Any:
    import dask

    return dask.config.set({"distributed.worker.profile.enabled": False})


@contextlib.contextmanager
def dask_client(engine: Engine, tasks: int = 1) -> Iterator[Any]:
    """A ``distributed.Client`` for ``engine`` (what it started is ended afterwards)."""
    engine.check()
    distributed = _distributed()
    import logging

    for name in ("distributed", "distributed.nanny", "distributed.worker",
                 "distributed.scheduler", "distributed.core", "dask_jobqueue"):
        logging.getLogger(name).setLevel(logging.ERROR)
    if engine.scheduler == "local":
        n = engine.workers or default_workers()
        try:
            with _no_worker_profile():  # the workers' nannies hand them this config
                cluster = distributed.LocalCluster(
                    n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                    silence_logs=logging.CRITICAL)
        except Exception as exc:  # noqa: BLE001 - whatever stops a cluster from starting
            raise EngineError(f"the local Dask cluster did not start ({exc}); try --workers 1 "
                              f"or --scheduler tcp://HOST:8786.") from None
        with cluster, distributed.Client(cluster) as client:
            yield client
    elif engine.scheduler == "slurm":
        with _slurm_cluster(engine, tasks) as cluster, distributed.Client(cluster) as client:
            try:
                client.wait_for_workers(1, timeout=SLURM_WAIT_S)
            except TimeoutError:
                raise EngineError(f"no Slurm job of the Dask workers started within "
                                  f"{SLURM_WAIT_S:g} s (squeue shows why); try another "
                                  f"--slurm-partition or fewer --workers.") from None
            yield client
    else:
        try:
            client = distributed.Client(engine.scheduler, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as exc:
            raise EngineError(f"no Dask scheduler answers at {engine.scheduler} ({exc}): start "
                              f"one (`dask scheduler`, then `dask worker {engine.scheduler}`) "
                              f"or leave --scheduler out to run on this machine.") from None
        with client:
            yield client


@contextlib.contextmanager
def _slurm_cluster(engine: Engine, tasks: int) -> Iterator[Any]:
    """Dask workers as Slurm jobs (dask-jobqueue), one single-threaded worker per job, as
    many jobs as ``workers`` (default: one per export, at most ``SLURM_JOBS``). The jobs run
    this Python (its environment must be on a filesystem the nodes share, as for sweeps)."""
    SLURMCluster = import_slurm_cluster()
    extra = []
    for arg in engine.slurm_args:
        key, eq, value = str(arg).partition("=")
        key = key.strip().lstrip("-")
        if not key:
            raise BadOption(f"--slurm-arg {arg!r}: give KEY=VALUE (an sbatch option).")
        extra.append(f"--{key}={value.strip()}" if eq else f"--{key}")
    try:
        cluster = SLURMCluster(
            cores=1, processes=1, memory=engine.slurm_mem or SLURM_MEM,
            walltime=_walltime(engine.slurm_time), queue=engine.slurm_partition,
            job_extra_directives=extra, python=sys.executable, job_name="nsys-mine-ranks",
            log_directory=str(slurm_log_folder()),
            job_script_prologue=[f"export {NO_PROFILE_ENV}=False"],
            scheduler_options={"dashboard_address": None})
    except Exception as exc:  # noqa: BLE001 - a bad option or no sbatch
        raise EngineError(f"the Slurm Dask cluster did not start ({exc}).") from None
    try:
        cluster.scale(jobs=engine.workers or max(1, min(tasks, SLURM_JOBS)))
        yield cluster
    finally:
        cluster.close()


def import_slurm_cluster() -> Any:
    """dask_jobqueue's SLURMCluster. Importing dask_jobqueue sets a SIGINT handler of its own
    (``sys.exit``, in its runner module): the process's handler is put back, so that Ctrl-C
    stays a KeyboardInterrupt everywhere else."""
    import signal
    import threading

    main = threading.current_thread() is threading.main_thread()
    before = signal.getsignal(signal.SIGINT) if main else None
    try:
        from dask_jobqueue import SLURMCluster
    except ImportError:
        raise EngineError(f"--scheduler slurm needs dask-jobqueue: {INSTALL_HINT}.") from None
    finally:
        if main and before is not None:
            signal.signal(signal.SIGINT, before)
    return SLURMCluster


def slurm_log_folder() -> Path:
    """Where the worker jobs write their logs: the user cache (home folders are shared with
    the nodes on clusters), one folder per run; never the current directory."""
    from nsys_parsers.nsys_tool import user_cache_dir

    folder = user_cache_dir() / "ranks-slurm" / time.strftime("%Y%m%d-%H%M%S")
    folder = folder.with_name(f"{folder.name}-{uuid.uuid4().hex[:6]}")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _walltime(text: str | None) -> str:
    """A job's time limit for ``#SBATCH -t``: minutes (``90``) or Slurm's forms as given."""
    if text is None:
        return SLURM_TIME
    value = str(text).strip()
    if not value or not all(c.isdigit() or c in ":-" for c in value):
        raise BadOption(f"--slurm-time: {text!r} is not a Slurm time; use minutes (90), "
                        f"HH:MM:SS (1:30:00) or D-HH:MM:SS.")
    return value


def caught(fn: Callable[..., Any], *args: Any) -> tuple[Any, BaseException | None]:
    """``fn(*args)`` on a worker, its error handed back as a value (result, None) or (None,
    error): the worker logs no traceback for an export that cannot be read, and the client
    says it in one line. An error that is not ours travels as its type and message."""
    try:
        return fn(*args), None
    except NsysMineError as exc:
        return None, exc
    except Exception as exc:  # noqa: BLE001 - any failure is this export's answer
        return None, RuntimeError(f"{type(exc).__name__}: {exc}")


def map_exports(client: Any, fn: Callable[..., Any], paths: list[Path], *args: Any,
                what: str = "export") -> Iterator[tuple[Path, Any, BaseException | None]]:
    """Run ``fn(str(path), *args)`` for each path on the workers; yield (path, result, None)
    or (path, None, error) as each ends, updating ``PROGRESS``."""
    distributed = _distributed()
    update = PROGRESS.get()
    total = len(paths)
    batch = uuid.uuid4().hex[:8]  # keys never repeat: Dask would hand back an older result
    futures = {client.submit(caught, fn, str(p), *args, key=f"{what}-{p.name}-{batch}-{i}",
                             pure=False): p for i, p in enumerate(paths)}
    if update is not None:
        update(0, total, f"{total} {what}s on {_workers(client)} worker(s)")
    done = 0
    for future in distributed.as_completed(futures):
        path = futures[future]
        done += 1
        try:
            result, error = future.result()
        except Exception as exc:  # noqa: BLE001 - its worker died: this export's answer
            result, error = None, exc
        finally:
            future.release()
        yield path, result, error
        if update is not None:
            update(done, total, path.name)


def _workers(client: Any) -> int | str:
    try:
        return len(client.scheduler_info().get("workers", {}))
    except Exception:  # noqa: BLE001 - only for the progress text
        return "?"
