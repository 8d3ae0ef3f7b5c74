#!/usr/bin/env python3
"""`haar hammer --mode read` beside FDB5's C API (`haar hammer --fdb5`) in the same run, at 4 KiB
and 800 KiB, on two emulations of persistent memory, with the floor of a verified zero-copy
read measured on the same pool file (issue 13's hammer-read target, ≥ 3× FDB5).

    bench/hammer_read.py [--rounds 3] [--haar target/release/haar] [--out bench/results]

Directories: /dev/shm (tmpfs, 4 KiB pages: a mapping is faulted in page by page) and, as root, a
tmpfs mounted here with `huge=always` (2 MiB pages, as a DAX mount maps persistent memory);
each store (haar pmem pool, FDB5 TOC root) is written once, then read `--rounds` times, haar and
FDB5 alternating. Reads retrieve one field per call and verify it (header, key, body CRC-32C:
haar hands out the CRC-32C its store verified, so its body check needs no second pass; FDB5
keeps none, so the body is checksummed after the read). The floor comes from
`crates/haar-persist/examples/map_floor.rs` over the pool file after the reads: p50 µs to
fault a fresh mapping of one field in (`touch`), to checksum it through a fresh mapping (`crc`,
what a verified zero-copy read cannot go below), and to pread it (+ checksum) into a buffer.
Prints a Markdown table and saves OUT/hammer-read.json and OUT/benchmarks-hammer-read.md.
"""
import argparse
import datetime
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHAPES = {
    "4 KiB": ["--members", "10", "--steps", "5", "--levels", "40", "--params", "10", "--field-size", "4096"],
    "800 KiB": ["--members", "4", "--steps", "5", "--levels", "10", "--params", "5", "--field-size", "819200"],
}


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True)


def hammer(haar, root, shape, mode, out, fdb5):
    cmd = [haar]
    if not fdb5:
        cmd += ["--backend", "pmem", "--root", os.path.join(root, "pmem")]
    cmd += ["hammer", *shape, "--mode", mode, "--quiet", "--json", out]
    if fdb5:
        cmd += ["--fdb5", os.path.join(root, "fdb5")]
    run(cmd)
    with open(out) as f:
        return json.load(f)


def huge_tmpfs(base):
    """A tmpfs with 2 MiB pages under `base`, or None (not root, or the kernel refuses)."""
    if os.geteuid() != 0:
        return None
    d = tempfile.mkdtemp(prefix="haar-huge-", dir=base)
    try:
        run(["mount", "-t", "tmpfs", "-o", "huge=always,size=8g", "tmpfs", d])
    except subprocess.CalledProcessError:
        os.rmdir(d)
        return None
    return d


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--haar", default=os.path.join(REPO, "target/release/haar"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench/results"))
    a = ap.parse_args()
    floor_bin = os.path.join(os.path.dirname(a.haar), "examples/map_floor")
    if not os.path.exists(floor_bin):
        run(["cargo", "build", "--release", "-p", "haar-persist", "--example", "map_floor"])
    load0 = os.getloadavg()
    dirs = [("tmpfs, 4 KiB pages (/dev/shm)", tempfile.mkdtemp(prefix="haar-hr-", dir="/dev/shm"), False)]
    huge = huge_tmpfs("/tmp")
    if huge:
        dirs.append(("tmpfs, 2 MiB pages (huge=always)", huge, True))
    rows = []
    try:
        for label, base, mounted in dirs:
            for size, shape in SHAPES.items():
                root = os.path.join(base, size.replace(" ", ""))
                os.makedirs(root)
                tmp = os.path.join(root, "r.json")
                hammer(a.haar, root, shape, "write", tmp, False)
                hammer(a.haar, root, shape, "write", tmp, True)
                got = {"haar": [], "fdb5": []}
                for r in range(a.rounds):
                    order = ["haar", "fdb5"] if r % 2 == 0 else ["fdb5", "haar"]
                    for who in order:
                        j = hammer(a.haar, root, shape, "read", tmp, who == "fdb5")
                        got[who].append((j["fields_per_s"], j["op_latency"]["p50_us"]))
                nbytes = int(shape[shape.index("--field-size") + 1])
                floor = json.loads(run([floor_bin, os.path.join(root, "pmem/haar.pool"), str(nbytes)]).stdout)
                med = {w: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for w, v in got.items()}
                rows.append({
                    "dir": label, "size": size, "rounds": got,
                    "haar_fields_per_s": med["haar"][0], "haar_p50_us": med["haar"][1],
                    "fdb5_fields_per_s": med["fdb5"][0], "fdb5_p50_us": med["fdb5"][1],
                    "ratio_fields_per_s": med["haar"][0] / med["fdb5"][0],
                    "ratio_p50": med["fdb5"][1] / med["haar"][1],
                    "floor": floor,
                    "limit_ratio_p50": med["fdb5"][1] / max(floor["crc_p50_us"], 1e-3),
                })
                shutil.rmtree(root)
    finally:
        for _, base, mounted in dirs:
            if mounted:
                subprocess.run(["umount", base])
            shutil.rmtree(base, ignore_errors=True)
    load1 = os.getloadavg()
    host = run(["sh", "-c", "grep -m1 'model name' /proc/cpuinfo | cut -d: -f2; nproc"]).stdout.split("\n")
    md = [
        f"Produced by `bench/hammer_read.py --rounds {a.rounds}` on {datetime.date.today()}, {host[0].strip()}, "
        f"{host[1].strip()} CPUs; load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end. "
        "Median of the rounds; one field per retrieve, verified (header, key, body CRC-32C). "
        "*floor*: p50 µs over the same pool file, fresh mapping per pass "
        "(`crates/haar-persist/examples/map_floor.rs`): fault every page in / CRC-32C through the "
        "mapping (a verified zero-copy read's floor) / pread into a buffer + CRC-32C. "
        "*limit*: FDB5's p50 ÷ the zero-copy floor, the most a verified zero-copy read can reach there.",
        "",
        "| pages | field | haar fields/s | FDB5 fields/s | ÷ FDB5 | haar p50 µs | FDB5 p50 µs | ÷ FDB5 (p50) | floor: touch / crc / pread+crc µs | limit ÷ FDB5 (p50) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        f = r["floor"]
        md.append(
            f"| {r['dir']} | {r['size']} | {r['haar_fields_per_s']:,.0f} | {r['fdb5_fields_per_s']:,.0f} | "
            f"{r['ratio_fields_per_s']:.2f}× | {r['haar_p50_us']:.1f} | {r['fdb5_p50_us']:.1f} | {r['ratio_p50']:.2f}× | "
            f"{f['touch_p50_us']:.1f} / {f['crc_p50_us']:.1f} / {f['pread_crc_p50_us']:.1f} | {r['limit_ratio_p50']:.1f}× |"
        )
    text = "\n".join(md) + "\n"
    print(text)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "hammer-read.json"), "w") as f:
        json.dump({"rows": rows, "load": [load0, load1]}, f, indent=1)
    with open(os.path.join(a.out, "benchmarks-hammer-read.md"), "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
