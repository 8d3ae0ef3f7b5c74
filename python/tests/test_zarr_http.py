"""haar.zarr_http: the Zarr view served over HTTP, read by zarr's and xarray's own HTTP clients.

A real server on 127.0.0.1 (a thread, or the command line as a process) over the ERA5 sample
fields; clients are zarr 3's FsspecStore (fsspec + aiohttp) and raw ``http.client``. Values
are checked against ecCodes' decoding of the GRIB messages themselves and against the local
view, bit for bit; NaN exactly where fields were not archived.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import haar

zarr = pytest.importorskip("zarr", minversion="3")
xr = pytest.importorskip("xarray")
eccodes = pytest.importorskip("eccodes")
pytest.importorskip("fsspec")
pytest.importorskip("aiohttp")  # fsspec's HTTP file system: zarr's client for http:// URLs

from conftest import DATA  # noqa: E402
from test_remote import server  # noqa: E402,F401  (the fixture: a haar serve on a pmem root)
from test_zarr import DIMS, DROPPED, ERA5, messages, reference  # noqa: E402

from haar.zarr_http import RangeNotSatisfiable, ZarrHTTPServer, load_tokens, parse_range, serve  # noqa: E402

TOKEN = "zarr-http-test-token"
READ_TOKEN = "zarr-http-read-only-token"


def bearer(token: str = TOKEN) -> dict[str, Any]:
    """zarr's storage options for a server that wants `token`."""
    return {"headers": {"Authorization": f"Bearer {token}"}}


@pytest.fixture
def era5(pmem_config: dict[str, object]) -> tuple[haar.FDB, list[bytes]]:
    """A pmem store with the 160 ERA5 fields but those of DROPPED; and all 160 messages."""
    msgs = messages(DATA / "era5-levels-members.grib")
    fdb = haar.FDB(pmem_config)
    for m in msgs:
        k, _ = reference(m)
        if (k["paramId"], k["dataDate"], k["dataTime"], k["number"], k["level"]) not in DROPPED:
            fdb.archive(m)
    fdb.flush()
    return fdb, msgs


def running(srv: ZarrHTTPServer) -> Iterator[ZarrHTTPServer]:
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=10)


@pytest.fixture
def served(era5: tuple[haar.FDB, list[bytes]]) -> Iterator[ZarrHTTPServer]:
    """The view of every ERA5 field (t and z, DIMS) served on 127.0.0.1 with two tokens."""
    fdb, _ = era5
    view = haar.zarr.store(dict(ERA5), dims=DIMS, fdb=fdb)
    yield from running(serve(view, "127.0.0.1:0", tokens=[TOKEN, READ_TOKEN]))


def request(srv: ZarrHTTPServer, method: str, path: str, headers: dict[str, str] | None = None,
            token: str | None = TOKEN, body: bytes | None = None) -> tuple[int, dict[str, str], bytes]:
    host, port = srv.address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_zarr_reads_every_chunk_over_http_as_ecCodes_decodes_it(
    served: ZarrHTTPServer, era5: tuple[haar.FDB, list[bytes]]
) -> None:
    _, msgs = era5
    group = zarr.open_group(served.url, mode="r", storage_options=bearer())
    assert sorted(group.array_keys()) == sorted(DIMS + ["latitude", "longitude", "t", "z"])
    coords = {d: list(group[d][:]) for d in DIMS}
    assert coords["levelist"] == [500, 850] and coords["number"] == list(range(10))
    arrays = {name: group[name][:] for name in ("t", "z")}  # every chunk, over HTTP
    seen = 0
    for m in msgs:
        k, values = reference(m)
        idx = tuple(coords[d].index(k[key]) for d, key in zip(DIMS, ("dataDate", "dataTime", "number", "level")))
        chunk = arrays[k["shortName"]][idx]
        if (k["paramId"], k["dataDate"], k["dataTime"], k["number"], k["level"]) in DROPPED:
            assert np.isnan(chunk).all()  # the server answered 404: zarr filled the chunk
        else:
            assert chunk.tobytes() == values.reshape(61, 120).tobytes()  # bit-identical
            seen += 1
    assert seen == 160 - len(DROPPED)
    for name in ("t", "z"):  # NaN nowhere else
        assert int(np.isnan(arrays[name]).all(axis=(-2, -1)).sum()) == int(np.isnan(arrays[name]).any(axis=(-2, -1)).sum())
        assert int(np.isnan(arrays[name]).all(axis=(-2, -1)).sum()) == sum(1 for d in DROPPED if d[0] == (130 if name == "t" else 129))


