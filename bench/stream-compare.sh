#!/usr/bin/env bash
# Compares `haar stream` with the reference STREAM rules on the same array size and thread
# count, in the same run, and prints and saves the ratios.
#
# The reference is McCalpin's stream.c when STREAM_C points to a copy of it (it is not on the
# package registries, so it cannot be fetched here); otherwise bench/stream_ref.c, a
# reimplementation of its rules kept in this repository. Both are built with gcc -O2 and
# OpenMP (pinned with OMP_PROC_BIND=close OMP_PLACES=cores); haar pins its threads itself.
#
# The runs alternate (reference, haar DRAM, haar /dev/shm mapped) for ROUNDS rounds and each
# kernel keeps its best rate over the rounds, so drift on a shared host hits all three alike.
#
# Environment (all optional):
#   ELEMENTS  elements per array (default: 4 x the sum of the last-level caches, STREAM's rule)
#   THREADS   threads (default: CPUs available)
#   ROUNDS    alternating rounds (default 5)
#   SHM_DIR   directory for the mapped-file run (default /dev/shm; empty to skip)
#   OUT       JSON results file (default stream-compare.json)
#   HAAR      haar binary (default: built with cargo build --release into $CARGO_TARGET_DIR)
#   STREAM_C  path to McCalpin's stream.c, used instead of the reimplementation if given
set -euo pipefail
cd "$(dirname "$0")/.."

threads=${THREADS:-$(nproc)}
rounds=${ROUNDS:-5}
shm=${SHM_DIR-/dev/shm}
out=${OUT:-stream-compare.json}
target=${CARGO_TARGET_DIR:-target}

if [[ -z "${ELEMENTS:-}" ]]; then
    llc=0
    level=0
    for d in /sys/devices/system/cpu/cpu0/cache/index*; do
        [[ $(cat "$d/type") == Instruction ]] && continue
        l=$(cat "$d/level")
        if ((l > level)); then
            level=$l
            s=$(cat "$d/size")
            case $s in
            *K) llc=$((${s%K} * 1024)) ;;
            *M) llc=$((${s%M} * 1048576)) ;;
            *) llc=$s ;;
            esac
            # Instances of this cache over all CPUs (sockets).
            n=$(cat /sys/devices/system/cpu/cpu*/cache/index"${d##*index}"/shared_cpu_list | sort -u | wc -l)
            llc=$((llc * n))
        fi
    done
    ELEMENTS=$((4 * llc / 8))
fi

if [[ -z "${HAAR:-}" ]]; then
    cargo build --release -q -p haar-cli
    HAAR=$target/release/haar
fi

src=${STREAM_C:-bench/stream_ref.c}
ref=$target/stream_ref
mkdir -p "$target"
omp=-fopenmp
echo 'int main(void){return 0;}' | gcc -fopenmp -x c - -o /dev/null 2>/dev/null || omp=
gcc -O2 $omp -DSTREAM_ARRAY_SIZE="$ELEMENTS" -DNTIMES=10 "$src" -o "$ref" -lm
echo "reference: $src built with gcc -O2 ${omp:-(no OpenMP)}; $ELEMENTS elements per array, $threads threads, $rounds rounds"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for r in $(seq 1 "$rounds"); do
    OMP_NUM_THREADS=$threads OMP_PROC_BIND=close OMP_PLACES=cores "$ref" >"$work/ref.$r"
    grep -q "Solution Validates" "$work/ref.$r" || { cat "$work/ref.$r"; exit 1; }
    "$HAAR" stream --elements "$ELEMENTS" --threads "$threads" --json >"$work/dram.$r"
    if [[ -n "$shm" ]]; then
        "$HAAR" stream --elements "$ELEMENTS" --threads "$threads" --path "$shm" --json >"$work/shm.$r"
    fi
done

python3 - "$work" "$rounds" "$ELEMENTS" "$threads" "$src" "$out" "$shm" <<'EOF'
import json, glob, os, platform, re, sys
work, rounds, elements, threads, src, out, shm = sys.argv[1:]
kernels = ["copy", "scale", "add", "triad"]
def ref_rates(path):
    rates = {}
    for line in open(path):
        m = re.match(r"(Copy|Scale|Add|Triad):\s+([0-9.]+)", line)
        if m:
            rates[m.group(1).lower()] = float(m.group(2))
    return rates
def haar_rates(path):
    rep = json.load(open(path))["report"]
    return {k["kernel"]: k["best_rate_mb_s"] for k in rep["kernels"]}, rep
best = {"reference": {}, "haar_dram": {}, "haar_shm": {}}
per_round = []
placement = None
for r in range(1, int(rounds) + 1):
    row = {"reference": ref_rates(f"{work}/ref.{r}")}
    row["haar_dram"], _ = haar_rates(f"{work}/dram.{r}")
    if os.path.exists(f"{work}/shm.{r}"):
        row["haar_shm"], rep = haar_rates(f"{work}/shm.{r}")
        placement = rep["placement"]
    per_round.append(row)
    for name, rates in row.items():
        for k, v in rates.items():
            best[name][k] = max(best[name].get(k, 0.0), v)
model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = next((l.split()[1] for l in open("/proc/meminfo") if l.startswith("MemTotal")), "0")
result = {
    "machine": {"cpu": model, "cpus": os.cpu_count(), "mem_total_kib": int(mem), "kernel": platform.release()},
    "elements": int(elements), "threads": int(threads), "rounds": int(rounds), "reference_source": src,
    "best_mb_s": best, "per_round_mb_s": per_round, "shm_placement": placement,
    "ratio_haar_dram_to_reference": {k: best["haar_dram"][k] / best["reference"][k] for k in kernels},
}
if best["haar_shm"]:
    result["ratio_haar_shm_to_reference"] = {k: best["haar_shm"][k] / best["reference"][k] for k in kernels}
json.dump(result, open(out, "w"), indent=2)
print(f"\nBest rate over {rounds} alternating rounds, MB/s (10^6 bytes/s); {elements} elements per array "
      f"({int(elements) * 8 / 2**20:.1f} MiB), {threads} threads\n")
hdr = "| kernel | reference | haar (DRAM) | haar / reference |"
sep = "|---|---:|---:|---:|"
if best["haar_shm"]:
    hdr += f" haar ({shm} mapped, persist: {placement['persist']}) | mapped / reference |"
    sep += "---:|---:|"
print(hdr); print(sep)
for k in kernels:
    line = f"| {k} | {best['reference'][k]:.0f} | {best['haar_dram'][k]:.0f} | {best['haar_dram'][k] / best['reference'][k]:.2f} |"
    if best["haar_shm"]:
        line += f" {best['haar_shm'][k]:.0f} | {best['haar_shm'][k] / best['reference'][k]:.2f} |"
    print(line)
worst = min(result["ratio_haar_dram_to_reference"].values())
print(f"\nhaar on DRAM vs reference: lowest ratio {worst:.2f} (target >= 0.90); saved to {out}")
EOF
