"""The same API against a real `haar serve` (a remote store): archive, retrieve, list, watch
and wait through the server, and a dead server as a StorageError naming it.

Needs the `haar` binary: $HAAR_BIN, else `haar` on PATH, else the workspace's
target/release/haar ($CARGO_TARGET_DIR honoured); skipped without one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIRST

import haar

REPO = Path(__file__).resolve().parents[2]


def haar_bin() -> str | None:
    candidates = [os.environ.get("HAAR_BIN"), shutil.which("haar")]
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    candidates.append(str(target / "release" / "haar"))
    return next((c for c in candidates if c and Path(c).is_file() and os.access(c, os.X_OK)), None)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    exe = haar_bin()
    if exe is None:
        pytest.skip("no haar binary (set HAAR_BIN or build haar-cli)")
    monkeypatch.setenv("HAAR_TOKEN", "python-test-token")
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-py-srv-") as root:
        env = {**os.environ, "HAAR_TOKEN": "python-test-token"}
        env.pop("HAAR_CONFIG", None)
        p = subprocess.Popen(
            [exe, "serve", "--listen", "127.0.0.1:0", "--root", root, "--backend", "pmem"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        try:
            assert p.stdout is not None
            line = p.stdout.readline().strip()
            assert line.startswith("listening on "), line
            yield line.removeprefix("listening on "), p
        finally:
            p.kill()
            p.wait(timeout=10)
            if p.stdout is not None:
                p.stdout.close()


def test_the_api_works_against_a_server(server: tuple[str, subprocess.Popen[str]], grib: bytes) -> None:
    addr, _ = server
    cfg = {"type": "remote", "server": addr}
    with haar.FDB(cfg) as fdb:
        assert fdb.archive(grib) == 160
    fdb = haar.FDB(cfg)
    assert len(list(fdb.list({"param": "129"}))) == 80
    h = fdb.retrieve(FIRST)
    assert not h.lent  # a server's bytes arrive over the socket: owned, still a buffer
    assert bytes(memoryview(h)) == h.read() and h.size() > 0
    with pytest.raises(haar.MissingError):
        fdb.retrieve({**FIRST, "step": "6"})
    assert fdb.axes({"date": "20170101"})["param"] == ["129", "130"]


def test_masked_copies_are_listed_and_read_through_the_server(
    server: tuple[str, subprocess.Popen[str]], grib: bytes
) -> None:
    # As pyfdb 5 on FDB5, and as a local store (test_pyfdb_api): each masked copy right after
    # its key's live one, readable where the listing located it.
    addr, _ = server
    fdb = haar.FDB({"type": "remote", "server": addr})
    fdb.archive(grib)
    fdb.flush()
    fdb.archive(grib)  # every key again: the first copies are masked
    fdb.flush()
    assert len(list(fdb.list({"param": "129"}))) == 80
    both = list(fdb.list({"param": "129"}, include_masked=True))
    assert len(both) == 160
    for live, masked in zip(both[::2], both[1::2]):
        assert live.keys() == masked.keys()
        assert (str(live.uri), live.offset()) != (str(masked.uri), masked.offset())
        assert live.data_handle is not None and masked.data_handle is not None
        assert live.data_handle.read() == masked.data_handle.read()


def test_watch_and_wait_through_the_server(server: tuple[str, subprocess.Popen[str]], grib: bytes) -> None:
    addr, _ = server
    cfg = {"type": "remote", "server": addr}
    step = {**FIRST, "param": ["129", "130"], "levelist": ["500", "850"]}

    def write() -> None:
        time.sleep(0.3)
        with haar.FDB(cfg) as w:
            w.archive(grib)

    t = threading.Thread(target=write)
    t.start()
    watched = []
    for ev in haar.FDB(cfg).watch({"param": "130", "date": "20170102", "time": "1200"}, timeout=10):
        watched.append(ev)
        if len(watched) == 20:
            break
    assert haar.FDB(cfg).wait(step, timeout=20) == 4
    t.join()
    assert len({tuple(sorted(e.key.items())) for e in watched}) == 20
    assert all(addr in e.origin or e.origin for e in watched)


def test_a_dead_server_is_a_storage_error_naming_it(server: tuple[str, subprocess.Popen[str]]) -> None:
    addr, proc = server
    fdb = haar.FDB({"type": "remote", "server": addr})
    proc.kill()
    proc.wait(timeout=10)
    with pytest.raises(haar.StorageError, match=addr.replace(".", r"\.")):
        list(fdb.list())
        fdb.archive(b"x", identifier=FIRST)
        fdb.flush()