def test_xarray_opens_the_url_from_the_consolidated_metadata_alone(
    served: ZarrHTTPServer, era5: tuple[haar.FDB, list[bytes]], count_retrieves: Callable[[], int]
) -> None:
    fdb, msgs = era5
    local = xr.open_zarr(haar.zarr.store(dict(ERA5), dims=DIMS, fdb=fdb), consolidated=False)
    before = count_retrieves()
    ds = xr.open_zarr(served.url, consolidated=True, storage_options=bearer(READ_TOKEN))
    assert count_retrieves() == before  # the server answered from its consolidated zarr.json
    assert dict(ds.sizes) == dict(local.sizes)
    assert ds["t"].dims == ("date", "time", "number", "levelist", "latitude", "longitude")
    assert ds["t"].attrs == local["t"].attrs and ds["t"].attrs["units"] == "K"
    assert ds["latitude"].values.tobytes() == local["latitude"].values.tobytes()
    assert ds["t"].data.numblocks == (2, 2, 10, 2, 1, 1)  # lazy: one chunk per field
    # dask's threads read the chunks over parallel connections: the same bytes as locally
    for name in ("t", "z"):
        assert ds[name].values.tobytes() == local[name].values.tobytes()
    k, values = reference(msgs[5])
    one = ds[k["shortName"]].sel(date=k["dataDate"], time=k["dataTime"], number=k["number"], levelist=k["level"])
    assert one.values.tobytes() == values.reshape(61, 120).tobytes()


def test_the_root_document_holds_every_node_and_nodes_are_served_too(served: ZarrHTTPServer) -> None:
    status, headers, body = request(served, "GET", "/zarr.json")
    assert status == 200 and headers["content-type"] == "application/json"
    root = json.loads(body)
    meta = root["consolidated_metadata"]
    assert meta["kind"] == "inline" and meta["must_understand"] is False
    assert sorted(meta["metadata"]) == sorted(DIMS + ["latitude", "longitude", "t", "z"])
    status, _, t = request(served, "GET", "/t/zarr.json")
    assert status == 200 and json.loads(t) == meta["metadata"]["t"]
    assert meta["metadata"]["t"]["shape"] == [2, 2, 10, 2, 61, 120]


def test_a_request_without_the_token_is_refused(served: ZarrHTTPServer) -> None:
    for token in (None, "wrong", TOKEN + "x", TOKEN[:-1], ""):
        status, headers, body = request(served, "GET", "/zarr.json", token=token)
        assert status == 401, token
        assert headers["www-authenticate"] == 'Bearer realm="haar"' and b"Authorization: Bearer" in body
    status, _, _ = request(served, "GET", "/zarr.json", token=None, headers={"Authorization": f"Basic {TOKEN}"})
    assert status == 401
    assert request(served, "GET", "/zarr.json", token=None, headers={"Authorization": f"bearer  {READ_TOKEN} "})[0] == 200
    with pytest.raises(Exception, match="401"):  # aiohttp's ClientResponseError through zarr
        zarr.open_group(served.url, mode="r", storage_options=bearer("wrong"))


