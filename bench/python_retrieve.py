#!/usr/bin/env python3
"""Python retrieve benchmark (issue 12): N fields of SIZE bytes retrieved one at a time.

Three peers in one run, on the same fields (same keys, same bytes) in /dev/shm:

- haar through Python (``haar.FDB``): ``retrieve(key).read()`` into ``bytes``, and
  ``memoryview(retrieve(key))`` (zero-copy over the pmem pool);
- haar through its Rust API (``crates/haar-py/examples/rust_retrieve.rs``, same store, same
  keys): ``FieldStore::retrieve`` copying into a ``Vec``, and ``retrieve_lent``;
- pyfdb 5.25 with its bundled FDB5 (separate process; TOC store in /dev/shm):
  ``retrieve(key)`` then ``read()``.

Figures are the best of ROUNDS for each, and every one is printed as a ratio to its peer:
Python bytes / Rust copy, Python memoryview / Rust lent, Python bytes / pyfdb. Saves
``bench/results/python.json`` and ``bench/results/benchmarks-python.md``. Not a test: it asserts
nothing about speed.

Usage: python3 bench/python_retrieve.py [--fields 1000] [--size 819200] [--rounds 3]
       [--backend pmem] [--rust-bin PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

BASE = {
    "class": "od",
    "expver": "0001",
    "stream": "oper",
    "date": "20261121",
    "time": "1200",
    "domain": "g",
    "type": "fc",
    "levtype": "sfc",
}
PARAMS = ["167", "165", "166", "134", "151", "129", "168", "164", "235", "31"]  # surface params FDB5 retrieves at levtype=sfc


def keys(n: int) -> list[dict[str, str]]:
    """N distinct keys: ten params per step."""
    return [{**BASE, "step": str(i // len(PARAMS)), "param": PARAMS[i % len(PARAMS)]} for i in range(n)]


def field(i: int, size: int, base: bytes) -> bytes:
    """Field i: SIZE bytes, distinct per field (a header naming it, then shared noise)."""
    head = b"GRIB" + i.to_bytes(8, "little")
    return head + base[: size - len(head) - 4] + b"7777"


def noise(size: int) -> bytes:
    return random.Random(12).randbytes(size)


def cpu_model() -> str:
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ----- pyfdb side (run in its own process: its bundled FDB5 and ecCodes stay out of ours) -----

PYFDB_SCRIPT = r"""
import json, os, random, sys, time
sys.path.insert(0, sys.argv[1])
from python_retrieve import keys, field, noise
import pyfdb
root, n, size, rounds = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cfg = {"type": "local", "engine": "toc", "schema": "/etc/fdb/schema",
       "spaces": [{"handler": "Default", "roots": [{"path": root}]}]}
fdb = pyfdb.FDB(cfg)
ks = keys(n)
base = noise(size)
archive = 0.0
for i, k in enumerate(ks):
    data = field(i, size, base)
    t = time.perf_counter()
    fdb.archive(data, identifier=k)
    archive += time.perf_counter() - t
t = time.perf_counter()
fdb.flush()
archive += time.perf_counter() - t
best = float("inf")
reader = pyfdb.FDB(cfg)  # opened after the flush: it sees the data (FDB5 handles cache)
for k in ks:  # steady state, as the haar side: every field touched once before timing
    with reader.retrieve(k) as h:
        h.read()
for _ in range(rounds):
    t = time.perf_counter()
    total = 0
    for k in ks:
        with reader.retrieve(k) as h:
            data = h.read()
        total += len(data)
    best = min(best, time.perf_counter() - t)
    assert total == n * size, total
# verify one field against what was archived
with pyfdb.FDB(cfg).retrieve(ks[-1]) as h:
    assert h.read() == field(n - 1, size, base)
print(json.dumps({"archive_seconds": archive, "retrieve_seconds": best, "bytes": total,
                  "version": getattr(pyfdb, "__version__", "?")}))
