#!/usr/bin/env bash
# One `haar serve` per node of a Slurm allocation, and the client configuration naming them.
#
# Inside an allocation (sbatch script or salloc shell):
#   scripts/slurm-serve.sh [--root DIR] [--port N] [--backend pmem|posix] [--replicas R]
#                          [--config FILE] [--token-file FILE] [--store-config FILE]
#                          [-- COMMAND ARGS...]
#
#   1. starts `haar serve --listen 0.0.0.0:PORT --root DIR` on every node of
#      $SLURM_JOB_NODELIST (one job step, `srun --overlap --ntasks-per-node=1`), DIR being
#      node-local (a DAX mount, /dev/shm, local disk);
#   2. waits until every server answers (`haar --servers HOST:PORT info`);
#   3. writes FILE (default ./haar-cluster.yaml): `type: dist` over `remote` lanes, one per
#      node, with R replicas;
#   4. with `-- COMMAND`, runs it with HAAR_CONFIG=FILE and HAAR_SERVERS=HOST:PORT,...
#      exported and stops the servers when it ends (its exit status is the script's);
#      without, prints the two and serves until the job ends or the script is interrupted.
#
# --store-config FILE: the servers' own store configuration (e.g. `pool_size`, `schema`), read
# on every node; --root and --backend override its roots and backend.
#
# The token (shared secret) is read from --token-file, default $HOME/.haar/token, created
# (mode 600) when missing; the file must be on a file system every node sees. Clients use it
# with `--token-file FILE` or HAAR_TOKEN=$(cat FILE).
set -euo pipefail

root=/dev/shm/haar-${USER:-$(id -un)}
port=7070
backend=pmem
replicas=1
config=$PWD/haar-cluster.yaml
token_file=${HAAR_TOKEN_FILE:-$HOME/.haar/token}
store_config=
haar=${HAAR:-haar}
while [ $# -gt 0 ]; do
    case "$1" in
        --root) root=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --backend) backend=$2; shift 2 ;;
        --replicas) replicas=$2; shift 2 ;;
        --config) config=$2; shift 2 ;;
        --token-file) token_file=$2; shift 2 ;;
        --store-config) store_config=$2; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "slurm-serve.sh: unknown option $1 (see --help)" >&2; exit 1 ;;
    esac
done

if [ -z "${SLURM_JOB_NODELIST:-}" ]; then
    echo "slurm-serve.sh: not inside a Slurm allocation (no SLURM_JOB_NODELIST); use sbatch or salloc" >&2
    exit 1
fi
command -v "$haar" >/dev/null || { echo "slurm-serve.sh: $haar not found; set HAAR=/path/to/haar" >&2; exit 1; }
haar=$(command -v "$haar")

mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
n=${#nodes[@]}
if [ "$replicas" -gt "$n" ]; then
    echo "slurm-serve.sh: --replicas $replicas needs at least $replicas nodes; the allocation has $n" >&2
    exit 1
fi

if [ ! -s "$token_file" ]; then
    mkdir -p "$(dirname "$token_file")"
    (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$token_file")
    echo "slurm-serve.sh: new token in $token_file" >&2
fi

# One task per node. --no-kill: a node that fails must not take the other servers down with it
# (Slurm's default ends the whole step, and every replica with it); it also makes
# --kill-on-bad-exit moot, so a server that fails to start is found by the readiness check below.
# The task expands its own root (ROOT may name the node, e.g. /local/$HOSTNAME
# via SLURMD_NODENAME), and `exec`s so that srun's signals reach the server directly.
log_dir=${SLURM_SUBMIT_DIR:-$PWD}/haar-serve-$SLURM_JOB_ID
mkdir -p "$log_dir"
store_args=()
[ -z "$store_config" ] || store_args=(--config "$store_config")
# shellcheck disable=SC2016
srun --overlap --no-kill --nodes="$n" --ntasks="$n" --ntasks-per-node=1 --kill-on-bad-exit=1 \
    --output="$log_dir/%N.log" \
    bash -c 'exec "$0" "${@:5}" --root "$1" --backend "$2" serve --listen "0.0.0.0:$3" --token-file "$4"' \
    "$haar" "$root" "$backend" "$port" "$token_file" "${store_args[@]}" &
servers_pid=$!
stop() {
    kill "$servers_pid" 2>/dev/null || true
    wait "$servers_pid" 2>/dev/null || true
}
trap stop EXIT
trap 'exit 130' INT TERM

addrs=()
for node in "${nodes[@]}"; do addrs+=("$node:$port"); done
list=$(IFS=,; echo "${addrs[*]}")

# The last lines each server wrote (why one failed to start), for the job's output.
server_logs() {
    local f
    for f in "$log_dir"/*.log; do
        [ -e "$f" ] || continue
        echo "slurm-serve.sh: --- $(basename "$f" .log), last lines:" >&2
        tail -n 5 "$f" | sed 's/^/    /' >&2
    done
}

# Ready when every server completes an authenticated request.
deadline=$((SECONDS + 60))
for a in "${addrs[@]}"; do
    until "$haar" --servers "$a" --token-file "$token_file" info >/dev/null 2>&1; do
        if ! kill -0 "$servers_pid" 2>/dev/null; then
            echo "slurm-serve.sh: the servers' job step ended before every server answered; see $log_dir/" >&2
            server_logs
            exit 1
        fi
        if [ $SECONDS -ge $deadline ]; then
            echo "slurm-serve.sh: $a did not answer within 60 s; see $log_dir/" >&2
            server_logs
            exit 1
        fi
        sleep 0.2
    done
done

{
    echo "# haar client configuration: $n server(s) of Slurm job $SLURM_JOB_ID"
    echo "type: dist"
    echo "replicas: $replicas"
    echo "lanes:"
    for a in "${addrs[@]}"; do echo "  - {type: remote, server: \"$a\"}"; done
} > "$config.tmp"
mv "$config.tmp" "$config"

export HAAR_CONFIG=$config HAAR_SERVERS=$list
echo "slurm-serve.sh: $n server(s) up: $list" >&2
echo "slurm-serve.sh: client configuration $config (token: --token-file $token_file)" >&2
if [ $# -gt 0 ]; then
    set +e
    "$@"
    status=$?
    exit $status
fi
echo "HAAR_CONFIG=$config"
echo "HAAR_SERVERS=$list"
wait "$servers_pid"