def test_ranges_are_answered_206_from_the_decoded_field(served: ZarrHTTPServer, era5: tuple[haar.FDB, list[bytes]]) -> None:
    _, msgs = era5
    k, values = reference(msgs[0])  # (129, 20170101, 0, number 0, 500): chunk z/c/0/0/0/0/0/0
    assert (k["shortName"], k["dataDate"], k["dataTime"], k["number"], k["level"]) == ("z", 20170101, 0, 0, 500)
    whole = values.astype("<f8").tobytes()
    key = "/z/c/0/0/0/0/0/0"
    status, headers, body = request(served, "GET", key)
    assert status == 200 and body == whole and headers["accept-ranges"] == "bytes"
    assert headers["content-type"] == "application/octet-stream"
    for rng, (start, stop) in {"bytes=8-23": (8, 24), "bytes=-16": (len(whole) - 16, len(whole)),
                               "bytes=58000-": (58000, len(whole)), "bytes=0-999999": (0, len(whole))}.items():
        status, headers, body = request(served, "GET", key, headers={"Range": rng})
        assert status == 206, rng
        assert body == whole[start:stop], rng
        assert headers["content-range"] == f"bytes {start}-{stop - 1}/{len(whole)}", rng
        assert int(headers["content-length"]) == stop - start
    status, headers, _ = request(served, "GET", key, headers={"Range": f"bytes={len(whole)}-"})
    assert status == 416 and headers["content-range"] == f"bytes */{len(whole)}"
    assert request(served, "GET", key, headers={"Range": "bytes=0-1,4-5"})[0] == 200  # several: whole
    status, headers, body = request(served, "HEAD", key)
    assert status == 200 and body == b"" and int(headers["content-length"]) == len(whole)
    # zarr's own client asks ranges through fsspec: the same bytes
    store = zarr.storage.FsspecStore.from_url(served.url, read_only=True, storage_options=bearer())
    from zarr.abc.store import RangeByteRequest, SuffixByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    got = sync(store.get(key[1:], default_buffer_prototype(), RangeByteRequest(80, 160)))
    assert got is not None and got.to_bytes() == whole[80:160]
    got = sync(store.get(key[1:], default_buffer_prototype(), SuffixByteRequest(8)))
    assert got is not None and got.to_bytes() == whole[-8:]


def test_absent_keys_and_missing_fields_are_404(served: ZarrHTTPServer) -> None:
    # (129, 20170102, 0, 9, 500) was not archived: date 1, time 0, number 9, levelist 0
    status, _, body = request(served, "GET", "/z/c/1/0/9/0/0/0")
    assert status == 404 and b"no such field" in body
    assert request(served, "GET", "/z/c/1/0/8/0/0/0")[0] == 200
    for path in ("/nothing/zarr.json", "/z/c/9/0/0/0/0/0", "/", "/z/../zarr.json", "/z//zarr.json", "/z/c/0/0/0/0/0/1"):
        assert request(served, "GET", path)[0] == 404, path
    assert request(served, "HEAD", "/z/c/1/0/9/0/0/0")[0] == 404


def test_writes_are_405_and_need_the_token_first(served: ZarrHTTPServer) -> None:
    for method in ("PUT", "POST", "DELETE", "PATCH"):
        status, headers, body = request(served, method, "/t/c/0/0/0/0/0/0", body=b"x" * 16)
        assert status == 405 and headers["allow"] == "GET, HEAD" and b"read-only" in body, method
    assert request(served, "PUT", "/zarr.json", token=None, body=b"{}")[0] == 401
    assert request(served, "GET", "/t/c/0/0/0/0/0/0")[0] == 200  # unchanged, still served


@pytest.mark.parametrize(
    "header, size, expect",
    [
        (None, 10, None), ("bytes=0-3", 10, (0, 4)), ("bytes=2-", 10, (2, 10)), ("bytes=-3", 10, (7, 10)),
        ("bytes=-30", 10, (0, 10)), ("bytes=5-100", 10, (5, 10)), ("bytes=9-9", 10, (9, 10)),
        ("bytes=0-1,3-4", 10, None), ("items=0-3", 10, None), ("bytes=x-3", 10, None), ("bytes=4-2", 10, None),
        ("bytes=-", 10, None), ("bytes=3", 10, None), (" Bytes = 1-2", 10, (1, 3)),
    ],
)
def test_parse_range(header: str | None, size: int, expect: tuple[int, int] | None) -> None:
    assert parse_range(header, size) == expect


@pytest.mark.parametrize("header, size", [("bytes=10-", 10), ("bytes=10-20", 10), ("bytes=-0", 10), ("bytes=0-", 0), ("bytes=-5", 0)])
def test_parse_range_past_the_end(header: str, size: int) -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_range(header, size)


def test_tokens_are_read_as_haar_serve_reads_them(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "rw").write_text("  secret-rw\n")
    (tmp_path / "ro").write_text("secret-ro\n")
    (tmp_path / "empty").write_text(" \n")
    monkeypatch.setenv("HAAR_TOKEN", "from-env")
    assert load_tokens() == ["from-env"]
    assert load_tokens(tmp_path / "rw", tmp_path / "ro") == ["secret-rw", "secret-ro"]  # the file wins over $HAAR_TOKEN
    assert load_tokens(None, tmp_path / "ro") == ["from-env", "secret-ro"]
    with pytest.raises(haar.BadRequestError, match="empty"):
        load_tokens(tmp_path / "empty")
    with pytest.raises(haar.StorageError, match="cannot read token file .*nope"):
        load_tokens(tmp_path / "nope")
    monkeypatch.setenv("HAAR_TOKEN", "")
    with pytest.raises(haar.BadRequestError, match=r"\$HAAR_TOKEN is empty"):
        load_tokens()
    monkeypatch.delenv("HAAR_TOKEN")
    assert load_tokens() == []


