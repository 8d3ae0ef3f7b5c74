#!/usr/bin/env python3
"""FDB5 5.25's own tools on its TOC backend and through haar's store plugin, same run.

fdb-hammer 5.25 (the fdb5lib wheel's) dies in eckit's static initialisers before reading its
arguments (SIGSEGV on `fdb-hammer --help`, with or without the plugin), so the load is the
wheel's `fdb-write` (archive + flush of one GRIB file) and `fdb-read` (one request naming
every field), each timed as a whole process, on the same tmpfs directory, alternating
backends run by run. Backends: FDB5 TOC; the plugin over a haar posix root; the plugin over a
haar pmem pool. Prints a Markdown table of medians and ratios (TOC time / plugin time) and
saves bench/results/fdb5-plugin.json.

    make fdb5-plugin && python3 bench/fdb5_plugin_bench.py --fields 200 --runs 5
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def make_grib(path, fields, points):
    """`fields` messages of `points` 16-bit values each (about 2*points bytes)."""
    import eccodes
    import numpy as np

    side = int(points ** 0.5)
    with open(path, "wb") as out:
        for i in range(fields):
            h = eccodes.codes_grib_new_from_samples("regular_ll_sfc_grib2")
            for k, v in (("Ni", side), ("Nj", side), ("iDirectionIncrement", 1000),
                         ("jDirectionIncrement", 1000), ("bitsPerValue", 16)):
                eccodes.codes_set(h, k, v)
            eccodes.codes_set_values(h, np.random.default_rng(i).random(side * side) * 300)
            for k, v in (("centre", 98), ("setLocalDefinition", 1), ("localDefinitionNumber", 1),
                         ("class", "rd"), ("expver", "xxxx"), ("stream", "oper"), ("type", "fc"),
                         ("dataDate", 20191110), ("dataTime", 0),
                         ("step", i // 10), ("paramId", (167, 165, 166, 134, 151, 164, 228, 235, 31, 34)[i % 10])):
                eccodes.codes_set(h, k, v)
            out.write(eccodes.codes_get_message(h))
            eccodes.codes_release(h)


def run(cmd, env):
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]}")
    return dt


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fields", type=int, default=200)
    ap.add_argument("--points", type=int, default=409600, help="values per field (16 bits each)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--dir", default="/dev/shm")
    args = ap.parse_args()

    import fdb5lib

    fdb_bin = os.path.join(os.path.dirname(fdb5lib.__file__), "bin")
    haar = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "haar")
    work = tempfile.mkdtemp(prefix="haar-fdb5-plugin-bench.", dir=args.dir)
    try:
        grib = os.path.join(work, "fields.grib")
        make_grib(grib, args.fields, args.points)
        size = os.path.getsize(grib)
        steps = sorted({i // 10 for i in range(args.fields)})
        req = os.path.join(work, "all.req")
        with open(req, "w") as f:
            f.write("retrieve,class=rd,expver=xxxx,stream=oper,date=20191110,time=0000,domain=g,"
                    "type=fc,levtype=sfc,step=%s,param=167/165/166/134/151/164/228/235/31/34\n"
                    % "/".join(map(str, steps)))
        base = dict(os.environ)
        base["PATH"] = fdb_bin + ":" + base["PATH"]
        for k in ("LOAD_PLUGINS", "HAAR_CONFIG", "FDB5_CONFIG_FILE"):
            base.pop(k, None)
        times = {}

        def setup(name):
            d = os.path.join(work, name)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            if name == "toc":
                open(os.path.join(d, "dbnames"), "w").close()
                subprocess.run([haar, "--config", os.path.join(work, "schema-src.yaml"), "schema"],
                               stdout=open(os.path.join(d, "schema"), "w"), check=True)
                with open(os.path.join(d, "config.yaml"), "w") as f:
                    f.write(f"---\ntype: local\nengine: toc\nschema: {d}/schema\n"
                            f"spaces: [{{handler: Default, roots: [{{path: {d}/root}}]}}]\n")
                os.makedirs(os.path.join(d, "root"))
                return dict(base, FDB5_CONFIG_FILE=f"{d}/config.yaml", FDB_DBNAMES_FILE=f"{d}/dbnames")
            backend = name.split("-")[1]
            cfg = os.path.join(d, "haar.yaml")
            with open(cfg, "w") as f:
                f.write(f"backend: {backend}\nroots: [{d}/store]\n")
            lines = subprocess.run([os.path.join(ROOT, "scripts", "fdb5-plugin-env.sh"), cfg],
                                   check=True, capture_output=True, text=True).stdout
            env = dict(base)
            for line in lines.splitlines():
                k, v = line[len("export "):].split("=", 1)
                env[k] = v.strip("'") if k != "PATH" else base["PATH"]
            return env

        with open(os.path.join(work, "schema-src.yaml"), "w") as f:
            f.write(f"backend: posix\nroots: [{work}/unused]\n")
        names = ["toc", "haar-posix", "haar-pmem"]
        for r in range(args.runs):
            for name in names:
                env = setup(name)
                w = run(["fdb-write", grib], env)
                out = os.path.join(work, name, "out.grib")
                rd = run(["fdb-read", req, out], env)
                got = os.path.getsize(out)
                if got < size:
                    sys.exit(f"{name}: fdb-read returned {got} bytes, fewer than the {size} written")
                times.setdefault(name, {"write": [], "read": []})
                times[name]["write"].append(w)
                times[name]["read"].append(rd)
        med = {n: {op: statistics.median(v) for op, v in t.items()} for n, t in times.items()}
        gib = size / 2**30
        rows = ["| backend | fdb-write s (GiB/s) | fdb-read s | write ratio TOC/this | read ratio TOC/this |",
                "|---|---|---|---|---|"]
        for n in names:
            m = med[n]
            rows.append(f"| {n} | {m['write']:.3f} ({gib / m['write']:.2f}) | {m['read']:.3f} | "
                        f"{med['toc']['write'] / m['write']:.2f}x | {med['toc']['read'] / m['read']:.2f}x |")
        table = "\n".join(rows)
        print(f"{args.fields} fields, {size / args.fields / 1024:.0f} KiB each, {args.runs} runs, medians, {args.dir}")
        print(table)
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        with open(os.path.join(HERE, "results", "fdb5-plugin.json"), "w") as f:
            json.dump({"fields": args.fields, "bytes": size, "runs": args.runs, "dir": args.dir,
                       "times": times, "medians": med, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "host": os.uname().nodename}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
