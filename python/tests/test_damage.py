"""Damage is never a clean answer (issue 27): a listing of a store whose index is damaged
raises, naming the file and what to do, as the CLI exits 3; it does not return fewer fields."""

from __future__ import annotations

from pathlib import Path

import pytest

import haar


def test_a_damaged_index_makes_list_raise_naming_it(tmp_path: Path, grib: bytes) -> None:
    config = {"backend": "posix", "roots": [str(tmp_path / "store")]}
    fdb = haar.FDB(config)
    half = len(grib) // 2
    # Two flushes, so each index holds two segments: the damaged one, and one still readable.
    assert fdb.archive(grib) == 160
    fdb.flush()
    assert len(list(fdb.list({"class": "ea"}))) == 160
    assert fdb.archive(grib[:half]) > 0
    fdb.flush()
    indexes = sorted((tmp_path / "store").rglob("*.index"))
    assert indexes, "no index written"
    victim = indexes[0]
    data = bytearray(victim.read_bytes())
    data[40] ^= 0xFF  # inside the first segment
    victim.write_bytes(bytes(data))
    with pytest.raises(haar.StorageError) as e:
        list(haar.FDB(config).list({"class": "ea"}))
    assert isinstance(e.value, OSError)
    assert str(victim) in str(e.value), str(e.value)
    assert "incomplete" in str(e.value) and "restore" in str(e.value), str(e.value)
