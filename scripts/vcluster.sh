#!/usr/bin/env bash
# A virtual cluster on one host, from Linux namespaces (issue 25): compute nodes n1..nN and a
# storage node, each its own network, UTS, mount, PID and IPC namespace, joined by a bridge;
# a GlusterFS volume served by the storage node and mounted by every compute node at /shared,
# the storage node's link limited by tc tbf; a real multi-node Slurm (slurmctld on the
# storage node, one slurmd and one munged per compute node). No container runtime, no systemd.
#
# Usage (root):
#   scripts/vcluster.sh up [N] [--pmem-size SIZE] [--shared-bw RATE] [--shared-total] [--node-bw RATE]
#                          [--pin] [--haar PATH]
#       N compute nodes (default 4, at most 8); SIZE of each node's /mnt/pmem0 tmpfs (2g);
#       RATE of the storage node's link, each direction, in tc units (1gbit; `none`: not
#       shaped); --shared-total makes RATE one budget for both directions (reads and writes
#       share it, as they share one file server's disks; default: RATE each way);
#       --node-bw limits every compute node's link too (default: unlimited); PATH:
#       the haar binary copied to RUN/bin/haar, on PATH on every node (default
#       target/release/haar when present). --pin gives each compute node CPUs of its own
#       (node K gets CPU (K-1)*CPUS/N: with 2 CPUs and 4 nodes, n1,n2 share CPU 0 and n3,n4
#       CPU 1), so nodes of different halves do not take each other's CPU time, as separate
#       machines would not; the storage node keeps every CPU. Default: not pinned.
#   scripts/vcluster.sh exec NODE CMD...   run CMD on NODE (n1..nN or storage), in the caller's
#                                          directory when the node sees it, else in /
#   scripts/vcluster.sh kill NODE          kill every process of NODE at once (its PID namespace
#                                          ends; its mounts, link and daemons go with it)
#   scripts/vcluster.sh revive NODE        bring a killed compute node back (link, mounts,
#                                          munged, slurmd, /shared); Slurm returns it to service
#   scripts/vcluster.sh status             nodes, their holder pids, Slurm's view
#   scripts/vcluster.sh bench [--mib M] [--json FILE]
#                                          write/read throughput of /shared from 1 and from all
#                                          nodes, and of one node's /mnt/pmem0, with the ratio
#   scripts/vcluster.sh down               remove every namespace, mount and process it made,
#                                          also after a failed run (idempotent)
#
# Inside the cluster: hosts n1..nN and storage resolve through a private /etc/hosts; /shared is
# the GlusterFS volume (mode 1777); /mnt/pmem0, /dev/shm and /tmp are node-private tmpfs;
# /etc/haar/haar.yaml declares the dataspaces `shared` (/shared) and `local` (/mnt/pmem0);
# /etc/slurm/slurm.conf makes sinfo, srun, sbatch work on every node. The rest of the host's
# file system (e.g. /root, /work) is visible on every node, as a cluster's home and software
# trees are. State lives in RUN=/run/haar-vcluster ($HAAR_VCLUSTER_DIR overrides).
set -euo pipefail

RUN=${HAAR_VCLUSTER_DIR:-/run/haar-vcluster}
SUBNET=10.77.0
STORAGE_IP=$SUBNET.2
MARK="haar-vcluster"
here=$(cd "$(dirname "$0")" && pwd)
say() { echo "vcluster.sh: $*" >&2; }
die() { say "$*"; exit 1; }

node_ip() {
    case "$1" in
        storage) echo "$STORAGE_IP" ;;
        n[1-8]) echo "$SUBNET.$((10 + ${1#n}))" ;;
        *) return 1 ;;
    esac
}

# Host pid of a node's init (PID 1 of its namespace), checked to still be ours.
node_pid() {
    local pid
    pid=$(cat "$RUN/pid/$1" 2>/dev/null) || return 1
    [ -n "$pid" ] && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q -- " $MARK:$1 *\$" || return 1
    echo "$pid"
}

