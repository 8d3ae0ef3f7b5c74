#!/usr/bin/env bash
# Runs scripts/slurm-serve.sh under a real, private, single-node Slurm (Debian slurm-wlm 22.05 +
# munge) on this machine, as root, without systemd; everything lives under a temporary
# directory and is stopped at the end. Checks: the servers come up through srun, the generated
# configuration reaches them, a field archived through it reads back byte-identical, `wait`
# completes, and scripts/slurm-mount.sh mounts the servers' file system on the node (a file
# copied in reads back, the mount is gone after).  Usage (root): scripts/slurm-selftest.sh [PATH/TO/haar]
set -euo pipefail
haar=$(readlink -f "${1:-target/release/haar}")
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" = 0 ] || { echo "slurm-selftest.sh: needs root (slurmd, munged)" >&2; exit 1; }
for t in slurmctld slurmd munged sbatch; do
    command -v $t >/dev/null || { echo "slurm-selftest.sh: $t missing: apt-get install slurm-wlm munge" >&2; exit 1; }
done
[ -x "$haar" ] || { echo "slurm-selftest.sh: $haar is not an executable haar" >&2; exit 1; }

S=$(mktemp -d /tmp/haar-slurm.XXXXXX)
H=$(hostname -s)
. "$here/slurm-ports.sh"
port=$(slurm_ports)
mkdir -p "$S/munge" "$S/state" "$S/spool" "$S/log" "$S/job"
chmod 755 "$S" "$S/munge"
# A private munge key and socket: nothing of the host's own munge/Slurm is touched.
head -c 1024 /dev/urandom > "$S/munge/munge.key"; chmod 400 "$S/munge/munge.key"
cleanup() {
    # Daemons found by their pid files, and by the private configuration they were given.
    local pids
    pids=$(cat "$S/slurmd.pid" "$S/slurmctld.pid" "$S/munge/munged.pid" 2>/dev/null || true)
    pids="$pids $(pgrep -f -- "-f $S/slurm.conf" || true)"
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    sleep 2
    for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
    fusermount3 -u -z "$S/mnt" 2>/dev/null || true
    rm -rf "/dev/shm/haar-selftest-$port"
    [ "$passed" = 1 ] && rm -rf "$S"
}
passed=0
trap cleanup EXIT
munged --socket="$S/munge/munge.socket.2" --key-file="$S/munge/munge.key" \
    --pid-file="$S/munge/munged.pid" --log-file="$S/log/munged.log" --seed-file="$S/munge/seed" --force
cat > "$S/slurm.conf" <<CONF
ClusterName=haarselftest
SlurmctldHost=$H
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.socket.2
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmctldPort=$((port + 1))
SlurmdPort=$((port + 2))
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
NodeName=$H CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$H Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
printf 'CgroupPlugin=cgroup/v1\n' > "$S/cgroup.conf"
export SLURM_CONF=$S/slurm.conf
slurmctld -f "$SLURM_CONF"
slurmd -f "$SLURM_CONF"
for _ in $(seq 50); do sinfo -h -o %T 2>/dev/null | grep -q idle && break; sleep 0.2; done
sinfo -h -o %T 2>/dev/null | grep -q idle || {
    echo "$(basename "$0"): the private Slurm did not come up (node not idle after 10 s); slurmctld log:" >&2
    tail -20 "$S/log/slurmctld.log" >&2; exit 1; }

cd "$S/job"
head -c 300000 /dev/urandom > field.bin
key=class=od,expver=1,stream=oper,date=20261122,time=0,domain=g,type=fc,levtype=sfc,step=0,param=167
req=class=od,expver=1,stream=oper,date=20261122,time=0,type=fc,levtype=sfc,step=0,param=167
cat > job.sh <<JOB
#!/bin/bash
#SBATCH -N 1
#SBATCH -t 5
set -euo pipefail
export HAAR=$haar
t=$S/token
$here/slurm-serve.sh --root /dev/shm/haar-selftest-$port --port $port --token-file \$t \
    --config $S/job/cluster.yaml -- bash -c "
  set -e
  \\\$HAAR --token-file \$t archive --key $key field.bin
  \\\$HAAR --token-file \$t retrieve $req -o back.bin
  cmp field.bin back.bin
  \\\$HAAR --servers \\\$HAAR_SERVERS --token-file \$t wait $req --timeout 10
  echo SELFTEST-CLIENT-OK
  $here/slurm-mount.sh --mountpoint $S/mnt --token-file \$t -- bash -c '
    cp field.bin \\\$HAAR_MOUNT/f && sync && cmp field.bin \\\$HAAR_MOUNT/f && echo SELFTEST-MOUNT-OK'
  if grep -q ' $S/mnt ' /proc/mounts; then echo MOUNT-LEFT-BEHIND; exit 1; fi
  echo SELFTEST-UNMOUNT-OK"
JOB
jid=$(sbatch --parsable job.sh)
for _ in $(seq 120); do [ -z "$(squeue -h -j "$jid" -o %T 2>/dev/null)" ] && break; sleep 0.5; done
cat "slurm-$jid.out"
grep -q SELFTEST-CLIENT-OK "slurm-$jid.out" && grep -q SELFTEST-MOUNT-OK "slurm-$jid.out" \
    && grep -q SELFTEST-UNMOUNT-OK "slurm-$jid.out" \
    && grep -q 'type: dist' cluster.yaml \
    && { passed=1; echo "slurm-selftest.sh: ok (job $jid under Slurm $(sinfo -V | awk '{print $2}'))"; } \
    || { echo "slurm-selftest.sh: FAILED; logs in $S" >&2; exit 1; }
