#!/usr/bin/env bash
# haar mount against its backing tmpfs, same run (design §15): fio sequential write and read in
# 1 MiB blocks, and an mdtest-like small-file phase (create+write 4 KiB, stat, read, unlink).
# Usage: bench/mount.sh [SIZE (fio, default 4g)] [FILES (default 100000)]
# Needs: fio, a release haar (target/release/haar or $HAAR), root or fuse3. Prints a table and
# writes it to ${OUT:-bench/mount-results.md}. Removes everything it made.
# The FUSE ceiling of the host, in the same run: fio on the `fuse_ceiling` example of haar-fs
# (same fuser session, options and max_write as haar mount; discards writes, reads zeros), built
# with `cargo build --release -p haar-fs --example fuse_ceiling` ($CEILING to point elsewhere).
# The small-file phases also run on a disk file system (DISK, default /var/tmp: ext4 on the
# hosts here) beside tmpfs and haar mount; there close(2) is not a durability barrier, on haar
# mount it is (design §15.3), so the two differ in what a crash keeps, not only in speed.
# DIST=1 adds fio on haar mount over 3 local `haar serve` (pmem under /dev/shm, dist with
# replicas 2, loopback TCP: every chunk crosses FUSE, then TCP twice), design §15.6.
set -euo pipefail
SIZE=${1:-4g}
FILES=${2:-100000}
HAAR=${HAAR:-target/release/haar}
CEILING=${CEILING:-target/release/examples/fuse_ceiling}
OUT=${OUT:-bench/mount-results.md}
work=$(mktemp -d /dev/shm/haar-mount-bench.XXXXXX)
mnt=$(mktemp -d /tmp/haar-mount-bench-mnt.XXXXXX)
cmnt=$(mktemp -d /tmp/haar-mount-bench-ceiling.XXXXXX)
dmnt=$(mktemp -d /tmp/haar-mount-bench-dist.XXXXXX)
disk=$(mktemp -d "${DISK:-/var/tmp}/haar-mount-bench-disk.XXXXXX")
disk_type=$(df -T "$disk" | awk 'NR == 2 { print $2 }')
DISK_LABEL=${DISK:-/var/tmp}
pid=
cpid=
dpid=
spids=()
cleanup() {
    for m in "$mnt" "$cmnt" "$dmnt"; do
        if mountpoint -q "$m"; then fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; fi
    done
    [ -n "$pid" ] && wait "$pid" 2>/dev/null || true
    [ -n "$cpid" ] && wait "$cpid" 2>/dev/null || true
    [ -n "$dpid" ] && wait "$dpid" 2>/dev/null || true
    for p in "${spids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    rm -rf "$work" "$mnt" "$cmnt" "$dmnt" "$disk"
}
trap cleanup EXIT
mkdir -p "$work/tmpfs"
"$HAAR" --backend pmem --root "$work/store" mount "$mnt" > "$work/ready" 2> "$work/log" &
pid=$!
until grep -q mounted "$work/ready" 2>/dev/null; do sleep 0.1; kill -0 $pid; done

fio_bw() { # DIR RW -> MiB/s
    fio --name=seq --directory="$1" --rw="$2" --bs=1M --size="$SIZE" --numjobs=1 \
        --ioengine=psync --end_fsync=1 --output-format=terse --terse-version=3 \
        | awk -F';' -v rw="$2" '{ if (rw == "write") print $48/1024; else print $7/1024 }'
}
small() { # DIR -> "create/s stat/s read/s unlink/s"
    python3 - "$1" "$FILES" <<'PY'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.join(d, "md"), exist_ok=True)
buf = b"x" * 4096
names = [os.path.join(d, "md", f"f{i}") for i in range(n)]
r = []
t = time.perf_counter()
for p in names:
    fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644); os.write(fd, buf); os.close(fd)
r.append(n / (time.perf_counter() - t)); t = time.perf_counter()
for p in names: os.stat(p)
r.append(n / (time.perf_counter() - t)); t = time.perf_counter()
for p in names:
    fd = os.open(p, os.O_RDONLY); os.read(fd, 4096); os.close(fd)
