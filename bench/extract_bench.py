"""Extraction of scattered points from many fields (issue 29 part 2): haar's ``FDB.extract``
(jump records, only the values' bytes read) against two peers in the same run, over the same
GRIB messages and the same ranges:

- ecCodes' whole-field decode of the messages (from memory, no I/O);
- ``pygribjump`` 0.13 (PyPI ``pygribjump`` + ``gribjumplib``) on a real FDB5 5.25 (PyPI
  ``pyfdb``/``fdb5lib`` wheels): the messages are archived with ``pyfdb`` into a local TOC
  FDB5 on /dev/shm with gribjump's FDB plugin on (``FDB_ENABLE_GRIBJUMP=1``, ``plugin.select``
  in ``GRIBJUMP_CONFIG_FILE``), which writes gribjump's jump index (``.gribjump`` beside each
  ``.data`` file) at flush, as ECMWF runs it; then extracted with ``GribJump().extract_single``
  (one request of every step) and with ``GribJump().extract`` (one ``ExtractionRequest`` per
  field), each with the fields' grid hash, local engine, gribjump's default configuration.
  Two more columns: with the index switched off (``cache.enable: false``: gribjump reads
  each message's headers itself), and with two worker threads (``GRIBJUMP_THREADS=2``;
  gribjump's default, like haar's extract, is one). gribjump runs in child processes of this script with a clean
  environment (the wheels' libraries only, never Debian's or haar's libfdb5/ecCodes); the
  timings are taken inside them around the extraction calls only.

Every extracted value, of every field, from haar and from gribjump, must equal ecCodes'
decoding of the field (asserted).

Usage: [ROUNDS=3] python3 bench/extract_bench.py [FIELDS] [POINTS] [OUT.json]
(defaults 200 fields of 1,000,000 points at 16 bits, 100 points per field,
bench/results/extract.json). Stores live in /dev/shm (haar pmem and posix backends, FDB5 TOC).
In each of ROUNDS rounds every column is measured best of 3; a column's figure is its best
over the rounds. gribjump's headline is its faster request shape with values per range (what
haar's results hold); ``pygribjump_flat_s`` is its faster shape with one flat array per field.
If gribjump cannot run, the exact error is saved under ``gribjump.error`` and the other
columns stand.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

NI, NJ = 1000, 1000
KEY = {
    "class": "od",
    "expver": "0001",
    "stream": "oper",
    "date": "20261121",
    "time": "1200",
    "domain": "g",
    "type": "fc",
    "levtype": "sfc",
    "param": "167",
}


def make_fields(n: int) -> list[tuple[str, bytes]]:
    import eccodes
    import numpy as np

    h = eccodes.codes_grib_new_from_samples("regular_ll_sfc_grib2")
    eccodes.codes_set(h, "Ni", NI)
    eccodes.codes_set(h, "Nj", NJ)
    eccodes.codes_set(h, "numberOfDataPoints", NI * NJ)
    eccodes.codes_set(h, "bitsPerValue", 16)
    rng = np.random.default_rng(29)
    eccodes.codes_set_values(h, 250.0 + 30.0 * rng.random(NI * NJ))
    out = []
    for s in range(n):
        key = (
            "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,"
            f"levtype=sfc,step={s},param=167"
        )
        out.append((key, eccodes.codes_get_message(h)))
    eccodes.codes_release(h)
    return out


def ranges_for(points: int) -> list[tuple[int, int]]:
    import numpy as np

    rng = np.random.default_rng(1)
    idx = np.sort(rng.choice(NI * NJ, points, replace=False))
    return [(int(i), int(i) + 1) for i in idx]


def reference(message: bytes, ranges: list[tuple[int, int]]):
    """ecCodes' decode of the field at the ranges, and the field's grid hash."""
    import eccodes
    import numpy as np

    h = eccodes.codes_new_from_message(message)
    values = eccodes.codes_get_array(h, "values")
    grid_hash = eccodes.codes_get_string(h, "md5GridSection")
    eccodes.codes_release(h)
    return np.concatenate([values[i:j] for i, j in ranges]), grid_hash


def best(f, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def loaded_libraries() -> list[str]:
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            base = os.path.basename(path)
            if path.startswith("/") and base.startswith(
                    ("libfdb5", "libgribjump", "libeckit.", "libmetkit", "libeccodes")):
                libs.add(path)
    return sorted(libs)


# ---------------------------------------------------------------------------------------------
# gribjump side (child processes; the environment is set by the parent before Python starts)


def gj_archive(n: int) -> None:
    """Archive the same N messages into FDB5 5.25 with pyfdb, gribjump's plugin on."""
    import pygribjump  # noqa: F401  (first: loads gribjump's FDB plugin before FDB5 starts)
    import pyfdb

    fields = make_fields(n)
    t = time.perf_counter()
    fdb = pyfdb.FDB()
    for s, (_, m) in enumerate(fields):
        fdb.archive(m, dict(KEY, step=str(s)))
    fdb.flush()
    print(json.dumps({"archive_s": time.perf_counter() - t, "libraries": loaded_libraries(),
                      "pyfdb": pyfdb.__version__ if hasattr(pyfdb, "__version__") else None}))


