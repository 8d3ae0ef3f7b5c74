"""The earthkit-data source "haar": lazy xarray through the Zarr view (``lazy=True``, the option
earthkit-data's fdb source has), the lazy field list, and partial requests (earthkit-data
#1002: never 0 fields silently when a key is left out)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import haar

ekd = pytest.importorskip("earthkit.data")
pytest.importorskip("zarr", minversion="3")
dask = pytest.importorskip("dask")

FULL = {"class": "ea", "expver": "0001", "stream": "enda", "date": ["20170101", "20170102"], "time": ["0000", "1200"],
        "domain": "g", "type": "an", "levtype": "pl", "step": "0", "number": [str(n) for n in range(10)],
        "levelist": ["500", "850"], "param": "130"}


def test_lazy_to_xarray_is_the_zarr_view_and_reads_only_what_is_computed(
    filled: haar.FDB, config: dict[str, object], count_retrieves: Callable[[], int]
) -> None:
    data = ekd.from_source("haar", {"class": "ea", "param": "t"}, config=config, lazy=True)
    assert count_retrieves() == 0
    ds = data.to_xarray()
    assert count_retrieves() == 1  # the grid and t's attributes: one field of 80
    assert isinstance(ds["t"].data, dask.array.Array)
    assert dict(ds["t"].sizes) == {"date": 2, "time": 2, "number": 10, "levelist": 2, "latitude": 61, "longitude": 120}
    assert ds["t"].attrs["units"] == "K" and ds["t"].attrs["GRIB_paramId"] == 130
    lazy = ds["t"].sel(date=20170101, time=1200, number=3, levelist=850).values
    assert count_retrieves() == 2
    eager = ekd.from_source("haar", dict(FULL, date="20170101", time="1200", number="3", levelist="850"),
                            config=config).to_numpy()
    assert lazy.tobytes() == eager.reshape(61, 120).tobytes()  # both ecCodes' float64 decoding


def test_lazy_dims_choose_the_dimensions(filled: haar.FDB, config: dict[str, object]) -> None:
    one = dict(FULL, date="20170102", time="0000", levelist="500")
    ds = ekd.from_source("haar", one, config=config, lazy=True, dims=["number"]).to_xarray()
    assert ds["t"].dims == ("number", "latitude", "longitude")
    ds = ekd.from_source("haar", one, config=config, lazy=True).to_xarray(dims=["number"], chunks=None)
    assert not isinstance(ds["t"].data, dask.array.Array)  # open_zarr's chunks=None passed on


def test_lazy_field_list_retrieves_only_the_fields_used(
    filled: haar.FDB, config: dict[str, object], count_retrieves: Callable[[], int]
) -> None:
    fl = ekd.from_source("haar", {"class": "ea", "param": "t", "date": "20170101"}, config=config,
                         lazy=True).to_fieldlist()
    assert len(fl) == 40 and count_retrieves() == 0  # listed, none read
    sel = fl.sel({"vertical.level": 850, "ensemble.member": "3"})
    values = sel.to_numpy()
    assert values.shape[0] == 2 and count_retrieves() <= 3  # two fields, and the reference one
    eager = ekd.from_source("haar", dict(FULL, date="20170101", levelist="850", number="3"), config=config).to_numpy()
    assert values.tobytes() == eager.tobytes()


@pytest.mark.parametrize("lazy", [False, True])
def test_a_partial_request_gives_every_stored_field_of_the_omitted_keys(
    filled: haar.FDB, config: dict[str, object], lazy: bool
) -> None:
    partial = {"class": "ea", "param": "130"}  # date, time, number, levelist ... left out
    axes = filled.axes(partial)
    full = {k: v if len(v) > 1 else v[0] for k, v in axes.items()}
    assert full == FULL  # what the omitted keys expand to, from the catalogue
    got = ekd.from_source("haar", partial, config=config, lazy=lazy).to_numpy()
    want = ekd.from_source("haar", full, config=config).to_numpy()
    assert got.shape == want.shape == (80, 61, 120)
    assert sorted(f.tobytes() for f in got) == sorted(f.tobytes() for f in want)


@pytest.mark.parametrize("lazy", [False, True])
def test_a_request_matching_nothing_raises_instead_of_giving_0_fields(
    filled: haar.FDB, config: dict[str, object], lazy: bool
) -> None:
    with pytest.raises(haar.MissingError):
        ekd.from_source("haar", {"class": "ea", "levelist": "700"}, config=config, lazy=lazy).to_numpy()
    if lazy:
        with pytest.raises(haar.MissingError, match="no field matches"):
            ekd.from_source("haar", {"class": "ea", "levelist": "700"}, config=config, lazy=True).to_xarray()