# Runs a command in every namespace of a node, with RUN/bin first on PATH, on the node's
# CPUs when it has its own (up --pin: RUN/cpus/NODE).
in_node() {
    local name=$1 pid cpu_pin=(); shift
    pid=$(node_pid "$name") || die "node $name is not up (scripts/vcluster.sh status)"
    [ -s "$RUN/cpus/$name" ] && cpu_pin=(taskset -c "$(cat "$RUN/cpus/$name")")
    PATH=$RUN/bin:$PATH "${cpu_pin[@]}" nsenter --target "$pid" --mount --uts --net --pid --ipc -- "$@"
}

# A node's namespaces are held by a small init (PID 1 of its own PID namespace) that reaps
# orphans and ends on SIGTERM from inside; SIGKILL from the host ends the node at once.
start_holder() {
    local name=$1 upid child=
    # shellcheck disable=SC2016
    setsid unshare --net --uts --mount --pid --ipc --fork --mount-proc --propagation private \
        bash -c 'trap "exit 0" TERM; while :; do sleep 3600 & wait $!; done' "$MARK:$name" \
        </dev/null >/dev/null 2>&1 &
    upid=$!
    for _ in $(seq 200); do
        child=$(awk '{print $1}' "/proc/$upid/task/$upid/children" 2>/dev/null || true)
        [ -n "$child" ] && tr '\0' ' ' < "/proc/$child/cmdline" 2>/dev/null | grep -q -- "$MARK:$name" && break
        child=
        sleep 0.02
    done
    [ -n "$child" ] || die "could not start the namespaces of $name (unshare failed?)"
    echo "$child" > "$RUN/pid/$name"
}

# Node-side set-up, run inside the node (bash -c with NAME, IP, ... in the environment).
# shellcheck disable=SC2016
NODE_SETUP='
set -euo pipefail
hostname "$NAME"
# A private /run (as every machine has), with the cluster directory moved back in.
mount --bind "$RUN" /mnt
mount -t tmpfs -o mode=755 "run-$NAME" /run
mkdir -p "$RUN"
mount --move /mnt "$RUN"
ip link set lo up
ip addr add "$IP/24" dev eth0
ip link set eth0 up
mount -t tmpfs -o mode=1777 "shm-$NAME" /dev/shm
mount -t tmpfs -o mode=1777 "tmp-$NAME" /tmp
mount --bind "$RUN/etc/hosts" /etc/hosts
mount --bind "$RUN/etc/slurm" /etc/slurm
mount --bind "$RUN/etc/haar" /etc/haar
mount --bind "$RUN/node/$NAME" "$RUN/local"
if [ "$NAME" = storage ]; then
    mkdir -p "$RUN/local/glusterd" "$RUN/local/glusterlog" "$RUN/local/brick"
    # Only the hooks and option groups of the package, never the state of a host glusterd.
    cp -a /var/lib/glusterd/groups /var/lib/glusterd/hooks "$RUN/local/glusterd/" 2>/dev/null || true
    mount --bind "$RUN/local/glusterd" /var/lib/glusterd
    mount --bind "$RUN/local/glusterlog" /var/log/glusterfs
    # Small: only the burst-buffer hook writes here (its `persist init`), never in the host dir.
    mount -t tmpfs -o "size=16m,mode=1777" "pmem0-$NAME" /mnt/pmem0
else
    mount -t tmpfs -o "size=$PMEM_SIZE,mode=1777" "pmem0-$NAME" /mnt/pmem0
fi
if [ -n "$BW" ] && [ "$BW" != none ] && [ "$NAME" = storage ] && [ -e "$RUN/shared-total" ]; then
    # One budget for both directions (up --shared-total): what eth0 sends and receives
    # passes one tbf on ifb0, as reads and writes share the disks of one file server.
    ip link add ifb0 type ifb
    ip link set ifb0 up
    tc qdisc add dev ifb0 root tbf rate "$BW" burst 1mb latency 100ms
    tc qdisc add dev eth0 clsact
    tc filter add dev eth0 ingress protocol all u32 match u32 0 0 action mirred egress redirect dev ifb0
    tc filter add dev eth0 egress protocol all u32 match u32 0 0 action mirred egress redirect dev ifb0
