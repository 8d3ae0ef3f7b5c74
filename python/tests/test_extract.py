"""``FDB.extract`` against ecCodes: values at index ranges equal ecCodes' decode of the same
field (bit for bit), on both local backends, with the real ERA5 fields and synthetic fields
with a bitmap (missing points NaN)."""

from __future__ import annotations

import numpy as np
import pytest

import haar

eccodes = pytest.importorskip("eccodes")


def decode(msg: bytes) -> np.ndarray:
    h = eccodes.codes_new_from_message(msg)
    try:
        values = eccodes.codes_get_array(h, "values").astype(np.float64)
        if eccodes.codes_get(h, "bitmapPresent"):
            bitmap = eccodes.codes_get_array(h, "bitmap")
            values[bitmap == 0] = np.nan
        return values
    finally:
        eccodes.codes_release(h)


def messages(grib: bytes) -> list[bytes]:
    out, at = [], 0
    while (at := grib.find(b"GRIB", at)) >= 0:
        n = int.from_bytes(grib[at + 4 : at + 7], "big")
        out.append(grib[at : at + n])
        at += n
    return out


RANGES = [(0, 5), (100, 120), (7300, 7320), (9, 9)]


def test_extract_matches_eccodes(filled: haar.FDB, grib: bytes) -> None:
    wanted = {}
    for m in messages(grib):
        h = eccodes.codes_new_from_message(m)
        key = (eccodes.codes_get(h, "paramId"), eccodes.codes_get(h, "level"),
               eccodes.codes_get(h, "number"), eccodes.codes_get(h, "dataDate"),
               eccodes.codes_get(h, "dataTime"))
        eccodes.codes_release(h)
        wanted[key] = decode(m)
    res = filled.extract({"class": "ea", "param": ["129", "130"]}, RANGES)
    assert len(res) == 160
    for r in res:
        k = r.key
        key = (int(k["param"]), int(k["levelist"]), int(k["number"]), int(k["date"]),
               int(k["time"]) // 100 * 100)
        assert r.method == "jump"
        assert r.ranges == RANGES
        for (i, j), v in zip(RANGES, r.values):
            np.testing.assert_array_equal(v, wanted[key][i:j])
        assert r.values_flat.shape == (5 + 20 + 20,)


def test_extract_bitmap_points_and_errors(config: dict[str, object]) -> None:
    fdb = haar.FDB(config)
    h = eccodes.codes_grib_new_from_samples("regular_ll_sfc_grib2")
    eccodes.codes_set(h, "bitsPerValue", 16)
    eccodes.codes_set(h, "bitmapPresent", 1)
    n = eccodes.codes_get(h, "numberOfDataPoints")
    values = 250.0 + np.arange(n) % 37 * 0.5
    values[::7] = 9999.0  # missingValue: bitmap bit 0
    eccodes.codes_set_values(h, values)
    msg = eccodes.codes_get_message(h)
    eccodes.codes_release(h)
    key = ("class=od,expver=1,stream=oper,date=20261121,time=12,domain=g,type=fc,"
           "levtype=sfc,step=0,param=167")
    fdb.archive(msg, key)
    fdb.flush()
    want = decode(msg)
    (r,) = fdb.extract({"param": "167"}, [(0, 10), (n - 3, n)])
    assert r.method == "jump"
    np.testing.assert_array_equal(r.values[0], want[0:10])
    np.testing.assert_array_equal(r.values[1], want[n - 3 : n])
    assert np.isnan(r.values[0][0]) and np.isnan(r.values[0][7])
    (p,) = fdb.extract({"param": "167"}, points=[(60.0, 0.0)])
    assert p.ranges[0][1] == p.ranges[0][0] + 1
    with pytest.raises(haar.BadRequestError):
        fdb.extract({"param": "167"}, [(0, n + 1)])
    with pytest.raises(haar.BadRequestError):
        fdb.extract({"param": "167"})