r.append(n / (time.perf_counter() - t)); t = time.perf_counter()
for p in names: os.unlink(p)
r.append(n / (time.perf_counter() - t))
print(" ".join(f"{x:.0f}" for x in r))
PY
}
shared() { # DIR -> creates/s with N = 1 2 4 8 processes in one directory
    python3 - "$1" "$((FILES / 10))" <<'PY'
import os, sys, time
from multiprocessing import Process
d, per = sys.argv[1], int(sys.argv[2])
out = []
for n in (1, 2, 4, 8):
    sd = os.path.join(d, f"shared{n}"); os.makedirs(sd)
    def work(w):
        for i in range(per // n):
            fd = os.open(os.path.join(sd, f"{w}-{i}"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"x" * 4096); os.close(fd)
    ps = [Process(target=work, args=(w,)) for w in range(n)]
    t = time.perf_counter()
    for p in ps: p.start()
    for p in ps: p.join()
    out.append((per // n) * n / (time.perf_counter() - t))
print(" ".join(f"{x:.0f}" for x in out))
PY
}
load_before=$(uptime)
for target in tmpfs mount; do
    dir=$work/tmpfs; [ $target = mount ] && dir=$mnt
    w=$(fio_bw "$dir" write); sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    r=$(fio_bw "$dir" read); rm -f "$dir"/seq.*
    s=$(small "$dir")
    m=$(shared "$dir")
    eval "${target}_w=$w ${target}_r=$r ${target}_s=\"$s\" ${target}_m=\"$m\""
done
disk_s=$(small "$disk")
disk_m=$(shared "$disk")
rm -rf "${disk:?}"/*
# The local mount's pool (several GiB of /dev/shm) goes before the next phases: on a shared
# host the memory it holds invites the OOM killer.
fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt"
wait "$pid" 2>/dev/null || true
pid=
rm -rf "$work/store"
ceil_w=0 ceil_r=0
if [ -x "$CEILING" ]; then
    "$CEILING" "$cmnt" > "$work/ceiling-ready" 2> "$work/ceiling-log" &
    cpid=$!
    until grep -q mounted "$work/ceiling-ready" 2>/dev/null; do sleep 0.1; kill -0 $cpid; done
    ceil_w=$(fio_bw "$cmnt" write)
    ceil_r=$(fio_bw "$cmnt" read)
    rm -f "$cmnt"/seq.*
    fusermount3 -u "$cmnt"
fi
dist_w=0 dist_r=0
if [ "${DIST:-0}" = 1 ]; then
    export HAAR_TOKEN=bench-mount-dist-token
    for i in 0 1 2; do
        "$HAAR" --backend pmem --root "$work/node$i" serve --listen 127.0.0.1:0 \
            > "$work/node$i.out" 2> "$work/node$i.log" &
        spids+=($!)
    done
    { echo "type: dist"; echo "replicas: 2"; echo "lanes:"; } > "$work/cluster.yaml"
    for i in 0 1 2; do
        until grep -q '^listening on ' "$work/node$i.out" 2>/dev/null; do sleep 0.1; done
        echo "  - {type: remote, server: \"$(sed -n 's/^listening on //p' "$work/node$i.out")\"}" >> "$work/cluster.yaml"
    done
    "$HAAR" --config "$work/cluster.yaml" mount "$dmnt" > "$work/dist-ready" 2> "$work/dist-log" &
    dpid=$!
    until grep -q mounted "$work/dist-ready" 2>/dev/null; do sleep 0.1; kill -0 $dpid; done
    dist_w=$(fio_bw "$dmnt" write); echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true
    dist_r=$(fio_bw "$dmnt" read)
    rm -f "$dmnt"/seq.*
    fusermount3 -u "$dmnt"
    wait "$dpid" 2>/dev/null || true
    dpid=
    for p in "${spids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
    spids=()
    rm -rf "$work"/node?
fi
load_after=$(uptime)
{
    echo "| $(date -u +%F) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs | tmpfs | haar mount (pmem on tmpfs) | ratio |"
    echo "|---|---|---|---|"
    awk -v a="$tmpfs_w" -v b="$mount_w" 'BEGIN { printf "| fio write 1 MiB, '"$SIZE"', MiB/s | %.0f | %.0f | %.2f |\n", a, b, b/a }'
    awk -v a="$tmpfs_r" -v b="$mount_r" 'BEGIN { printf "| fio read 1 MiB, '"$SIZE"', MiB/s | %.0f | %.0f | %.2f |\n", a, b, b/a }'
    if [ "$ceil_w" != 0 ]; then
        awk -v a="$tmpfs_w" -v c="$ceil_w" 'BEGIN { printf "| fio write 1 MiB, '"$SIZE"', MiB/s: FUSE ceiling (fuse_ceiling) instead of haar mount | %.0f | %.0f | %.2f |\n", a, c, c/a }'
        awk -v a="$tmpfs_r" -v c="$ceil_r" 'BEGIN { printf "| fio read 1 MiB, '"$SIZE"', MiB/s: FUSE ceiling (fuse_ceiling) instead of haar mount | %.0f | %.0f | %.2f |\n", a, c, c/a }'
        awk -v c="$ceil_w" -v b="$mount_w" 'BEGIN { printf "| fio write: haar mount / FUSE ceiling | | | %.2f |\n", b/c }'
        awk -v c="$ceil_r" -v b="$mount_r" 'BEGIN { printf "| fio read: haar mount / FUSE ceiling | | | %.2f |\n", b/c }'
    fi
    if [ "$dist_w" != 0 ]; then
        awk -v a="$tmpfs_w" -v c="$dist_w" 'BEGIN { printf "| fio write 1 MiB, '"$SIZE"', MiB/s: haar mount over 3 servers, replicas 2 | %.0f | %.0f | %.2f |\n", a, c, c/a }'
        awk -v a="$tmpfs_r" -v c="$dist_r" 'BEGIN { printf "| fio read 1 MiB, '"$SIZE"', MiB/s: haar mount over 3 servers, replicas 2 | %.0f | %.0f | %.2f |\n", a, c, c/a }'
    fi
    read -r tc ts tr tu <<< "$tmpfs_s"; read -r mc ms mr mu <<< "$mount_s"
    for row in "create+write 4 KiB:$tc:$mc" "stat:$ts:$ms" "read 4 KiB:$tr:$mr" "unlink:$tu:$mu"; do
        IFS=: read -r what a b <<< "$row"
        awk -v a="$a" -v b="$b" -v w="$what" 'BEGIN { printf "| %s, '"$FILES"' files, ops/s | %.0f | %.0f | %.2f |\n", w, a, b, b/a }'
    done
    read -r t1 t2 t4 t8 <<< "$tmpfs_m"; read -r m1 m2 m4 m8 <<< "$mount_m"
    for row in "1:$t1:$m1" "2:$t2:$m2" "4:$t4:$m4" "8:$t8:$m8"; do
        IFS=: read -r n a b <<< "$row"
        awk -v a="$a" -v b="$b" -v n="$n" 'BEGIN { printf "| N=%s processes creating 4 KiB files in one directory, files/s | %.0f | %.0f | %.2f |\n", n, a, b, b/a }'
    done
    echo
    echo "| small files beside a disk file system | tmpfs | $disk_type ($DISK_LABEL) | haar mount | haar mount ÷ $disk_type |"
    echo "|---|---|---|---|---|"
    read -r dc ds dr du <<< "$disk_s"
    for row in "create+write 4 KiB:$tc:$dc:$mc" "stat:$ts:$ds:$ms" "read 4 KiB:$tr:$dr:$mr" "unlink:$tu:$du:$mu"; do
        IFS=: read -r what a d b <<< "$row"
        awk -v a="$a" -v d="$d" -v b="$b" -v w="$what" 'BEGIN { printf "| %s, '"$FILES"' files, ops/s | %.0f | %.0f | %.0f | %.2f |\n", w, a, d, b, b/d }'
    done
    read -r d1 d2 d4 d8 <<< "$disk_m"
    for row in "1:$t1:$d1:$m1" "2:$t2:$d2:$m2" "4:$t4:$d4:$m4" "8:$t8:$d8:$m8"; do
        IFS=: read -r n a d b <<< "$row"
        awk -v a="$a" -v d="$d" -v b="$b" -v n="$n" 'BEGIN { printf "| N=%s processes creating 4 KiB files in one directory, files/s | %.0f | %.0f | %.0f | %.2f |\n", n, a, d, b, b/d }'
    done
    echo
    echo "load before: $load_before"
    echo "load after:  $load_after"
} | tee "$OUT"
