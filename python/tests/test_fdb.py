"""The pyfdb-shaped API on real GRIB: archive, list, retrieve, axes, wipe, purge, stats."""

from __future__ import annotations

import io
import shutil

import pytest
from conftest import FIRST

import haar


def split_messages(data: bytes) -> list[bytes]:
    """GRIB messages of a buffer, framed by their own total length."""
    out, pos = [], data.find(b"GRIB")
    while pos >= 0:
        edition = data[pos + 7]
        n = int.from_bytes(data[pos + 8 : pos + 16], "big") if edition == 2 else int.from_bytes(data[pos + 4 : pos + 7], "big")
        out.append(data[pos : pos + n])
        pos = data.find(b"GRIB", pos + n)  # messages may be padded
    return out


def test_round_trip_gives_back_every_message_byte_for_byte(filled: haar.FDB, grib: bytes) -> None:
    messages = split_messages(grib)
    assert len(messages) == 160
    stored = {m for m in messages}
    els = list(filled.list())
    assert len(els) == 160
    got = set()
    for el in els:
        with filled.retrieve(el.combined_key()) as h:
            data = h.read()
        assert len(data) == el.length()
        got.add(data)
    assert got == stored


def test_keys_are_those_ecCodes_gives(filled: haar.FDB) -> None:
    el = next(iter(filled.list(FIRST)))
    assert el.combined_key() == FIRST
    db, index, datum = el.keys()
    assert db == {k: FIRST[k] for k in ("class", "expver", "stream", "date", "time", "domain")}
    assert index == {"type": "an", "levtype": "pl"}
    assert set(datum) == {"step", "number", "levelist", "param"}
    assert el["keys"] == FIRST
    assert el.has_location() and el.offset() is not None and el.uri
    assert el.data_handle is not None and el.data_handle.read(4) == b"GRIB"


def test_selections_as_dicts_lists_numbers_and_mars_strings_agree(filled: haar.FDB) -> None:
    as_dict = {**FIRST, "param": ["129", "130"], "levelist": [500, 850], "step": 0}
    as_text = ",".join(f"{k}={v}" for k, v in {**FIRST, "param": "129/130", "levelist": "500/850"}.items())
    a = [e.combined_key() for e in filled.list(as_dict)]
    b = [e.combined_key() for e in filled.list(as_text)]
    assert len(a) == 4 and a == b
    h1 = filled.retrieve(as_dict).read()
    h2 = filled.retrieve(as_text).read()
    assert h1 == h2 and h1.count(b"GRIB") == 4


def test_list_levels_and_axes(filled: haar.FDB) -> None:
    assert len(list(filled.list(level=1))) == 4
    assert len(list(filled.list(level=2))) == 4
    axes = filled.axes({"date": "20170101"})
    assert axes["param"] == ["129", "130"]
    assert axes["number"] == [str(i) for i in range(10)]
    assert axes["time"] == ["0000", "1200"]
    assert "param" not in filled.axes(level=1) and filled.axes(level=1)["date"] == ["20170101", "20170102"]


def test_data_handle_is_file_like(filled: haar.FDB) -> None:
    h = filled.retrieve({**FIRST, "param": ["129", "130"]})
    size = h.size()
    assert len(h) == size and h.tell() == 0
    assert h.read(4) == b"GRIB" and h.tell() == 4
    assert h.seek(-4, io.SEEK_END) == size - 4 and h.read() == b"7777"
    assert h.read(10) == b""
    h.seek(0)
    buf = bytearray(100)
    assert h.readinto(buf) == 100 and bytes(buf[:4]) == b"GRIB"
    out = io.BytesIO()
    h.seek(0)
    shutil.copyfileobj(h, out)
    assert out.getvalue() == h.readall() and len(out.getvalue()) == size
    h.close()
    with pytest.raises(haar.BadRequestError):
        h.read()
    with h:
        assert h.read(4) == b"GRIB"


def test_archive_under_an_identifier_stores_the_bytes_as_given(config: dict[str, object]) -> None:
    key = {**FIRST, "param": "167", "levtype": "sfc"}
    del key["levelist"]
    with haar.FDB(config) as fdb:
        assert fdb.archive(b"not grib at all", identifier=key) == 1
    # leaving the with block flushed, as in pyfdb
    assert haar.FDB(config).retrieve(key).read() == b"not grib at all"


def test_unflushed_fields_are_invisible_and_flush_shows_them(config: dict[str, object], grib: bytes) -> None:
    writer = haar.FDB(config)
    writer.archive(grib)
    reader = haar.FDB(config)
    assert list(reader.list()) == []
    writer.flush()
    assert len(list(reader.list())) == 160


