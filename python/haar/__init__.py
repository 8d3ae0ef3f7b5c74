"""haar: a weather-field store (FDB5-like) for Python, in pyfdb 5's shape: ``import haar as
pyfdb`` runs code written for pyfdb 5.25 (``FDB``, ``list``/``inspect``/``retrieve``/``axes``,
``wipe``/``purge``/``status``/``control`` iterators, ``ControlIdentifier``, ``URI``).

>>> import haar
>>> fdb = haar.FDB()                        # doctest: +SKIP
>>> fdb.archive(grib_bytes); fdb.flush()    # doctest: +SKIP
>>> fdb.retrieve({"param": "167", ...})     # doctest: +SKIP

Exceptions all derive from :class:`haar.Error` and from the builtin they resemble:
:class:`MissingError` (``KeyError``), :class:`BadRequestError` (``ValueError``),
:class:`StorageError` (``OSError``), :class:`TimeoutError` (``TimeoutError``).
An earthkit-data source is registered as ``from_source("haar", request, config=...)``.
:mod:`haar.zarr` (imported on first use, it needs ``zarr`` 3) views a request as a Zarr v3
store for ``xarray.open_zarr``: ``haar.zarr.store(request, dims=[...], config=...)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._errors import BadRequestError, Error, MissingError, StorageError, TimeoutError
from ._fdb import (
    FDB,
    URI,
    Config,
    ControlAction,
    ControlElement,
    ControlIdentifier,
    DataHandle,
    Event,
    ExtractionResult,
    IndexAxis,
    ListElement,
    MarsIdentifier,
    MarsSelection,
    PurgeElement,
    Selection,
    StatsElement,
    StatusElement,
    WipeElement,
    WipeElementType,
)

__all__ = [
    "FDB",
    "URI",
    "Config",
    "ControlAction",
    "ControlElement",
    "ControlIdentifier",
    "DataHandle",
    "Event",
    "ExtractionResult",
    "IndexAxis",
    "ListElement",
    "MarsIdentifier",
    "MarsSelection",
    "PurgeElement",
    "Selection",
    "StatsElement",
    "StatusElement",
    "WipeElement",
    "WipeElementType",
    "Error",
    "MissingError",
    "BadRequestError",
    "StorageError",
    "TimeoutError",
]

if TYPE_CHECKING:
    from . import zarr


def __getattr__(name: str) -> object:
    # haar.zarr needs zarr 3 (an optional dependency): imported when first named, so that
    # "import haar" works without it.
    if name == "zarr":
        import importlib

        return importlib.import_module(".zarr", __name__)
    raise AttributeError(f"module 'haar' has no attribute {name!r}")
