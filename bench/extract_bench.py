"""Extraction of scattered points from many fields (issue 29 part 2): haar's ``FDB.extract``
(jump records, only the values' bytes read) against ecCodes' whole-field decode of the same
messages, in the same run. Prints and saves JSON.

Usage: python3 bench/extract_bench.py [FIELDS] [POINTS] [OUT.json]
(defaults 200 fields of 1,000,000 points at 16 bits, 100 points per field,
bench/results/extract.json). Stores live in /dev/shm (pmem and posix backends).
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
import time

import eccodes
import numpy as np

import haar

FIELDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
POINTS = int(sys.argv[2]) if len(sys.argv) > 2 else 100
OUT = sys.argv[3] if len(sys.argv) > 3 else "bench/results/extract.json"
NI, NJ = 1000, 1000


def make_fields() -> list[tuple[str, bytes]]:
    h = eccodes.codes_grib_new_from_samples("regular_ll_sfc_grib2")
    eccodes.codes_set(h, "Ni", NI)
    eccodes.codes_set(h, "Nj", NJ)
    eccodes.codes_set(h, "numberOfDataPoints", NI * NJ)
    eccodes.codes_set(h, "bitsPerValue", 16)
    rng = np.random.default_rng(29)
    eccodes.codes_set_values(h, 250.0 + 30.0 * rng.random(NI * NJ))
    out = []
    for s in range(FIELDS):
        key = (
            "class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,"
            f"levtype=sfc,step={s},param=167"
        )
        out.append((key, eccodes.codes_get_message(h)))
    eccodes.codes_release(h)
    return out


def best(f, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        f()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    fields = make_fields()
    rng = np.random.default_rng(1)
    idx = np.sort(rng.choice(NI * NJ, POINTS, replace=False))
    ranges = [(int(i), int(i) + 1) for i in idx]

    def eccodes_whole() -> None:
        for _, m in fields:
            h = eccodes.codes_new_from_message(m)
            v = eccodes.codes_get_array(h, "values")
            _ = v[idx]
            eccodes.codes_release(h)

    result = {
        "command": "python3 bench/extract_bench.py " + " ".join(sys.argv[1:]),
        "machine": platform.processor() or platform.machine(),
        "fields": FIELDS,
        "points_per_field": NI * NJ,
        "extracted_per_field": POINTS,
        "bytes_per_field": len(fields[0][1]),
        "eccodes_whole_decode_s": best(eccodes_whole),
    }
    for backend in ["pmem", "posix"]:
        with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-xb-") as d:
            fdb = haar.FDB({"backend": backend, "roots": [d]})
            for k, m in fields:
                fdb.archive(m, k)
            fdb.flush()
            req = {"param": "167", "step": [str(s) for s in range(FIELDS)]}
            first = time.perf_counter()
            res = fdb.extract(req, ranges)
            first = time.perf_counter() - first
            assert len(res) == FIELDS and all(r.method == "jump" for r in res)
            # Same values as ecCodes for one field.
            h = eccodes.codes_new_from_message(fields[0][1])
            ref = eccodes.codes_get_array(h, "values")[idx]
            eccodes.codes_release(h)
            k0 = [r for r in res if r.key["step"] == "0"][0]
            assert np.array_equal(k0.values_flat, ref)
            t = best(lambda: fdb.extract(req, ranges))
            result[f"haar_{backend}_first_s"] = first
            result[f"haar_{backend}_s"] = t
            result[f"speedup_vs_eccodes_{backend}"] = result["eccodes_whole_decode_s"] / t
    print(json.dumps(result, indent=2))
    with open(OUT, "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