def test_wipe_is_a_dry_run_unless_doit(filled: haar.FDB) -> None:
    sel = {"class": "ea", "date": "20170101", "time": "0000"}
    dry = list(filled.wipe(sel))
    whole = [e.msg() for e in dry if e.type() == haar.WipeElementType.CATALOGUE]
    assert len(whole) == 1 and "to remove" in whole[0] and "20170101" in whole[0]
    assert len(list(filled.list(sel))) == 40
    done = list(filled.wipe(sel, doit=True))
    assert [e.msg() for e in done if e.type() == haar.WipeElementType.CATALOGUE] == [
        m.replace("to remove", "removed") for m in whole
    ]
    assert list(filled.list(sel)) == []
    assert len(list(filled.list())) == 120
    with pytest.raises(haar.BadRequestError):
        list(filled.wipe({}))


def test_purge_drops_overwritten_fields_and_stats_count_them(config: dict[str, object], grib: bytes) -> None:
    fdb = haar.FDB(config)
    fdb.archive(grib)
    fdb.flush()
    fdb.archive(grib)  # the same keys again: the first copies are masked
    fdb.flush()
    stats = fdb.stats()
    assert sum(s.fields for s in stats) == 160
    assert sum(s.dead_fields for s in stats) == 160
    dry = [str(e) for e in fdb.purge()]
    assert "160 masked or wiped field(s) to drop" in dry[0] and "Dry run" in dry[1]
    assert sum(s.dead_fields for s in fdb.stats()) == 160
    list(fdb.purge(doit=True))
    assert sum(s.dead_fields for s in fdb.stats()) == 0
    assert len(list(fdb.list())) == 160


def test_config_forms(tmp_path: object, grib: bytes) -> None:
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        yaml_text = f"backend: posix\nroots: [{d}]\n"
        f = pathlib.Path(d) / "haar.yaml"
        f.write_text(yaml_text)
        a = haar.FDB(yaml_text)
        a.archive(grib)
        a.flush()
        assert len(list(haar.FDB(f).list())) == 160
        assert len(list(haar.FDB(str(f)).list())) == 160


def test_fdb5_local_toc_config_dict_is_accepted(tmp_path: object, grib: bytes) -> None:
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        schema = pathlib.Path("/etc/fdb/schema")
        if not schema.exists():
            pytest.skip("no FDB5 schema at /etc/fdb/schema (Debian's fdb5 package)")
        cfg = {
            "type": "local",
            "engine": "toc",
            "schema": str(schema),
            "spaces": [{"handler": "Default", "roots": [{"path": d}]}],
        }
        with haar.FDB(cfg) as fdb:
            fdb.archive(grib)
        assert len(list(haar.FDB(cfg).list({"param": "130"}))) == 80


def test_no_config_reads_the_environment_haar_first_then_fdb5(
    monkeypatch: pytest.MonkeyPatch, grib: bytes
) -> None:
    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as a, tempfile.TemporaryDirectory(dir="/dev/shm") as b:
        haar_cfg = pathlib.Path(a) / "haar.yaml"
        haar_cfg.write_text(f"backend: posix\nroots: [{a}]\n")
        for var in ("HAAR_CONFIG", "FDB5_CONFIG", "FDB5_CONFIG_FILE", "FDB_HOME"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("HAAR_CONFIG", str(haar_cfg))
        with haar.FDB() as fdb:
            fdb.archive(grib)
        opened = haar.FDB()
        assert "not opened yet" in repr(opened)  # opened on first use, as pyfdb
        opened.flush()
        assert "posix:" + a in repr(opened)
        if not pathlib.Path("/etc/fdb/schema").exists():
            return
        # FDB5's own variable, with a local TOC configuration, where HAAR_CONFIG is unset
        monkeypatch.delenv("HAAR_CONFIG")
        monkeypatch.setenv(
            "FDB5_CONFIG",
            f"{{type: local, engine: toc, schema: /etc/fdb/schema, spaces: [{{handler: Default, roots: [{{path: {b}}}]}}]}}",
        )
        fdb5 = haar.FDB()
        assert list(fdb5.list()) == [] and b in repr(fdb5)
        fdb5.archive(grib)
        fdb5.flush()
        assert len(list(haar.FDB().list({"param": "129"}))) == 80


def test_a_failed_archive_loses_nothing_already_flushed(config: dict[str, object], grib: bytes) -> None:
    from conftest import DATA

    fdb = haar.FDB(config)
    fdb.archive(grib)
    fdb.flush()
    before = [(e.combined_key(), e.length()) for e in fdb.list()]
    with pytest.raises(haar.BadRequestError):
        fdb.archive((DATA / "era5-levels-corrupted.grib").read_bytes())
    with pytest.raises(haar.BadRequestError):
        fdb.archive(grib[:1000])  # a truncated message
    fdb.flush()
    after = haar.FDB(config)
    assert [(e.combined_key(), e.length()) for e in after.list()] == before
    assert after.retrieve(FIRST).read(4) == b"GRIB"
