#!/usr/bin/env python3
"""The same FDB5 C-API program on two libraries: bench/fdb5_peer.c, compiled against FDB5
5.25's header, linked once against FDB5 5.25's own libfdb5.so (the fdb5lib wheel) and once
against haar's (libhaar_c.so installed as libfdb5.so), same load, same directory (/dev/shm),
each store set up the FDB5 way (FDB5_CONFIG_FILE, a local TOC configuration, which haar maps
onto its posix backend). A third column runs haar's library with $HAAR_CONFIG naming its pmem
backend under the same root (what a user who sets one variable gets).

    bench/fdbapi_bench.py [--runs 3] [--fields 1000] [--sizes 819200,65536] [--flush-every 100]
                          [--lib $CARGO_TARGET_DIR/release/libhaar_c.so] [--out bench/results]

Per size and run (the two libraries alternate which goes first): write (fdb_archive of every
field, fdb_flush every FLUSH_EVERY) then read (one fdb_retrieve per field, fresh request and
reader each). Prints a table of medians and haar/FDB5 speed ratios (FDB5 seconds / haar
seconds) and saves OUT/fdbapi.json and OUT/benchmarks-fdbapi.md. The bytes read back must be
identical (FNV-1a digest), or it stops.
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


def wheel():
    import fdb5lib  # noqa: PLC0415 (only needed here)

    site = os.path.dirname(os.path.dirname(fdb5lib.__file__))
    dirs = ["fdb5lib/lib64", "eckitlib/lib64", "metkitlib/lib64", "eccodeslib/lib64", "eckitlib.libs"]
    return site, ":".join(os.path.join(site, d) for d in dirs)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def run_peer(binary, lib_path, mode, root, n, size, flush_every, haar_config=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("HAAR_CONFIG", "FDB5_CONFIG", "FDB5_CONFIG_FILE", "FDB_HOME")}
    env["LD_LIBRARY_PATH"] = lib_path
    if haar_config:
        env["HAAR_CONFIG"] = haar_config
    p = subprocess.run([binary, mode, root, str(n), str(size), str(flush_every)],
                       capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.exit(f"{binary} {mode} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def raw_limits(root, n, size, flush_every):
    """The file system's own limit on this load, in the same directory: write(2) of every field
    into one file with fsync every FLUSH_EVERY fields (one copy into the page cache, no
    checksum, no index), then pread(2) of each field into one reused buffer (one copy out).
    A store that keeps its fields in files there can go no faster."""
    import time  # noqa: PLC0415

    os.makedirs(root)
    path = os.path.join(root, "raw.data")
    data = os.urandom(size)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600)
    t = time.perf_counter()
    for i in range(n):
        os.write(fd, data)
        if (i + 1) % flush_every == 0 or i + 1 == n:
            os.fsync(fd)
    write_s = time.perf_counter() - t
    os.close(fd)
    buf = bytearray(size)
    fd = os.open(path, os.O_RDONLY)
    each = []
    for i in range(n):
        t = time.perf_counter()
        os.preadv(fd, [buf], i * size)
        each.append(time.perf_counter() - t)
    os.close(fd)
    shutil.rmtree(root)
    return {"write_s": write_s, "read_s": sum(each), "read_p50_us": statistics.median(each) * 1e6}


def crc_pass(binary, n, size):
    """One CRC-32C pass over each field (haar's per-read check), timed by
    crates/haar-c/examples/crc_pass.rs."""
    return json.loads(sh([binary, str(n), str(size)]).stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--fields", type=int, default=1000)
    ap.add_argument("--sizes", default="819200,65536")
    ap.add_argument("--flush-every", type=int, default=100)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    ap.add_argument("--lib", default=os.path.join(target, "release/libhaar_c.so"))
    ap.add_argument("--out", default=os.path.join(REPO, "bench/results"))
    ap.add_argument("--scratch", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    a = ap.parse_args()

    if not os.path.isfile(a.lib):
        sys.exit(f"{a.lib} missing: build it with `cargo build --release -p haar-c` (or pass --lib)")
    crc_bin = os.path.join(os.path.dirname(a.lib), "examples/crc_pass")
    sh(["cargo", "build", "--release", "-q", "-p", "haar-c", "--example", "crc_pass"], cwd=REPO)
    floor_bin = os.path.join(os.path.dirname(a.lib), "examples/map_floor")
    sh(["cargo", "build", "--release", "-q", "-p", "haar-persist", "--example", "map_floor"], cwd=REPO)
    site, fdb5_path = wheel()
    include = os.path.join(site, "fdb5lib/include")
    work = tempfile.mkdtemp(prefix="haar-fdbapi-bench-", dir=a.scratch)
    try:
        haar_dir = os.path.join(work, "haar-lib")
        os.makedirs(haar_dir)
        shutil.copy(a.lib, os.path.join(haar_dir, "libfdb5.so"))
        src = os.path.join(REPO, "bench/fdb5_peer.c")
        cflags = ["gcc", "-O2", "-std=c11", "-Wall", "-Wextra", "-Werror", f"-I{include}", src]
        peers = {
            "fdb5": (os.path.join(work, "peer-fdb5"), fdb5_path),
            "haar": (os.path.join(work, "peer-haar"), haar_dir),
            "haar-pmem": (os.path.join(work, "peer-haar"), haar_dir),
            "limit": (None, None),
        }
        sh(cflags + [f"-L{site}/fdb5lib/lib64", f"-Wl,-rpath-link={fdb5_path}", "-lfdb5",
                     "-o", peers["fdb5"][0]])
        sh(cflags + [f"-L{haar_dir}", "-lfdb5", "-o", peers["haar"][0]])

        results = []
        for size in [int(s) for s in a.sizes.split(",")]:
            names = list(peers)
            runs = {lib: [] for lib in names}
            crc = []
            for r in range(a.runs):
                crc.append(crc_pass(crc_bin, a.fields, size)["p50_us"])
                order = names[r % len(names):] + names[:r % len(names)]
                digests = {}
                for lib in order:
                    binary, lib_path = peers[lib]
                    root = os.path.join(work, f"{lib}-{size}-{r}")
                    if lib == "limit":
                        runs[lib].append(raw_limits(root, a.fields, size, a.flush_every))
                        continue
                    cfg = None
                    if lib == "haar-pmem":
                        os.makedirs(root)
                        cfg = os.path.join(root, "haar.yaml")
                        with open(cfg, "w") as f:
                            f.write(f"backend: pmem\nroots: [{root}/db]\n")
                    args = (a.fields, size, a.flush_every, cfg)
                    w = run_peer(binary, lib_path, "write", root, *args)
                    rd = run_peer(binary, lib_path, "read", root, *args)
                    digests[lib] = rd["digest"]
                    runs[lib].append({"write_s": w["seconds"], "read_s": rd["seconds"],
                                      "read_p50_us": rd["p50_us"], "version": w["fdb5_version"]})
                    if lib == "haar-pmem":
                        # The floor under any verified read of these fields into a caller's
                        # buffer, over the very pool just read (fresh mapping, as a new process).
                        pool = os.path.join(root, "db", "haar.pool")
                        runs[lib][-1]["floor"] = json.loads(
                            sh([floor_bin, pool, str(size), str(a.fields)]).stdout.strip().splitlines()[-1])
                    shutil.rmtree(root)
                if len(set(digests.values())) != 1:
                    sys.exit(f"size {size} run {r}: bytes read differ: {digests}")
            med = {lib: {k: statistics.median(x[k] for x in v) for k in ("write_s", "read_s", "read_p50_us")}
                   for lib, v in runs.items()}
            gib = a.fields * size / 2**30
            floors = [x["floor"] for x in runs["haar-pmem"] if "floor" in x]
            floor = {k: statistics.median(f[k] for f in floors)
                     for k in ("touch_p50_us", "crc_p50_us", "crc_copy_p50_us", "pread_p50_us",
                               "pread_crc_p50_us")} if floors else None
            row = {
                "size": size, "fields": a.fields, "flush_every": a.flush_every, "runs": runs,
                "pmem_floor": floor,
                "crc_pass_p50_us": statistics.median(crc),
                "median": med,
                "write_gib_per_s": {lib: gib / m["write_s"] for lib, m in med.items()},
                "read_gib_per_s": {lib: gib / m["read_s"] for lib, m in med.items()},
                "ratio_write": {lib: med["fdb5"]["write_s"] / med[lib]["write_s"] for lib in names[1:]},
                "ratio_read": {lib: med["fdb5"]["read_s"] / med[lib]["read_s"] for lib in names[1:]},
            }
            results.append(row)
            for lib in names[1:]:
                if lib == "limit":
                    print(f"{size // 1024:>5} KiB x {a.fields}: the file system's own limit (write(2)+fsync / pread):"
                          f" {row['write_gib_per_s'][lib]:.2f} / {row['read_gib_per_s'][lib]:.2f} GiB/s ="
                          f" {row['ratio_write'][lib]:.2f}x / {row['ratio_read'][lib]:.2f}x FDB5;"
                          f" one CRC-32C pass per field: p50 {row['crc_pass_p50_us']:.0f} µs", flush=True)
                    continue
                print(f"{size // 1024:>5} KiB x {a.fields}: archive+flush {lib} {row['write_gib_per_s'][lib]:.2f} GiB/s"
                      f" vs FDB5 {row['write_gib_per_s']['fdb5']:.2f} GiB/s = {row['ratio_write'][lib]:.2f}x;"
                      f" retrieve {lib} {row['read_gib_per_s'][lib]:.2f} GiB/s vs FDB5"
                      f" {row['read_gib_per_s']['fdb5']:.2f} GiB/s = {row['ratio_read'][lib]:.2f}x"
                      f" (p50 {med[lib]['read_p50_us']:.0f} vs {med['fdb5']['read_p50_us']:.0f} µs"
                      f" = {med['fdb5']['read_p50_us'] / med[lib]['read_p50_us']:.2f}x)", flush=True)
            if floor:
                print(f"{size // 1024:>5} KiB x {a.fields}: floor of a verified read into the caller's buffer"
                      f" (haar's pool, fresh mapping): CRC+copy p50 {floor['crc_copy_p50_us']:.0f} µs,"
                      f" pread+CRC {floor['pread_crc_p50_us']:.0f} µs", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    host = next((l.split(":", 1)[1].strip() for l in sh(["lscpu"]).stdout.splitlines()
                 if l.startswith("Model name")), "unknown")
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    command = "bench/fdbapi_bench.py " + " ".join(sys.argv[1:])
    doc = {"benchmark": "fdbapi", "command": command.strip(), "host": host, "cpus": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "commit": commit, "scratch": a.scratch, "results": results}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "fdbapi.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = [
        "### FDB5's C API: haar's libfdb5.so against FDB5 5.25's",
        "",
        f"`{doc['command']}` on {host} ({os.cpu_count()} vCPUs), {doc['date']}, commit {commit}: "
        f"`bench/fdb5_peer.c` built against FDB5 5.25's header, linked against each library, "
        f"{a.fields} fields per size, flush every {a.flush_every}, stores in {a.scratch} set up by "
        f"FDB5_CONFIG_FILE (haar: its posix backend; haar-pmem: the same program with "
        f"HAAR_CONFIG naming haar's pmem backend under the same root); medians of {a.runs} runs, "
        "the libraries taking turns to go first; bytes read back identical. "
        "Ratio = FDB5 time / haar time (above 1: haar faster). The last row of each size is the "
        "file system's own limit in the same directory and run (write(2) of the bytes into one "
        "file with fsync every flush, then pread(2) of each field into one buffer: one copy each "
        "way, no checksum, no index): no store that keeps its fields in files there can beat it, "
        "so its ratio bounds what a file-backed store (haar's posix backend) can reach.",
        "",
        "| field size | library | archive+flush | ratio | one-at-a-time retrieve | p50 | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        for lib in r["median"]:
            ratio = lambda k: "1" if lib == "fdb5" else f"**{r[k][lib]:.2f}×**"
            name = {"fdb5": "FDB5 5.25", "haar": "haar (FDB5 config → posix)",
                    "haar-pmem": "haar (HAAR_CONFIG pmem)",
                    "limit": "limit: write(2)+fsync / pread(2) in the same directory"}[lib]
            lines.append(
                f"| {r['size'] // 1024} KiB | {name} | {r['write_gib_per_s'][lib]:.2f} GiB/s | "
                f"{ratio('ratio_write')} | {r['read_gib_per_s'][lib]:.2f} GiB/s | "
                f"{r['median'][lib]['read_p50_us']:.0f} µs | {ratio('ratio_read')} |")
    lines.append("")
    for r in results:
        fdb5_p50 = r["median"]["fdb5"]["read_p50_us"]
        lines.append(
            f"At {r['size'] // 1024} KiB, same run: one pread(2) per field (the limit row) p50 "
            f"{r['median']['limit']['read_p50_us']:.0f} µs, one CRC-32C pass over a field "
            f"(`crates/haar-c/examples/crc_pass.rs`, the check haar makes on every read) p50 "
            f"{r['crc_pass_p50_us']:.0f} µs: a verified read from a file costs at least their sum, "
            f"{r['median']['limit']['read_p50_us'] + r['crc_pass_p50_us']:.0f} µs, against "
            f"{fdb5_p50 / 2:.0f} µs for 2× FDB5's p50 ({fdb5_p50:.0f} µs).")
        fl = r.get("pmem_floor")
        if fl:
            best = min(fl["crc_copy_p50_us"], fl["pread_crc_p50_us"])
            lines.append(
                f"At {r['size'] // 1024} KiB, over haar's pmem pool of the same run "
                f"(`crates/haar-persist/examples/map_floor.rs`, a fresh mapping as a new process "
                f"has, p50): faulting a field's pages in {fl['touch_p50_us']:.0f} µs, CRC-32C "
                f"through the mapping {fl['crc_p50_us']:.0f} µs, then the copy into the caller's "
                f"buffer {fl['crc_copy_p50_us']:.0f} µs; pread(2) {fl['pread_p50_us']:.0f} µs, "
                f"pread(2) + CRC-32C {fl['pread_crc_p50_us']:.0f} µs. A verified read into the "
                f"caller's memory costs at least {best:.0f} µs, so at most "
                f"{fdb5_p50 / best:.2f}× FDB5's p50 ({fdb5_p50:.0f} µs); haar's pmem p50 is "
                f"{r['median']['haar-pmem']['read_p50_us']:.0f} µs "
                f"({r['median']['haar-pmem']['read_p50_us'] / best:.2f}× that floor).")
    with open(os.path.join(a.out, "benchmarks-fdbapi.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"saved {a.out}/fdbapi.json and {a.out}/benchmarks-fdbapi.md")


if __name__ == "__main__":
    main()