elif [ -n "$BW" ] && [ "$BW" != none ]; then
    tc qdisc add dev eth0 root tbf rate "$BW" burst 1mb latency 100ms
fi
'

# Munge and the node's Slurm daemon; on a compute node also the GlusterFS client at /shared.
# shellcheck disable=SC2016
NODE_DAEMONS='
set -euo pipefail
mkdir -p "$RUN/local/state" "$RUN/local/spool"
munged --socket="$RUN/local/munge.socket.2" --key-file="$RUN/etc/munge.key" \
    --pid-file="$RUN/local/munged.pid" --log-file="$RUN/local/munged.log" \
    --seed-file="$RUN/local/munge.seed" --force
# Every node mounts /shared, the controller too: the burst-buffer hook keeps each job
# staging plan there, for its compute nodes (burst_buffer_haar.conf: state).
# No attribute, entry or negative caching: a file another node appended to then reads in
# full, as on Lustre (with the 1 s defaults, a reader saw the new length of an index and then a
# short read: docs/cluster.md).
glusterfs --volfile-server=storage --volfile-id=shared \
    --attribute-timeout=0 --entry-timeout=0 --negative-timeout=0 \
    --log-file="$RUN/local/glusterfs-client.log" /shared
for _ in $(seq 100); do mountpoint -q /shared && break; sleep 0.1; done
mountpoint -q /shared || { echo "$NAME: /shared did not mount; see $RUN/node/$NAME/glusterfs-client.log" >&2; exit 1; }
if [ "$NAME" = storage ]; then
    slurmctld
else
    slurmd
fi
'

# The link of a node: a veth pair, eth0 in the node, NAME in the switch's bridge.
link_node() {
    local name=$1 bw=$2 pid sw
    pid=$(node_pid "$name") || die "no namespaces for $name"
    sw=$(node_pid switch) || die "no switch namespace"
    nsenter --target "$sw" --net -- ip link add "$name" type veth peer name eth0 netns "$pid"
    nsenter --target "$sw" --net -- ip link set "$name" master br0 up
    # The switch's port towards the node shapes what the node receives (writes to storage),
    # unless the storage node shapes both directions itself (up --shared-total).
    if [ -n "$bw" ] && [ "$bw" != none ] && ! { [ "$name" = storage ] && [ -e "$RUN/shared-total" ]; }; then
        nsenter --target "$sw" --net -- tc qdisc add dev "$name" root tbf rate "$bw" burst 1mb latency 100ms
    fi
}

bring_node() {
    local name=$1 bw=$2
    mkdir -p "$RUN/node/$name"
    chmod 755 "$RUN/node/$name"
    start_holder "$name"
    link_node "$name" "$bw"
    NAME=$name IP=$(node_ip "$name") RUN=$RUN PMEM_SIZE=$(cat "$RUN/pmem-size") BW=$bw \
        in_node "$name" bash -c "$NODE_SETUP"
}

node_daemons() {
    NAME=$1 RUN=$RUN in_node "$1" bash -c "$NODE_DAEMONS"
}

