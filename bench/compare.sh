#!/usr/bin/env bash
# haar beside the real FDB5 on the same workloads, with the raw limits measured in the same run.
#
#   bench/compare.sh            # full run (a few minutes on 2 cores); writes docs/benchmarks.md
#   QUICK=1 bench/compare.sh    # smaller workloads
#
# Steps (each prints its command):
#   1. installs what is missing (scripts/setup.sh: ecCodes, FDB5 and its C API headers), builds
#      haar and the FDB5 C-API peer harness (bench/fdb5_peer.c);
#   2. `haar bench`: core archive/retrieve figures beside memcpy / non-temporal copy into a
#      mapping and the FDB5 C-API harness -> bench/results/benchmarks.json, docs/benchmarks.md;
#   3. `haar hammer`, one workload (members x steps x levels x params, a flush per step) through
#      haar's pmem store, through haar `dist` over 3 local servers, and through FDB5's C API
#      (haar hammer --fdb5, and the C harness bench/fdb5_peer with the same field count, size and
#      flush interval), with memcpy, NT copy, write(2) and loopback TCP measured in the same run
#      -> bench/results/hammer-*.json;
#   4. `haar workflow` (SC'19 Table 9 in miniature) -> bench/results/workflow.json, bench/results/workflow.png, and
#      at the delivery-latency target's shape -> bench/results/workflow-10x100.json, .png;
#   5. appends the hammer and workflow sections, with ratios and exact commands, to
#      docs/benchmarks.md (bench/render_compare.py).
set -euo pipefail
cd "$(dirname "$0")/.."

run() { echo "+ $*" >&2; "$@"; }

run scripts/setup.sh
run cargo build --release --workspace --bins
run bench/build-peer.sh

HAAR=target/release/haar
SCRATCH=${SCRATCH:-/dev/shm}
WORK=$(mktemp -d "$SCRATCH/haar-compare-XXXXXX")
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

if [ "${QUICK:-0}" = 1 ]; then
    MEMBERS=2 STEPS=4 LEVELS=10 PARAMS=5 BENCH_QUICK=--quick WF="--steps 2"
else
    MEMBERS=4 STEPS=5 LEVELS=10 PARAMS=5 BENCH_QUICK= WF=
fi
SIZE=${SIZE:-819200}
SHAPE=(--members "$MEMBERS" --steps "$STEPS" --levels "$LEVELS" --params "$PARAMS" --field-size "$SIZE")
FIELDS=$((MEMBERS * STEPS * LEVELS * PARAMS))

# 2. Core figures.
run "$HAAR" bench $BENCH_QUICK --json bench/results/benchmarks.json --markdown docs/benchmarks.md

# 3. Hammer: one writer process per member pair, then readers; raw limits with the first run.
hammer() { # NAME GLOBALS... -- HAMMER-ARGS...
    local name=$1; shift
    local globals=()
    while [ "$1" != -- ]; do globals+=("$1"); shift; done
    shift
    run "$HAAR" "${globals[@]}" hammer "${SHAPE[@]}" --quiet --json "bench/results/hammer-$name.json" "$@"
}
for procs in 1 2; do
    rm -rf "$WORK/pmem"
    hammer "haar-pmem-write-p$procs" --backend pmem --root "$WORK/pmem" -- --procs "$procs" --limits "$SCRATCH"
    hammer "haar-pmem-read-p$procs" --backend pmem --root "$WORK/pmem" -- --procs "$procs" --mode read
    rm -rf "$WORK/fdb5"
    hammer "fdb5-write-p$procs" -- --procs "$procs" --fdb5 "$WORK/fdb5"
    hammer "fdb5-read-p$procs" -- --procs "$procs" --fdb5 "$WORK/fdb5" --mode read
    # Two more write rounds of each, back to back, for the median ratio (this host varies).
    for round in 2 3; do
        rm -rf "$WORK/pmem" "$WORK/fdb5"
        hammer "haar-pmem-write-p$procs-r$round" --backend pmem --root "$WORK/pmem" -- --procs "$procs"
        hammer "fdb5-write-p$procs-r$round" -- --procs "$procs" --fdb5 "$WORK/fdb5"
    done
done

# haar dist over three local servers (pmem pools), fields spread by rendezvous hashing.
echo -n "compare-token-$$-$RANDOM" > "$WORK/token"
ADDRS=()
for i in 0 1 2; do
    "$HAAR" --backend pmem --root "$WORK/node$i" serve --listen 127.0.0.1:0 \
        --token-file "$WORK/token" > "$WORK/node$i.out" 2>"$WORK/node$i.err" &
    PIDS+=($!)
done
for i in 0 1 2; do
    for _ in $(seq 600); do grep -q "listening on" "$WORK/node$i.out" 2>/dev/null && break; sleep 0.1; done
    ADDRS+=("$(sed -n 's/^listening on //p' "$WORK/node$i.out")")
done
{
    echo "type: dist"; echo "replicas: 1"; echo "placement: field"; echo "lanes:"
    for a in "${ADDRS[@]}"; do echo "  - {type: remote, server: \"$a\"}"; done
} > "$WORK/dist.yaml"
hammer haar-dist-write-p2 --config "$WORK/dist.yaml" --token-file "$WORK/token" -- --procs 2 --limits "$SCRATCH"
hammer haar-dist-read-p2 --config "$WORK/dist.yaml" --token-file "$WORK/token" -- --procs 2 --mode read

# The FDB5 C harness with the same number of fields, size and flush interval (one process).
PER_FLUSH=$((MEMBERS * LEVELS * PARAMS))
for mode in write read; do
    echo "+ target/fdb5_peer $mode $WORK/peer $FIELDS $SIZE $PER_FLUSH" >&2
    target/fdb5_peer "$mode" "$WORK/peer" "$FIELDS" "$SIZE" "$PER_FLUSH" > "bench/results/hammer-fdb5-c-harness-$mode.json"
done

# 4. The workflow: the default (`make run`), then the delivery-latency target's shape (10
#    members x 100 fields of 800 KiB per step), with model time long enough for the consumers
#    of this machine to finish a step before the next one starts.
run "$HAAR" workflow $WF --json bench/results/workflow.json --plot bench/results/workflow.png
run "$HAAR" workflow --members 10 --levels 20 --params 5 --field-size 800KiB ${WF:---steps 3} \
    --compute-ms 2000 --json bench/results/workflow-10x100.json --plot bench/results/workflow-10x100.png

# 5. Report.
run python3 bench/render_compare.py "$FIELDS" "$SIZE" "${SHAPE[*]}" >> docs/benchmarks.md
echo "compare.sh: docs/benchmarks.md updated" >&2