def test_serving_is_refused_unauthenticated_or_in_clear_off_loopback(era5: tuple[haar.FDB, list[bytes]]) -> None:
    view = haar.zarr.store(dict(ERA5, param="130"), dims=DIMS, fdb=era5[0])
    with pytest.raises(haar.BadRequestError, match="without authentication"):
        serve(view, "0.0.0.0:0", tokens=None)
    with pytest.raises(haar.BadRequestError, match="refusing plain HTTP"):
        serve(view, "0.0.0.0:0", tokens=[READ_TOKEN])
    with pytest.raises(haar.BadRequestError, match="empty"):
        serve(view, "127.0.0.1:0", tokens=[""])
    with pytest.raises(haar.BadRequestError, match="HOST:PORT"):
        serve(view, "7080", tokens=[TOKEN])
    with pytest.raises(haar.BadRequestError, match="both a certificate"):
        serve(view, "127.0.0.1:0", tokens=[TOKEN], tls_cert="cert.pem")
    # explicitly asked for: plain HTTP off loopback, or no tokens on loopback
    for srv in (serve(view, "0.0.0.0:0", tokens=[READ_TOKEN], plain_http=True), serve(view, "127.0.0.1:0", tokens=None)):
        for s in running(srv):
            port = s.address.rsplit(":", 1)[1]
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
            conn.request("GET", "/t/zarr.json")
            assert conn.getresponse().status == (401 if s.tokens is not None else 200)
            conn.close()


def test_connections_over_the_limit_are_answered_503(era5: tuple[haar.FDB, list[bytes]]) -> None:
    view = haar.zarr.store(dict(ERA5, param="130"), dims=DIMS, fdb=era5[0])
    for srv in running(serve(view, "127.0.0.1:0", tokens=[TOKEN], max_connections=1)):
        host, port = srv.address.rsplit(":", 1)
        first = http.client.HTTPConnection(host, int(port), timeout=30)
        first.request("GET", "/t/zarr.json", headers={"Authorization": f"Bearer {TOKEN}"})
        response = first.getresponse()
        assert response.status == 200 and response.read()  # kept alive: it holds the one slot
        status, headers, body = request(srv, "GET", "/t/zarr.json")
        assert status == 503 and headers["retry-after"] == "1" and b"too many connections" in body
        first.close()  # its thread ends and gives the slot back
        deadline = time.monotonic() + 10
        while (status := request(srv, "GET", "/t/zarr.json")[0]) == 503 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert status == 200
    with pytest.raises(haar.BadRequestError, match="at least 1"):
        serve(view, "127.0.0.1:0", tokens=[TOKEN], max_connections=0)


def test_tls_with_a_certificate_as_haar_serve_takes_it(tmp_path: Path, era5: tuple[haar.FDB, list[bytes]]) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    r = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        capture_output=True, text=True,
    )
    if r.returncode != 0:
        pytest.skip(f"openssl cannot make a test certificate: {r.stderr.strip()}")
    view = haar.zarr.store(dict(ERA5, param="130"), dims=DIMS, fdb=era5[0])
    for srv in running(serve(view, "127.0.0.1:0", tokens=[TOKEN], tls_cert=cert, tls_key=key)):
        assert srv.url.startswith("https://127.0.0.1:")
        trust = ssl.create_default_context(cafile=str(cert))
        group = zarr.open_group(srv.url, mode="r", storage_options={**bearer(), "ssl": trust})
        local = zarr.open_group(view, mode="r")
        assert group["t"][1, 1, 4, 1].tobytes() == local["t"][1, 1, 4, 1].tobytes()
        with pytest.raises(Exception, match="(?i)certificate"):  # a client that does not trust it
            zarr.open_group(srv.url, mode="r", storage_options=bearer())
        conn = http.client.HTTPConnection("127.0.0.1", int(srv.address.rsplit(":", 1)[1]), timeout=10)
        with pytest.raises((http.client.HTTPException, ConnectionError)):  # plain HTTP to a TLS port
            conn.request("GET", "/zarr.json")
            conn.getresponse()
        conn.close()


