#!/usr/bin/env bash
# Staging against cp between tiers, in the same run (issue 15's figures): `haar stage bench`
# (haar_stage::bench) for files and for fields by request, stage-in (ext4 standing for the
# parallel file system -> /dev/shm standing for node-local pmem, with the non-temporal copy
# limit of the target) and stage-out (/dev/shm -> ext4). JSON in bench/results/.
#
# Usage: bench/stage.sh [PATH/TO/haar] [MIB] [ROUNDS]     (defaults: target/release/haar, 4096, 3)
set -euo pipefail
haar=${1:-target/release/haar}
mib=${2:-4096}
rounds=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
out=$here/results
disk=${STAGE_BENCH_DISK:-/tmp}
mem=${STAGE_BENCH_MEM:-/dev/shm}
mkdir -p "$out"
echo "bench/stage.sh: $(uname -n), $(nproc) CPUs, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$haar" stage bench --from "$disk" --to "$mem" --mib "$mib" --rounds "$rounds" --nt-limit \
    --out "$out/stage-in-${mib}m.json" >/dev/null
"$haar" stage bench --from "$mem" --to "$disk" --mib "$mib" --rounds "$rounds" \
    --out "$out/stage-out-${mib}m.json" >/dev/null
for f in "$out/stage-in-${mib}m.json" "$out/stage-out-${mib}m.json"; do
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
