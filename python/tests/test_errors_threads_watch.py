"""Errors of each class, sharing one FDB between threads, watch and wait."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from conftest import DATA, FIRST

import haar


def test_missing_data_is_a_key_error_naming_the_key(filled: haar.FDB) -> None:
    with pytest.raises(haar.MissingError) as e:
        filled.retrieve({**FIRST, "step": "6"})
    assert isinstance(e.value, KeyError) and isinstance(e.value, LookupError)
    assert isinstance(e.value, haar.Error)
    assert "step=6" in str(e.value) and "not found" in str(e.value)
    # several fields, one missing: an error too (FDB5 would return the others silently)
    with pytest.raises(KeyError, match="1 field"):
        filled.retrieve({**FIRST, "param": ["129", "999"]})


@pytest.mark.parametrize(
    "selection",
    ["foo", "param=", {"param": []}, {"param": None}, {}],
)
def test_bad_selections_are_value_errors(filled: haar.FDB, selection: object) -> None:
    with pytest.raises(haar.BadRequestError) as e:
        filled.retrieve(selection)  # type: ignore[arg-type]
    assert isinstance(e.value, ValueError) and str(e.value)


def test_data_that_is_not_grib_archives_nothing(config: dict[str, object]) -> None:
    fdb = haar.FDB(config)
    with pytest.raises(haar.BadRequestError, match="nothing archived"):
        fdb.archive(b"this is not GRIB")
    corrupted = (DATA / "era5-levels-corrupted.grib").read_bytes()
    with pytest.raises(ValueError):
        fdb.archive(corrupted)
    fdb.flush()
    assert list(fdb.list()) == []


def test_an_identifier_must_name_one_value_per_keyword(config: dict[str, object]) -> None:
    with pytest.raises(haar.BadRequestError, match="one value per keyword"):
        haar.FDB(config).archive(b"x", identifier={**FIRST, "param": ["1", "2"]})
    with pytest.raises(haar.BadRequestError):
        haar.FDB(config).archive(b"x", identifier={"param": "1"})  # the schema needs more


def test_bad_configurations(tmp_path: Path) -> None:
    # Made without complaint, as pyfdb's FDB; the first use fails, naming the problem.
    with pytest.raises(haar.BadRequestError, match="nonexistent"):
        list(haar.FDB("/nonexistent/haar.yaml").list())
    with pytest.raises(haar.BadRequestError):
        haar.FDB({"backend": "floppy", "roots": [str(tmp_path)]}).flush()
    with pytest.raises(haar.BadRequestError, match="engine|unknown"):
        list(haar.FDB({"type": "local", "engine": "rados", "spaces": []}).list())
    with pytest.raises(haar.BadRequestError, match="config"):
        haar.FDB(42)  # type: ignore[arg-type]  # the kind is checked at once


def test_storage_failures_are_os_errors(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the store wants a directory")
    with pytest.raises(haar.StorageError) as e:
        fdb = haar.FDB({"backend": "posix", "roots": [str(blocker / "store")]})
        fdb.archive(b"x", identifier={**FIRST})
        fdb.flush()
    assert isinstance(e.value, OSError) and "file" in str(e.value)


def test_a_dead_server_is_a_storage_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(haar.StorageError, match="127.0.0.1:9"):
        fdb = haar.FDB({"type": "remote", "server": "127.0.0.1:9"})
        fdb.list()
        list(fdb.list())


def test_threads_share_one_fdb(config: dict[str, object], grib: bytes) -> None:
    fdb = haar.FDB(config)
    fdb.archive(grib)
    fdb.flush()
    keys = [el.combined_key() for el in fdb.list()]
    expected = {tuple(sorted(k.items())): fdb.retrieve(k).read() for k in keys}
    errors: list[BaseException] = []

    def reader(part: list[dict[str, str]]) -> None:
        try:
            for _ in range(3):
                for k in part:
                    assert fdb.retrieve(k).read() == expected[tuple(sorted(k.items()))]
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            errors.append(e)

    def writer() -> None:
        try:
            for i in range(20):
                fdb.archive(b"GRIB-ish %d" % i, identifier={**FIRST, "param": str(1000 + i)})
                fdb.flush()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(keys[i::4],)) for i in range(4)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(list(fdb.list())) == 180


def test_the_gil_is_released_while_waiting(config: dict[str, object]) -> None:
    fdb = haar.FDB(config)
    ticks = 0
    done = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not done.is_set():
            ticks += 1
            time.sleep(0.001)

    t = threading.Thread(target=count)
    t.start()
    with pytest.raises(haar.TimeoutError):
        fdb.wait({**FIRST}, timeout=0.3)
    done.set()
    t.join()
    assert ticks > 50  # the counter ran during the wait


def test_wait_completes_when_a_writer_flushes_the_step(config: dict[str, object], grib: bytes) -> None:
    step = {**FIRST, "param": ["129", "130"], "levelist": ["500", "850"]}
    with pytest.raises(haar.TimeoutError) as e:
        haar.FDB(config).wait(step, timeout=0.05)
    assert isinstance(e.value, TimeoutError) and isinstance(e.value, haar.Error)
    assert len(e.value.missing) == 4 and {"param": "129"}.items() <= e.value.missing[0].items()
    assert "4 field(s) missing" in str(e.value)

    def write() -> None:
        time.sleep(0.2)
        w = haar.FDB(config)
        w.archive(grib)
        w.flush()

    t = threading.Thread(target=write)
    t.start()
    assert haar.FDB(config).wait(step, timeout=20) == 4
    t.join()


def test_watch_yields_each_flushed_field_once(config: dict[str, object], grib: bytes) -> None:
    sel = {"param": "129", "date": "20170101", "time": "0000"}
    first = haar.FDB(config)
    first.archive(b"early", identifier={**FIRST, "param": "129", "number": "99"})
    first.flush()

    def write() -> None:
        time.sleep(0.2)
        w = haar.FDB(config)
        w.archive(grib)
        w.flush()

    t = threading.Thread(target=write)
    t.start()
    events = []
    for ev in haar.FDB(config).watch(sel, timeout=2):
        events.append(ev)
        if len(events) == 21:
            break
    t.join()
    assert events[0].key["number"] == "99" and events[0].length == 5  # already flushed: first
    assert len({tuple(sorted(e.key.items())) for e in events}) == 21
    assert all(e.key["param"] == "129" for e in events)
    # nothing more comes: the iterator ends after the idle timeout
    assert list(haar.FDB(config).watch({**FIRST, "param": "1"}, timeout=0.1)) == []
