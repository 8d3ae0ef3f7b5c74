#!/usr/bin/env bash
# Checks that every cargo build the Makefile makes after the test build resolves each shared
# dependency with a feature set that the test build (`cargo test --workspace --release`) also
# resolves, so that it reuses the test build's artefacts instead of compiling libc, serde and
# every haar crate again (crates/haar-workspace-hack says why and holds the pins).
#
#   scripts/feature-check.sh
#
# Reads cargo's unit graph (no compilation; RUSTC_BOOTSTRAP lets stable cargo print it). Exits
# 1 naming each dependency, build and feature set to add to crates/haar-workspace-hack.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export RUSTC_BOOTSTRAP=1
python3 - <<'PY'
import json, subprocess, sys

def units(args):
    cmd = ["cargo", *args, "--release", "--unit-graph", "-Z", "unstable-options"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"feature-check: {' '.join(cmd)} failed:\n{out.stderr}")
    seen = {}
    for u in json.loads(out.stdout)["units"]:
        if u["pkg_id"].startswith("path+"):
            continue  # the workspace's own crates: they follow from their dependencies
        key = (u["pkg_id"].split("#")[-1], u["mode"])
        seen.setdefault(key, set()).add(",".join(sorted(u["features"])))
    return seen

test = units(["test", "--workspace", "--no-run"])
builds = {  # the Makefile's builds after `make unit`'s test build
    "cargo build -p haar-c": ["build", "-p", "haar-c"],
    "cargo test -p haar-c --features fdb5-5_10": ["test", "-p", "haar-c", "--features", "fdb5-5_10", "--test", "fdb_v5_10", "--no-run"],
    "cargo build -p haar-cli": ["build", "-p", "haar-cli"],
    "cargo build -p haar-py (maturin)": ["build", "-p", "haar-py"],
    "cargo build --workspace --bins": ["build", "--workspace", "--bins"],
    "cargo build -p haar-heap-preload": ["build", "-p", "haar-heap-preload"],
    "cargo build -p haar-c -p haar-cli": ["build", "-p", "haar-c", "-p", "haar-cli"],
}
bad = 0
for name, args in builds.items():
    for (pkg, mode), feats in sorted(units(args).items()):
        for f in sorted(feats - test.get((pkg, mode), set())):
            bad += 1
            have = sorted(test.get((pkg, mode), set()))
            print(f"feature-check: {name} resolves {pkg} ({mode}) with [{f}]; the test build with {have}", flush=True)
if bad:
    sys.exit("feature-check: pin those features in crates/haar-workspace-hack/Cargo.toml")
print(f"feature-check: ok ({len(builds)} builds reuse the test build's dependencies)")
PY