def octahedral(n: int, steps: Sequence[int], missing_every: int) -> dict[tuple[int, int], bytes]:
    """Synthetic fields on the octahedral reduced Gaussian grid O`n` (GRIB2, simple packing,
    24 bits), one per (param, step) of 2 m temperature and dew point (167, 168), keyed so;
    from ecCodes' N320 sample with the octahedral
    ``pl`` (20 + 4i points on the i-th latitude from each pole); points where the index is a
    multiple of `missing_every` (shifted by the step) are missing in the bitmap."""
    h = eccodes.codes_grib_new_from_samples("reduced_gg_pl_320_grib2")
    rows = [20 + 4 * i for i in range(n)]
    pl = np.array(rows + rows[::-1])
    eccodes.codes_set(h, "N", n)
    eccodes.codes_set_array(h, "pl", pl)
    eccodes.codes_set(h, "numberOfDataPoints", int(pl.sum()))
    eccodes.codes_set(h, "numberOfValues", int(pl.sum()))
    eccodes.codes_set(h, "bitmapPresent", 1)
    out = {}
    for pid in (167, 168):
        for step in steps:
            i = np.arange(int(pl.sum()))
            values = 273.15 + 40 * np.sin(i / 997.0 + step + pid) * np.cos(i / 50_000.0)
            values[(i + step) % missing_every == 0] = 9999.0  # the sample's missing value: bitmap 0
            eccodes.codes_set(h, "paramId", pid)
            eccodes.codes_set(h, "step", step)
            eccodes.codes_set_values(h, values)
            out[(pid, step)] = eccodes.codes_get_message(h)
    eccodes.codes_release(h)
    return out


def test_octahedral_O320_chunks_are_ecCodes_decoding_locally_and_over_http(pmem_config: dict[str, object]) -> None:
    msgs = octahedral(320, [0, 6, 12], missing_every=101)
    h = eccodes.codes_new_from_message(msgs[(167, 0)])
    assert (eccodes.codes_get(h, "gridName"), eccodes.codes_get(h, "isOctahedral")) == ("O320", 1)
    lats = eccodes.codes_get_array(h, "latitudes")
    lons = eccodes.codes_get_array(h, "longitudes")
    eccodes.codes_release(h)
    assert lats.size == 421_120
    fdb = haar.FDB(pmem_config)
    for k, m in msgs.items():
        if k != (168, 12):  # not archived: NaN
            fdb.archive(m)
    fdb.flush()
    view = haar.zarr.store({"class": "od", "levtype": "sfc"}, dims=["step"], fdb=fdb)
    for srv in running(serve(view, "127.0.0.1:0", tokens=[TOKEN])):
        remote = xr.open_zarr(srv.url, consolidated=True, storage_options=bearer())
        local = xr.open_zarr(view, consolidated=False)
        for ds in (local, remote):
            assert set(ds.data_vars) == {"2t", "2d"}
            assert ds["2t"].dims == ("step", "values") and ds.sizes["values"] == 421_120
            assert ds["2t"].attrs["GRIB_gridType"] == "reduced_gg"
            assert ds["latitude"].values.tobytes() == lats.tobytes()
            assert ds["longitude"].values.tobytes() == lons.tobytes()
            for (pid, step), m in msgs.items():
                got = ds["2t" if pid == 167 else "2d"].sel(step=step).values
                if (pid, step) == (168, 12):
                    assert np.isnan(got).all()
                    continue
                _, ref = reference(m)
                assert np.isnan(ref).sum() == len(range((-step) % 101, 421_120, 101))  # the bitmap's ...
                assert got.tobytes() == ref.tobytes()  # ... NaN in the chunk too, the rest bit-identical


