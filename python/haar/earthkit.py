"""The earthkit-data source ``"haar"``: ``earthkit.data.from_source("haar", request,
config=...)`` retrieves the fields of `request` from a haar store and hands earthkit-data a GRIB
field list (``.sel()``, ``.to_numpy()``, ``.to_xarray()`` …).

Registered through the ``earthkit.data.sources`` entry point of this package. The retrieve is
haar's (:meth:`haar.FDB.retrieve`, GIL released, missing fields an error); decoding is
earthkit-data's own, from memory, with the ecCodes that earthkit-data loads.

ecCodes: haar's extension links the system's libeccodes (soname ``libeccodes.so.0``) to key
GRIB while archiving; earthkit-data decodes with the ``eccodeslib`` wheel's (``libeccodes.so``).
Python loads extension modules with ``RTLD_LOCAL`` and cffi does the same, so each keeps its
own symbols and definitions in one process, in either import order; neither sets
``ECCODES_DEFINITION_PATH``. Do not point that variable at one copy's definitions while the
other is in use.
"""

from __future__ import annotations

from typing import Any

from earthkit.data.sources import Source
from earthkit.data.sources.memory import MemorySource

from . import FDB, Config, Selection

__all__ = ["HaarSource", "source"]


class HaarSource(Source):
    """earthkit-data source reading fields from a haar store.

    Parameters
    ----------
    request : dict or str, optional
        The fields to retrieve (a dict of keyword → value(s), or a MARS string); keyword
        arguments are added to it, as for earthkit-data's ``fdb`` source.
    config : dict, str or path-like, optional
        The store's configuration, as for :class:`haar.FDB`; ``None``: the environment.
    **kwargs
        More request keywords.

    Examples
    --------
    >>> import earthkit.data as ekd
    >>> ds = ekd.from_source("haar", {"param": ["t", "u"], "step": 0, ...},  # doctest: +SKIP
    ...                      config={"roots": ["/dev/shm/haar"]})
    >>> ds.sel(param="t").to_numpy()  # doctest: +SKIP
    """

    def __init__(self, request: Selection | None = None, config: Config | None = None, **kwargs: Any) -> None:
        super().__init__()
        if isinstance(request, str):
            if kwargs:
                raise ValueError("haar source: give the request as a dict to add keyword arguments")
            self.request: Selection = request
        else:
            merged: dict[str, Any] = dict(request or {})
            merged.update(kwargs)
            if not merged:
                raise ValueError("haar source: no request given")
            self.request = merged
        self.config = config

    def mutate(self) -> Source:
        """Retrieve the fields and hand them to earthkit-data as in-memory GRIB."""
        with FDB(self.config).retrieve(self.request) as handle:
            data = handle.read()
        return _GribFields(data)

    def __repr__(self) -> str:
        return f"HaarSource({self.request!r})"


class _GribFields(Source):
    """Retrieved GRIB as earthkit-data's ``GribData`` (``to_fieldlist``, ``to_numpy``,
    ``to_xarray`` …), decoded from memory: no file is written."""

    path = None

    def __init__(self, data: bytes) -> None:
        super().__init__()
        self._fields = MemorySource(data).to_fieldlist()

    def to_data_object(self) -> Any:
        """The GRIB data object earthkit-data's ``from_source`` returns."""
        from earthkit.data.data.grib import GribData

        return GribData(self)

    def to_fieldlist(self, *args: Any, **kwargs: Any) -> Any:
        """The fields as an earthkit-data GRIB field list (``sel``, ``order_by`` …)."""
        return self._fields

    def to_numpy(self, *args: Any, **kwargs: Any) -> Any:
        """The fields' values as one numpy array."""
        return self._fields.to_numpy(*args, **kwargs)

    def to_array(self, *args: Any, **kwargs: Any) -> Any:
        """The fields' values as an array."""
        return self._fields.to_array(*args, **kwargs)

    def to_xarray(self, *args: Any, **kwargs: Any) -> Any:
        """The fields as an xarray dataset (earthkit-data's engine)."""
        return self._fields.to_xarray(*args, **kwargs)

    def to_pandas(self, *args: Any, **kwargs: Any) -> Any:
        """The fields as a pandas frame."""
        return self._fields.to_pandas(*args, **kwargs)

    def __len__(self) -> int:
        return len(self._fields)


#: What earthkit-data's plugin loader looks up on a module.
source = HaarSource
