"""pyfdb 5.25's documented API on haar (issue 26, point 8): ``import haar as pyfdb`` runs the
examples of pyfdb's docstrings, with pyfdb's names, signatures and return types.

pyfdb itself (when installed) is only looked at from a subprocess, for its signatures and enum
values: its bundled FDB5 and ecCodes stay out of this process.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FIRST
from test_remote import server  # noqa: F401  (the fixture: a haar serve on a pmem root)

import haar
import haar as pyfdb  # the point: code written for pyfdb 5.25, unchanged

DB = {k: FIRST[k] for k in ("class", "expver", "stream", "date", "time", "domain")}


@pytest.fixture(scope="session")
def surface_field(grib: bytes) -> bytes:
    """The first sample field turned into a surface field (2 m temperature): its key has no
    levelist, which the schema makes optional (``levelist=`` when listed)."""
    import eccodes

    first = grib[: grib.index(b"7777") + 4]
    h = eccodes.codes_new_from_message(first)
    try:
        eccodes.codes_set(h, "typeOfLevel", "surface")
        eccodes.codes_set(h, "paramId", 167)
        return bytes(eccodes.codes_get_message(h))
    finally:
        eccodes.codes_release(h)


@pytest.fixture
def posix_filled(grib: bytes) -> Iterator[haar.FDB]:
    """A posix store holding the sample fields, flushed (its databases are directories)."""
    with tempfile.TemporaryDirectory(dir="/dev/shm", prefix="haar-py-") as d:
        fdb = haar.FDB({"backend": "posix", "roots": [d]})
        fdb.archive(grib)
        fdb.flush()
        yield fdb


@pytest.fixture
def with_surface(filled: haar.FDB, surface_field: bytes) -> haar.FDB:
    filled.archive(surface_field)
    filled.flush()
    return filled


def test_data_handle_of_a_field_without_its_optional_levelist(with_surface: haar.FDB, surface_field: bytes) -> None:
    (el,) = with_surface.list({"levtype": "sfc"})
    assert el.keys()[2]["levelist"] == ""  # listed as FDB5 5.25 lists it
    handle = el.data_handle
    assert handle is not None and handle.read() == surface_field
    # The same key given back by hand, empty value included, retrieves it too.
    assert with_surface.retrieve(el.combined_key()).read() == surface_field


def test_one_field_retrieve_leaving_out_domain_finds_what_list_shows(
    with_surface: haar.FDB, surface_field: bytes, grib: bytes
) -> None:
    no_domain = {k: v for k, v in FIRST.items() if k != "domain"}
    assert len(list(with_surface.list(no_domain))) == 1
    assert with_surface.retrieve(no_domain).read() == grib[: grib.index(b"7777") + 4]
    sfc = {**no_domain, "levtype": "sfc", "param": "167"}
    del sfc["levelist"]
    assert with_surface.retrieve(sfc).read() == surface_field
    with pytest.raises(haar.MissingError, match="param=999"):
        with_surface.retrieve({**no_domain, "param": "999"})


def test_wipe_yields_elements_and_does_nothing_until_consumed(filled: haar.FDB) -> None:
    sel = {"class": "ea", "date": "20170101", "time": "0000"}
    pending = filled.wipe(sel, doit=True)
    assert isinstance(pending, Iterator)
    assert len(list(filled.list(sel))) == 40  # as pyfdb: not consumed, nothing done
    dry = list(filled.wipe(sel))
    assert [e.type() for e in dry] == [pyfdb.WipeElementType.CATALOGUE_INFO, pyfdb.WipeElementType.CATALOGUE]
    assert "dry run" in dry[0].msg() and "40 field(s)" in dry[0].msg()
    assert "class=ea" in dry[1].msg() and all(e.uris() == [] for e in dry)
    assert len(list(filled.list(sel))) == 40
    done = list(pending)
    assert done[0].msg().startswith("Wiped") and "removed" in done[1].msg()
    assert list(filled.list(sel)) == [] and len(list(filled.list())) == 120
    # porcelain: only what names databases and files
    assert [e.type() for e in filled.wipe({"class": "ea", "date": "20170102"}, porcelain=True)] == [
        pyfdb.WipeElementType.CATALOGUE
    ] * 2


def test_wipe_refuses_files_haar_did_not_write_unless_unsafe_wipe_all(posix_filled: haar.FDB) -> None:
    fdb = posix_filled
    (status,) = fdb.status(DB)
    foreign = Path(status.location().path()) / "notes.txt"
    foreign.write_text("not haar's")
    dry = list(fdb.wipe(DB))
    (unknown,) = [e for e in dry if e.type() == pyfdb.WipeElementType.UNKNOWN]
    assert [u.path() for u in unknown.uris()] == [str(foreign)] and "unsafe_wipe_all" in unknown.msg()
    with pytest.raises(haar.BadRequestError, match="notes.txt"):
        list(fdb.wipe(DB, doit=True))
    assert foreign.exists() and len(list(fdb.list(DB))) == 40  # nothing removed
    done = list(fdb.wipe(DB, doit=True, unsafe_wipe_all=True))
    assert any(e.type() == pyfdb.WipeElementType.UNKNOWN for e in done)
    assert not foreign.exists() and list(fdb.list(DB)) == []


def test_purge_yields_lines_and_does_nothing_until_consumed(config: dict[str, object], grib: bytes) -> None:
    fdb = pyfdb.FDB(config)
    fdb.archive(grib)
    fdb.flush()
    fdb.archive(grib)  # every key again: the first copies are masked
    fdb.flush()
    pending = fdb.purge({"class": "ea"}, doit=True)
    assert sum(s.dead_fields for s in fdb.stats()) == 160
    # As pyfdb 5 on FDB5: include_masked lists each masked copy after its key's live one
    both = list(fdb.list({"class": "ea"}, include_masked=True))
    assert len(both) == 320 and len(list(fdb.list({"class": "ea"}))) == 160
    for live, masked in zip(both[::2], both[1::2]):
        assert live.keys() == masked.keys()
        assert (str(live.uri), live.offset()) != (str(masked.uri), masked.offset())
        assert live.data_handle is not None and masked.data_handle is not None
        assert live.data_handle.read() == masked.data_handle.read()
    dry = [str(e) for e in fdb.purge({"class": "ea"})]
    assert len(dry) == 2 and "160 masked or wiped field(s) to drop" in dry[0]
    assert [str(e) for e in fdb.purge({"class": "ea"}, porcelain=True)] == dry[:1]
    (done,) = [repr(e) for e in pending]
    assert done.startswith("Purged") and "160 masked or wiped field(s) dropped" in done
    assert sum(s.dead_fields for s in fdb.stats()) == 0 and len(list(fdb.list())) == 160
    # the purge dropped the masked copies: nothing more to list
    assert len(list(fdb.list({"class": "ea"}, include_masked=True))) == 160


def test_inspect_finds_fields_a_selection_names_completely(filled: haar.FDB) -> None:
    (one,) = filled.inspect(FIRST)
    (listed,) = filled.list(FIRST)
    assert one == listed and one.data_handle is not None and one.data_handle.read(4) == b"GRIB"
    many = {**FIRST, "number": ["0", "1"], "param": "129/130"}
    assert len(list(filled.inspect(many))) == 4
    # domain is optional in the schema (default g): a complete key without it
    assert len(list(filled.inspect({k: v for k, v in FIRST.items() if k != "domain"}))) == 1
    # a partial selection names no field completely (list is for that)
    assert list(filled.inspect({"class": "ea", "param": "129"})) == []
    assert list(filled.inspect({**FIRST, "param": "999"})) == []


def test_status_and_control(filled: haar.FDB, config: dict[str, object]) -> None:
    status = list(filled.status({"class": "ea"}))
    assert len(status) == 4  # four date-times, one database each
    el = status[0]
    assert el.controlIdentifiers() == [] and el.key()["class"] == ["ea"]
    assert all(len(v) == 1 for v in el.key().values())
    assert isinstance(el.location(), pyfdb.URI) and os.path.exists(el.location().path())
    if config["backend"] == "posix":
        assert os.path.isdir(el.location().path())
    enabled = list(filled.control({"class": "ea"}, pyfdb.ControlAction.ENABLE, [pyfdb.ControlIdentifier.RETRIEVE]))
    assert enabled == status and all(isinstance(e, pyfdb.ControlElement) for e in enabled)
    refused = filled.control(DB, pyfdb.ControlAction.DISABLE, [pyfdb.ControlIdentifier.RETRIEVE])
    with pytest.raises(haar.BadRequestError, match="RETRIEVE"):
        list(refused)
    assert filled.retrieve(FIRST).read(4) == b"GRIB"


def test_enabled_dirty_and_control_identifiers(config: dict[str, object], grib: bytes) -> None:
    fdb = pyfdb.FDB(config)
    assert all(fdb.enabled(c) for c in pyfdb.ControlIdentifier)
    assert fdb.enabled(pyfdb.ControlIdentifier.LIST | pyfdb.ControlIdentifier.WIPE)
    assert repr(pyfdb.ControlIdentifier.LIST | pyfdb.ControlIdentifier.RETRIEVE) == "LIST|RETRIEVE"
    assert str(pyfdb.ControlIdentifier.NONE) == "NONE" and str(pyfdb.ControlAction.DISABLE) == "DISABLE"
    assert fdb.dirty() is False
    fdb.archive(grib[:14760])
    assert fdb.dirty() is True
    fdb.flush()
    assert fdb.dirty() is False


def test_a_config_is_read_on_first_use_not_when_made(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-schema"
    cfg = {"type": "local", "engine": "toc", "schema": str(missing), "spaces": [{"handler": "Default", "roots": [{"path": str(tmp_path)}]}]}
    fdb = pyfdb.FDB(cfg)  # as pyfdb: made without reading the schema
    assert "not opened yet" in repr(fdb)
    with pytest.raises(haar.Error, match="no-such-schema"):
        list(fdb.list({"class": "ea"}))


def test_config_gives_the_system_and_user_configuration_without_opening(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    toc = {"type": "local", "engine": "toc", "schema": str(tmp_path / "no-such-schema"), "spaces": [{"handler": "Default", "roots": [{"path": str(tmp_path)}]}]}
    fdb = pyfdb.FDB(toc, user_config={"useSubToc": True})
    assert fdb.config() == (toc, {"useSubToc": True})  # as given, FDB5's keys kept
    assert "not opened yet" in repr(fdb)  # nothing was read but the configuration
    (tmp_path / "haar.yaml").write_text("backend: posix\nroots: [/tmp/x]\n")
    assert pyfdb.FDB(tmp_path / "haar.yaml").config() == ({"backend": "posix", "roots": ["/tmp/x"]}, {})
    assert pyfdb.FDB("backend: pmem\n", "a: 1\n").config() == ({"backend": "pmem"}, {"a": 1})
    monkeypatch.setenv("HAAR_CONFIG", str(tmp_path / "haar.yaml"))
    assert pyfdb.FDB().config()[0]["roots"] == ["/tmp/x"]
    for var in ("HAAR_CONFIG", "FDB5_CONFIG", "FDB5_CONFIG_FILE", "FDB_HOME"):
        monkeypatch.delenv(var, raising=False)
    system, user = pyfdb.FDB().config()  # nothing named: haar's defaults, as used
    assert system["backend"] == "posix" and system["roots"] and user == {}
    with pytest.raises(haar.Error, match="not YAML"):
        pyfdb.FDB("a: [\n").config()


def test_list_uri_is_the_file_holding_the_bytes_at_offset(filled: haar.FDB, grib: bytes) -> None:
    for el in list(filled.list({"param": "130", "number": "3"})):
        uri, offset, length = el.uri, el.offset(), el.length()
        assert uri is not None and offset is not None and length is not None
        assert uri.scheme() == "file" and el["path"] == uri.path()
        with open(uri.path(), "rb") as f:  # read past haar, straight from the file
            f.seek(offset)
            on_disk = f.read(length)
        assert on_disk[:4] == b"GRIB" and el.data_handle is not None and on_disk == el.data_handle.read()


def test_identifier_as_pairs(config: dict[str, object]) -> None:
    fdb = pyfdb.FDB(config)
    fdb.archive(b"not checked", identifier=list(FIRST.items()))
    fdb.flush()
    assert fdb.retrieve(FIRST).read() == b"not checked"
    with pytest.raises(haar.BadRequestError, match="twice"):
        fdb.archive(b"x", identifier=[*FIRST.items(), ("param", "130")])


def test_selections_by_pyfdb_keyword(filled: haar.FDB) -> None:
    assert len(list(filled.list(mars_selection={"param": "129"}, level=3))) == 80
    assert filled.retrieve(mars_selection=FIRST).read(4) == b"GRIB"
    assert filled.axes(mars_selection=FIRST)["param"] == ["129"]


def test_pyfdb_documented_examples_run_unchanged(config: dict[str, object], grib: bytes) -> None:
    # The examples of pyfdb 5.25's docstrings, with this test's data.
    with pyfdb.FDB(config) as fdb:
        fdb.archive(data=grib)
    fdb.flush()
    request = {**FIRST, "param": ["129", "130"]}
    data_handle = fdb.retrieve(request)
    data_handle.open()
    assert data_handle.read(4) == b"GRIB"
    data_handle.close()
    with fdb.retrieve(request) as data_handle:
        assert data_handle
        assert data_handle.read(4) == b"GRIB"
    selection = {k: v for k, v in FIRST.items() if k not in ("param", "levelist", "number")}
    elements = list(fdb.list(selection))
    assert len(elements) == 40 and all(e.has_location() for e in elements)  # 10 members x 2 levels x 2 params
    assert len(list(fdb.list(selection, level=2))) == 1 and len(list(fdb.list(selection, level=1))) == 1
    for element in elements:
        assert set(element.combined_key()) >= set(selection)
        field_handle = element.data_handle
        if field_handle is not None:
            field_handle.open()
            assert field_handle.read(4) == b"GRIB"
            field_handle.close()
    index_axis = fdb.axes(selection)
    for k, v in index_axis.items():
        assert isinstance(k, str) and list(v)
    assert index_axis["param"] == ["129", "130"]
    for el in fdb.stats(selection):
        assert "Fields" in el.index_statistics() and el.db_statistics()
    wiped_elements = list(fdb.wipe({"class": "ea"}))
    assert wiped_elements and all(isinstance(e, pyfdb.WipeElement) for e in wiped_elements)
    purged_elements = list(fdb.purge({"class": "ea"}, doit=True))
    assert purged_elements and isinstance(purged_elements[0], pyfdb.PurgeElement)


def test_the_same_through_a_server(server: tuple[str, object], grib: bytes, surface_field: bytes) -> None:
    addr, _ = server
    fdb = pyfdb.FDB({"type": "remote", "server": addr})
    fdb.archive(grib)
    fdb.archive(surface_field)
    fdb.flush()
    (sfc,) = fdb.list({"levtype": "sfc"})
    assert sfc.data_handle is not None and sfc.data_handle.read() == surface_field
    assert sfc.uri is not None and sfc.uri.scheme() == "haar"  # no file on this side
    no_domain = {k: v for k, v in FIRST.items() if k != "domain"}
    assert fdb.retrieve(no_domain).read(4) == b"GRIB"
    assert len(list(fdb.inspect(FIRST))) == 1
    status = list(fdb.status({"class": "ea"}))
    assert len(status) == 4 and all(s.location().scheme() == "haar" for s in status)
    assert "41 field(s)" in next(iter(fdb.wipe(DB))).msg()  # the surface field too
    list(fdb.wipe(DB, doit=True))
    assert list(fdb.list(DB)) == []


PYFDB_SHAPE = """
import inspect, json, warnings
warnings.simplefilter("ignore")
import pyfdb
from pyfdb.pyfdb_iterator import WipeElementType
out = {"methods": {}, "enums": {}}
for name, fn in inspect.getmembers(pyfdb.FDB, inspect.isfunction):
    if not name.startswith("_"):
        out["methods"][name] = list(inspect.signature(fn).parameters)