def test_the_command_serves_a_view_over_haar_serve_with_its_token(
    server: tuple[str, Any], grib: bytes, tmp_path: Path
) -> None:
    """End to end with processes: ``haar serve`` holds the fields; ``python3 -m haar.zarr_http``
    reads them through it with the token file haar serve was given and lets in clients that
    show the same token; SIGTERM stops it (exit 0)."""
    addr, _ = server  # HAAR_TOKEN=python-test-token
    cfg = {"type": "remote", "server": addr}
    with haar.FDB(cfg) as fdb:
        assert fdb.archive(grib) == 160
    token_file = tmp_path / "token"
    token_file.write_text("python-test-token\n")
    env = {k: v for k, v in os.environ.items() if k not in ("HAAR_TOKEN", "HAAR_CONFIG")}
    p = subprocess.Popen(
        [sys.executable, "-m", "haar.zarr_http", "--request", "class=ea,param=130,levelist=850",
         "--dims", "date,time,number", "--config", json.dumps(cfg), "--listen", "127.0.0.1:0",
         "--token-file", str(token_file)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**env, "HAAR_TOKEN": "python-test-token"},  # the view's own client logs in to haar serve
    )
    try:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        assert line.startswith("listening on 127.0.0.1:"), (line, p.stderr.read() if p.poll() is not None and p.stderr else "")
        url = "http://" + line.removeprefix("listening on ")
        ds = xr.open_zarr(url, consolidated=True, storage_options=bearer("python-test-token"))
        assert ds["t"].dims == ("date", "time", "number", "latitude", "longitude")
        for m in messages(DATA / "era5-levels-members.grib"):
            k, values = reference(m)
            if k["paramId"] == 130 and k["level"] == 850:
                got = ds["t"].sel(date=k["dataDate"], time=k["dataTime"], number=k["number"]).values
                assert got.tobytes() == values.reshape(61, 120).tobytes()
        with pytest.raises(Exception, match="401"):
            zarr.open_group(url, mode="r", storage_options=bearer("wrong"))
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=10)
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()


def test_the_command_says_what_is_wrong(pmem_config: dict[str, object], tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HAAR_TOKEN", "HAAR_CONFIG")}
    haar.FDB(pmem_config).flush()

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "haar.zarr_http", "--config", json.dumps(pmem_config), *args],
                              capture_output=True, text=True, env=env, timeout=60)

    r = run("--request", "class=ea", "--listen", "127.0.0.1:0")
    assert r.returncode == 1 and "set $HAAR_TOKEN or give --token-file" in r.stderr
    r = run("--request", "class=ea", "--listen", "127.0.0.1:0", "--no-auth")
    assert r.returncode == 2 and "no field matches" in r.stderr
    r = run("--request", "class=ea", "--listen", "127.0.0.1:0", "--token-file", str(tmp_path / "none"))
    assert r.returncode == 3 and "cannot read token file" in r.stderr


def test_the_docs_example_runs_as_written(era5: tuple[haar.FDB, list[bytes]], pmem_config: dict[str, object], tmp_path: Path) -> None:
    """docs/zarr.md's command (with a temporary store, port and token file) and its client."""
    import re
    import shlex

    doc = (Path(__file__).resolve().parents[2] / "docs" / "zarr.md").read_text()
    shell = re.findall(r"^```sh\n(.*?)^```", doc, flags=re.S | re.M)[0]
    command = next(line for line in shell.splitlines() if line.startswith("python3 -m haar.zarr_http "))
    client = re.findall(r"^```python\n(.*?)^```", doc, flags=re.S | re.M)[0]
    token_file = tmp_path / "read-token"
    token_file.write_text("docs-example-token\n")
    args = shlex.split(command)[1:]
    args[args.index("--config") + 1] = json.dumps(pmem_config)
    args[args.index("--listen") + 1] = "127.0.0.1:0"
    args[args.index("--read-token-file") + 1] = str(token_file)
    env = {k: v for k, v in os.environ.items() if k not in ("HAAR_TOKEN", "HAAR_CONFIG")}
    p = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert p.stdout is not None
        line = p.stdout.readline().strip()
        assert line.startswith("listening on "), line
        code = client.replace("~/.haar-read-token", str(token_file)).replace("http://127.0.0.1:7080", "http://" + line.removeprefix("listening on "))
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
        assert run.returncode == 0, run.stderr
        mean, shape = run.stdout.splitlines()
        assert float(mean) > 200 and shape.startswith("(2, 2, 10, 61, 120) ('date', 'time', 'number', 'latitude', 'longitude')")
    finally:
        p.terminate()
        p.wait(timeout=30)
        for f in (p.stdout, p.stderr):
            if f is not None:
                f.close()


#: The request and dims of the growing forecast below: 2 m temperature and dew point by step.
SFC = {"class": "od", "levtype": "sfc"}


