#!/usr/bin/env bash
# Fuzz smoke test: builds every cargo-fuzz target of fuzz/ once, seeds the corpora, then runs
# each target for SECONDS (default 20). Exits nonzero if any target crashes (panic, sanitizer
# error, timeout or out-of-memory), printing the artifact to reproduce it with.
#
#   scripts/fuzz-smoke.sh [SECONDS]
#
# Needs the nightly toolchain (`rustup toolchain install nightly`); installs cargo-fuzz with
# `cargo install cargo-fuzz --locked` when `cargo fuzz` is missing. All targets share one
# target directory (fuzz/target) and one release build (optimised, with debug assertions and
# overflow checks). Reproduce a finding with
#   cargo +nightly fuzz run -s "$HAAR_FUZZ_SANITIZER" <target> <artifact>
#
# HAAR_FUZZ_SANITIZER (default: none) is passed to `cargo fuzz -s`. Most fuzzed code (haar-core,
# haar-store/format.rs, haar-grib/frame.rs, haar-net's frame codec) has no `unsafe`, so
# AddressSanitizer finds nothing more there than Rust's own checks while doubling build and run
# time; the `wire` target also drives a live loopback server, whose only `unsafe` is a few libc
# socket calls. Use HAAR_FUZZ_SANITIZER=address when fuzzing code with unsafe or FFI.
set -euo pipefail

secs="${1:-20}"
if ! [[ $secs =~ ^[0-9]+$ ]] || ((secs < 1)); then
    echo "usage: $0 [SECONDS]   (SECONDS: a positive integer, default 20)" >&2
    exit 2
fi

sanitizer="${HAAR_FUZZ_SANITIZER:-none}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
start=$(date +%s)
elapsed() { echo "$(($(date +%s) - start))s"; }

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
    echo "error: the Rust nightly toolchain is required by cargo-fuzz (sanitizer flags)." >&2
    echo "       install it with:  rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "== cargo fuzz missing: cargo install cargo-fuzz --locked"
    cargo install cargo-fuzz --locked
fi

echo "== seeding corpora (fuzz/seed.sh)"
fuzz/seed.sh

echo "== building all fuzz targets (release, sanitizer: $sanitizer) [$(elapsed)]"
cargo +nightly fuzz build -s "$sanitizer"

mapfile -t targets < <(cargo +nightly fuzz list)
if ((${#targets[@]} == 0)); then
    echo "error: cargo fuzz list found no targets" >&2
    exit 1
fi

logs="$repo/fuzz/target/smoke-logs"
mkdir -p "$logs"
failed=()
for t in "${targets[@]}"; do
    echo "== $t: fuzzing for ${secs}s [$(elapsed)]"
    log="$logs/$t.log"
    # -timeout: an input running this long counts as a hang (a finding), so the run stays bounded.
    if cargo +nightly fuzz run -s "$sanitizer" "$t" -- \
        -max_total_time="$secs" -rss_limit_mb=2048 -timeout=30 -print_final_stats=1 \
        >"$log" 2>&1; then
        grep -E '^stat::number_of_executed_units|^Done [0-9]+ runs' "$log" | tail -1 | sed "s/^/   $t: /" || true
    else
        rc=$?
        failed+=("$t")
        echo "!! $t FAILED (exit $rc); log: $log"
        # The panic message (first lines only: assertion messages may hold whole inputs).
        grep -m 1 -A 2 "panicked at" "$log" | cut -c 1-400 | sed 's/^/   /' || true
        grep -m 2 -E "^==[0-9]+== ERROR|^SUMMARY: " "$log" | sed 's/^/   /' || true
        artifact=$(grep -o 'Test unit written to .*' "$log" | tail -1 | sed 's/^Test unit written to //')
        if [[ -n $artifact ]]; then
            echo "   artifact: $artifact"
            echo "   reproduce: cargo +nightly fuzz run -s $sanitizer $t $artifact"
        fi
    fi
done

echo "== done in $(elapsed)"
if ((${#failed[@]} > 0)); then
    echo "FAILED targets: ${failed[*]}" >&2
    exit 1
fi
echo "all ${#targets[@]} fuzz targets ran ${secs}s without a crash"
