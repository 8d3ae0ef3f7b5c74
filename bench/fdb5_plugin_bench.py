#!/usr/bin/env python3
"""FDB5 5.25's own tools on its TOC backend and through haar's store plugin, same run.

Backends, on the same tmpfs directory, alternating run by run, a fresh root each run: FDB5
TOC; the plugin (`store: haar`) over a haar posix root; the plugin over a haar pmem pool.

Default mode (`--mode tools`): the wheel's `fdb-write` (archive + flush of one GRIB file) and
`fdb-read` (one request naming every field), each timed as a whole process. Prints a Markdown
table of medians and ratios (TOC time / plugin time); saves bench/results/fdb5-plugin.json.

`--mode hammer`: the wheel's `fdb-hammer` (one process, not distributed) writing, then
`--read`ing, members x steps x levels x params fields stamped from one template GRIB2 of
`--field-size` bytes. The wheel's fdb-hammer only starts with the LD_AUDIT shim
crates/haar-bench/src/table8/fdb-hammer-audit.c (built here with `cc`; docs/benchmarks.md,
"Why the wheel's `fdb-hammer` 5.25 crashes"). Before the timed runs of each root one
fdb-hammer process writes one field outside the run (step 9999), which creates the FDB5
database and, for pmem, the pool, as haar hammer --vcluster does. Also TOC with FDB5's own
schema (/etc/fdb/schema, when present) beside TOC with haar's (the plugin's). The order of
backends reverses every other run. Timings: fdb-hammer's own (first IO to last IO, its GRIB
and writing durations) and the whole process; GiB/s counts fields x template bytes once. Each
run also times write(2)+fsync and read(2) of the same bytes in the directory: the store's
floor, and how much faster TOC could be with a store that took no time. The `backend-free`
row is TOC's configuration with bench/fdb5_backend_free.cc preloaded (built here with `c++`):
FDB::archive(Key, data, length) and FDB::flush() are no-ops, so its write span is what
fdb-hammer and FDB5's client side take with a backend costing nothing; its read is a TOC read
less the time in FDB::retrieve and in the data copy. TOC's span over it
(`backend_free_ceiling`) is the most any FDB5 backend (Store, Catalogue or engine) could give.
Saves bench/results/fdb5-plugin-hammer.json.

    make fdb5-plugin && python3 bench/fdb5_plugin_bench.py --fields 200 --runs 5
    make fdb5-plugin && python3 bench/fdb5_plugin_bench.py --mode hammer --runs 5
"""

import argparse
import json
import os
import resource
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