write_config() {
    local n=$1 i
    {
        echo "127.0.0.1 localhost"
        echo "$STORAGE_IP storage"
        for ((i = 1; i <= n; i++)); do echo "$(node_ip "n$i") n$i"; done
    } > "$RUN/etc/hosts"
    cat > "$RUN/etc/haar/haar.yaml" <<CONF
# haar's configuration on every node of the virtual cluster (scripts/vcluster.sh).
backend: pmem
roots: [/mnt/pmem0/haar]
# 256 MiB to start with (grown on demand): a node's pool is allocated in host memory.
pool_size: 268435456
dataspaces:
  shared: {kind: shared, path: /shared}
  local: {kind: posix, path: /mnt/pmem0}
CONF
    head -c 1024 /dev/urandom > "$RUN/etc/munge.key"
    chmod 400 "$RUN/etc/munge.key"
    {
        cat <<CONF
# Slurm of the virtual cluster (scripts/vcluster.sh): every node reads this file at
# /etc/slurm/slurm.conf; RUN/local is each node's own directory.
ClusterName=haarvc
SlurmctldHost=storage($STORAGE_IP)
AuthType=auth/munge
AuthInfo=socket=$RUN/local/munge.socket.2
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SchedulerParameters=bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
StateSaveLocation=$RUN/local/state
SlurmdSpoolDir=$RUN/local/spool
SlurmctldPidFile=$RUN/local/slurmctld.pid
SlurmdPidFile=$RUN/local/slurmd.pid
SlurmctldLogFile=$RUN/local/slurmctld.log
SlurmdLogFile=$RUN/local/slurmd.log
SlurmUser=root
SlurmdUser=root
ReturnToService=2
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
# haar's staging (docs/staging.md, "Per-node staging"): #HAAR directives checked at sbatch and
# shared-FS transfers by burst_buffer.lua in slurmctld; node-local ones on every node of the
# job by its Prolog (at allocation), TaskProlog (HAAR_STAGE_LOCAL) and Epilog.
BurstBufferType=burst_buffer/lua
PrologFlags=Alloc
Prolog=$RUN/bin/haar-prolog.sh
TaskProlog=$RUN/bin/haar-taskprolog.sh
Epilog=$RUN/bin/haar-epilog.sh
# A dead node is seen within seconds (the node-failure tests kill whole nodes).
SlurmdTimeout=5
MessageTimeout=3
TCPTimeout=2
KillWait=2
CONF
        for ((i = 1; i <= n; i++)); do
            echo "NodeName=n$i NodeAddr=$(node_ip "n$i") CPUs=$(nproc) State=UNKNOWN"
        done
        echo "PartitionName=batch Nodes=n[1-$n] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE"
    } > "$RUN/etc/slurm/slurm.conf"
    printf 'CgroupPlugin=cgroup/v1\n' > "$RUN/etc/slurm/cgroup.conf"
    cat > "$RUN/etc/slurm/burst_buffer.conf" <<CONF
Directive=HAAR
Flags=TeardownFailure
StageInTimeout=300
StageOutTimeout=300
OtherTimeout=300
CONF
    cat > "$RUN/etc/slurm/burst_buffer_haar.conf" <<CONF
haar = $RUN/bin/haar
config = /etc/haar/haar.yaml
state = /shared/.haar-stage
setpriv = $(command -v setpriv)
scancel = $(command -v scancel)
per_node = local
node_state = /run/haar-stage
CONF
}

# Directories the nodes mount over, created on the host when missing and removed by `down`.
host_dir() {
    [ -d "$1" ] && return 0
    mkdir -p "$1"
    echo "$1" >> "$RUN/created-dirs"
}