"""


def run_pyfdb(root: Path, n: int, size: int, rounds: int) -> dict[str, object] | None:
    env = dict(os.environ)
    dbnames = root / "dbnames"
    dbnames.write_text("")
    env["FDB_DBNAMES_FILE"] = str(dbnames)  # FACTS: 5.25 may crash on Debian's /etc/fdb/dbnames
    for var in ("FDB5_CONFIG", "FDB5_CONFIG_FILE", "FDB_HOME", "HAAR_CONFIG"):
        env.pop(var, None)
    data = root / "fdb"
    data.mkdir()
    r = subprocess.run(
        [sys.executable, "-c", PYFDB_SCRIPT, str(HERE), str(data), str(n), str(size), str(rounds)],
        capture_output=True,
        text=True,
        env=env,
    )
    if r.returncode != 0:
        print(f"pyfdb peer failed (exit {r.returncode}):\n{r.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fields", type=int, default=1000)
    ap.add_argument("--size", type=int, default=800 * 1024)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--backend", default="pmem", choices=["pmem", "posix"])
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    ap.add_argument("--rust-bin", type=Path, default=target / "release/examples/rust_retrieve")
    ap.add_argument("--out", type=Path, default=HERE / "results")
    a = ap.parse_args()

    import haar

    if not a.rust_bin.exists():
        print(f"{a.rust_bin} missing: cargo build --release -p haar-py --example rust_retrieve", file=sys.stderr)
        return 2
    n, size = a.fields, a.size
    ks = keys(n)
    base = noise(size)
    work = Path(tempfile.mkdtemp(prefix="haar-bench-py-", dir="/dev/shm"))
    try:
        store = work / "haar"
        store.mkdir()
        config_file = work / "haar.yaml"
        config_file.write_text(f"backend: {a.backend}\nroots: [{store}]\n")
        fdb = haar.FDB(config_file)
        # Only the archive calls and the flush are timed (making each field's bytes is not).
        haar_archive = 0.0
        for i, k in enumerate(ks):
            data = field(i, size, base)
            t = time.perf_counter()
            fdb.archive(data, identifier=k)
            haar_archive += time.perf_counter() - t
        t = time.perf_counter()
        fdb.flush()
        haar_archive += time.perf_counter() - t
        assert fdb.retrieve(ks[-1]).read() == field(n - 1, size, base)

        key_file = work / "keys.txt"
        key_file.write_text("".join(",".join(f"{k}={v}" for k, v in key.items()) + "\n" for key in ks))
        # Rounds alternate Python and Rust, so that both see the same machine (2 shared cores
        # here): the best of each is kept.
        best_bytes = best_view = float("inf")
        rust: dict[str, float] = {}
        # Steady state on both sides: the reader opens the store and touches every field once
        # before the timed loops (a fresh mapping of the pool faults its pages in on first
        # use); the Rust peer does the same pass in its own process.
        reader = haar.FDB(config_file)
        for k in ks:
            memoryview(reader.retrieve(k))
        for _ in range(a.rounds):
            t = time.perf_counter()
            total = 0
            for k in ks:
                total += len(reader.retrieve(k).read())
            best_bytes = min(best_bytes, time.perf_counter() - t)
            assert total == n * size
            t = time.perf_counter()
            total = 0
            for k in ks:
                total += memoryview(reader.retrieve(k)).nbytes
            best_view = min(best_view, time.perf_counter() - t)
            assert total == n * size
            r = subprocess.run([str(a.rust_bin), str(config_file), str(key_file), "1"], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"Rust peer failed: {r.stderr}", file=sys.stderr)
                return 1
            for name, v in json.loads(r.stdout).items():
                rust[name] = min(rust.get(name, float("inf")), float(v))
        lent = haar.FDB(config_file).retrieve(ks[0]).lent
        del fdb
        shutil.rmtree(store)  # room for FDB5's copy
        pyfdb = run_pyfdb(work, n, size, a.rounds)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    gib = n * size / 2**30
    res: dict[str, object] = {
        "benchmark": "python_retrieve",
        "command": "python3 bench/python_retrieve.py " + " ".join(sys.argv[1:]),
        "host": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "fields": n,
        "field_bytes": size,
        "rounds": a.rounds,
        "backend": a.backend,
        "directory": "/dev/shm",
        "haar_python_read_bytes_seconds": best_bytes,
        "haar_python_memoryview_seconds": best_view,
        "haar_python_memoryview_zero_copy": lent,
        "haar_rust_copy_seconds": rust["copy_seconds"],
        "haar_rust_lent_seconds": rust["lent_seconds"],
        "haar_python_archive_seconds": haar_archive,
        "haar_rust_lent_copy_seconds": rust["lent_copy_seconds"],
        "ratio_python_bytes_vs_rust_copy": rust["copy_seconds"] / best_bytes,
        "ratio_python_bytes_vs_rust_lent_copy": rust["lent_copy_seconds"] / best_bytes,
        "ratio_python_memoryview_vs_rust_lent": rust["lent_seconds"] / best_view,
        "ratio_python_memoryview_vs_rust_copy": rust["copy_seconds"] / best_view,
    }
    if pyfdb:
        res["pyfdb_version"] = pyfdb["version"]
        res["pyfdb_read_seconds"] = pyfdb["retrieve_seconds"]
        res["pyfdb_archive_seconds"] = pyfdb["archive_seconds"]
        res["ratio_python_bytes_vs_pyfdb"] = pyfdb["retrieve_seconds"] / best_bytes
        res["ratio_python_memoryview_vs_pyfdb"] = pyfdb["retrieve_seconds"] / best_view
        res["ratio_archive_haar_python_vs_pyfdb"] = pyfdb["archive_seconds"] / haar_archive

    def line(name: str, seconds: float, peer: str) -> str:
        return f"| {name} | {seconds * 1e3:.1f} | {n / seconds:,.0f} | {gib / seconds:.2f} | {peer} |"

    rows = [
        f"Python retrieve, {n} fields × {size // 1024} KiB one at a time, haar {a.backend} in /dev/shm, best of {a.rounds}; "
        f"host: {res['host']} ({res['cores']} cores), Python {res['python']}.",
        f"Command: `{res['command']}`.",
        "",
        "| path | ms | fields/s | GiB/s | ratio |",
        "|---|---|---|---|---|",
        line("haar Python `retrieve(key).read()` → bytes", best_bytes,
             f"{res['ratio_python_bytes_vs_rust_copy']:.2f}× Rust retrieve, {res['ratio_python_bytes_vs_rust_lent_copy']:.2f}× Rust lent+copy"
             + (f", {res['ratio_python_bytes_vs_pyfdb']:.1f}× pyfdb" if pyfdb else "")),
        line("haar Python `memoryview(retrieve(key))`" + (" (zero-copy)" if lent else ""), best_view,
             f"{res['ratio_python_memoryview_vs_rust_lent']:.2f}× Rust lent"
             + (f", {res['ratio_python_memoryview_vs_pyfdb']:.1f}× pyfdb" if pyfdb else "")),
        line("haar Rust `FieldStore::retrieve` → Vec", rust["copy_seconds"], "peer"),
        line("haar Rust `retrieve_lent`", rust["lent_seconds"], "peer"),
        line("haar Rust `retrieve_lent` + copy → Vec", rust["lent_copy_seconds"], "peer"),
    ]
    if pyfdb:
        rows.append(line(f"pyfdb {pyfdb['version']} `retrieve(key).read()`", float(pyfdb["retrieve_seconds"]), "peer"))  # type: ignore[arg-type]
        rows += [
            "",
            f"Archive of the same fields (identifier given, then one flush): haar Python {haar_archive:.2f} s, "
            f"pyfdb {pyfdb['archive_seconds']:.2f} s ({res['ratio_archive_haar_python_vs_pyfdb']:.1f}×).",
        ]
    else:
        rows += ["", "pyfdb peer: not run (see stderr)."]
    md = "\n".join(rows) + "\n"
    print(md)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "python.json").write_text(json.dumps(res, indent=2) + "\n")
    (a.out / "benchmarks-python.md").write_text(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
