#!/usr/bin/env bash
# fio sequential 1 MiB write and read on tmpfs, on the FUSE ceiling (haar-fs's fuse_ceiling
# example: same fuser session as haar mount, stores nothing) and on haar mount (pmem pool on
# /dev/shm), interleaved over ROUNDS rounds so that a noisy shared host weighs on all three
# alike; prints each round and the medians (design §15.5).
# Usage: bench/mount-fio.sh [SIZE (default 2g)] [ROUNDS (default 3)]
# Needs: fio, target/release/haar ($HAAR), target/release/examples/fuse_ceiling ($CEILING), root.
set -euo pipefail
SIZE=${1:-2g}
ROUNDS=${2:-3}
HAAR=${HAAR:-target/release/haar}
CEILING=${CEILING:-target/release/examples/fuse_ceiling}
work=$(mktemp -d /dev/shm/haar-mount-fio.XXXXXX)
hmnt=$(mktemp -d /tmp/haar-mount-fio-haar.XXXXXX)
cmnt=$(mktemp -d /tmp/haar-mount-fio-ceiling.XXXXXX)
pids=()
cleanup() {
    for m in "$hmnt" "$cmnt"; do
        if mountpoint -q "$m"; then fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; fi
    done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$work" "$hmnt" "$cmnt"
}
trap cleanup EXIT
mkdir -p "$work/tmpfs"
"$HAAR" --backend pmem --root "$work/store" mount "$hmnt" > "$work/haar-ready" 2> "$work/haar-log" &
pids+=($!)
"$CEILING" "$cmnt" > "$work/ceiling-ready" 2> "$work/ceiling-log" &
pids+=($!)
until grep -q mounted "$work/haar-ready" 2>/dev/null && grep -q mounted "$work/ceiling-ready" 2>/dev/null; do
    sleep 0.1
done

fio_bw() { # DIR RW -> MiB/s
    fio --name=seq --directory="$1" --rw="$2" --bs=1M --size="$SIZE" --numjobs=1 \
        --ioengine=psync --end_fsync=1 --output-format=terse --terse-version=3 \
        | awk -F';' -v rw="$2" '{ if (rw == "write") print $48/1024; else print $7/1024 }'
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

echo "load before: $(uptime)"
declare -A w r
for ((i = 1; i <= ROUNDS; i++)); do
    for t in tmpfs ceiling haar; do
        case $t in tmpfs) d=$work/tmpfs ;; ceiling) d=$cmnt ;; haar) d=$hmnt ;; esac
        a=$(fio_bw "$d" write)
        sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
        b=$(fio_bw "$d" read)
        rm -f "$d"/seq.*
        w[$t]+="$a "; r[$t]+="$b "
        echo "round $i $t: write $a MiB/s, read $b MiB/s"
    done
done
echo "load after: $(uptime)"
for t in tmpfs ceiling haar; do
    mw=$(tr ' ' '\n' <<< "${w[$t]}" | grep . | median)
    mr=$(tr ' ' '\n' <<< "${r[$t]}" | grep . | median)
    eval "m_w_$t=$mw m_r_$t=$mr"
done
echo "| fio 1 MiB, $SIZE, median of $ROUNDS | tmpfs | FUSE ceiling | haar mount | ceiling/tmpfs | haar/tmpfs | haar/ceiling |"
echo "|---|---|---|---|---|---|---|"
awk -v t="$m_w_tmpfs" -v c="$m_w_ceiling" -v h="$m_w_haar" 'BEGIN { printf "| write, MiB/s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |\n", t, c, h, c/t, h/t, h/c }'
awk -v t="$m_r_tmpfs" -v c="$m_r_ceiling" -v h="$m_r_haar" 'BEGIN { printf "| read, MiB/s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f |\n", t, c, h, c/t, h/t, h/c }'
