#!/usr/bin/env python3
"""The Zarr view over HTTP (issue 29 part 1): what ``haar.zarr_http`` adds to a local read.

Same fields, same run, store in /dev/shm (pmem backend), server on 127.0.0.1 (``python3 -m
haar.zarr_http`` as its own process, as users run it: plain HTTP, bearer token), client zarr
3's FsspecStore (fsspec + aiohttp) in this process:

- open: ``xarray.open_zarr(url, consolidated=True)`` against ``xarray.open_zarr(view)`` of a
  fresh local view (which reads the catalogue and one field per param);
- one chunk at a time: ``group[name][i]`` over HTTP against the same on the local view
  (median of every field, each read once per way, after one warm-up read);
- every chunk at once: ``group[name][:]`` (zarr's concurrent reads; over HTTP one connection
  per concurrent read, one server thread each) against the same locally.

Fields: --fields steps of 2 m temperature on the octahedral O320 grid (421,120 points,
GRIB2 simple packing, 24 bits; 3.4 MB a chunk as float64), and the 160 ERA5 fields of
python/tests/data (7,320 points; 59 kB a chunk). Prints and saves
``bench/results/zarr_http.json``. Not a test: it asserts nothing about speed.

Usage: python3 bench/zarr_http_bench.py [--fields 24]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import statistics
import sys
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import eccodes
import numpy as np

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parent / "python" / "tests" / "data" / "era5-levels-members.grib"
TOKEN = "bench-token"


def o320_fields(n: int) -> list[bytes]:
    """`n` steps of param 167 on O320: ecCodes' N320 sample with the octahedral pl."""
    h = eccodes.codes_grib_new_from_samples("reduced_gg_pl_320_grib2")
    rows = [20 + 4 * i for i in range(320)]
    pl = np.array(rows + rows[::-1])
    eccodes.codes_set_array(h, "pl", pl)
    eccodes.codes_set(h, "numberOfDataPoints", int(pl.sum()))
    eccodes.codes_set(h, "numberOfValues", int(pl.sum()))
    i = np.arange(int(pl.sum()))
    out = []
    for step in range(n):
        eccodes.codes_set(h, "paramId", 167)
        eccodes.codes_set(h, "step", step)
        eccodes.codes_set_values(h, 273.15 + 40 * np.sin(i / 997.0 + step))
        out.append(eccodes.codes_get_message(h))
    eccodes.codes_release(h)
    return out


def measure(config: dict[str, Any], request: str, dims: list[str], name: str, indices: list[tuple[int, ...]]) -> dict[str, Any]:
    import xarray
    import zarr

    import haar.zarr

    def fresh_view() -> Any:
        return haar.zarr.store(request, dims=dims, config=config)

    view = fresh_view()
    t = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "-m", "haar.zarr_http", "--request", request, "--dims", ",".join(dims),
         "--config", json.dumps(config), "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "HAAR_TOKEN": TOKEN},
    )
    assert server.stdout is not None
    line = server.stdout.readline().strip()
    started = time.perf_counter() - t
    if not line.startswith("listening on "):
        server.kill()
        raise SystemExit(f"the server did not start: {line!r}")
    url = "http://" + line.removeprefix("listening on ")
    options = {"headers": {"Authorization": f"Bearer {TOKEN}"}}
    try:
        t = time.perf_counter()
        xarray.open_zarr(fresh_view(), consolidated=False)
        open_local = time.perf_counter() - t
        t = time.perf_counter()
        xarray.open_zarr(url, consolidated=True, storage_options=options)
        open_http = time.perf_counter() - t
        groups = {"local": zarr.open_group(view, mode="r"),
                  "http": zarr.open_group(url, mode="r", storage_options=options)}
        one: dict[str, list[float]] = {"local": [], "http": []}
        for g in groups.values():
            g[name][indices[0]]  # warm-up: connections, caches
        for k, idx in enumerate(indices):
            for way in (("local", "http") if k % 2 == 0 else ("http", "local")):
                t = time.perf_counter()
                groups[way][name][idx]
                one[way].append(time.perf_counter() - t)
        every: dict[str, float] = {}
        for way in (("local", "http", "local", "http")):
            t = time.perf_counter()
            a = groups[way][name][:]
            every[way] = min(every.get(way, 1e9), time.perf_counter() - t)
        chunk_bytes = a[indices[0]].nbytes
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        server.stdout.close()
    med = {w: statistics.median(v) for w, v in one.items()}
    return {
        "chunks": len(indices),
        "chunk_bytes": int(chunk_bytes),
        "server_start_s": round(started, 3),
        "open_local_view_s": round(open_local, 4),
        "open_http_consolidated_s": round(open_http, 4),
        "one_chunk_median_ms": {w: round(v * 1e3, 2) for w, v in med.items()},
        "one_chunk_http_over_local": round(med["http"] / med["local"], 2),
        "every_chunk_s": {w: round(v, 3) for w, v in every.items()},
        "every_chunk_http_over_local": round(every["http"] / every["local"], 2),
        "every_chunk_http_MB_per_s": round(len(indices) * chunk_bytes / every["http"] / 1e6, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fields", type=int, default=24)
    ap.add_argument("--out", type=Path, default=HERE / "results" / "zarr_http.json")
    args = ap.parse_args()

    import aiohttp
    import fsspec
    import xarray
    import zarr

    import haar
    import haar.zarr

    tmp = tempfile.mkdtemp(dir="/dev/shm", prefix="haar-zarr-http-bench-")
    try:
        o320 = {"backend": "pmem", "roots": [os.path.join(tmp, "o320")]}
        with haar.FDB(o320) as fdb:
            fdb.archive(b"".join(o320_fields(args.fields)))
        era5 = {"backend": "pmem", "roots": [os.path.join(tmp, "era5")]}
        with haar.FDB(era5) as fdb:
            fdb.archive(SAMPLE.read_bytes())
        dims = ["date", "time", "number", "levelist"]
        result = {
            "issue": 29,
            "command": "python3 bench/zarr_http_bench.py " + " ".join(sys.argv[1:]),
            "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
            "machine": {"host": platform.node(), "cpus": os.cpu_count(), "python": platform.python_version(),
                        "load_avg_1m_at_start": round(os.getloadavg()[0], 2)},
            "versions": {"zarr": zarr.__version__, "xarray": xarray.__version__, "fsspec": fsspec.__version__,
                         "aiohttp": aiohttp.__version__, "eccodes": eccodes.codes_get_api_version()},
            "o320": measure(o320, "class=od", ["step"], "2t", [(i,) for i in range(args.fields)]),
            "era5": measure(era5, "class=ea", dims, "t",
                            [(d, t, n, lv) for d in range(2) for t in range(2) for n in range(10) for lv in range(2)]),
        }
        result["machine"]["load_avg_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=2)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    print(f"saved {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