for enum in (pyfdb.ControlIdentifier, pyfdb.ControlAction, WipeElementType):
    out["enums"][enum.__name__] = {m.name: int(m) for m in enum.__members__.values()}
out["names"] = sorted(pyfdb.__all__)
for cls in ("ListElement", "WipeElement", "StatusElement", "ControlElement", "URI", "DataHandle"):
    out[cls] = sorted(n for n in vars(getattr(pyfdb, cls)) if not n.startswith("_"))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def pyfdb_shape() -> dict[str, object]:
    """pyfdb 5.25's public names, method parameters and enum values, read in a subprocess."""
    try:
        import importlib.util

        if importlib.util.find_spec("pyfdb") is None:
            pytest.skip("pyfdb is not installed")
    except ValueError:
        pytest.skip("pyfdb is not installed")
    r = subprocess.run([sys.executable, "-c", PYFDB_SHAPE], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        pytest.skip(f"pyfdb cannot be imported here: {r.stderr[-300:]}")
    shape: dict[str, object] = json.loads(r.stdout)
    return shape


def test_names_signatures_and_enums_are_pyfdb_5s(pyfdb_shape: dict[str, object]) -> None:
    names = pyfdb_shape["names"]
    assert isinstance(names, list)
    # pyfdb's IndexAxis is a mapping class, haar's a dict; every other public name is here
    assert [n for n in names if not hasattr(haar, n)] == []
    methods = pyfdb_shape["methods"]
    assert isinstance(methods, dict)
    for name, params in methods.items():
        if name == "config":
            continue  # not provided: haar's configuration is one file or dict, given by the caller
        # The same parameters in the same order (haar's list adds `keys` after them).
        ours = list(inspect.signature(getattr(haar.FDB, name)).parameters)
        assert ours[: len(params)] == params, name
    enums = pyfdb_shape["enums"]
    assert isinstance(enums, dict)
    for enum_name, members in enums.items():
        ours_enum = getattr(haar, enum_name)
        assert {m.name: int(m) for m in ours_enum.__members__.values()} == members
    for cls in ("ListElement", "WipeElement", "StatusElement", "ControlElement", "URI", "DataHandle"):
        wanted = pyfdb_shape[cls]
        assert isinstance(wanted, list)
        assert [n for n in wanted if not hasattr(getattr(haar, cls), n)] == [], cls
