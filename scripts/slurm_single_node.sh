#!/usr/bin/env bash
# A single-node Slurm on this machine, for the dispatcher's tests (tests/slurm/) and its benchmark.
#
# Writes /etc/slurm/slurm.conf for this host (CPUs and memory from `slurmd -C`; one partition, `debug`), creates a
# munge key if there is none, starts munged, slurmctld and slurmd as root, and waits until `sinfo` shows the node idle.
# Nothing here needs cgroups (containers often have none): processes are tracked by their Linux process tree
# (proctrack/linuxproc) and tasks are not bound (task/none). State and logs go under $SLURM_STATE_DIR.
# Idempotent: daemons already running are left alone. Run as root (CI does). Debian: apt-get install slurm-wlm munge.
#   scripts/slurm_single_node.sh          start (or check) the cluster
#   scripts/slurm_single_node.sh stop     stop the daemons this script started
set -euo pipefail

state="${SLURM_STATE_DIR:-/var/tmp/npu-advisor-slurm}"
conf=/etc/slurm/slurm.conf

if [ "$(id -u)" -ne 0 ]; then
  echo "slurm_single_node: run as root (it starts munged, slurmctld and slurmd)" >&2
  exit 2
fi
for tool in munged slurmctld slurmd sinfo; do
  command -v "$tool" >/dev/null 2>&1 || { echo "slurm_single_node: $tool is missing (apt-get install slurm-wlm munge)" >&2; exit 2; }
done

stop() {
  for daemon in slurmd slurmctld; do
    if [ -f "$state/$daemon.pid" ] && kill -0 "$(cat "$state/$daemon.pid")" 2>/dev/null; then
      kill "$(cat "$state/$daemon.pid")"
    fi
  done
}
if [ "${1:-start}" = stop ]; then
  stop
  exit 0
fi

mkdir -p "$state/ctld" "$state/d" /etc/slurm
host="$(hostname -s)"
node="$(slurmd -C | head -n 1)"  # NodeName=<host> CPUs=... RealMemory=...
cpus="$(sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' <<<"$node")"
memory="$(sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' <<<"$node")"
cat >"$conf.new" <<CONF
# written by npu-advisor's scripts/slurm_single_node.sh: one node, one partition, no cgroups
ClusterName=npu-advisor-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$state/ctld
SlurmdSpoolDir=$state/d
SlurmctldPidFile=$state/slurmctld.pid
SlurmdPidFile=$state/slurmd.pid
SlurmctldLogFile=$state/slurmctld.log
SlurmdLogFile=$state/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=60
InactiveLimit=0
MinJobAge=30
KillWait=5
MpiDefault=none
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
if ! cmp -s "$conf.new" "$conf"; then
  mv "$conf.new" "$conf"
  stop  # a changed configuration: start the daemons again with it
  sleep 1
else
  rm -f "$conf.new"
fi

# munge: a key (the packages ship one on Debian; create one if missing), then the daemon as its user
if [ ! -s /etc/munge/munge.key ]; then
  mkdir -p /etc/munge
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
fi
chown munge:munge /etc/munge /etc/munge/munge.key
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown munge:munge /run/munge /var/lib/munge /var/log/munge
if ! munge -n >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n >/dev/null 2>&1 && break; sleep 0.1; done
fi
munge -n | unmunge >/dev/null || { echo "slurm_single_node: munged does not answer" >&2; exit 1; }

running() { [ -f "$state/$1.pid" ] && kill -0 "$(cat "$state/$1.pid")" 2>/dev/null; }
running slurmctld || slurmctld -c  # -c: no jobs recovered from an earlier run's saved state
for _ in $(seq 100); do scontrol ping 2>/dev/null | grep -q UP && break; sleep 0.2; done
running slurmd || slurmd
# the node reaches `idle` once slurmd registered; a node left `down` by an earlier run is resumed
for _ in $(seq 150); do
  state_now="$(sinfo -h -n "$host" -o %T 2>/dev/null || true)"
  case "$state_now" in
    idle | mixed | allocated) echo "slurm_single_node: node $host is $state_now (partition debug)"; exit 0 ;;
    down* | drain*) scontrol update NodeName="$host" State=RESUME 2>/dev/null || true ;;
  esac
  sleep 0.2
done
echo "slurm_single_node: node $host did not become idle; sinfo says '${state_now:-nothing}'; logs in $state" >&2
tail -n 20 "$state/slurmctld.log" "$state/slurmd.log" >&2 || true
exit 1