cmd_up() {
    local n=4 pmem=2g shared_bw=1gbit node_bw='' haar='' pin=0 total=0
    [ -x "$here/../target/release/haar" ] && haar=$here/../target/release/haar
    while [ $# -gt 0 ]; do
        case "$1" in
            --pmem-size) pmem=$2; shift 2 ;;
            --shared-bw) shared_bw=$2; shift 2 ;;
            --node-bw) node_bw=$2; shift 2 ;;
            --haar) haar=$2; shift 2 ;;
            --pin) pin=1; shift ;;
            --shared-total) total=1; shift ;;
            [0-9]*) n=$1; shift ;;
            *) die "up: unknown argument $1 (see --help)" ;;
        esac
    done
    if [ "$n" -lt 1 ] || [ "$n" -gt 8 ]; then die "up: N must be 1..8 (got $n)"; fi
    [ "$(id -u)" = 0 ] || die "needs root (namespaces, mounts, slurmd)"
    local t
    for t in unshare nsenter setsid ip tc munged slurmctld slurmd sinfo glusterd gluster glusterfs mountpoint setpriv; do
        command -v $t >/dev/null || die "$t missing: run scripts/setup.sh (iproute2, munge, slurm-wlm, glusterfs-server, glusterfs-client)"
    done
    if [ -d "$RUN" ]; then
        any_up && die "a virtual cluster is already up in $RUN; scripts/vcluster.sh down first"
        cmd_down
    fi
    local t0=$SECONDS
    mkdir -p "$RUN"/{pid,etc/slurm,etc/haar,node,local,bin}
    chmod 755 "$RUN" "$RUN/local" "$RUN/etc"
    touch "$RUN/created-dirs"
    echo "$n" > "$RUN/nodes"
    echo "$pmem" > "$RUN/pmem-size"
    echo "$node_bw" > "$RUN/node-bw"
    echo "$shared_bw" > "$RUN/shared-bw"
    [ "$total" = 1 ] && touch "$RUN/shared-total"
    if [ "$pin" = 1 ]; then
        local k cpus
        cpus=$(nproc)
        mkdir -p "$RUN/cpus"
        for ((k = 1; k <= n; k++)); do echo $(((k - 1) * cpus / n)) > "$RUN/cpus/n$k"; done
    fi
    if [ -n "$haar" ]; then
        [ -x "$haar" ] || die "--haar $haar is not executable"
        cp "$haar" "$RUN/bin/haar"
    fi
    # The Slurm launch scripts, where every node sees them: a checkout under /tmp is hidden by
    # each node's private /tmp (a clean-clone CI run in /tmp/clean found it).
    cp "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"/slurm-{serve,mount}.sh "$RUN/bin/"
    # haar's staging hooks: the Lua one beside slurm.conf, the node ones (one script, three
    # names) where every node sees them.
    cp "$here/../slurm/burst_buffer.lua" "$RUN/etc/slurm/"
    cp "$here/../slurm/haar-node.sh" "$RUN/bin/"
    local part
    for part in prolog taskprolog epilog; do ln -sf haar-node.sh "$RUN/bin/haar-$part.sh"; done
    host_dir /shared
    host_dir /mnt/pmem0
    host_dir /etc/haar
    host_dir /var/log/glusterfs
    write_config "$n"
    up_ok=0
    trap 'if [ "$up_ok" != 1 ]; then say "bring-up failed; tearing down (logs lost; rerun with HAAR_VCLUSTER_KEEP=1 to keep $RUN)"; [ -n "${HAAR_VCLUSTER_KEEP:-}" ] || cmd_down; fi' EXIT

    # The switch: a bridge in a namespace of its own, so the host's network is untouched.
    start_holder switch
    in_node switch ip link set lo up
    in_node switch ip link add br0 type bridge
    in_node switch ip link set br0 up

    bring_node storage "$shared_bw"
    in_node storage glusterd --pid-file="$RUN/node/storage/glusterd.pid"
    local ok=0
    for _ in $(seq 100); do in_node storage gluster --mode=script volume list >/dev/null 2>&1 && { ok=1; break; }; sleep 0.1; done
    [ $ok = 1 ] || die "glusterd did not answer; see $RUN/node/storage/glusterlog/"
    in_node storage gluster --mode=script volume create shared transport tcp "storage:$RUN/local/brick" force >/dev/null
    # Client-side caches off, for the same coherence between nodes (docs/cluster.md).
    local opt
    for opt in quick-read io-cache read-ahead stat-prefetch open-behind; do
        in_node storage gluster --mode=script volume set shared "performance.$opt" off >/dev/null
    done
    in_node storage gluster --mode=script volume start shared >/dev/null
    node_daemons storage

    local i
    for ((i = 1; i <= n; i++)); do bring_node "n$i" "$node_bw"; done
    for ((i = 1; i <= n; i++)); do node_daemons "n$i"; done
    in_node n1 chmod 1777 /shared
    wait_idle "$n"
    up_ok=1
    trap - EXIT
    say "up: $n compute node(s) n1..n$n + storage in $((SECONDS - t0)) s; /shared: GlusterFS at $shared_bw; try: scripts/vcluster.sh exec n1 srun -N $n hostname"
}

