"""The earthkit-data source ``"haar"``: ``earthkit.data.from_source("haar", request,
config=...)`` retrieves the fields of `request` from a haar store and hands earthkit-data a GRIB
field list (``.sel()``, ``.to_numpy()``, ``.to_xarray()`` …).

With ``lazy=True`` (the option earthkit-data's ``fdb`` source has) nothing is retrieved when
the source is made: ``.to_xarray()`` opens the request through haar's Zarr view
(:func:`haar.zarr.store`: dask arrays, one field retrieved and decoded per chunk read), and
``.to_fieldlist()`` is earthkit-data's virtual field list, one retrieve per field used.

A request may leave keys out, as earthkit users expect: every stored value of an omitted key
is read (haar expands a request against its catalogue), and a request that matches nothing
raises :class:`haar.MissingError` instead of giving 0 fields.

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

from collections.abc import Sequence

from earthkit.data.sources import Source
from earthkit.data.sources.memory import MemorySource
from earthkit.data.utils.request import RequestMapper

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
    lazy : bool, optional
        Retrieve nothing now: ``to_xarray()`` opens haar's Zarr view (lazy, dask-backed) and
        ``to_fieldlist()`` gives a virtual field list (one retrieve per field used). Default
        False: every field is retrieved when the source is made, as before.
    dims : sequence of str, optional
        With `lazy`, the keys that become dimensions of ``to_xarray()`` (see
        :func:`haar.zarr.store`); default every key with several values.
    **kwargs
        More request keywords.

    Examples
    --------
    >>> import earthkit.data as ekd
    >>> ds = ekd.from_source("haar", {"param": ["t", "u"], "step": 0, ...},  # doctest: +SKIP
    ...                      config={"roots": ["/dev/shm/haar"]})
    >>> ds.sel(param="t").to_numpy()  # doctest: +SKIP
    >>> ekd.from_source("haar", {"class": "ea", "param": "t"}, config=cfg,  # doctest: +SKIP
    ...                 lazy=True).to_xarray()["t"]  # dask-backed, nothing read yet
    """

    def __init__(
        self,
        request: Selection | None = None,
        config: Config | None = None,
        lazy: bool = False,
        dims: Sequence[str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__()
        self.lazy = lazy
        self.dims = None if dims is None else list(dims)
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
        """Retrieve the fields and hand them to earthkit-data as in-memory GRIB; with `lazy`,
        hand over a source that retrieves only what is used."""
        if self.lazy:
            return _LazyFields(self.request, self.config, self.dims)
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


class _LazyFields(Source):
    """The fields of a request, not read yet: an xarray dataset through haar's Zarr view, or
    earthkit-data's virtual field list."""

    path = None

    def __init__(self, request: Selection, config: Config | None, dims: Sequence[str] | None) -> None:
        super().__init__()
        self._request = request
        self._config = config
        self._dims = dims
        self._fdb = FDB(config)

    def to_data_object(self) -> Any:
        """The GRIB data object earthkit-data's ``from_source`` returns."""
        from earthkit.data.data.grib import GribData

        return GribData(self)

    def to_xarray(self, dims: Sequence[str] | None = None, **kwargs: Any) -> Any:
        """The fields as a lazy xarray dataset: ``xarray.open_zarr`` of haar's Zarr view.

        Parameters
        ----------
        dims : sequence of str, optional
            Keys that become dimensions (default: the source's `dims`, else every key with
            several values); see :func:`haar.zarr.store`.
        **kwargs
            Passed to ``xarray.open_zarr`` (``chunks=`` …).

        Returns
        -------
        xarray.Dataset
            Dask-backed: opening reads one field per param; each chunk computed reads one.
        """
        import xarray

        from . import zarr as haar_zarr

        view = haar_zarr.store(self._request, dims if dims is not None else self._dims, fdb=self._fdb)
        kwargs.setdefault("consolidated", False)
        return xarray.open_zarr(view, **kwargs)

    def to_fieldlist(self, *args: Any, **kwargs: Any) -> Any:
        """The fields as earthkit-data's virtual GRIB field list: listed now, each retrieved
        when its values or full metadata are used."""
        from earthkit.data.field.grib.virtual import VirtualGribFieldList

        return VirtualGribFieldList(_ListedFields(self._request, self._fdb), _Retriever(self._fdb))

    def to_numpy(self, *args: Any, **kwargs: Any) -> Any:
        """The fields' values as one numpy array (every field read)."""
        return self.to_fieldlist().to_numpy(*args, **kwargs)

    def to_array(self, *args: Any, **kwargs: Any) -> Any:
        """The fields' values as an array (every field read)."""
        return self.to_fieldlist().to_array(*args, **kwargs)

    def __len__(self) -> int:
        return len(self.to_fieldlist())


class _ListedFields(RequestMapper):
    """earthkit-data's request mapper over haar's catalogue: one request per listed field,
    numbers as numbers (as earthkit-data's fdb source converts them)."""

    _INTEGER_KEYS = ("date", "time", "step", "levelist", "level", "number")

    def __init__(self, request: Selection, fdb: FDB) -> None:
        super().__init__(request)
        self._fdb = fdb

    def _build(self) -> list[dict[str, Any]]:
        out = []
        for el in self._fdb.list(self.request):
            key: dict[str, Any] = {k: v for k, v in el.combined_key().items() if v != ""}
            for k in self._INTEGER_KEYS:
                if k in key and key[k].lstrip("-").isdigit():
                    key[k] = int(key[k])
            out.append(key)
        if not out:
            from . import MissingError

            raise MissingError(f"no field matches {self.request!r}")
        return out


class _Retriever:
    """Retrieves one listed field for earthkit-data's virtual field list."""

    def __init__(self, fdb: FDB) -> None:
        self._fdb = fdb

    def get(self, request: dict[str, Any]) -> Any:
        """The field of a complete key, as a one-field earthkit-data field list."""
        with self._fdb.retrieve(request) as handle:
            return _GribFields(handle.read()).to_fieldlist()


#: What earthkit-data's plugin loader looks up on a module.
source = HaarSource
