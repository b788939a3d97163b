#!/usr/bin/env bash
# A private one-node Slurm cluster for the tests (Debian's slurm-wlm + munge), run as root.
#
#   scripts/slurm_cluster.sh install        apt-get install slurm-wlm munge (CI; needs root)
#   scripts/slurm_cluster.sh start DIR      start munged, slurmctld and slurmd with everything
#                                           (config, key, sockets, state, logs) inside DIR;
#                                           prints `SLURM_CONF=DIR/slurm.conf` when the node is idle
#   scripts/slurm_cluster.sh stop DIR       end the daemons started for DIR, by their PIDs
#
# Nothing outside DIR is touched: the system's /etc/slurm and /etc/munge stay as they are, and
# clients (sbatch, squeue, sacct, scancel, submitit) find this cluster through $SLURM_CONF.
# Free TCP ports are picked at start, so two clusters (two test runs) do not collide.
# There is no slurmdbd: `sacct` answers from the job-completion log (JobCompType=jobcomp/filetxt)
# only with --completion; nsys-mine reads job states from squeue/scontrol and then sacct.
set -euo pipefail

cmd="${1:-}"
dir="${2:-}"

die() { echo "slurm_cluster.sh: $*" >&2; exit 1; }

case "$cmd" in
install)
    [ "$(id -u)" = 0 ] || die "install needs root"
    if command -v slurmctld >/dev/null && command -v slurmd >/dev/null \
        && command -v munged >/dev/null && command -v sbatch >/dev/null; then
        exit 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends slurm-wlm munge >/dev/null
    ;;
start)
    [ -n "$dir" ] || die "usage: $0 start DIR"
    [ "$(id -u)" = 0 ] || die "starting slurmd needs root"
    for b in munged mungekey slurmctld slurmd sbatch squeue; do
        command -v "$b" >/dev/null || die "$b not found (install slurm-wlm and munge: $0 install)"
    done
    mkdir -p "$dir"
    dir="$(cd "$dir" && pwd)"
    chmod 700 "$dir"
    mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
    chmod 700 "$dir/munge"
    [ -f "$dir/munge/munge.key" ] || mungekey --create --keyfile="$dir/munge/munge.key" >/dev/null 2>&1 \
        || dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null
    chmod 400 "$dir/munge/munge.key"
    munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.sock" \
        --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
        --seed-file="$dir/munge/munged.seed"
    read -r ctl_port node_port < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))
EOF
)
    # SLURM_CLUSTER_CPUS lets the tests offer more job slots than cores (their jobs mostly
    # sleep); slurmd then takes the configured count (SlurmdParameters=config_overrides)
    cpus="${SLURM_CLUSTER_CPUS:-$(nproc)}"
    overrides=""
    [ "$cpus" != "$(nproc)" ] && overrides="SlurmdParameters=config_overrides"
    mem_mb="$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)"
    host="$(hostname -s)"
    cat > "$dir/slurm.conf" <<EOF
# one-node test cluster made by scripts/slurm_cluster.sh
ClusterName=nsysmine
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmdPort=$node_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$dir/log/jobcomp.txt
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MpiDefault=none
KillWait=5
OverTimeLimit=0
MinJobAge=600
InactiveLimit=0
$overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF"
    slurmd -f "$SLURM_CONF" -N localhost
    for _ in $(seq 1 100); do
        state="$(sinfo -h -n localhost -o '%T' 2>/dev/null || true)"
        [ "$state" = idle ] && { echo "SLURM_CONF=$SLURM_CONF"; exit 0; }
        sleep 0.1
    done
    echo "slurm_cluster.sh: the node did not become idle (state: ${state:-none}); logs in $dir/log" >&2
    tail -n 5 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2 || true
    exit 1
    ;;
stop)
    [ -n "$dir" ] || die "usage: $0 stop DIR"
    # end the cluster's jobs first: slurmstepd and the job processes outlive slurmd
    if [ -f "$dir/slurm.conf" ] && [ -f "$dir/slurmctld.pid" ] \
        && kill -0 "$(cat "$dir/slurmctld.pid")" 2>/dev/null; then
        export SLURM_CONF="$dir/slurm.conf"
        scancel --user="$(id -un)" 2>/dev/null || true
        for _ in $(seq 1 150); do
            [ -z "$(squeue -h -t PD,R,CG,S -o %i 2>/dev/null)" ] && break
            sleep 0.1
        done
    fi
    # the three daemons each take ~2 s to exit: end them together
    pids=""
    for pidfile in "$dir/slurmd.pid" "$dir/slurmctld.pid" "$dir/munge/munged.pid"; do
        [ -f "$pidfile" ] || continue
        pid="$(cat "$pidfile")"
        [ -n "$pid" ] && kill "$pid" 2>/dev/null && pids="$pids $pid"
    done
    for _ in $(seq 1 100); do
        alive=""
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && alive="$alive $pid"; done
        [ -z "$alive" ] && break
        sleep 0.1
    done
    for pid in $alive; do kill -9 "$pid" 2>/dev/null || true; done
    ;;
*)
    die "usage: $0 install | start DIR | stop DIR"
    ;;
esac
