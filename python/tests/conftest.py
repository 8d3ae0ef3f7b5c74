"""Fixtures: real GRIB (cfgrib's sample files, see data/README.md) and fresh stores."""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import haar

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def grib() -> bytes:
    """160 ERA5 fields (params 129/130, levels 500/850, members 0-9, four date-times)."""
    return (DATA / "era5-levels-members.grib").read_bytes()


@pytest.fixture(params=["pmem", "posix"])
def config(request: pytest.FixtureRequest) -> Iterator[dict[str, object]]:
    """A configuration of an empty store in /dev/shm, for each local backend."""
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-py-") as d:
        yield {"backend": request.param, "roots": [d]}


@pytest.fixture
def pmem_config() -> Iterator[dict[str, object]]:
    """A configuration of an empty pmem store in /dev/shm."""
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-py-") as d:
        yield {"backend": "pmem", "roots": [d]}


@pytest.fixture
def filled(config: dict[str, object], grib: bytes) -> haar.FDB:
    """A store holding the 160 sample fields, flushed."""
    fdb = haar.FDB(config)
    assert fdb.archive(grib) == 160
    fdb.flush()
    return fdb


FIRST = {
    "class": "ea",
    "expver": "0001",
    "stream": "enda",
    "date": "20170101",
    "time": "0000",
    "domain": "g",
    "type": "an",
    "levtype": "pl",
    "step": "0",
    "number": "0",
    "levelist": "500",
    "param": "129",
}


@pytest.fixture
def count_retrieves(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count haar.FDB.retrieve calls from now on (the only way the view reads a field)."""
    calls: list[object] = []
    original = haar.FDB.retrieve

    def counting(self: haar.FDB, selection: Any) -> haar.DataHandle:
        calls.append(selection)
        return original(self, selection)

    monkeypatch.setattr(haar.FDB, "retrieve", counting)
    return lambda: len(calls)
