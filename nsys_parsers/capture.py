"""What an export says about how its capture ran: the session's UTC start (to put exports of
different machines on one clock), the machine it ran on (exports of one machine share its
clock) and the launched program's environment and arguments (where a rank may be named:
``RANK=3``, ``--rank 3``)."""

from __future__ import annotations

from nsys_parsers.export import Export
from nsys_parsers.queries import Query

SESSION_TABLE = "TARGET_INFO_SESSION_START_TIME"
CAPTURE_TABLE = "META_DATA_CAPTURE"

SESSION_START_UTC = Query(
    "session_start_utc", f"SELECT utcEpochNs FROM {SESSION_TABLE} LIMIT 1",
    needs={SESSION_TABLE: ("utcEpochNs",)}, purpose="the capture's start time")
CAPTURE_SETTINGS = Query(
    "capture_settings",
    f"""SELECT name, value FROM {CAPTURE_TABLE}
        WHERE name LIKE ? ESCAPE '\\' OR name LIKE ? ESCAPE '\\' ORDER BY rowid""",
    needs={CAPTURE_TABLE: ("name", "value")}, purpose="the capture's command line")


def session_start_utc(export: Export) -> int | None:
    """The capture's start as UTC nanoseconds since the epoch (None: not recorded). nsys's
    timestamps count from the session's start, so ``utc + t`` is the UTC time of ``t``."""
    if not export.has_column(SESSION_TABLE, "utcEpochNs"):
        return None
    row = export.db.execute(SESSION_START_UTC.sql(export)).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def on_utc_clock(t: int, utc: int | None) -> bool:
    """Whether the timestamp ``t`` counts UTC nanoseconds (an export made with
    ``--ts-normalize``) rather than from the session's start: near the epoch's nanoseconds."""
    return utc is not None and t >= utc // 2


CAPTURE_HOST = Query(
    "capture_host", f"SELECT value FROM {CAPTURE_TABLE} WHERE name = 'DEVICE_DISPLAY_NAME' "
                    f"LIMIT 1",
    needs={CAPTURE_TABLE: ("name", "value")}, purpose="the machine the capture ran on")
# where the launched program's environment names its machine, most trusted first (HOSTNAME
# is inherited: `srun` from a job script passes the submitting machine's on)
HOST_VARIABLES = ("SLURMD_NODENAME", "SLURM_TOPOLOGY_ADDR", "HOSTNAME")


def capture_host(export: Export, env: dict[str, str]) -> str | None:
    """The machine the capture ran on: the device nsys names (``DEVICE_DISPLAY_NAME``), else
    its name in the launched program's environment (``env``); None: not recorded."""
    if export.has_column(CAPTURE_TABLE, "name") and export.has_column(CAPTURE_TABLE, "value"):
        row = export.db.execute(CAPTURE_HOST.sql(export)).fetchone()
        if row and row[0] and str(row[0]) != "Local (CLI)":
            return str(row[0]).split(".")[0]
    for key in HOST_VARIABLES:
        if env.get(key):
            return env[key].split(".")[0]
    return None


def capture_environment(export: Export) -> tuple[dict[str, str], list[str]]:
    """The launched program's environment variables and its arguments (empty where the export
    does not record them)."""
    env: dict[str, str] = {}
    args: list[str] = []
    if not (export.has_column(CAPTURE_TABLE, "name")
            and export.has_column(CAPTURE_TABLE, "value")):
        return env, args
    sql = CAPTURE_SETTINGS.sql(export)
    for name, value in export.db.execute(sql, ("PROCESS\\_%:ENVIRONMENT\\_VARIABLE",
                                               "PROCESS\\_%:ARGUMENT\\_%")):
        text = str(value or "")
        if str(name).endswith("ENVIRONMENT_VARIABLE"):
            key, eq, val = text.partition("=")
            if eq:
                env[key] = val.strip().strip('"')
        else:
            args.append(text)
    return env, args
