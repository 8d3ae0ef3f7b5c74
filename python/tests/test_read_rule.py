"""One read rule for every face (issue 28): Python decides when bytes are lent and what is
missing with the library's rule (``haar::read``), as the C faces do, so the same request
behaves the same from C and from Python."""

from __future__ import annotations

import pytest
from conftest import FIRST

import haar


def test_one_field_named_through_a_range_is_lent_as_from_c(pmem_config: dict[str, object], grib: bytes) -> None:
    # `step=0/to/0` names one field: C's haar_retrieve lends it from the pool; Python's own
    # syntactic rule (one plain value per keyword) copied it.
    fdb = haar.FDB(pmem_config)
    fdb.archive(grib)
    fdb.flush()
    first = grib[: grib.index(b"7777") + 4]
    h = fdb.retrieve({**FIRST, "step": "0/to/0"})
    assert h.lent and h.read() == first
    # Abbreviated and unnormalised spellings of the one key are lent too.
    assert fdb.retrieve({**FIRST, "time": "0", "param": "z"}).lent


def test_a_selection_matching_nothing_is_missing_never_silence(filled: haar.FDB) -> None:
    # `step=all` names no combination, so nothing is "missing" key by key: it used to come
    # back as zero bytes. C's haar_retrieve fails; so does Python now, naming the request.
    with pytest.raises(haar.MissingError, match="no flushed field matches"):
        filled.retrieve({**FIRST, "param": "999", "step": "all"})
    # A selection that matches something through `all` is unchanged.
    assert len(filled.retrieve({**FIRST, "step": "all"}).read()) > 0


def test_one_field_retrieve_leaving_out_domain_is_found_on_every_backend(filled: haar.FDB, grib: bytes) -> None:
    # The report: list shows the field, a one-field retrieve without domain must find it.
    no_domain = {k: v for k, v in FIRST.items() if k != "domain"}
    assert len(list(filled.list(no_domain))) == 1
    assert filled.retrieve(no_domain).read() == grib[: grib.index(b"7777") + 4]
