"""pyfdb 5.25's documented API on haar (issue 26, point 8): fields that list shows are
retrieved as listed."""

from __future__ import annotations

import pytest
from conftest import FIRST

import haar


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
