"""The earthkit-data source "haar" on real GRIB archived into haar, and ecCodes coexistence."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

import haar


def test_from_source_gives_a_grib_field_list(filled: haar.FDB, config: dict[str, object]) -> None:
    import earthkit.data as ekd

    request = {"class": "ea", "date": "20170101", "time": "0000", "param": ["129", "130"], "stream": "enda",
               "expver": "0001", "domain": "g", "type": "an", "levtype": "pl", "step": 0,
               "levelist": [500, 850], "number": list(range(10))}
    data = ekd.from_source("haar", request, config=config)
    # earthkit-data 1.x: from_source gives a data object; its field list has sel().
    assert data.to_numpy().shape[0] == 40
    ds = data.to_fieldlist()
    assert len(ds) == 40
    # earthkit-data 1.x key names
    t = ds.sel({"parameter.variable": "t", "vertical.level": 850})
    assert len(t) == 10 and {f.get("metadata.number") for f in t} == set(range(10))
    values = t.to_numpy()
    assert values.shape[0] == 10 and np.isfinite(values).all()
    assert 200 < float(values.mean()) < 320  # temperature at 850 hPa, in K
    xr = ds.sel({"parameter.variable": "z"}).to_xarray()
    assert "z" in xr.data_vars and dict(xr["z"].sizes)["member"] == 10 and dict(xr["z"].sizes)["level"] == 2


def test_missing_fields_raise_through_earthkit(filled: haar.FDB, config: dict[str, object]) -> None:
    import earthkit.data as ekd
    import pytest

    with pytest.raises(haar.MissingError):
        ds = ekd.from_source("haar", {"class": "ea", "param": "999", "date": "20170101", "time": "0000",
                                      "stream": "enda", "expver": "0001", "domain": "g", "type": "an",
                                      "levtype": "pl", "step": 0, "levelist": 500, "number": 0},
                             config=config)
        ds.to_fieldlist()


SCRIPT = """
import sys, tempfile
order = sys.argv[1]
if order == "earthkit-first":
    import earthkit.data as ekd
    import haar
else:
    import haar
    import earthkit.data as ekd
import eccodes
data = open(sys.argv[2], "rb").read()
with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
    cfg = {"backend": "pmem", "roots": [d]}
    # haar keys with the system's libeccodes; earthkit decodes with the wheel's.
    with haar.FDB(cfg) as fdb:
        n = fdb.archive(data)
    ds = ekd.from_source("haar", "class=ea,expver=1,stream=enda,date=20170102,time=12,domain=g,type=an,levtype=pl,step=0,levelist=500/850,number=0/1,param=129/130", config=cfg).to_fieldlist()
    print(n, len(ds), sorted({f.get("parameter.variable") for f in ds}), eccodes.codes_get_api_version(), ds[0].to_numpy().shape)
"""


def test_both_import_orders_work_in_one_process() -> None:
    from conftest import DATA

    outs = []
    for order in ("earthkit-first", "haar-first"):
        r = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(SCRIPT), order, str(DATA / "era5-levels-members.grib")],
            capture_output=True, text=True, timeout=120,
        )
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout.strip())
    assert outs[0] == outs[1]
    n, count, *_ = outs[0].split(" ", 2)
    assert n == "160" and count == "8"
    assert "['t', 'z']" in outs[0] and "2.50" in outs[0]