def gj_extract(n: int, points: int, variant: str) -> None:
    """VARIANT: single|per_field (one request of every step, or one request per field), with
    ``-flat`` to take each field's values as one array (``values_flat``) instead of one array
    per range (``values``, what haar's results hold)."""
    import numpy as np
    import pygribjump

    ranges = ranges_for(points)
    ref, grid_hash = reference(make_fields(1)[0][1], ranges)
    gj = pygribjump.GribJump()
    steps = [str(s) for s in range(n)]
    request = dict(KEY, step=steps)
    how, _, flat = variant.partition("-")
    take = (lambda r: r.values_flat) if flat else (lambda r: r.values)

    def single() -> list:
        return [take(r) for r in gj.extract_single(request, ranges, grid_hash)]

    def per_field() -> list:
        reqs = [pygribjump.ExtractionRequest(dict(KEY, step=s), ranges, grid_hash) for s in steps]
        return [take(r) for r in gj.extract(reqs)]

    run = {"single": single, "per_field": per_field}[how]
    t = time.perf_counter()
    out = run()
    first = time.perf_counter() - t
    assert len(out) == n, (len(out), n)
    for v in out:
        v = v if flat else np.concatenate(v)
        assert np.array_equal(v, ref), "pygribjump's values differ from ecCodes'"
    print(json.dumps({
        "first_s": first,
        "best_s": best(run),
        "pygribjump": pygribjump.__version__,
        "gribjump": pygribjump.library_version(),
        "libraries": loaded_libraries(),
    }))


