"""Extraction over a server, or over several through ``dist`` (issue 29, design §8 EXTRACT,
§7.1): bytes on the wire and time of
``haar --servers ADDR extract`` (the server extracts, only the values travel) beside the
whole-field ``haar --servers ADDR retrieve`` of the same fields through the same server, in
the same run. Fields and ranges are ``extract_bench.py``'s (1,000 x 1,000 points at 16 bits,
simple packing; ``POINTS`` scattered single-point ranges per field).

Bytes on the wire are counted by a TCP relay in this script between the client and the server,
each direction, for one more run of each command through it (and of ``haar list`` of the
request: what ``dist`` lists before reading a request that leaves keywords out) (every byte of every frame:
handshake, headers, meta, data); the times are of runs straight to the server. The server runs on the pmem backend in /dev/shm, plain TCP on loopback (no
frame tags), ``HAAR_LOCAL_READS=0`` so that nothing bypasses the wire. Every extracted value
must equal ecCodes' decoding of the field (asserted).

With ``--servers N`` (N > 1) it runs N servers, each behind its own counting relay, and the
client reaches them as ``haar --servers A,B,C`` (``dist``, rendezvous hashing on the database,
design §7.1): the fields are spread over ``DATES`` databases (dates 20261101 on, field s in
date ``s mod DATES``, step ``s div DATES``) so that every server holds some; each server
extracts the fields it holds. The retrieve's time is also given with ecCodes' decoding of
the retrieved fields at the same ranges (``retrieve_decode_s``: what a client without
extraction pays to get the values).

Usage: python3 bench/extract_servers_bench.py [--servers N] HAAR_BINARY [FIELDS] [POINTS]
[OUT.json] (defaults 1 server, 200 fields, 100 points, bench/results/extract_servers.json, or
extract_servers_N.json for N servers). Each command is timed best of ROUNDS (default 3),
alternating extract and retrieve.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from extract_bench import make_fields, ranges_for, reference  # noqa: E402

TOKEN = "extract-servers-bench"


def with_mars_keys(msgs: list[tuple[str, bytes]]) -> list[bytes]:
    """The messages with MARS keys in their headers (``haar archive`` takes keys from there;
    ``extract_bench.py`` hands them to ``FDB.archive`` instead): step ``s`` for the s-th."""
    import eccodes

    out = []
    for s, (_, m) in enumerate(msgs):
        h = eccodes.codes_new_from_message(m)
        for k, v in (("setLocalDefinition", 1), ("class", "od"), ("stream", "oper"), ("type", "fc"), ("expver", "0001"),
                     ("date", 20261121), ("time", 1200), ("step", s), ("paramId", 167)):
            eccodes.codes_set(h, k, v)
        out.append(eccodes.codes_get_message(h))
        eccodes.codes_release(h)
    return out


class CountingProxy:
    """A loopback TCP relay that counts the bytes of each direction (a haar client writes with
    send(2), which /proc/PID/io does not count)."""

    def __init__(self, target: str):
        import socket
        import threading

        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.up = self.down = 0
        self.lock = threading.Lock()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.addr = "127.0.0.1:%d" % self.listener.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        import socket
        import threading

        while True:
            c, _ = self.listener.accept()
            s = socket.create_connection(self.target)
            for a, b, up in ((c, s, True), (s, c, False)):
                threading.Thread(target=self.pump, args=(a, b, up), daemon=True).start()

    def pump(self, a, b, up: bool):
        import socket

        while True:
            try:
                data = a.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                try:
                    b.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            with self.lock:
                if up:
                    self.up += len(data)
                else:
                    self.down += len(data)
            b.sendall(data)

    def counts(self) -> tuple[int, int]:
        with self.lock:
            return self.up, self.down


def with_dates(msgs: list[bytes], dates: int) -> list[bytes]:
    """Field s moved to date 20261101 + (s mod dates), step s div dates."""
    import eccodes

    out = []
    for s, m in enumerate(msgs):
        h = eccodes.codes_new_from_message(m)
        eccodes.codes_set(h, "date", 20261101 + s % dates)
        eccodes.codes_set(h, "step", s // dates)
        out.append(eccodes.codes_get_message(h))
        eccodes.codes_release(h)
    return out


def decode_at(path: str, ranges: list[tuple[int, int]]) -> int:
    """ecCodes' decoding of every field in ``path``, keeping the values at ``ranges`` (what a
    client that retrieves whole fields does to get them); returns the fields decoded."""
    import eccodes
    import numpy as np

    n = 0
    with open(path, "rb") as f:
        while True:
            h = eccodes.codes_grib_new_from_file(f)
            if h is None:
                return n
            values = eccodes.codes_get_values(h)
            np.concatenate([values[i:j] for i, j in ranges])
            eccodes.codes_release(h)
            n += 1


def main() -> None:
    args = sys.argv[1:]
    servers = 1
    if args[:1] == ["--servers"]:
        servers = int(args[1])
        args = args[2:]
    haar = os.path.abspath(args[0])
    fields = int(args[1]) if len(args) > 1 else 200
    points = int(args[2]) if len(args) > 2 else 100
    default_out = ("bench/results/extract_servers.json" if servers == 1
                   else "bench/results/extract_servers_%d.json" % servers)
    out_path = args[3] if len(args) > 3 else default_out
    rounds = int(os.environ.get("ROUNDS", "3"))
    dates = 1 if servers == 1 else int(os.environ.get("DATES", "10"))
    assert fields % dates == 0, "FIELDS must be a multiple of DATES (%d)" % dates

    msgs = with_mars_keys(make_fields(fields))
    if dates > 1:
        msgs = with_dates(msgs, dates)
    ranges = ranges_for(points)
    want, _ = reference(msgs[0], ranges)
    field_bytes = sum(len(m) for m in msgs)

    work = tempfile.mkdtemp(prefix="haar-extract-servers-", dir="/dev/shm")
    grib = os.path.join(work, "fields.grib")
    with open(grib, "wb") as f:
        for m in msgs:
            f.write(m)
    env = dict(os.environ, HAAR_TOKEN=TOKEN, HAAR_LOCAL_READS="0")
    env.pop("HAAR_CONFIG", None)
    procs = []
    try:
        for i in range(servers):
            procs.append(subprocess.Popen(
                [haar, "--root", os.path.join(work, "store%d" % i), "--backend", "pmem", "serve",
                 "--listen", "127.0.0.1:0"],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            ))
        addrs = [p.stdout.readline().strip().removeprefix("listening on ") for p in procs]
        addr = ",".join(addrs)
        archived = subprocess.run([haar, "--servers", addr, "archive", grib], env=env,
                                  capture_output=True, text=True)
        assert archived.returncode == 0, archived.stderr
        date_part = "/".join(str(20261101 + d) for d in range(dates))
        request = "class=od,date=%s,time=12,param=167,step=0/to/%d/by/1" % (
            date_part, fields // dates - 1)
        spec = ",".join(f"{i}-{j}" for i, j in ranges)
        out_grib = os.path.join(work, "out.grib")
        extract = [haar, "--servers", addr, "extract", request, "--ranges", spec, "--json"]
        retrieve = [haar, "--servers", addr, "retrieve", request, "-o", out_grib]

        proxies = [CountingProxy(a) for a in addrs]
        via_addr = ",".join(p.addr for p in proxies)
        wire = {}
        # The listing alone: what dist asks the servers before it extracts or retrieves when
        # the request leaves keywords out (it names no expver, stream, type, levtype, domain).
        listing = [haar, "--servers", addr, "list", request]
        for name, cmd in (("extract", extract), ("retrieve", retrieve), ("list", listing)):
            before = [p.counts() for p in proxies]
            via = [via_addr if a == addr else a for a in cmd]
            subprocess.run(via, env=env, check=True, capture_output=True)
            after = [p.counts() for p in proxies]
            per = [{"client_to_server": a[0] - b[0], "server_to_client": a[1] - b[1]}
                   for a, b in zip(after, before)]
            wire[name] = {
                "client_to_server": sum(x["client_to_server"] for x in per),
                "server_to_client": sum(x["server_to_client"] for x in per),
            }
            if servers > 1:
                wire[name]["per_server"] = per

        times = {"extract": [], "retrieve": [], "retrieve_decode": []}
        for _ in range(rounds):
            for name, cmd in (("extract", extract), ("retrieve", retrieve)):
                t = time.perf_counter()
                p = subprocess.run(cmd, env=env, check=True, capture_output=True)
                times[name].append(time.perf_counter() - t)
                stdout = p.stdout
                if name == "extract":
                    lines = stdout.decode().splitlines()
                    assert len(lines) == fields, len(lines)
                    for line in lines:
                        v = json.loads(line)
                        assert v["method"] == "jump", v["method"]
                        got = [x for r in v["values"] for x in r]
                        assert got == list(want), "values differ from ecCodes'"
                else:
                    t = time.perf_counter()
                    assert decode_at(out_grib, ranges) == fields
                    times["retrieve_decode"].append(
                        times["retrieve"][-1] + time.perf_counter() - t)
        values_bytes = fields * points * 8
        ext, ret = wire["extract"], wire["retrieve"]
        result = {
            "what": "haar extract vs whole-field retrieve (+ ecCodes decode) through %s haar "
                    "serve (pmem, loopback, plain TCP), same run" % (
                        "one" if servers == 1 else "%d (dist, %d databases)" % (servers, dates)),
            "command": "python3 bench/extract_servers_bench.py %s%s %d %d" % (
                "--servers %d " % servers if servers > 1 else "", os.path.relpath(haar),
                fields, points),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "host": {"node": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
                     "load": os.getloadavg()},
            "servers": servers,
            "databases": dates,
            "fields": fields,
            "points_per_field": points,
            "field_bytes": field_bytes,
            "values_bytes": values_bytes,
            "wire": wire,
            "extract_bytes_over_values": ext["server_to_client"] / values_bytes,
            "extract_minus_listing_over_values":
                (ext["server_to_client"] - wire["list"]["server_to_client"]) / values_bytes,
            "retrieve_over_extract_bytes": ret["server_to_client"] / ext["server_to_client"],
            "extract_s": min(times["extract"]),
            "retrieve_s": min(times["retrieve"]),
            "retrieve_decode_s": min(times["retrieve_decode"]),
            "retrieve_over_extract_time": min(times["retrieve"]) / min(times["extract"]),
            "retrieve_decode_over_extract_time":
                min(times["retrieve_decode"]) / min(times["extract"]),
            "times": times,
            "checked": "every value equal to ecCodes' decoding",
        }
    finally:
        for p in procs:
            p.kill()
            p.wait()
        subprocess.run(["rm", "-rf", work])
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: result[k] for k in (
        "servers", "fields", "points_per_field", "values_bytes", "wire",
        "extract_bytes_over_values", "extract_minus_listing_over_values", "retrieve_over_extract_bytes", "extract_s", "retrieve_s",
        "retrieve_decode_s", "retrieve_over_extract_time", "retrieve_decode_over_extract_time")},
        indent=2))


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
