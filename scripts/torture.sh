#!/usr/bin/env bash
# The long reliability run of issue 14 (docs/reliability.md): the kill and power-loss tests of
# `make test`, with many more trials, on both backends.
#
#   scripts/torture.sh [KILLS] [IMAGES]     # defaults: 1000 kills per test and backend,
#                                           # 2000 simulated power-loss images
#
# Runs, from the release build (cargo builds what is missing):
#   crash.rs        writers killed with SIGKILL at random moments, posix and pmem (KILLS each;
#                   pmem with 16 commit slots, so kills land while the slot chain grows)
#   reuse.rs        pmem writers killed while archiving, re-archiving, purging and wiping (KILLS)
#   pool_creation   pmem creators killed during pool creation (KILLS)
#   net_servers     `haar serve` killed at random moments under a producer and restarted,
#                   posix and pmem (KILLS each)
#   power_loss      crash images of a pmem writer (IMAGES, both persistence modes)
#   power_loss_posix crash images of a posix writer on the recording file system (IMAGES,
#                   journalled and weak directory ordering; needs root and /dev/fuse)
# and prints each test's own summary lines; a single lost acknowledged field fails the run.
set -euo pipefail

kills="${1:-1000}"
images="${2:-2000}"
for n in "$kills" "$images"; do
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1)); then
        echo "usage: $0 [KILLS] [IMAGES]   (positive integers; defaults 1000 and 2000)" >&2
        exit 2
    fi
done
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
step() { echo "== $1 [$(($(date +%s) - start)) s]"; }

export HAAR_CRASH_TRIALS="$kills" HAAR_RESTART_TRIALS="$kills" HAAR_POWER_TRIALS="$images"
summary='crash test|reuse|creat|server kills|persistence points|recorded|image|test result|panicked'

step "writers killed (crash.rs, reuse.rs, pool_creation.rs: $kills trials each)"
cargo test --release -p haar-store --test crash --test reuse --test pool_creation \
    -- --nocapture --test-threads 1 </dev/null 2>&1 | grep -E "$summary"
step "servers killed and restarted ($kills per backend)"
cargo test --release -p haar-cli --test net_servers servers_killed -- --nocapture \
    </dev/null 2>&1 | grep -E "$summary"
step "simulated power loss, pmem ($images crash images)"
cargo test --release -p haar-store --test power_loss -- --nocapture </dev/null 2>&1 \
    | grep -E "$summary"
step "simulated power loss, posix ($images crash images)"
cargo test --release -p haar-fs --test power_loss_posix -- --nocapture </dev/null 2>&1 \
    | grep -E "$summary"
step "done"