# Until Slurm says every compute node is idle (30 s).
wait_idle() {
    local n=$1 idle
    for _ in $(seq 150); do
        idle=$(in_node storage sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)
        [ "$idle" -ge "$n" ] && return 0
        sleep 0.2
    done
    in_node storage sinfo -N >&2 || true
    die "Slurm: not every node became idle within 30 s; see $RUN/node/*/slurm*.log"
}

any_up() {
    local f
    for f in "$RUN"/pid/*; do
        [ -e "$f" ] && node_pid "$(basename "$f")" >/dev/null && return 0
    done
    return 1
}

cmd_kill() {
    local name=${1:?kill NODE} pid
    pid=$(node_pid "$name") || die "node $name is not up"
    kill -9 "$pid"
    for _ in $(seq 100); do [ -e "/proc/$pid" ] || break; sleep 0.05; done
    # The namespace's last processes (exiting FUSE daemons) are gone when its init is reaped.
    for _ in $(seq 100); do
        pgrep -f -- "$MARK:$name\$" >/dev/null || break
        sleep 0.05
    done
    rm -f "$RUN/pid/$name"
    rm -f "$RUN/node/$name"/*.pid
}

cmd_revive() {
    local name=${1:?revive NODE}
    [ -f "$RUN/nodes" ] || die "no virtual cluster in $RUN"
    if [[ "$name" != n[1-8] ]] || [ "${name#n}" -gt "$(cat "$RUN/nodes")" ]; then
        die "revive: $name is not a compute node of this cluster"
    fi
    node_pid "$name" >/dev/null && die "revive: $name is up"
    bring_node "$name" "$(cat "$RUN/node-bw")"
    node_daemons "$name"
}

cmd_status() {
    [ -f "$RUN/nodes" ] || { say "no virtual cluster in $RUN"; return 1; }
    local f name
    for f in "$RUN"/pid/*; do
        name=$(basename "$f")
        if node_pid "$name" >/dev/null; then echo "$name up (pid $(cat "$f"))"; else echo "$name down"; fi
    done
    in_node storage sinfo -N || true
}

cmd_down() {
    local pids=() pid f
    if [ -d "$RUN/pid" ]; then
        for f in "$RUN"/pid/*; do
            [ -e "$f" ] || continue
            pid=$(node_pid "$(basename "$f")") && pids+=("$pid")
        done
    fi
    # Holders whose pid files are lost (a bring-up that failed half-way): found by their mark.
    for pid in $(pgrep -f -- "^bash -c .* $MARK:[a-z0-9]+\$" || true); do pids+=("$pid"); done
    for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do
        for _ in $(seq 100); do [ -e "/proc/$pid" ] || break; sleep 0.05; done
    done
    # Nothing is mounted on the host (every mount was made inside a node's namespace); this
    # only guards against a future change leaking one.
    local m
    for m in /shared /mnt/pmem0 /etc/haar "$RUN/local"; do
        if grep -q " $m " /proc/self/mounts 2>/dev/null; then umount -l "$m" 2>/dev/null || true; fi
    done
    if [ -f "$RUN/created-dirs" ]; then
        tac "$RUN/created-dirs" | while read -r d; do rmdir "$d" 2>/dev/null || true; done
    fi
    rm -rf "$RUN"
}

cmd_exec() {
    local name=${1:?exec NODE CMD...}; shift
    [ $# -gt 0 ] || die "exec $name: give a command"
    # shellcheck disable=SC2016
    in_node "$name" bash -c 'cd "$1" 2>/dev/null || cd /; shift; exec "$@"' vcluster-exec "$PWD" "$@"
}

# Throughput of /shared (GlusterFS behind the storage node's shaped link) from one node and
# from every node at once, and of one node's /mnt/pmem0, with dd (1 MiB blocks; writes end
# with fsync). Every read is of a file another node wrote, so no client cache can serve it and
# the bytes cross the storage node's link.
cmd_bench() {
    local mib=256 json=
    while [ $# -gt 0 ]; do
        case "$1" in
            --mib) mib=$2; shift 2 ;;
            --json) json=$2; shift 2 ;;
            *) die "bench: unknown argument $1" ;;
        esac
    done
    local n i t0 t1
    n=$(cat "$RUN/nodes")
    in_node n1 mkdir -p /shared/.vcbench
    rate() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.1f", b / 1048576 / s }'; }
    now() { date +%s.%N; }
    secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }
    dd_write() { in_node "$1" dd if=/dev/zero of="$2" bs=1M count="$mib" conv=fsync status=none; }
    dd_read() { in_node "$1" dd if="$2" of=/dev/null bs=1M status=none; }
    # One node writes, another reads (so the reader's cache cannot serve it).
    t0=$(now); dd_write n1 /shared/.vcbench/one; t1=$(now)
    local w1 r1 wn rn wl rl
    w1=$(rate $((mib * 1048576)) "$(secs "$t0" "$t1")")
    local reader=n2; [ "$n" -ge 2 ] || reader=n1
    t0=$(now); dd_read "$reader" /shared/.vcbench/one; t1=$(now)
    r1=$(rate $((mib * 1048576)) "$(secs "$t0" "$t1")")
    # Every node at once, each its own file; then every node reads its neighbour's.
    t0=$(now)
    for ((i = 1; i <= n; i++)); do dd_write "n$i" "/shared/.vcbench/n$i" & done
    wait; t1=$(now)
    wn=$(rate $((n * mib * 1048576)) "$(secs "$t0" "$t1")")
    t0=$(now)
    for ((i = 1; i <= n; i++)); do dd_read "n$i" "/shared/.vcbench/n$(( i % n + 1 ))" & done
    wait; t1=$(now)
    rn=$(rate $((n * mib * 1048576)) "$(secs "$t0" "$t1")")
    in_node n1 rm -rf /shared/.vcbench
    # The node-local tier: write (new tmpfs pages), then read.
    t0=$(now); dd_write n1 /mnt/pmem0/.vcbench; t1=$(now)
    wl=$(rate $((mib * 1048576)) "$(secs "$t0" "$t1")")
    t0=$(now); dd_read n1 /mnt/pmem0/.vcbench; t1=$(now)
    rl=$(rate $((mib * 1048576)) "$(secs "$t0" "$t1")")
    in_node n1 rm -f /mnt/pmem0/.vcbench
    local out
    out=$(cat <<JSON
{
  "nodes": $n,
  "shared_bw": "$(cat "$RUN/shared-bw")",
  "mib_per_node": $mib,
  "host": "$(uname -r), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')",
  "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)",
  "shared_write_1_node_mib_s": $w1,
  "shared_read_1_node_mib_s": $r1,
  "shared_write_all_nodes_mib_s": $wn,
  "shared_read_all_nodes_mib_s": $rn,
  "local_write_mib_s": $wl,
  "local_read_mib_s": $rl,
  "local_over_shared_write_per_node": $(awk -v a="$wl" -v b="$wn" -v n="$n" 'BEGIN { printf "%.1f", a / (b / n) }'),
  "local_over_shared_read_per_node": $(awk -v a="$rl" -v b="$rn" -v n="$n" 'BEGIN { printf "%.1f", a / (b / n) }')
}
JSON
)
    echo "$out"
    if [ -n "$json" ]; then echo "$out" > "$json"; fi
}

case "${1:-}" in
    up) shift; cmd_up "$@" ;;
    down) shift; cmd_down ;;
    exec) shift; cmd_exec "$@" ;;
    kill) shift; cmd_kill "$@" ;;
    revive) shift; cmd_revive "$@" ;;
    status) shift; cmd_status ;;
    bench) shift; cmd_bench "$@" ;;
    -h|--help|"") awk 'NR > 1 && /^set -euo/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" ;;
    *) die "unknown command $1 (see --help)" ;;
esac
