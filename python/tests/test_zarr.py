"""haar.zarr: the Zarr v3 view of a request, checked against ecCodes' own decoding.

The reference values are decoded here from the GRIB messages themselves (``eccodes``), never
through the view: each chunk must be bit-identical to them, NaN exactly where a field was not
archived or a bitmap marks a point missing.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import haar

zarr = pytest.importorskip("zarr", minversion="3")
xr = pytest.importorskip("xarray")
eccodes = pytest.importorskip("eccodes")

from conftest import DATA  # noqa: E402
from test_remote import server  # noqa: E402,F401  (the fixture: a haar serve on a pmem root)

#: Fields left out of the store: (paramId, date, time, number, level).
DROPPED = {(130, 20170101, 1200, 3, 850), (129, 20170102, 0, 9, 500), (129, 20170102, 0, 9, 850)}
ERA5 = {"class": "ea", "expver": "0001", "stream": "enda", "domain": "g", "type": "an", "levtype": "pl", "step": 0}
DIMS = ["date", "time", "number", "levelist"]


def messages(path: Path) -> list[bytes]:
    """The GRIB messages of a file, split by ecCodes."""
    out = []
    with open(path, "rb") as f:
        while (h := eccodes.codes_grib_new_from_file(f)) is not None:
            out.append(eccodes.codes_get_message(h))
            eccodes.codes_release(h)
    return out


def reference(message: bytes) -> tuple[dict[str, Any], np.ndarray]:
    """ecCodes' decoding of one message: its keys and its values (NaN where the bitmap says
    missing), float64 in scanning order."""
    h = eccodes.codes_new_from_message(message)
    try:
        keys = {k: eccodes.codes_get(h, k) for k in ("paramId", "dataDate", "dataTime", "level", "step", "shortName")}
        keys["number"] = eccodes.codes_get(h, "number") if eccodes.codes_is_defined(h, "number") else None
        values = eccodes.codes_get_values(h)
        if eccodes.codes_get(h, "bitmapPresent"):
            values[eccodes.codes_get_array(h, "bitmap") == 0] = np.nan
    finally:
        eccodes.codes_release(h)
    return keys, values


@pytest.fixture
def era5(config: dict[str, object]) -> tuple[haar.FDB, list[bytes]]:
    """A store (each local backend) holding the 160 ERA5 fields but those of DROPPED; and all
    160 messages."""
    msgs = messages(DATA / "era5-levels-members.grib")
    fdb = haar.FDB(config)
    kept = 0
    for m in msgs:
        k, _ = reference(m)
        if (k["paramId"], k["dataDate"], k["dataTime"], k["number"], k["level"]) not in DROPPED:
            kept += fdb.archive(m)
    fdb.flush()
    assert kept == 160 - len(DROPPED)
    return fdb, msgs


def test_opening_reads_the_catalogue_and_one_field_per_param(
    era5: tuple[haar.FDB, list[bytes]], count_retrieves: Callable[[], int]
) -> None:
    fdb, _ = era5
    view = haar.zarr.store(dict(ERA5, param=["129", "130"]), dims=DIMS, fdb=fdb)
    assert count_retrieves() == 0  # the view itself: catalogue only
    group = zarr.open_group(view, mode="r")
    assert sorted(group.array_keys()) == sorted(DIMS + ["latitude", "longitude", "t", "z"])
    # The grid's shape and a param's attributes are not in the catalogue: one field each.
    assert count_retrieves() == 2
    ds = xr.open_zarr(view, consolidated=False)
    assert count_retrieves() == 2  # metadata cached: 157 fields, 2 read, none decoded
    ds["t"].isel(date=0, time=0, number=0, levelist=0).values
    assert count_retrieves() == 3  # one chunk, one field


def test_an_open_of_a_fresh_view_by_xarray_reads_one_field_per_param(
    era5: tuple[haar.FDB, list[bytes]], count_retrieves: Callable[[], int]
) -> None:
    fdb, _ = era5
    ds = xr.open_zarr(haar.zarr.store(dict(ERA5), fdb=fdb))  # xarray's defaults, unchanged
    assert count_retrieves() == 2
    assert set(ds.data_vars) == {"t", "z"}


def test_every_chunk_is_ecCodes_decoding_and_missing_fields_are_nan(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, msgs = era5
    view = haar.zarr.store(dict(ERA5), dims=DIMS, fdb=fdb)
    group = zarr.open_group(view, mode="r")
    coords = {d: list(group[d][:]) for d in DIMS}
    seen = 0
    for m in msgs:
        k, values = reference(m)
        idx = (coords["date"].index(k["dataDate"]), coords["time"].index(k["dataTime"]),
               coords["number"].index(k["number"]), coords["levelist"].index(k["level"]))
        chunk = group[k["shortName"]][idx]
        assert chunk.shape == (61, 120) and chunk.dtype == np.dtype("<f8")
        if (k["paramId"], k["dataDate"], k["dataTime"], k["number"], k["level"]) in DROPPED:
            assert np.isnan(chunk).all()
            assert view.field_key(k["shortName"], idx) is None
        else:
            assert chunk.tobytes() == values.reshape(61, 120).tobytes()  # bit-identical
            seen += 1
    assert seen == 160 - len(DROPPED)
    # NaN exactly where fields are missing: the sample fields have no bitmap.
    for name in ("t", "z"):
        data = group[name][:]
        missing = np.isnan(data).all(axis=(-2, -1))
        assert np.isnan(data).any(axis=(-2, -1)).sum() == missing.sum()
        expect = {(d, t, n, lv) for p, d, t, n, lv in DROPPED if p == (130 if name == "t" else 129)}
        got = {tuple(coords[dim][i] for dim, i in zip(DIMS, ix)) for ix in zip(*np.nonzero(missing))}
        assert got == expect


def test_xarray_finds_the_dims_coordinates_and_attributes(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, msgs = era5
    ds = xr.open_zarr(haar.zarr.store(dict(ERA5), dims=DIMS, fdb=fdb), consolidated=False)
    assert dict(ds.sizes) == {"date": 2, "time": 2, "number": 10, "levelist": 2, "latitude": 61, "longitude": 120}
    assert ds["t"].dims == ("date", "time", "number", "levelist", "latitude", "longitude")
    assert list(ds["date"].values) == [20170101, 20170102]
    assert list(ds["time"].values) == [0, 1200]
    assert list(ds["number"].values) == list(range(10))
    assert list(ds["levelist"].values) == [500, 850]
    h = eccodes.codes_new_from_message(msgs[0])
    lats = eccodes.codes_get_array(h, "latitudes").reshape(61, 120)[:, 0]
    lons = eccodes.codes_get_array(h, "longitudes").reshape(61, 120)[0]
    eccodes.codes_release(h)
    assert ds["latitude"].values.tobytes() == lats.tobytes() and ds["latitude"].values[0] == 90.0
    assert ds["longitude"].values.tobytes() == lons.tobytes()
    assert ds["latitude"].attrs["units"] == "degrees_north"
    t = ds["t"].attrs
    assert (t["units"], t["long_name"], t["standard_name"], t["GRIB_paramId"]) == ("K", "Temperature", "air_temperature", 130)
    z = ds["z"].attrs
    assert (z["units"], z["GRIB_paramId"], z["GRIB_shortName"]) == ("m**2 s**-2", 129, "z")
    # lazy: dask arrays, one chunk per field
    assert ds["t"].chunks is not None and ds["t"].data.numblocks == (2, 2, 10, 2, 1, 1)
    one = ds["t"].sel(date=20170101, time=1200, number=3, levelist=500).values
    keys, ref = next(reference(m) for m in msgs if reference(m)[0] == {
        "paramId": 130, "dataDate": 20170101, "dataTime": 1200, "number": 3, "level": 500, "step": 0, "shortName": "t"})
    assert one.tobytes() == ref.reshape(61, 120).tobytes()
    assert np.isnan(ds["t"].sel(date=20170101, time=1200, number=3, levelist=850).values).all()


def test_zarr_open_group_unchanged_and_writes_refused(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, _ = era5
    view = haar.zarr.store(dict(ERA5, param="130"), dims=DIMS, fdb=fdb)
    group = zarr.open_group(view)  # zarr's default mode "a": opens, writes nothing
    assert group["t"].shape == (2, 2, 10, 2, 61, 120)
    assert group["t"].metadata.dimension_names == ("date", "time", "number", "levelist", "latitude", "longitude")
    assert zarr.open_group(view, mode="r")["t"].read_only
    assert not view.supports_writes and not view.supports_deletes
    with pytest.raises(ValueError, match="read-only"):
        group.create_array("x", shape=(1,), dtype="f8")
    with pytest.raises(ValueError, match="read-only"):
        group["t"][0, 0, 0, 0] = 1.0
    assert group["t"][0, 0, 0, 0].shape == (61, 120)  # unchanged: still the field


def test_listing_names_one_chunk_per_field_held(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, _ = era5
    view = haar.zarr.store(dict(ERA5, param="129"), dims=DIMS, fdb=fdb)
    group = zarr.open_group(view, mode="r")
    assert group["z"].nchunks_initialized == 80 - 2
    assert view.variables == {"z": "129"}


def test_dims_choose_the_arrays_dimensions(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, _ = era5
    one = dict(ERA5, date="20170101", time="1200", levelist="500")
    ds = xr.open_zarr(haar.zarr.store(one, dims=["number"], fdb=fdb), consolidated=False)
    assert ds["t"].dims == ("number", "latitude", "longitude") and ds.sizes["number"] == 10
    # the default: every key with several values, in schema order
    assert haar.zarr.store(dict(ERA5), fdb=fdb).dims == ["date", "time", "number", "levelist"]
    assert haar.zarr.store(dict(ERA5), dims=["levelist", "number", "time", "date"], fdb=fdb).dims[0] == "levelist"
    with pytest.raises(haar.BadRequestError, match="'number' has 10 values"):
        haar.zarr.store(one, dims=[], fdb=fdb)
    with pytest.raises(haar.BadRequestError, match="'param' is not a dimension"):
        haar.zarr.store(one, dims=["number", "param"], fdb=fdb)
    with pytest.raises(haar.BadRequestError, match="'latitude' names one of the grid's dimensions"):
        haar.zarr.store(one, dims=["number", "latitude"], fdb=fdb)
    with pytest.raises(haar.BadRequestError, match="'number' given twice"):
        haar.zarr.store(one, dims=["number", "number"], fdb=fdb)
    with pytest.raises(haar.BadRequestError, match="no key 'hdate'"):
        haar.zarr.store(one, dims=["number", "hdate"], fdb=fdb)
    with pytest.raises(haar.MissingError, match="no field matches"):
        haar.zarr.store(dict(one, param="999"), dims=["number"], fdb=fdb)


def test_float32_is_ecCodes_values_rounded(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, msgs = era5
    group = zarr.open_group(haar.zarr.store(dict(ERA5), dims=DIMS, fdb=fdb, dtype="float32"), mode="r")
    keys, values = reference(msgs[0])
    chunk = group[keys["shortName"]][0, 0, 0, 0]
    assert chunk.dtype == np.dtype("<f4")
    assert chunk.tobytes() == values.astype("<f4").reshape(61, 120).tobytes()


@pytest.fixture
def reduced(config: dict[str, object]) -> Iterator[tuple[haar.FDB, dict[tuple[int, int], bytes]]]:
    """Synthetic fields on a reduced Gaussian grid (ecCodes' N32 sample, GRIB2) with a bitmap:
    params 167 and 165 at steps 0 and 6, all but (165, 6)."""
    h = eccodes.codes_grib_new_from_samples("reduced_gg_pl_32_grib2")
    n = eccodes.codes_get(h, "numberOfDataPoints")
    eccodes.codes_set(h, "bitmapPresent", 1)
    msgs = {}
    for step in (0, 6):
        for pid in (167, 165):
            values = np.linspace(200, 300, n) + pid + step
            values[(np.arange(n) + step) % 7 == 0] = 9999.0  # the missing value: bitmap 0
            eccodes.codes_set(h, "paramId", pid)
            eccodes.codes_set(h, "step", step)
            eccodes.codes_set_values(h, values)
            msgs[(pid, step)] = eccodes.codes_get_message(h)
    eccodes.codes_release(h)
    fdb = haar.FDB(config)
    for k, m in msgs.items():
        if k != (165, 6):
            fdb.archive(m)
    fdb.flush()
    yield fdb, msgs


def test_a_reduced_grid_is_one_values_dimension_with_ecCodes_coordinates(
    reduced: tuple[haar.FDB, dict[tuple[int, int], bytes]],
) -> None:
    fdb, msgs = reduced
    ds = xr.open_zarr(haar.zarr.store({"class": "od", "levtype": "sfc"}, fdb=fdb), consolidated=False)
    assert set(ds.data_vars) == {"2t", "10u"}
    assert ds["2t"].dims == ("step", "values") and ds.sizes["values"] == 6114
    assert set(ds.coords) == {"step", "latitude", "longitude"}
    h = eccodes.codes_new_from_message(msgs[(167, 0)])
    assert ds["latitude"].values.tobytes() == eccodes.codes_get_array(h, "latitudes").tobytes()
    assert ds["longitude"].values.tobytes() == eccodes.codes_get_array(h, "longitudes").tobytes()
    eccodes.codes_release(h)
    assert ds["2t"].attrs["GRIB_gridType"] == "reduced_gg" and ds["2t"].attrs["units"] == "K"
    for (pid, step), m in msgs.items():
        got = ds["2t" if pid == 167 else "10u"].sel(step=step).values
        if (pid, step) == (165, 6):
            assert np.isnan(got).all()
            continue
        _, ref = reference(m)
        assert np.isnan(ref).sum() == (6114 + 6) // 7  # the bitmap's missing points ...
        assert got.tobytes() == ref.tobytes()  # ... NaN in the chunk too, the rest bit-identical


def test_params_on_two_grids_are_refused_by_name(config: dict[str, object]) -> None:
    fdb = haar.FDB(config)
    with open(DATA / "era5-levels-members.grib", "rb") as f:
        h = eccodes.codes_grib_new_from_file(f)
    fdb.archive(eccodes.codes_get_message(h))  # z on the 3-degree lat/lon grid
    eccodes.codes_release(h)
    h = eccodes.codes_grib_new_from_samples("reduced_gg_pl_32_grib2")
    for k, v in {"class": "ea", "stream": "enda", "date": 20170101, "time": 0, "paramId": 130, "level": 500}.items():
        eccodes.codes_set(h, k, v)
    fdb.archive(eccodes.codes_get_message(h))
    eccodes.codes_release(h)
    fdb.flush()
    view = haar.zarr.store({"class": "ea", "levelist": "500"}, dims=[], fdb=fdb)
    group = zarr.open_group(view, mode="r")
    assert group["z"].shape == (61, 120)
    with pytest.raises(haar.BadRequestError, match=r"param 130 \(t\) is on another grid"):
        group["t"]


MYPY_USAGE = """
import haar
import xarray

def view(cfg: dict[str, object]) -> xarray.Dataset:
    store: haar.zarr.HaarZarrStore = haar.zarr.store({"class": "ea"}, dims=["number"], config=cfg, dtype="float32")
    names: dict[str, str] = store.variables
    key: dict[str, str] | None = store.field_key("t", [0])
    print(names, key, store.dims)
    ds: xarray.Dataset = xarray.open_zarr(store, consolidated=False)
    return ds
"""


def test_the_view_type_checks_strictly(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    source = Path(__file__).resolve().parents[1]
    if not (source / "haar" / "_haar.pyi").exists():
        pytest.skip("needs the source tree")
    (tmp_path / "use_zarr.py").write_text(MYPY_USAGE)
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(source / "pyproject.toml"), str(tmp_path / "use_zarr.py")],
        cwd=source, capture_output=True, text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr



def test_a_view_opens_its_store_from_a_config_and_takes_a_mars_string(
    era5: tuple[haar.FDB, list[bytes]], config: dict[str, object]
) -> None:
    view = haar.zarr.store("class=ea,param=t,date=20170102,time=1200,levelist=850", dims=["number"], config=config)
    ds = xr.open_zarr(view, consolidated=False)
    assert set(ds.data_vars) == {"t"} and ds["t"].dims == ("number", "latitude", "longitude")
    assert list(ds["number"].values) == list(range(10))
    assert int(np.isnan(ds["t"].values).all(axis=(1, 2)).sum()) == 0  # (130, 20170101, 1200, 3, 850) is another date
    assert view == view.with_read_only(True) and view.with_read_only(True).read_only and not view.read_only


def test_a_view_made_from_a_config_pickles_for_other_processes(
    era5: tuple[haar.FDB, list[bytes]], config: dict[str, object]
) -> None:
    view = haar.zarr.store(dict(ERA5, param="129"), dims=DIMS, config=config)
    copy = pickle.loads(pickle.dumps(view))  # reopens the store, keeps the catalogue's answer
    assert copy.dims == view.dims and copy.variables == view.variables
    a = zarr.open_group(view, mode="r")["z"][1, 0, 9, 0]
    b = zarr.open_group(copy, mode="r")["z"][1, 0, 9, 0]
    assert np.isnan(a).all() and np.isnan(b).all()  # (129, 20170102, 0, 9, 500) is missing
    assert zarr.open_group(copy, mode="r")["z"][0, 1, 2, 1].tobytes() == zarr.open_group(view, mode="r")["z"][0, 1, 2, 1].tobytes()
    with pytest.raises(TypeError, match="made with fdb= cannot be pickled"):
        pickle.dumps(haar.zarr.store(dict(ERA5, param="129"), dims=DIMS, fdb=era5[0]))


def test_dask_reads_chunks_in_parallel_threads_to_the_same_values(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, _ = era5
    view = haar.zarr.store(dict(ERA5), dims=DIMS, fdb=fdb)
    parallel = xr.open_zarr(view, consolidated=False)["t"].compute(scheduler="threads", num_workers=4).values
    one_by_one = np.stack([zarr.open_group(view, mode="r")["t"][i] for i in range(2)])
    assert parallel.tobytes() == one_by_one.tobytes()


def test_a_view_over_a_server_decodes_on_the_client(server: tuple[str, Any], grib: bytes) -> None:
    addr, _ = server
    cfg = {"type": "remote", "server": addr}
    with haar.FDB(cfg) as fdb:
        assert fdb.archive(grib) == 160
    ds = xr.open_zarr(haar.zarr.store(dict(ERA5, param="130"), dims=DIMS, config=cfg), consolidated=False)
    assert dict(ds["t"].sizes) == {"date": 2, "time": 2, "number": 10, "levelist": 2, "latitude": 61, "longitude": 120}
    for m in messages(DATA / "era5-levels-members.grib")[:40]:
        k, values = reference(m)
        if k["paramId"] == 130:
            got = ds["t"].sel(date=k["dataDate"], time=k["dataTime"], number=k["number"], levelist=k["level"]).values
            assert got.tobytes() == values.reshape(61, 120).tobytes()


def test_keys_that_are_not_integers_are_string_coordinates(era5: tuple[haar.FDB, list[bytes]]) -> None:
    fdb, _ = era5
    one = dict(ERA5, date="20170101", time="0000", levelist="500")
    ds = xr.open_zarr(haar.zarr.store(one, dims=["expver", "number", "class"], fdb=fdb), consolidated=False)
    assert list(ds["expver"].values) == ["0001"] and list(ds["class"].values) == ["ea"]  # "0001" stays "0001"
    assert ds["t"].dims == ("expver", "number", "class", "latitude", "longitude")
    assert not np.isnan(ds["t"].isel(expver=0, number=0, **{"class": 0}).values).any()