@pytest.fixture
def forecast(pmem_config: dict[str, object]) -> tuple[haar.FDB, dict[tuple[int, int], bytes]]:
    """A pmem store holding steps 0 and 6 of a small forecast (O24: 3,168 points a field);
    and the messages of steps 0, 3, 6 and 12, to archive more of them as a producer would."""
    msgs = octahedral(24, [0, 3, 6, 12], missing_every=97)
    fdb = haar.FDB(pmem_config)
    for (pid, step), m in msgs.items():
        if step in (0, 6):
            fdb.archive(m)
    fdb.flush()
    return fdb, msgs


def produce(fdb: haar.FDB, msgs: dict[tuple[int, int], bytes], step: int) -> None:
    """Archive and flush both params of one step, as the producer does."""
    for (_, s), m in msgs.items():
        if s == step:
            fdb.archive(m)
    fdb.flush()


def open_url(srv: ZarrHTTPServer) -> Any:
    return xr.open_zarr(srv.url, consolidated=True, storage_options=bearer())


def test_the_served_dataset_grows_with_each_step_flushed_and_old_chunk_keys_keep_their_fields(
    forecast: tuple[haar.FDB, dict[tuple[int, int], bytes]], count_retrieves: Callable[[], int]
) -> None:
    fdb, msgs = forecast
    view = haar.zarr.store(SFC, dims=["step"], fdb=fdb)
    for srv in running(serve(view, "127.0.0.1:0", tokens=[TOKEN], refresh=0)):
        before = open_url(srv)
        assert list(before["step"].values) == [0, 6] and before["2t"].shape == (2, 3168)
        root0 = request(srv, "GET", "/zarr.json")[2]
        status, headers0, _ = request(srv, "GET", "/zarr.json")
        assert status == 200 and headers0["cache-control"] == "no-cache" and "last-modified" in headers0
        etag0 = headers0["etag"]
        assert request(srv, "GET", "/zarr.json", headers={"If-None-Match": etag0})[0] == 304  # unchanged
        old_chunk = request(srv, "GET", "/2t/c/1/0")[2]  # step 6
        assert old_chunk == reference(msgs[(167, 6)])[1].tobytes()
        old_step = request(srv, "GET", "/step/c/0")[2]
        retrieves = count_retrieves()

        produce(fdb, msgs, 12)  # the next step is flushed: the next open sees it
        after = open_url(srv)
        assert count_retrieves() == retrieves  # a re-list reads no field (the grid is known)
        assert list(after["step"].values) == [0, 6, 12] and after["2t"].shape == (3, 3168)
        assert "haar_sorted" not in after["step"].attrs
        for pid, name in ((167, "2t"), (168, "2d")):
            assert after[name].sel(step=12).values.tobytes() == reference(msgs[(pid, 12)])[1].tobytes()
            for step in (0, 6):  # the dataset opened before still reads the fields it knew
                assert before[name].sel(step=step).values.tobytes() == reference(msgs[(pid, step)])[1].tobytes()
        status, headers1, _ = request(srv, "GET", "/zarr.json")
        assert headers1["etag"] != etag0  # the layout changed: so did the tag
        assert request(srv, "GET", "/zarr.json", headers={"If-None-Match": etag0})[0] == 200
        assert request(srv, "GET", "/2t/c/1/0")[2] == old_chunk  # an old-shape key: the same field
        step_chunk = request(srv, "GET", "/step/c/0")[2]  # the coordinate's chunk kept its size
        assert len(step_chunk) == len(old_step) and step_chunk[:16] == old_step[:16]

        produce(fdb, msgs, 3)  # a step that sorts before others comes late: appended, not inserted
        late = open_url(srv)
        assert list(late["step"].values) == [0, 6, 12, 3] and late["step"].attrs["haar_sorted"] is False
        assert late["2t"].sel(step=3).values.tobytes() == reference(msgs[(167, 3)])[1].tobytes()
        assert list(late.sortby("step")["step"].values) == [0, 3, 6, 12]
        assert request(srv, "GET", "/2t/c/1/0")[2] == old_chunk  # still step 6
        assert request(srv, "GET", "/2d/c/2/0")[2] == reference(msgs[(168, 12)])[1].tobytes()
        assert request(srv, "GET", "/zarr.json")[1]["etag"] not in (etag0, headers1["etag"])
        assert json.loads(root0)["consolidated_metadata"]["metadata"]["2t"]["shape"] == [2, 3168]