# One GRIB2 message of about `size` bytes (16-bit values on a square grid), an ensemble member
# (stream=enfo, type=pf) on pressure levels: the template haar hammer --vcluster gives
# fdb-hammer (TEMPLATE_PY in crates/haar-bench/src/table8/fdb_hammer.rs).
def make_template(path, size, klass="rd", expver="xxxx", date=20261121):
    import eccodes
    import numpy as np

    side = max(int((max(size - 200, 128) // 2) ** 0.5), 8)
    h = eccodes.codes_grib_new_from_samples("regular_ll_pl_grib2")
    for k, v in (("Ni", side), ("Nj", side), ("iDirectionIncrement", 1000),
                 ("jDirectionIncrement", 1000), ("bitsPerValue", 16)):
        eccodes.codes_set(h, k, v)
    eccodes.codes_set_values(h, np.random.default_rng(0).random(side * side) * 300)
    for k, v in (("centre", 98), ("setLocalDefinition", 1), ("localDefinitionNumber", 1),
                 ("productDefinitionTemplateNumber", 1), ("class", klass), ("expver", expver),
                 ("stream", "enfo"), ("type", "pf"), ("number", 1), ("dataDate", date),
                 ("dataTime", 0), ("level", 1), ("step", 0), ("paramId", 130)):
        eccodes.codes_set(h, k, v)
    with open(path, "wb") as f:
        f.write(eccodes.codes_get_message(h))
    eccodes.codes_release(h)


# What fdb-hammer prints (the figures `parse()` in crates/haar-bench/src/table8/fdb_hammer.rs
# reads, and the durations beside them).
HAMMER_KEYS = {
    "Fields written": ("fields", int), "Fields read": ("fields", int),
    "Bytes written": ("bytes", int), "Bytes read": ("bytes", int),
    "Total duration": ("total_s", float), "GRIB duration": ("grib_s", float),
    "Writing duration": ("writing_s", float), "Data read duration": ("data_read_s", float),
    "Timestamp before first IO": ("first_io", float), "Timestamp after last IO": ("last_io", float),
}


def parse_hammer(out):
    said = {}
    for line in out.splitlines():
        k, sep, v = line.partition(":")
        if sep and k.strip() == "Save into":
            # eckit's DataHandle::saveInto timer: "Save into: 0.31 second elapsed, ..."
            # (fdb-hammer --read copies the retrieved handle into a null handle).
            try:
                said["save_into_eckit_s"] = said.get("save_into_eckit_s", 0.0) + float(v.split()[0])
            except (ValueError, IndexError):
                pass
            continue
        if sep and k.strip() == "haar-backend-free":
            # bench/fdb5_backend_free.cc's line at exit: archive_key=N bytes=B flush=F ...
            said["shim"] = {a: float(b) if "." in b else int(b)
                            for a, b in (w.split("=", 1) for w in v.split())}
            continue
        if sep and k.strip() in HAMMER_KEYS:
            name, conv = HAMMER_KEYS[k.strip()]
            try:
                said[name] = conv(v.strip())
            except ValueError:
                pass
    if not all(k in said for k in ("fields", "bytes", "first_io", "last_io")):
        return None
    said["io_s"] = said["last_io"] - said["first_io"]
    return said


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_hammer(cmd, env, what):
    c = children_cpu()
    t = time.perf_counter()
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    dt = time.perf_counter() - t
    cpu = children_cpu() - c
    if p.returncode != 0:
        sys.exit(f"{what}: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-2000:]} {p.stdout[-1000:]}")
    said = parse_hammer(p.stdout + "\n" + p.stderr)
    if said is None:
        sys.exit(f"{what}: fdb-hammer printed no figures: {p.stdout[-2000:]}")
    said["process_s"] = dt
    said["cpu_s"] = cpu  # user + system CPU of the whole process (not inflated by waiting)
    return said


def tree(root):
    """{path: size} of every file under `root`."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            out[os.path.join(d, f)] = os.path.getsize(os.path.join(d, f))
    return out


def backend_free_run(tool, timed, grib, env, free_so, fields, data, root, what):
    """fdb-hammer with FDB5's backend made free (bench/fdb5_backend_free.cc preloaded).

    Write: FDB::archive(Key, data, length) and FDB::flush() are no-ops, so the span is what
    fdb-hammer and FDB5's client side (reading each message, metkit's key decoding, the GRIB
    stamping) take with a backend that costs nothing. Checked: every field reached the no-op,
    no other archive overload was called, and the root is unchanged.
    Read: a plain (untimed) TOC write fills the root, then --read with the shim timing
    FDB::retrieve; the read's `io_s` is its span less the time in FDB::retrieve and in the
    data copy (eckit::DataHandle::saveInto, timed by the shim), i.e. what is left with both
    free; `io_full_s` is the span itself."""
    before = tree(root)
    w = run_hammer([tool] + timed + [grib], dict(env, LD_PRELOAD=free_so), f"{what} write")
    after = tree(root)
    sh = w.get("shim")
    if (not sh or sh["archive_key"] != fields or sh["bytes"] != data or sh["archive_other"] != 0
            or after != before):
        sys.exit(f"{what} write: the shim did not take every field ({sh}); root before "
                 f"{len(before)} files, after {len(after)}")
    run_hammer([tool] + timed + [grib], env, f"{what} (plain TOC write, for the read)")
    rd = run_hammer([tool, "--read"] + timed + [grib], dict(env, LD_PRELOAD=free_so),
                    f"{what} read")
    sh = rd.get("shim")
    if not sh or sh["retrieve"] < 1 or sh["save"] < 1:
        sys.exit(f"{what} read: no FDB::retrieve or DataHandle::saveInto timing ({sh})")
    rd["save_into_s"] = sh["save_s"]
    rd["io_full_s"] = rd["io_s"]
    rd["retrieve_s"] = sh["retrieve_s"]
    rd["io_s"] = rd["io_full_s"] - sh["retrieve_s"] - rd["save_into_s"]
    return w, rd


def data_floor(path, grib, fields):
    """The store's share at its cheapest: `fields` copies of the template written with
    write(2) into one new file in the run's directory (then fsync), and read back; seconds."""
    with open(grib, "rb") as f:
        msg = f.read()
    t = time.perf_counter()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for _ in range(fields):
        os.write(fd, msg)
    os.fsync(fd)
    os.close(fd)
    w = time.perf_counter() - t
    t = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    buf = bytearray(len(msg))
    for _ in range(fields):
        os.readv(fd, [buf])
    os.close(fd)
    rd = time.perf_counter() - t
    os.unlink(path)
    # One memcpy of each field, from its own place in memory, into a field-sized buffer: the
    # least a store that maps its data (haar pmem) must do to hand a field to the reader.
    src = memoryview(bytearray(msg) * fields)
    mv = memoryview(buf)
    n = len(msg)
    t = time.perf_counter()
    for i in range(fields):
        mv[:] = src[i * n:(i + 1) * n]
    cp = time.perf_counter() - t
    del src
    return {"write_s": w, "read_s": rd, "copy_s": cp}


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
    ap.add_argument("--mode", choices=("tools", "hammer"), default="tools",
                    help="tools: fdb-write/fdb-read; hammer: fdb-hammer write then --read")
    ap.add_argument("--field-size", type=int, default=819200, help="hammer: template GRIB bytes")
    ap.add_argument("--members", type=int, default=2, help="hammer: --nensembles")
    ap.add_argument("--steps", type=int, default=2, help="hammer: --nsteps")
    ap.add_argument("--levels", type=int, default=10, help="hammer: --nlevels")
    ap.add_argument("--params", type=int, default=5, help="hammer: --nparams")
    ap.add_argument("--debian-schema", default="/etc/fdb/schema",
                    help="hammer: also run TOC with this schema (FDB5's own), when it exists")
    ap.add_argument("--json", help="where to save the figures (default bench/results/"
                    "fdb5-plugin.json, or fdb5-plugin-hammer.json with --mode hammer)")
    args = ap.parse_args()

    import fdb5lib

    fdb_bin = os.path.join(os.path.dirname(fdb5lib.__file__), "bin")
    haar = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release", "haar")
    work = tempfile.mkdtemp(prefix="haar-fdb5-plugin-bench.", dir=args.dir)
    try:
        base = dict(os.environ)
        base["PATH"] = fdb_bin + ":" + base["PATH"]
        for k in ("LOAD_PLUGINS", "HAAR_CONFIG", "FDB5_CONFIG_FILE"):
            base.pop(k, None)
        times = {}

        def setup(name):
            d = os.path.join(work, name)
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
            if name in ("toc", "toc-debian-schema", "backend-free"):
                open(os.path.join(d, "dbnames"), "w").close()
                if name != "toc-debian-schema":
                    subprocess.run([haar, "--config", os.path.join(work, "schema-src.yaml"), "schema", "--fdb5"],
                                   stdout=open(os.path.join(d, "schema"), "w"), check=True)
                else:
                    # FDB5's own schema as Debian ships it ('domain' required, no fallback rule).
                    shutil.copy(args.debian_schema, os.path.join(d, "schema"))
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
        if args.mode == "hammer":
            names.insert(1, "backend-free")
            if os.path.exists(args.debian_schema):
                names.insert(2, "toc-debian-schema")
            hammer(args, work, fdb_bin, names, setup)
            return
        grib = os.path.join(work, "fields.grib")
        make_grib(grib, args.fields, args.points)
        size = os.path.getsize(grib)
        steps = sorted({i // 10 for i in range(args.fields)})
        req = os.path.join(work, "all.req")
        with open(req, "w") as f:
            f.write("retrieve,class=rd,expver=xxxx,stream=oper,date=20191110,time=0000,domain=g,"
                    "type=fc,levtype=sfc,step=%s,param=167/165/166/134/151/164/228/235/31/34\n"
                    % "/".join(map(str, steps)))
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
        with open(args.json or os.path.join(HERE, "results", "fdb5-plugin.json"), "w") as f:
            json.dump({"fields": args.fields, "bytes": size, "runs": args.runs, "dir": args.dir,
                       "times": times, "medians": med, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "host": os.uname().nodename}, f, indent=1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def hammer(args, work, fdb_bin, names, setup):
    """fdb-hammer write then --read on every backend, alternating run by run."""
    load0 = os.getloadavg()
    shim_c = os.path.join(ROOT, "crates", "haar-bench", "src", "table8", "fdb-hammer-audit.c")
    shim = os.path.join(work, "fdb-hammer-audit.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", shim, shim_c], check=True)
    # FDB5's backend made free (FDB::archive(Key, data, length) and FDB::flush() no-ops,
    # FDB::retrieve timed): bench/fdb5_backend_free.cc, preloaded in the backend-free row.
    free_so = os.path.join(work, "fdb5-backend-free.so")
    subprocess.run(["c++", "-O2", "-std=c++17", "-shared", "-fPIC", "-o", free_so,
                    os.path.join(HERE, "fdb5_backend_free.cc"), "-ldl"], check=True)
    grib = os.path.join(work, "template.grib")
    make_template(grib, args.field_size)
    template = os.path.getsize(grib)
    tool = os.path.join(fdb_bin, "fdb-hammer")
    fields = args.members * args.steps * args.levels * args.params
    shape = ["--class=rd", "--expver=xxxx", "--level=1", "--no-randomise-data"]
    timed = shape + [f"--nensembles={args.members}", f"--nsteps={args.steps}",
                     f"--nlevels={args.levels}", f"--nparams={args.params}"]
    # One field outside the run: creates the database (and the pmem pool) before timing.
    pre = shape + ["--nensembles=1", "--nsteps=1", "--nlevels=1", "--nparams=1", "--step=9999"]
    runs = {n: [] for n in names}
    floors = []
    for r in range(args.runs):
        floors.append(data_floor(os.path.join(work, "floor.bin"), grib, fields))
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            env = dict(setup(name), LD_AUDIT=shim)
            p = run_hammer([tool] + pre + [grib], env, f"{name} run {r} (creating the database)")
            if name == "backend-free":
                w, rd = backend_free_run(tool, timed, grib, env, free_so, fields,
                                         fields * template, os.path.join(work, name, "root"),
                                         f"{name} run {r}")
            else:
                w = run_hammer([tool] + timed + [grib], env, f"{name} run {r} write")
                rd = run_hammer([tool, "--read"] + timed + [grib], env, f"{name} run {r} read")
            for what, said in (("write", w), ("read", rd)):
                if said["fields"] != fields:
                    sys.exit(f"{name} run {r} {what}: {said['fields']} fields, expected {fields}")
            runs[name].append({"create_process_s": p["process_s"], "create_cpu_s": p["cpu_s"],
                               "write": w, "read": rd,
                               "loadavg": os.getloadavg()})
            print(f"run {r} {name}: write {w['io_s']:.3f} s (process {w['process_s']:.3f}), "
                  f"read {rd['io_s']:.3f} s (process {rd['process_s']:.3f}), "
                  f"read bytes {rd['bytes']}, load {os.getloadavg()[0]:.2f}", flush=True)
    data = fields * template
    gib = data / 2**30

    def med(name, op, key):
        return statistics.median(x[op][key] for x in runs[name] if key in x[op])

    medians = {}
    for n in names:
        medians[n] = {op: {k: med(n, op, k) for k in
                           ("io_s", "process_s", "total_s", "grib_s", "writing_s", "data_read_s",
                            "io_full_s", "retrieve_s", "save_into_s", "cpu_s")
                           if any(k in x[op] for x in runs[n])}
                      for op in ("write", "read")}
        for op in ("write", "read"):
            m = medians[n][op]
            m["gib_per_s"] = gib / m["io_s"]
            m["fields_per_s"] = fields / m["io_s"]
            m["process_gib_per_s"] = gib / m["process_s"]
            m["bytes_reported"] = statistics.median(x[op]["bytes"] for x in runs[n])
    toc = medians["toc"]
    deb = medians.get("toc-debian-schema")
    floor = {k: statistics.median(f[k] for f in floors) for k in ("write_s", "read_s", "copy_s")}
    # A Store plugin replaces only the store's share of TOC's time; FDB5's key extraction,
    # catalogue (TOC index) and fdb-hammer's own GRIB work stay. With the store's share at
    # its floor removed entirely, TOC's time would fall by at most this much:
    ceiling = {"write": toc["write"]["io_s"] / max(toc["write"]["io_s"] - floor["write_s"], 1e-9),
               "read": toc["read"]["io_s"] / max(toc["read"]["io_s"] - floor["read_s"], 1e-9)}
    # FDB5's backend free (any Store, Catalogue or engine at zero cost): TOC's span / the
    # backend-free span; medians of each, and the median of the same-run (paired) ratios.
    free = medians["backend-free"]
    backend_free_ceiling = {
        op: toc[op]["io_s"] / max(free[op]["io_s"], 1e-9) for op in ("write", "read")}
    backend_free_paired = {
        op: statistics.median(t[op]["io_s"] / max(f[op]["io_s"], 1e-9)
                              for t, f in zip(runs["toc"], runs["backend-free"]))
        for op in ("write", "read")}
    # The same write ceiling in CPU time, which a busy host inflates far less than wall time:
    # each write process's CPU less that of the one-field process before it (start-up), TOC's
    # over the backend-free one's, paired run by run (both one-field processes are the same
    # plain TOC write, so this removes the same start-up from both).
    def write_cpu(x):
        return x["write"]["cpu_s"] - x["create_cpu_s"]
    backend_free_cpu = statistics.median(
        write_cpu(t) / max(write_cpu(f), 1e-9) for t, f in zip(runs["toc"], runs["backend-free"]))
    # Read with FDB::retrieve (TOC's catalogue lookups, request expansion) kept and only the data
    # copy (all the store's reads, DataHandle::saveInto) free: the most a Store plugin could give.
    read_data_free_ceiling = free["read"]["io_full_s"] / max(
        free["read"]["io_full_s"] - free["read"]["save_into_s"], 1e-9)
    # The same with the data copy at its floor (one memcpy of every byte fdb-hammer reads,
    # duplicates included) instead of free.
    copy_floor = floor["copy_s"] * toc["read"]["bytes_reported"] / data
    read_copy_floor_ceiling = free["read"]["io_full_s"] / max(
        free["read"]["io_full_s"] - free["read"]["save_into_s"] + copy_floor, 1e-9)
    rows = ["| backend | write GiB/s (fields/s) | write process s | read GiB/s (fields/s) | "
            "read process s | write ratio this/TOC | read ratio this/TOC |"
            + (" write ratio this/TOC Debian schema | read ratio this/TOC Debian schema |"
               if deb else ""),
            "|---|---|---|---|---|---|---|" + ("---|---|" if deb else "")]
    for n in names:
        m = medians[n]
        rows.append(
            f"| {n} | {m['write']['gib_per_s']:.3f} ({m['write']['fields_per_s']:.0f}) | "
            f"{m['write']['process_s']:.3f} | {m['read']['gib_per_s']:.3f} "
            f"({m['read']['fields_per_s']:.0f}) | {m['read']['process_s']:.3f} | "
            f"{toc['write']['io_s'] / m['write']['io_s']:.2f}x | "
            f"{toc['read']['io_s'] / m['read']['io_s']:.2f}x |" + (
                f" {deb['write']['io_s'] / m['write']['io_s']:.2f}x | "
                f"{deb['read']['io_s'] / m['read']['io_s']:.2f}x |" if deb else ""))
    table = "\n".join(rows)
    print(f"fdb-hammer: {fields} fields of {template} bytes ({gib:.3f} GiB), {args.runs} runs, "
          f"medians, {args.dir}; GiB/s = fields x template bytes over first IO to last IO")
    print(table)
    for n in names:
        w = medians[n]["write"]
        print(f"{n}: write process CPU {w['cpu_s']:.3f} s (TOC/this {toc['write']['cpu_s'] / w['cpu_s']:.2f}x)")
        print(f"{n}: write io {w['io_s']:.3f} s = GRIB {w.get('grib_s', 0):.3f} + writing "
              f"{w.get('writing_s', 0):.3f}; read data {medians[n]['read'].get('data_read_s', 0):.3f} s; "
              f"read bytes reported {medians[n]['read']['bytes_reported']:.0f} (written {data})")
    print(f"data floor (write(2)+fsync / read(2) of the same bytes in {args.dir}): write "
          f"{floor['write_s']:.3f} s, read {floor['read_s']:.3f} s; a store taking no time at "
          f"all would make TOC's runs at most {ceiling['write']:.2f}x (write) / "
          f"{ceiling['read']:.2f}x (read) faster")
    print(f"backend-free (FDB::archive/flush no-ops; read less FDB::retrieve and the data copy): "
          f"write span {free['write']['io_s']:.3f} s, read {free['read']['io_s']:.3f} s of "
          f"{free['read']['io_full_s']:.3f} (retrieve {free['read']['retrieve_s']:.3f}, data "
          f"{free['read']['save_into_s']:.3f}); ceiling TOC/backend-free "
          f"{backend_free_ceiling['write']:.2f}x write, {backend_free_ceiling['read']:.2f}x read "
          f"(paired per run: {backend_free_paired['write']:.2f}x, {backend_free_paired['read']:.2f}x); "
          f"write in CPU time less start-up (paired): {backend_free_cpu:.2f}x; "
          f"read with only the data copy free (FDB::retrieve kept): {read_data_free_ceiling:.2f}x, "
          f"with it at one memcpy ({copy_floor:.3f} s): {read_copy_floor_ceiling:.2f}x")
    out = args.json or os.path.join(HERE, "results", "fdb5-plugin-hammer.json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    import fdb5lib
    with open(out, "w") as f:
        json.dump({"mode": "hammer", "tool": tool, "version": fdb5lib.__version__,
                   "shape": {"members": args.members, "steps": args.steps, "levels": args.levels,
                             "params": args.params, "fields": fields},
                   "template_bytes": template, "bytes": data, "runs": args.runs, "dir": args.dir,
                   "rate_basis": "fields x template bytes over fdb-hammer's first IO to last IO",
                   "per_run": runs, "medians": medians, "data_floor_per_run": floors,
                   "data_floor": floor, "store_free_ceiling": ceiling,
                   "backend_free_ceiling": backend_free_ceiling,
                   "backend_free_ceiling_paired": backend_free_paired,
                   "backend_free_write_cpu_ceiling": backend_free_cpu,
                   "read_data_free_ceiling": read_data_free_ceiling,
                   "read_copy_floor_s": copy_floor,
                   "read_copy_floor_ceiling": read_copy_floor_ceiling,
                   "backend_free_basis": "write: TOC span / span with FDB::archive(Key,data,len) "
                   "and FDB::flush no-ops (bench/fdb5_backend_free.cc); read: TOC span / "
                   "(span - time in FDB::retrieve - time in DataHandle::saveInto, the data copy)",
                   "ratios": {n: {op: toc[op]["io_s"] / medians[n][op]["io_s"]
                                  for op in ("write", "read")} for n in names},
                   "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                   "host": os.uname().nodename, "loadavg_start": load0,
                   "loadavg_end": os.getloadavg(),
                   "cpu": cpu_model()}, f, indent=1)
    print(f"saved {out}")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


if __name__ == "__main__":
    main()
