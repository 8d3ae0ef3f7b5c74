#!/usr/bin/env bash
# haar's per-node staging on a Slurm compute node: the node Prolog, TaskProlog and Epilog of a
# job whose `#HAAR` directives stage into a node-local dataspace (burst_buffer_haar.conf:
# per_node). burst_buffer.lua wrote the job's node-local directives to STATE/JOB/plan on a
# file system every node sees; each part here is one `haar stage node` call, which does the
# work (crates/haar-stage/src/node.rs). See docs/staging.md, "Per-node staging".
#
#   slurm.conf:  PrologFlags=Alloc                       (the Prolog runs at allocation, on
#                Prolog=/etc/slurm/haar-prolog.sh         every node of the job)
#                TaskProlog=/etc/slurm/haar-taskprolog.sh
#                Epilog=/etc/slurm/haar-epilog.sh
#   the three names are links to this script (the part is taken from the name; or give it:
#   haar-node.sh prolog|taskprolog|epilog).
#
# Prolog and Epilog run as root and call haar as the job's owner (setpriv): the owner's own
# permissions decide what is read and written. They always exit 0: a non-zero Prolog or
# Epilog drains the node, and a user's missing input is no fault of the node. A failed
# stage-in fails the job instead: the TaskProlog of every task (the batch script's first)
# prints why, naming the node, and exits non-zero. A failed stage-out cannot fail the job
# (it has ended, and Slurm 22.05 refuses updates to a finished job, AdminComment included):
# the Epilog appends haar's message, naming the node, to the job's output file as its owner.
# (slurmd does not keep a Prolog's or Epilog's output.) Settings: burst_buffer_haar.conf
# beside slurm.conf (haar, config, state, setpriv, scontrol; node_state: each node's per-job
# directories, default /run/haar-stage).
set -u
part=${1:-$(basename "$0" .sh)}
part=${part#haar-}
conf=$(dirname "${SLURM_CONF:-/etc/slurm/slurm.conf}")/burst_buffer_haar.conf
haar=/usr/local/bin/haar config=/etc/haar/haar.yaml state=/var/spool/slurm/haar-stage
setpriv=/usr/bin/setpriv node_state=/run/haar-stage scontrol=scontrol
if [ -r "$conf" ]; then
    while IFS='=' read -r k v; do
        # Blanks around the value and a trailing comment (`key = value   # why`) go.
        k=${k//[[:space:]]/}; v=${v%%[[:space:]]#*}; v=${v#"${v%%[![:space:]]*}"}; v=${v%"${v##*[![:space:]]}"}
        case "$k" in haar|config|state|setpriv|node_state|scontrol) printf -v "$k" '%s' "$v" ;; esac
    done < <(grep -v '^[[:space:]]*#' "$conf")
fi
job=${SLURM_JOB_ID:?haar-node.sh: no SLURM_JOB_ID}
node=${SLURMD_NODENAME:-$(hostname -s)}
# The job's nodes: SLURM_JOB_NODELIST in the TaskProlog, SLURM_NODELIST in Prolog and Epilog
# (Slurm 22.05). Never guessed: spread= deals files by this list.
nodes=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
plan=$state/$job/plan
dir=$node_state/$job
where=(--dir "$dir" --node "$node" --nodes "$nodes" --reports "$state/$job/nodes")
say() { echo "haar-node.sh ($part, job $job, $node): $*" >&2; }

# Where the job's owner looks when a stage-out failed on this node: the job's output file
# (`scontrol show job`'s StdOut, appended as the owner, if this node sees it: a shared file
# system, as the batch script's output usually is).
tell_job() { # MESSAGE
    local out
    out=$("$scontrol" show job "$job" 2>/dev/null | sed -n 's/^ *StdOut=//p')
    if [ -n "$out" ] && [ -f "$out" ]; then
        printf 'haar: %s\n' "$1" | "$setpriv" --reuid="$SLURM_JOB_UID" \
            --regid="${SLURM_JOB_GID:-$(id -g "$SLURM_JOB_UID")}" --clear-groups \
            tee -a "$out" >/dev/null || say "cannot append to $out"
    fi
}

as_owner() {
    "$setpriv" --reuid="$SLURM_JOB_UID" --regid="${SLURM_JOB_GID:-$(id -g "$SLURM_JOB_UID")}" \
        --clear-groups "$haar" stage --config "$config" "$@"
}

case "$part" in
    prolog)
        [ -f "$plan" ] || exit 0
        # Without the node list nothing is staged here, and the TaskProlog fails the job.
        [ -n "$nodes" ] || { say "neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set"; exit 0; }
        # The persist registries are root's (design §13.4), made once per node.
        "$haar" stage --config "$config" persist init >/dev/null 2>&1 || true
        if ! install -d -m 0755 "$node_state" || ! install -d -m 0700 -o "$SLURM_JOB_UID" \
            -g "${SLURM_JOB_GID:-$(id -g "$SLURM_JOB_UID")}" "$dir"; then
            say "cannot create $dir"; exit 0
        fi
        as_owner node in --plan "$plan" "${where[@]}" </dev/null || say "stage-in failed (the job's TaskProlog fails it)"
        exit 0 ;;
    taskprolog)
        # As the task's user: `export HAAR_STAGE_LOCAL=...`, or `print` why and fail.
        [ -d "$dir" ] || [ -e "$plan" ] || exit 0
        exec "$haar" stage --config "$config" node env --plan "$plan" "${where[@]}" ;;
    epilog)
        [ -d "$dir" ] || exit 0
        # The node's directory of the job goes unless a stage-out failed (its journal names
        # the data left on the node).
        if err=$(as_owner node out "${where[@]}" </dev/null 2>&1 >/dev/null); then
            rm -rf "$dir"
        else
            say "stage-out failed; see $dir: $err"
            err=${err#haar: }
            tell_job "stage-out failed on node $node: ${err#on node "$node": }"
        fi
        exit 0 ;;
    *) say "unknown part $part: call it as haar-prolog.sh, haar-taskprolog.sh or haar-epilog.sh"; exit 0 ;;
esac
