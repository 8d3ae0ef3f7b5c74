"""haar: a weather-field store (FDB5-like) for Python, in pyfdb's shape.

>>> import haar
>>> fdb = haar.FDB()                        # doctest: +SKIP
>>> fdb.archive(grib_bytes); fdb.flush()    # doctest: +SKIP
>>> fdb.retrieve({"param": "167", ...})     # doctest: +SKIP

Exceptions all derive from :class:`haar.Error` and from the builtin they resemble:
:class:`MissingError` (``KeyError``), :class:`BadRequestError` (``ValueError``),
:class:`StorageError` (``OSError``), :class:`TimeoutError` (``TimeoutError``).
An earthkit-data source is registered as ``from_source("haar", request, config=...)``.
"""

from __future__ import annotations

from ._errors import BadRequestError, Error, MissingError, StorageError, TimeoutError
from ._fdb import (
    FDB,
    Config,
    DataHandle,
    Event,
    IndexAxis,
    ListElement,
    PurgeReport,
    Selection,
    StatsElement,
    WipeReport,
)

__all__ = [
    "FDB",
    "Config",
    "DataHandle",
    "Event",
    "IndexAxis",
    "ListElement",
    "PurgeReport",
    "Selection",
    "StatsElement",
    "WipeReport",
    "Error",
    "MissingError",
    "BadRequestError",
    "StorageError",
    "TimeoutError",
]
