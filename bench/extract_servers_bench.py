"""Extraction over a server (issue 29, design §8 EXTRACT): bytes on the wire and time of
``haar --servers ADDR extract`` (the server extracts, only the values travel) beside the
whole-field ``haar --servers ADDR retrieve`` of the same fields through the same server, in
the same run. Fields and ranges are ``extract_bench.py``'s (1,000 x 1,000 points at 16 bits,
simple packing; ``POINTS`` scattered single-point ranges per field).

Bytes on the wire are counted by a TCP relay in this script between the client and the server,
each direction, for one more run of each command through it (every byte of every frame:
handshake, headers, meta, data); the times are of runs straight to the server. The server runs on the pmem backend in /dev/shm, plain TCP on loopback (no
frame tags), ``HAAR_LOCAL_READS=0`` so that nothing bypasses the wire. Every extracted value
must equal ecCodes' decoding of the field (asserted).

Usage: python3 bench/extract_servers_bench.py HAAR_BINARY [FIELDS] [POINTS] [OUT.json]
(defaults 200 fields, 100 points, bench/results/extract_servers.json). Each command is timed
best of ROUNDS (default 3), alternating extract and retrieve.
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


def main() -> None:
    haar = os.path.abspath(sys.argv[1])
    fields = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    points = int(sys.argv[3]) if len(sys.argv) > 3 else 100
    out_path = sys.argv[4] if len(sys.argv) > 4 else "bench/results/extract_servers.json"
    rounds = int(os.environ.get("ROUNDS", "3"))

    msgs = with_mars_keys(make_fields(fields))
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
    server = subprocess.Popen(
        [haar, "--root", os.path.join(work, "store"), "--backend", "pmem", "serve",
         "--listen", "127.0.0.1:0"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        addr = server.stdout.readline().strip().removeprefix("listening on ")
        archived = subprocess.run([haar, "--servers", addr, "archive", grib], env=env,
                                  capture_output=True, text=True)
        assert archived.returncode == 0, archived.stderr
        request = "class=od,date=20261121,time=12,param=167,step=0/to/%d/by/1" % (fields - 1)
        spec = ",".join(f"{i}-{j}" for i, j in ranges)
        extract = [haar, "--servers", addr, "extract", request, "--ranges", spec, "--json"]
        retrieve = [haar, "--servers", addr, "retrieve", request, "-o",
                    os.path.join(work, "out.grib")]

        proxy = CountingProxy(addr)
        wire = {}
        for name, cmd in (("extract", extract), ("retrieve", retrieve)):
            up0, down0 = proxy.counts()
            via = [proxy.addr if a == addr else a for a in cmd]
            subprocess.run(via, env=env, check=True, capture_output=True)
            up1, down1 = proxy.counts()
            wire[name] = {"client_to_server": up1 - up0, "server_to_client": down1 - down0}

        times = {"extract": [], "retrieve": []}
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
        values_bytes = fields * points * 8
        ext, ret = wire["extract"], wire["retrieve"]
        result = {
            "what": "haar extract vs whole-field retrieve through one haar serve (pmem, "
                    "loopback, plain TCP), same run",
            "command": "python3 bench/extract_servers_bench.py %s %d %d" % (
                os.path.relpath(haar), fields, points),
            "host": {"node": platform.node(), "cpu": cpu_model(), "cpus": os.cpu_count(),
                     "load": os.getloadavg()},
            "fields": fields,
            "points_per_field": points,
            "field_bytes": field_bytes,
            "values_bytes": values_bytes,
            "wire": wire,
            "extract_bytes_over_values": ext["server_to_client"] / values_bytes,
            "retrieve_over_extract_bytes": ret["server_to_client"] / ext["server_to_client"],
            "extract_s": min(times["extract"]),
            "retrieve_s": min(times["retrieve"]),
            "retrieve_over_extract_time": min(times["retrieve"]) / min(times["extract"]),
            "times": times,
            "checked": "every value equal to ecCodes' decoding",
        }
    finally:
        server.kill()
        server.wait()
        subprocess.run(["rm", "-rf", work])
    os.makedirs(os.path.dirname(out_path) or ".", exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps({k: result[k] for k in (
        "fields", "points_per_field", "values_bytes", "wire", "extract_bytes_over_values",
        "retrieve_over_extract_bytes", "extract_s", "retrieve_s",
        "retrieve_over_extract_time")}, indent=2))


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


if __name__ == "__main__":
    main()
