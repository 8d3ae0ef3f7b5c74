"""The buffer protocol: zero-copy over the pmem pool, read-only, lifetime held by the view."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import FIRST

import haar


def mapped_file(addr: int) -> str | None:
    """The file mapped at `addr` in this process (from /proc/self/maps), if any."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi:
                return parts[5] if len(parts) > 5 else None
    return None


def _addr(view: memoryview) -> int:
    """Address of a buffer's first byte: numpy wraps the exported memory without copying."""
    arr = np.frombuffer(view, dtype=np.uint8)
    assert len(arr) == len(view)
    return int(arr.__array_interface__["data"][0])


@pytest.fixture
def pmem(pmem_config: dict[str, object], grib: bytes) -> haar.FDB:
    fdb = haar.FDB(pmem_config)
    fdb.archive(grib)
    fdb.flush()
    return fdb

def test_two_handles_on_one_pmem_field_view_the_same_memory(pmem: haar.FDB) -> None:
    a, b = pmem.retrieve(FIRST), pmem.retrieve(FIRST)
    assert a.lent and b.lent
    va, vb = memoryview(a), memoryview(b)
    assert va.readonly and vb.readonly
    assert bytes(va[:4]) == b"GRIB" and bytes(va) == a.read()
    # Same field, same pool bytes: both views point at one address (no copy was made).
    assert _addr(va) == _addr(vb) != 0
    # ... and that address lies in the store's pool file, mapped: the view is the pool itself.
    pool = mapped_file(_addr(va))
    assert pool is not None and pool.endswith("haar.pool"), pool
    other = memoryview(pmem.retrieve({**FIRST, "param": "130"}))
    assert _addr(other) != _addr(va)

def test_a_view_outlives_its_handle_and_store(pmem: haar.FDB) -> None:
    view = memoryview(pmem.retrieve(FIRST))
    expected = bytes(view)
    del pmem
    gc.collect()
    assert bytes(view) == expected and view[:4] == b"GRIB"

def test_views_are_read_only(pmem: haar.FDB) -> None:
    view = memoryview(pmem.retrieve(FIRST))
    with pytest.raises(TypeError):
        view[0] = 0
    arr = np.frombuffer(pmem.retrieve(FIRST), dtype=np.uint8)
    assert not arr.flags.writeable and bytes(arr[:4]) == b"GRIB"

def test_several_fields_or_posix_are_copies_with_the_same_bytes(config: dict[str, object], grib: bytes) -> None:
    fdb = haar.FDB(config)
    fdb.archive(grib)
    fdb.flush()
    many = fdb.retrieve({**FIRST, "param": ["129", "130"]})
    assert not many.lent
    assert bytes(memoryview(many)) == many.read()
    one = fdb.retrieve(FIRST)
    assert one.lent == (config["backend"] == "pmem")
    assert bytes(memoryview(one)) == one.read()