@pytest.mark.parametrize("refresh", [None, 60.0])
def test_never_refreshing_or_not_yet_serves_the_snapshot(
    forecast: tuple[haar.FDB, dict[tuple[int, int], bytes]], refresh: float | None
) -> None:
    fdb, msgs = forecast
    view = haar.zarr.store(SFC, dims=["step"], fdb=fdb)
    for srv in running(serve(view, "127.0.0.1:0", tokens=[TOKEN], refresh=refresh)):
        etag = request(srv, "GET", "/zarr.json")[1]["etag"]
        assert list(open_url(srv)["step"].values) == [0, 6]
        produce(fdb, msgs, 12)
        ds = open_url(srv)
        assert list(ds["step"].values) == [0, 6] and ds["2t"].shape == (2, 3168)  # the snapshot
        assert request(srv, "GET", "/zarr.json", headers={"If-None-Match": etag})[0] == 304
        assert request(srv, "GET", "/2t/c/2/0")[0] == 404  # outside the layout served


def test_a_refresh_that_fails_keeps_the_layout_and_says_why(
    forecast: tuple[haar.FDB, dict[tuple[int, int], bytes]], capfd: pytest.CaptureFixture[str]
) -> None:
    fdb, msgs = forecast
    view = haar.zarr.store(SFC, dims=["step"], fdb=fdb)
    for srv in running(serve(view, "127.0.0.1:0", tokens=[TOKEN], refresh=0)):
        key = view.field_key("2t", [0])
        assert key is not None
        fdb.archive(msgs[(167, 0)], dict(key, expver="0002"))  # a key outside dims gets a second value
        fdb.flush()
        for _ in range(2):
            ds = open_url(srv)
            assert list(ds["step"].values) == [0, 6]
            assert ds["2t"].sel(step=6).values.tobytes() == reference(msgs[(167, 6)])[1].tobytes()
        err = capfd.readouterr().err
        assert err.count("cannot refresh, serving the previous layout") == 1 and "'expver' has 2 values" in err


def test_refresh_is_parsed_and_checked() -> None:
    from haar.zarr_http import REFRESH, _parser, parse_refresh

    assert parse_refresh("never") is None and parse_refresh(" Never ") is None
    assert parse_refresh("0") == 0.0 and parse_refresh("2.5") == 2.5
    for bad in ("-1", "soon", "inf", "nan", ""):
        with pytest.raises(haar.BadRequestError, match="seconds"):
            parse_refresh(bad)
    assert _parser().parse_args(["--request", "class=od"]).refresh == REFRESH == 2.0
    assert _parser().parse_args(["--request", "class=od", "--refresh", "never"]).refresh is None
    with pytest.raises(SystemExit):
        _parser().parse_args(["--request", "class=od", "--refresh", "-3"])
    view = object.__new__(haar.zarr.HaarZarrStore)
    with pytest.raises(haar.BadRequestError, match="refresh -1"):
        serve(view, "127.0.0.1:0", tokens=[TOKEN], refresh=-1)


def test_any_store_is_consolidated_again_and_a_shrinking_layout_is_logged(capfd: pytest.CaptureFixture[str]) -> None:
    """A store without ``refreshed()`` (zarr's MemoryStore) is reconsolidated as it is; a
    layout that no longer extends the one served is served, and logged: old chunk keys may
    now mean other data."""
    mem = zarr.storage.MemoryStore()
    group = zarr.open_group(mem, mode="w")
    a = group.create_array("a", shape=(2,), chunks=(1,), dtype="<f8", fill_value=0.0, compressors=None)
    a[:] = [1.0, 2.0]
    for srv in running(serve(mem, "127.0.0.1:0", tokens=[TOKEN], refresh=0)):
        def shape() -> list[int]:
            return list(json.loads(request(srv, "GET", "/zarr.json")[2])["consolidated_metadata"]["metadata"]["a"]["shape"])

        assert shape() == [2]
        a.resize((3,))
        a[2] = 3.0
        assert shape() == [3] and request(srv, "GET", "/a/c/2")[2] == np.float64(3.0).tobytes()
        assert "shrank" not in capfd.readouterr().err
        a.resize((1,))
        assert shape() == [1]
        assert "the layout shrank, old chunk keys may now mean other data: array a: shape [3] is now [1]" in capfd.readouterr().err
