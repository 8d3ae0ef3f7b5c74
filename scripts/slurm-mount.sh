#!/usr/bin/env bash
# One `haar mount` per node of a Slurm allocation, all over the same servers: every node sees
# one namespace (docs/design.md §15.6, docs/cluster.md).
#
# Inside an allocation, with the servers' configuration written by scripts/slurm-serve.sh:
#   scripts/slurm-mount.sh --mountpoint DIR [--config FILE] [--token-file FILE]
#                          [--fs-name NAME] [-- COMMAND ARGS...]
#
#   1. starts `haar --config FILE mount --mount-id ID DIR` on every node of
#      $SLURM_JOB_NODELIST (one job step, `srun --overlap --ntasks-per-node=1`), ID being
#      the node's number in the allocation ($SLURM_NODEID), so that concurrent mounts never
#      hand out the same inode; the placement is the servers' (the same FILE), so file chunks
#      and metadata are spread over all servers by the rendezvous hash, with its replicas;
#      "%n" in DIR is replaced by the node number (several mounts on one machine);
#   2. waits until every node has mounted (its log says `mounted DIR`; 60 s at most);
#   3. with `-- COMMAND`, runs it with HAAR_MOUNT=DIR (node 0's) exported and unmounts every
#      node when it ends (one more srun step running fusermount3 -u; its exit status is the
#      script's); without, prints HAAR_MOUNT and keeps the mounts until the job ends or the
#      script is interrupted.
#
# FILE defaults to $HAAR_CONFIG (slurm-serve.sh exports it to its command), the token file to
# $HAAR_TOKEN_FILE or $HOME/.haar/token, as slurm-serve.sh. Typical job:
#   scripts/slurm-serve.sh --replicas 2 -- scripts/slurm-mount.sh --mountpoint /tmp/haarfs \
#       -- srun ./model --output /tmp/haarfs/run1
#
# Without Slurm (one machine, tests): HAAR_MOUNT_LOCAL_NODES=N runs the same per-node command
# as N local processes (node numbers 0..N-1) instead of srun; give DIR with "%n".
set -euo pipefail

mountpoint=
config=${HAAR_CONFIG:-}
token_file=${HAAR_TOKEN_FILE:-$HOME/.haar/token}
fs_name=main
haar=${HAAR:-haar}
while [ $# -gt 0 ]; do
    case "$1" in
        --mountpoint) mountpoint=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --token-file) token_file=$2; shift 2 ;;
        --fs-name) fs_name=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,27p' "$0"; exit 0 ;;
        *) echo "slurm-mount.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
done

[ -n "$mountpoint" ] || { echo "slurm-mount.sh: give --mountpoint DIR" >&2; exit 1; }
[ -n "$config" ] && [ -s "$config" ] || {
    echo "slurm-mount.sh: no server configuration: give --config FILE (scripts/slurm-serve.sh writes one and exports HAAR_CONFIG)" >&2
    exit 1
}
[ -s "$token_file" ] || { echo "slurm-mount.sh: token file $token_file is missing or empty (the servers' --token-file)" >&2; exit 1; }
command -v "$haar" >/dev/null || { echo "slurm-mount.sh: $haar not found; set HAAR=/path/to/haar" >&2; exit 1; }
haar=$(command -v "$haar")
config=$(readlink -f "$config")

local_nodes=${HAAR_MOUNT_LOCAL_NODES:-}
if [ -n "$local_nodes" ]; then
    n=$local_nodes
    log_dir=$(mktemp -d "${TMPDIR:-/tmp}/haar-mount-local.XXXXXX")
else
    if [ -z "${SLURM_JOB_NODELIST:-}" ]; then
        echo "slurm-mount.sh: not inside a Slurm allocation (no SLURM_JOB_NODELIST); use sbatch or salloc, or HAAR_MOUNT_LOCAL_NODES=N on one machine" >&2
        exit 1
    fi
    n=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | wc -l)
    log_dir=${SLURM_SUBMIT_DIR:-$PWD}/haar-mount-$SLURM_JOB_ID
    mkdir -p "$log_dir"
fi

# What every node runs: its own mount point and mount id from its node number; `exec` so that
# the launcher's SIGTERM reaches haar mount, which then unmounts and exits 0.
# shellcheck disable=SC2016
node_task='id=$SLURM_NODEID; mnt=${1//%n/$id}; mkdir -p "$mnt";
exec "$0" --config "$2" --token-file "$3" mount --fs-name "$4" --mount-id "$id" "$mnt"'

pids=()
if [ -n "$local_nodes" ]; then
    for ((i = 0; i < n; i++)); do
        SLURM_NODEID=$i bash -c "$node_task" "$haar" "$mountpoint" "$config" "$token_file" "$fs_name" \
            > "$log_dir/node$i.log" 2>&1 &
        pids+=($!)
    done
else
    srun --overlap --nodes="$n" --ntasks="$n" --ntasks-per-node=1 --kill-on-bad-exit=1 \
        --output="$log_dir/node%n.log" \
        bash -c "$node_task" "$haar" "$mountpoint" "$config" "$token_file" "$fs_name" &
    pids+=($!)
fi
# Stopping unmounts every node (busy: detached lazily); each haar mount then ends by itself
# with a last barrier. Signalling srun instead would escalate to SIGKILL and leave dead mounts.
# shellcheck disable=SC2016
unmount_task='mnt=${0//%n/$SLURM_NODEID}
fusermount3 -u "$mnt" 2>/dev/null || umount "$mnt" 2>/dev/null ||
    fusermount3 -u -z "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true'
stop() {
    local status=$?
    if [ -n "$local_nodes" ]; then
        for ((i = 0; i < n; i++)); do SLURM_NODEID=$i bash -c "$unmount_task" "$mountpoint"; done
    else
        srun --overlap --nodes="$n" --ntasks="$n" --ntasks-per-node=1 \
            bash -c "$unmount_task" "$mountpoint" || true
    fi
    local until=$((SECONDS + 30))
    for p in "${pids[@]}"; do
        while kill -0 "$p" 2>/dev/null && [ $SECONDS -lt $until ]; do sleep 0.2; done
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    # Local runs keep their logs (a temporary directory) only when something failed.
    if [ -n "$local_nodes" ] && [ "$status" = 0 ]; then rm -rf "$log_dir"; fi
}
trap stop EXIT
trap 'exit 130' INT TERM

deadline=$((SECONDS + 60))
for ((i = 0; i < n; i++)); do
    until grep -q '^mounted ' "$log_dir/node$i.log" 2>/dev/null; do
        for p in "${pids[@]}"; do
            if ! kill -0 "$p" 2>/dev/null; then
                echo "slurm-mount.sh: a mount ended before every node had mounted; node $i said:" >&2
                cat "$log_dir/node$i.log" >&2 || true
                exit 1
            fi
        done
        if [ $SECONDS -ge $deadline ]; then
            echo "slurm-mount.sh: node $i did not mount within 60 s; see $log_dir/node$i.log" >&2
            exit 1
        fi
        sleep 0.2
    done
done

export HAAR_MOUNT=${mountpoint//%n/0}
echo "slurm-mount.sh: $n node(s) mounted $mountpoint over $config (logs in $log_dir)" >&2
if [ $# -gt 0 ]; then
    set +e
    "$@"
    status=$?
    exit $status
fi
echo "HAAR_MOUNT=$HAAR_MOUNT"
for p in "${pids[@]}"; do wait "$p" || true; done
