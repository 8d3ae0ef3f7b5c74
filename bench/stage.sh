#!/usr/bin/env bash
# Staging against cp between tiers, in the same run (issue 15's figures): `haar stage bench`
# (haar_bench::stage) for files and for fields by request (into one GRIB file; stage-in also
# into a new pmem store, the node-local store NEXTGenIO staged into), stage-in (ext4 standing for the
# parallel file system -> /dev/shm standing for node-local pmem, with the non-temporal copy
# limit of the target) and stage-out (/dev/shm -> ext4), then the disk's write rate in the same
# run by dd of MIB MiB from the memory tier (oflag=direct: one 16 MiB request at a time, no page
# cache; and buffered + fdatasync: through the kernel's dirty throttling): reference rates of
# the disk, not ceilings (write-behind keeps two steps queued and beats both here). JSON in
# bench/results/, names ending in TAG when given. Two ceilings of stage-in in the same run:
# reading MIB MiB back from the disk tier's page cache (dd to /dev/null, after one read that
# caches it: no copy can go faster than reading its source) and writing MIB MiB into new pages
# of the memory tier (dd from /dev/zero into a new file: every page allocated and zeroed on
# first write, as any copy into it allocates them; the non-temporal copy limit is measured
# into pages that already exist).
#
# Usage: bench/stage.sh [PATH/TO/haar] [MIB] [ROUNDS] [TAG]
#        (defaults: target/release/haar, 4096, 3, no tag)
set -euo pipefail
haar=${1:-target/release/haar}
mib=${2:-4096}
rounds=${3:-3}
tag=${4:-}
here=$(cd "$(dirname "$0")" && pwd)
out=$here/results
disk=${STAGE_BENCH_DISK:-/tmp}
mem=${STAGE_BENCH_MEM:-/dev/shm}
mkdir -p "$out"
echo "bench/stage.sh: $(uname -n), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$haar" stage bench --from "$disk" --to "$mem" --mib "$mib" --rounds "$rounds" --nt-limit --what all \
    --out "$out/stage-in-${mib}m${tag}.json" >/dev/null
"$haar" stage bench --from "$mem" --to "$disk" --mib "$mib" --rounds "$rounds" \
    --out "$out/stage-out-${mib}m${tag}.json" >/dev/null
for f in "$out/stage-in-${mib}m${tag}.json" "$out/stage-out-${mib}m${tag}.json"; do
    python3 - "$f" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"{d['from']} -> {d['to']} (load {d['load_before']} .. {d['load_after']}"
      + (f", NT-copy limit {d['nt_copy_limit_gb_s']:.1f} GB/s" if d['nt_copy_limit_gb_s'] else "") + ")")
for r in d['results']:
    extra = (f", {r['ratio_to_nt_copy']:.2f} of NT copy (cp + sync: {r['cp_sync_ratio_to_nt_copy']:.2f})"
             if 'ratio_to_nt_copy' in r else "")
    print(f"  {r['kind']:6} {r['bytes']/2**30:.1f} GiB in {r['files']} objects: stage {r['stage_seconds']:.2f} s"
          f" ({r['stage_gb_s']:.2f} GB/s), cp {r['cp_seconds']:.2f} s, cp+sync {r['cp_sync_seconds']:.2f} s;"
          f" {r['ratio_to_cp']:.2f} of cp, {r['ratio_to_cp_sync']:.2f} of cp+sync{extra};"
          f" ETA error at 10% <= {r['eta_error_max']*100:.0f}%")
PY
done
# The disk's reference rates: MIB MiB of random bytes (1 GiB in the memory tier, written over
# and over through a pipe) to a file in the disk tier, 16 MiB at a time, O_DIRECT and buffered
# then fdatasync, each the median of ROUNDS.
blk=$mem/stage-limit-src.$$
dst=$disk/stage-limit-dst.$$
trap 'rm -f "$blk" "$dst"' EXIT
head -c $((1024 << 20)) /dev/urandom >"$blk"
feed() { for ((i = 0; i < mib / 1024; i++)); do cat "$blk"; done; head -c $(((mib % 1024) << 20)) "$blk"; }
rate() { # dd flags... -> seconds
    rm -f "$dst"
    local t0 t1
    t0=$(date +%s.%N)
    feed | dd of="$dst" bs=16M iflag=fullblock "$@" status=none
    t1=$(date +%s.%N)
    python3 -c "print($t1 - $t0)"
}
timed() { # command... -> seconds
    local t0 t1
    t0=$(date +%s.%N)
    "$@"
    t1=$(date +%s.%N)
    python3 -c "print($t1 - $t0)"
}
direct=() buffered=() reads=() fresh=()
for ((r = 0; r < rounds; r++)); do
    direct+=("$(rate oflag=direct conv=fdatasync)")
    buffered+=("$(rate conv=fdatasync)")
done
# The last buffered file is cached now (read it once more to be sure); read it back.
dd if="$dst" of=/dev/null bs=16M status=none
fresh_dst=$mem/stage-limit-fresh.$$
trap 'rm -f "$blk" "$dst" "$fresh_dst"' EXIT
for ((r = 0; r < rounds; r++)); do
    reads+=("$(timed dd if="$dst" of=/dev/null bs=16M status=none)")
    rm -f "$fresh_dst"
    fresh+=("$(timed dd if=/dev/zero of="$fresh_dst" bs=16M count=$((mib / 16)) status=none)")
done
rm -f "$fresh_dst"
python3 - "$out/stage-limits-${mib}m${tag}.json" "$disk" "$mib" "${direct[*]}" "${buffered[*]}" \
    "${reads[*]}" "${fresh[*]}" "$mem" <<'PY'
import json, statistics, sys
path, disk, mib, direct, buffered, reads, fresh, mem = sys.argv[1:]
d = [float(x) for x in direct.split()]
b = [float(x) for x in buffered.split()]
r = [float(x) for x in reads.split()]
f = [float(x) for x in fresh.split()]
gb = int(mib) * 2**20 / 1e9
med = statistics.median
res = {"disk": disk, "mem": mem, "mib": int(mib), "load_after": open("/proc/loadavg").read().split()[:3],
       "dd_direct_seconds": d, "dd_buffered_fdatasync_seconds": b,
       "dd_direct_gb_s": gb / med(d), "dd_buffered_fdatasync_gb_s": gb / med(b),
       "disk_cached_read_seconds": r, "disk_cached_read_gb_s": gb / med(r),
       "mem_new_pages_write_seconds": f, "mem_new_pages_write_gb_s": gb / med(f)}
json.dump(res, open(path, "w"), indent=1)
print(f"{disk} limits ({mib} MiB, 16 MiB writes, median of {len(d)}): dd oflag=direct "
      f"{med(d):.2f} s ({res['dd_direct_gb_s']:.2f} GB/s), buffered + fdatasync "
      f"{med(b):.2f} s ({res['dd_buffered_fdatasync_gb_s']:.2f} GB/s)")
print(f"stage-in ceilings: reading {mib} MiB from {disk}'s page cache {med(r):.2f} s "
      f"({res['disk_cached_read_gb_s']:.2f} GB/s); writing {mib} MiB into new pages of {mem} "
      f"{med(f):.2f} s ({res['mem_new_pages_write_gb_s']:.2f} GB/s)")
PY