class GribJumpPeer:
    """FDB5 5.25 + gribjump under /dev/shm: archive once (plugin on), then extraction rounds in
    child processes. Any failure is kept as the exact error (the reason gribjump cannot run)."""

    VARIANTS = {  # name: (child variant, extra environment)
        "single": ("single", {}),
        "per_field": ("per_field", {}),
        "single_flat": ("single-flat", {}),
        "per_field_flat": ("per_field-flat", {}),
        "noindex": ("per_field", {"noindex": True}),
        "threads2": ("per_field", {"GRIBJUMP_THREADS": "2"}),
    }

    def __init__(self, n: int, points: int) -> None:
        self.n, self.points = n, points
        self.info: dict = {}
        self.error: str | None = None
        d = self.dir = tempfile.mkdtemp(dir="/dev/shm", prefix="haar-xb-fdb5-")
        try:
            os.makedirs(f"{d}/root")
            shutil.copy("/etc/fdb/schema", f"{d}/schema")  # FDB5's default schema (Debian fdb5)
            open(f"{d}/dbnames", "w").close()  # FDB5 5.25 crashes on Debian's /etc/fdb/dbnames
            with open(f"{d}/config.yaml", "w") as f:
                f.write(f"---\ntype: local\nengine: toc\nschema: {d}/schema\n"
                        f"spaces:\n- handler: Default\n  roots:\n  - path: {d}/root\n")
            # Index every field at archive time (jump info written beside each .data file).
            with open(f"{d}/gribjump.yaml", "w") as f:
                f.write("---\ntype: local\nplugin:\n  select: class=(od)\n")
            with open(f"{d}/gribjump-noindex.yaml", "w") as f:
                f.write("---\ntype: local\ncache:\n  enable: false\n")
            self.env = {k: v for k, v in os.environ.items()
                        if not k.startswith(("HAAR", "FDB", "GRIBJUMP", "ECCODES"))
                        and k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")}
            self.env.update(FDB5_CONFIG_FILE=f"{d}/config.yaml", FDB_DBNAMES_FILE=f"{d}/dbnames")
            self.info["config"] = {
                "FDB5_CONFIG_FILE": open(f"{d}/config.yaml").read(),
                "GRIBJUMP_CONFIG_FILE (archive, extract)": open(f"{d}/gribjump.yaml").read(),
                "GRIBJUMP_CONFIG_FILE (noindex)": open(f"{d}/gribjump-noindex.yaml").read(),
                "archive environment": "FDB_ENABLE_GRIBJUMP=1, FDB_DBNAMES_FILE=<empty file>",
            }
            a = self.child(["--gj-archive", str(n)], {"FDB_ENABLE_GRIBJUMP": "1",
                                                       "GRIBJUMP_CONFIG_FILE": f"{d}/gribjump.yaml"})
            self.info["fdb5_archive_with_index_s"] = a["archive_s"]
            self.info["libraries"] = a["libraries"]
            files = [f for _, _, fs in os.walk(f"{d}/root") for f in fs]
            self.info["index_files"] = sum(f.endswith(".gribjump") for f in files)
            self.info["data_files"] = sum(f.endswith(".data") for f in files)
            assert self.info["index_files"] >= 1, f"no .gribjump index written: {files}"
        except Exception as e:  # noqa: BLE001  (the reason is the result)
            self.error = f"{type(e).__name__}: {e}"

    def child(self, args: list[str], extra: dict) -> dict:
        p = subprocess.run([sys.executable, os.path.abspath(__file__), *args],
                           env=dict(self.env, **extra), capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {p.returncode}:\n{p.stderr[-3000:]}")
        return json.loads(p.stdout.strip().splitlines()[-1])

    def round(self) -> dict:
        """Best of 3 of every variant, each in its own process."""
        out: dict = {}
        if self.error:
            return out
        try:
            for name, (variant, extra) in self.VARIANTS.items():
                cfg = "gribjump-noindex.yaml" if extra.pop("noindex", False) else "gribjump.yaml"
                extra = dict(extra, GRIBJUMP_CONFIG_FILE=f"{self.dir}/{cfg}")
                r = self.child(["--gj-extract", str(self.n), str(self.points), variant], extra)
                out[f"{name}_s"] = r["best_s"]
                out[f"{name}_first_s"] = r["first_s"]
                self.info["versions"] = {"pygribjump": r["pygribjump"], "gribjump": r["gribjump"]}
        except Exception as e:  # noqa: BLE001
            self.error = f"{type(e).__name__}: {e}"
        return out

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


# ---------------------------------------------------------------------------------------------


def main() -> None:
    import eccodes
    import numpy as np

    import haar

    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    points = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    out_path = sys.argv[3] if len(sys.argv) > 3 else "bench/results/extract.json"
    rounds = int(os.environ.get("ROUNDS", "3"))

    fields = make_fields(n)
    ranges = ranges_for(points)
    idx = np.array([i for i, _ in ranges])
    ref, _ = reference(fields[0][1], ranges)

    def eccodes_whole() -> None:
        for _, m in fields:
            h = eccodes.codes_new_from_message(m)
            v = eccodes.codes_get_array(h, "values")
            _ = v[idx]
            eccodes.codes_release(h)

    result: dict = {
        "command": "python3 bench/extract_bench.py " + " ".join(sys.argv[1:]),
        "machine": platform.processor() or platform.machine(),
        "cpu": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                     if line.startswith("model name")), None),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "load_average_start": os.getloadavg(),
        "fields": n,
        "points_per_field": NI * NJ,
        "extracted_per_field": points,
        "bytes_per_field": len(fields[0][1]),
        "rounds": rounds,
    }

    # The three stores, each holding the same N messages.
    tmp = [tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-xb-") for _ in range(2)]
    stores = {}
    req = {"param": "167", "step": [str(s) for s in range(n)]}
    for backend, d in zip(["pmem", "posix"], tmp):
        fdb = haar.FDB({"backend": backend, "roots": [d.name]})
        for k, m in fields:
            fdb.archive(m, k)
        fdb.flush()
        stores[backend] = fdb
        first = time.perf_counter()
        res = fdb.extract(req, ranges)
        result[f"haar_{backend}_first_s"] = time.perf_counter() - first
        assert len(res) == n and all(r.method == "jump" for r in res)
        assert sorted(int(r.key["step"]) for r in res) == list(range(n))
        for r in res:  # every field equal to ecCodes' decode
            assert np.array_equal(r.values_flat, ref), "haar's values differ from ecCodes'"
    gj = GribJumpPeer(n, points)

    # Rounds: every column measured (best of 3) once per round, columns interleaved, so that a
    # change of the host's load hits all of them; each column's figure is its best over rounds.
    per_round = []
    for _ in range(rounds):
        r: dict = {"load_average": os.getloadavg()[0], "eccodes_whole_decode_s": best(eccodes_whole)}
        for backend, fdb in stores.items():
            r[f"haar_{backend}_s"] = best(lambda: fdb.extract(req, ranges))
            # Where the time goes: the store's extract alone (each field's values as one
            # buffer, before FDB.extract splits them into per-range arrays in Python).
            try:
                from haar._fdb import _required

                sel = _required(req)
                assert len(fdb._store.extract(sel, ranges=ranges, points=None)) == n
                r[f"haar_{backend}_core_s"] = best(
                    lambda: fdb._store.extract(sel, ranges=ranges, points=None))
            except Exception as e:  # noqa: BLE001  (private API: informative only)
                r[f"haar_{backend}_core_s"] = f"not measured: {e}"
        r.update({f"pygribjump_{k}": v for k, v in gj.round().items()})
        per_round.append(r)
        print(json.dumps(r), file=sys.stderr)
    del fields
    for d in tmp:
        d.cleanup()
    gj.close()

    for k in per_round[0]:
        if k.endswith("_s") and all(isinstance(r.get(k), float) for r in per_round):
            result[k] = min(r[k] for r in per_round)
    ecc = result["eccodes_whole_decode_s"]
    for backend in ["pmem", "posix"]:
        result[f"speedup_vs_eccodes_{backend}"] = ecc / result[f"haar_{backend}_s"]
    result["gribjump"] = dict(gj.info, error=gj.error) if gj.error else gj.info
    if "pygribjump_per_field_s" in result:
        # The peer's headline: its faster request shape, values per range (as haar's results);
        # and its faster shape taking each field's values as one flat array.
        v = min(("single", "per_field"), key=lambda v: result[f"pygribjump_{v}_s"])
        result["pygribjump_best_variant"] = v
        result["pygribjump_s"] = result[f"pygribjump_{v}_s"]
        result["pygribjump_flat_s"] = min(result["pygribjump_single_flat_s"],
                                          result["pygribjump_per_field_flat_s"])
        result["pygribjump_speedup_vs_eccodes"] = ecc / result["pygribjump_s"]
        for backend in ["pmem", "posix"]:
            h = result[f"haar_{backend}_s"]
            result[f"speedup_vs_pygribjump_{backend}"] = result["pygribjump_s"] / h
            result[f"speedup_vs_pygribjump_flat_{backend}"] = result["pygribjump_flat_s"] / h
    result["per_round"] = per_round
    result["load_average_end"] = os.getloadavg()
    print(json.dumps(result, indent=2))
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    if gj.error:
        print(f"gribjump peer failed: {gj.error}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--gj-archive":
        gj_archive(int(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--gj-extract":
        gj_extract(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
    else:
        main()
