"""A read-only Zarr v3 view of a haar request: ``haar.zarr.store(request, dims=[...])``.

The view owns the mapping from a request's fields to a Zarr v3 hierarchy and nothing else:
fields are found by haar's catalogue (:meth:`haar.FDB.axes`, :meth:`haar.FDB.list`), read by
:meth:`haar.FDB.retrieve` and decoded by ecCodes (the ``eccodes`` Python package, the one
earthkit-data and cfgrib decode with). It never writes, and it keeps no state on disk.

Layout (Zarr v3, one group)::

    zarr.json                   the group
    <dim>/zarr.json, <dim>/c/0  one coordinate array per chosen key (``dims``), from ``axes``,
                                in chunks of COORDINATE_CHUNK (1024) values, the last padded
    latitude/..., longitude/... the grid's coordinates, from ecCodes
    <name>/zarr.json            one data array per ``param``, named by ecCodes' shortName
    <name>/c/i/j/.../0[/0]      one chunk per field: the field decoded, little-endian

A data array has the chosen keys as its first dimensions (chunk size 1 each) and the grid as
its last: ``latitude``, ``longitude`` for a regular lat/lon or regular Gaussian grid scanned
row by row, else one ``values`` dimension with ``latitude``/``longitude`` coordinate arrays.
A key's coordinate values are those the catalogue holds among the request's fields (its
``axes``), as integers for date, time, step, levelist and number; a combination of them the
catalogue does not hold is an absent chunk: Zarr fills it with NaN (``fill_value``). Points a
GRIB bitmap marks missing are NaN too.

Cost of opening: building the view lists the request in the catalogue (``axes`` and
``list``) and reads no field. Array names come from ecCodes' parameter table (no field). The
shape of the grid and a parameter's attributes are not in haar's catalogue, so the first read
of a data array's metadata (``<name>/zarr.json``, or the grid's coordinates) retrieves ONE
field of that parameter, the first the catalogue lists, and caches what it found: opening
with xarray costs one field per parameter, never one per field. (Listing every chunk key,
which zarr does only for ``nchunks_initialized`` and the like, needs the grid too.)

The view is the catalogue as it was listed; :meth:`HaarZarrStore.refreshed` lists it again
into a view whose layout extends this one's (positions kept, new values appended), so that
a reader holding the old metadata still reads the same field at each chunk key: what
``python3 -m haar.zarr_http --refresh`` serves.

A view made with ``config=`` pickles (for dask or DataLoader workers): the other process
reopens the store and keeps the catalogue's answer.

Values are float64 by default because that is what ecCodes decodes to: a chunk is then
bit-identical to ``eccodes.codes_get_values`` of the same field. ``dtype="float32"`` halves
the bytes for machine-learning readers; its values are ecCodes' doubles rounded to float32.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Union

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype

from ._errors import BadRequestError, Error, MissingError, StorageError
from ._fdb import FDB, Config, Selection

__all__ = ["HaarZarrStore", "store"]

#: Bytes of a key: JSON and coordinates as ``bytes``, decoded fields as a uint8 array view.
_Bytes = Union[bytes, np.ndarray]

#: Keys whose values earthkit-data's fdb source turns into integers; haar's view does too
#: (when every value is a decimal integer) so that xarray coordinates sort and compare as
#: numbers, not as strings.
_INTEGER_KEYS = frozenset({"date", "time", "step", "levelist", "level", "number"})
#: Grid types whose values, scanned row by row, form a (latitude, longitude) product.
_REGULAR_GRIDS = frozenset({"regular_ll", "regular_gg"})
#: Names the view gives to arrays of its own: a parameter may not take one of them.
_GRID_NAMES = ("latitude", "longitude", "values")
#: Values in one chunk of a key's coordinate array, whatever its length (the last chunk
#: padded): a chunk key keeps its meaning when a re-list (:meth:`HaarZarrStore.refreshed`)
#: appends values, as a chunk as long as the coordinate would not.
COORDINATE_CHUNK = 1024


def store(
    request: Selection,
    dims: Sequence[str] | None = None,
    config: Config | None = None,
    *,
    fdb: FDB | None = None,
    dtype: Literal["float64", "float32"] = "float64",
) -> HaarZarrStore:
    """Open a read-only Zarr v3 view of the fields of a request.

    Parameters
    ----------
    request : dict or str
        The fields to view, as for :meth:`haar.FDB.list`; keys may be omitted (every value
        the catalogue holds is then viewed).
    dims : sequence of str, optional
        The keys that become array dimensions, in this order, before the grid's dimensions.
        Default: every key other than ``param`` with more than one value, in schema order.
        Every other key must have one value among the request's fields.
    config : dict, str or path-like, optional
        The store's configuration, as for :class:`haar.FDB`; ignored when `fdb` is given.
    fdb : haar.FDB, optional
        An open store to read from, instead of opening one from `config`.
    dtype : {"float64", "float32"}, optional
        The arrays' data type; float64 (default) is bit-identical to ecCodes' decoding.

    Returns
    -------
    HaarZarrStore
        A ``zarr.abc.store.Store`` for ``zarr.open_group(view, mode="r")`` and
        ``xarray.open_zarr(view, consolidated=False)``.

    Raises
    ------
    MissingError
        No field matches the request.
    BadRequestError
        A key of `dims` is unknown or ``param``, or a key left out of `dims` has several
        values (the message names them).

    Examples
    --------
    >>> view = haar.zarr.store({"class": "ea", "param": ["129", "130"]},  # doctest: +SKIP
    ...                        dims=["date", "time", "number", "levelist"], config=cfg)
    >>> ds = xarray.open_zarr(view, consolidated=False)  # doctest: +SKIP
    >>> ds["t"].sel(levelist=850).isel(number=0, date=0, time=0).values  # doctest: +SKIP
    """
    if fdb is not None:
        return HaarZarrStore(request, dims, fdb=fdb, dtype=dtype)
    return HaarZarrStore(request, dims, fdb=FDB(config), dtype=dtype, config=config)


@dataclass(frozen=True)
class _Grid:
    """A field's grid as the view lays it out: its shape, dimension names and coordinates."""

    shape: tuple[int, ...]
    dims: tuple[str, ...]
    identity: tuple[Any, ...]
    message: bytes  # one field on this grid, to compute coordinates from when asked

    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Latitudes and longitudes (1-D each), as the grid's coordinate arrays hold them."""
        import eccodes

        h = eccodes.codes_new_from_message(self.message)
        try:
            lats = eccodes.codes_get_array(h, "latitudes")
            lons = eccodes.codes_get_array(h, "longitudes")
        finally:
            eccodes.codes_release(h)
        if len(self.shape) == 2:
            nj, ni = self.shape
            return lats.reshape(nj, ni)[:, 0].copy(), lons.reshape(nj, ni)[0, :].copy()
        return lats, lons


@dataclass(frozen=True)
class _Param:
    """One parameter's array: the param as the catalogue holds it, and the array's name."""

    value: str  # as the catalogue holds it, e.g. "130"
    name: str  # the array's name, ecCodes' shortName, e.g. "t"


class _Cache:
    """What the view learnt from fields (the grid, each param's attributes), shared by the
    copies :meth:`HaarZarrStore.with_read_only` makes, behind one lock."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.grid: _Grid | None = None
        self.attrs: dict[str, bytes] = {}


def _decode(message: Any) -> np.ndarray:
    """Decode one GRIB message with ecCodes: its values, float64, NaN where the bitmap says
    missing. Only the values: header keys such as ``name`` cost ecCodes more than decoding a
    small field, and the array's metadata already hold them."""
    import eccodes

    h = eccodes.codes_new_from_message(message)
    try:
        values: np.ndarray = eccodes.codes_get_values(h)
        if eccodes.codes_get(h, "bitmapPresent"):
            bitmap = eccodes.codes_get_array(h, "bitmap")
            values[bitmap == 0] = np.nan
    finally:
        eccodes.codes_release(h)
    return values


def _header(h: Any) -> dict[str, Any]:
    import eccodes

    def get(key: str, kind: type = str) -> Any:
        try:
            return eccodes.codes_get(h, key, kind)
        except eccodes.KeyValueNotFoundError:
            return None

    out = {
        "gridType": get("gridType"),
        "numberOfDataPoints": get("numberOfDataPoints", int),
        "Ni": get("Ni", int),
        "Nj": get("Nj", int),
        "jPointsAreConsecutive": get("jPointsAreConsecutive", int),
        "latitudeOfFirstGridPointInDegrees": get("latitudeOfFirstGridPointInDegrees", float),
        "longitudeOfFirstGridPointInDegrees": get("longitudeOfFirstGridPointInDegrees", float),
        "latitudeOfLastGridPointInDegrees": get("latitudeOfLastGridPointInDegrees", float),
        "longitudeOfLastGridPointInDegrees": get("longitudeOfLastGridPointInDegrees", float),
        "paramId": get("paramId", int),
        "shortName": get("shortName"),
        "name": get("name"),
        "units": get("units"),
        "cfName": get("cfName"),
        "cfVarName": get("cfVarName"),
        "typeOfLevel": get("typeOfLevel"),
    }
    if out["gridType"] and out["gridType"].startswith("reduced"):
        try:
            out["pl"] = tuple(int(x) for x in eccodes.codes_get_array(h, "pl"))
        except eccodes.KeyValueNotFoundError:
            out["pl"] = None
    return out


def _grid_of(header: Mapping[str, Any], message: bytes) -> _Grid:
    identity = tuple(
        header.get(k)
        for k in (
            "gridType",
            "numberOfDataPoints",
            "Ni",
            "Nj",
            "latitudeOfFirstGridPointInDegrees",
            "longitudeOfFirstGridPointInDegrees",
            "latitudeOfLastGridPointInDegrees",
            "longitudeOfLastGridPointInDegrees",
            "pl",
        )
    )
    ni, nj, n = header["Ni"], header["Nj"], header["numberOfDataPoints"]
    regular = (
        header["gridType"] in _REGULAR_GRIDS
        and not header["jPointsAreConsecutive"]
        and ni is not None
        and nj is not None
        and ni * nj == n
    )
    if regular:
        return _Grid((nj, ni), ("latitude", "longitude"), identity, message)
    return _Grid((n,), ("values",), identity, message)


def _param_names(values: Sequence[str], taken: set[str]) -> list[str]:
    """Array names of parameters from ecCodes' parameter table (no field is read): the
    shortName, as earthkit-data names variables; ``p<value>`` when ecCodes has none."""
    import eccodes

    sample = eccodes.codes_grib_new_from_samples("GRIB2")
    names: list[str] = []
    try:
        # The sample's tables are old (version 4): parameters defined since need the latest.
        eccodes.codes_set(sample, "tablesVersion", eccodes.codes_get(sample, "tablesVersionLatest", int))
        for value in values:
            name = None
            pid = _param_id(value)
            if pid is not None:
                try:
                    eccodes.codes_set(sample, "paramId", pid)
                    name = eccodes.codes_get(sample, "shortName", str)
                except eccodes.GribInternalError:
                    name = None
            elif re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", value):
                name = value
            if not name or name == "unknown" or "/" in name or name.startswith("__"):
                name = f"p{value}"
            if name in taken or name in names:
                name = f"{name}_{value}"
            names.append(name)
    finally:
        eccodes.codes_release(sample)
    return names


def _param_id(value: str) -> int | None:
    """ecCodes' paramId of a catalogue value: ``130`` -> 130, ``130.128`` -> 130,
    ``140.228`` -> 228140; None for a name."""
    if re.fullmatch(r"\d+", value):
        return int(value)
    m = re.fullmatch(r"(\d+)\.(\d+)", value)
    if m:
        number, table = int(m.group(1)), int(m.group(2))
        return number if table == 128 else table * 1000 + number
    return None


def _coordinate(key: str, values: Sequence[str]) -> tuple[list[Any], str]:
    """A key's coordinate values, sorted, and their Zarr data type (int64 or string)."""
    integers = all(re.fullmatch(r"-?\d+", v) for v in values) and (
        key in _INTEGER_KEYS or all(str(int(v)) == v for v in values)
    )
    if integers:
        return sorted(int(v) for v in values), "int64"
    return sorted(values), "string"


def _signature(fdb: FDB, request: Selection) -> tuple[tuple[str, int, int, int, int], ...] | None:
    """The statistics of the request's databases (live and dead fields and bytes): they
    change when a field is flushed, masked or wiped. None when the store cannot give them."""
    try:
        return tuple((s.db, s.fields, s.bytes, s.dead_fields, s.dead_bytes) for s in fdb.stats(request))
    except Error:
        return None


def _vlen_utf8(values: Sequence[str]) -> bytes:
    """The ``vlen-utf8`` codec's encoding: item count, then each item's length and UTF-8
    bytes, all lengths little-endian uint32."""
    parts = [len(values).to_bytes(4, "little")]
    for v in values:
        b = v.encode()
        parts += [len(b).to_bytes(4, "little"), b]
    return b"".join(parts)


def _slice(data: _Bytes, byte_range: ByteRequest | None) -> _Bytes:
    if byte_range is None:
        return data
    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return data[max(0, len(data) - byte_range.suffix) :]
    raise ValueError(f"unexpected byte range {byte_range!r}")


def _as_bytes(values: np.ndarray, dtype: str) -> np.ndarray:
    """The values as little-endian bytes, a uint8 view of the array (no copy for float64)."""
    return np.ascontiguousarray(values, dtype=dtype).reshape(-1).view(np.uint8)


def _array_json(
    shape: Sequence[int],
    chunks: Sequence[int],
    data_type: str,
    dims: Sequence[str],
    attributes: Mapping[str, Any],
) -> bytes:
    if data_type == "string":
        fill: Any = ""
        codecs: list[dict[str, Any]] = [{"name": "vlen-utf8", "configuration": {}}]
    else:
        fill = "NaN" if data_type.startswith("float") else 0
        codecs = [{"name": "bytes", "configuration": {"endian": "little"}}]
    meta = {
        "zarr_format": 3,
        "node_type": "array",
        "shape": list(shape),
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": fill,
        "codecs": codecs,
        "attributes": dict(attributes),
        "dimension_names": list(dims),
    }
    return json.dumps(meta).encode()


class HaarZarrStore(Store):
    """A read-only Zarr v3 store whose arrays are the fields of a haar request.

    Made by :func:`haar.zarr.store`, which documents the layout. Capabilities: reads and
    listing; no writes, no deletes (``supports_writes`` and ``supports_deletes`` are False,
    and :meth:`set`/:meth:`delete` raise :class:`haar.BadRequestError`, a ``ValueError`` as
    zarr's read-only stores raise). zarr's ``read_only`` flag is False unless asked for with
    :meth:`with_read_only`, so that ``zarr.open_group(view)`` accepts it in its default mode
    ``"a"``, which writes nothing to a hierarchy that exists.

    Reads run in threads (``asyncio.to_thread``): the retrieve releases the GIL in haar and
    the decoding in ecCodes, so zarr's concurrent chunk reads overlap their decoding.
    """

    supports_writes = False
    supports_deletes = False
    supports_listing = True
    # The view builds its metadata on demand; zarr must not try to write a consolidation.
    supports_consolidated_metadata = False

    def __init__(
        self,
        request: Selection,
        dims: Sequence[str] | None,
        *,
        fdb: FDB,
        dtype: Literal["float64", "float32"] = "float64",
        config: Config | None = None,
    ) -> None:
        # zarr's read_only flag is False so that zarr.open_group(view) works unchanged: its
        # default mode "a" refuses read-only stores, though it writes nothing to a hierarchy
        # that exists (as zarr's own FsspecStore over HTTP). The view still never writes:
        # supports_writes is False and set/delete raise.
        super().__init__(read_only=False)
        if dtype not in ("float64", "float32"):
            raise BadRequestError(f"dtype {dtype!r}: give 'float64' or 'float32'")
        self._fdb = fdb
        self._config = config
        self._request = request
        self._dtype = dtype
        self._cache = _Cache()
        self._list(dims, None)

    def _list(self, dims: Sequence[str] | None, previous: HaarZarrStore | None) -> None:
        """List the request in the catalogue and lay its fields out; with `previous`, keep
        every position of its layout (see :meth:`refreshed`)."""
        fdb, request = self._fdb, self._request
        # Before the listing: a field flushed while it runs changes the next signature.
        self._signature = _signature(fdb, request)
        axes = fdb.axes(request)
        # A listed key names every schema keyword; one the field lacks (levelist of a surface
        # field) is listed empty, and a retrieve refuses an empty value: it is left out.
        rows = [{k: v for k, v in el.combined_key().items() if v != ""} for el in fdb.list(request)]
        if not rows:
            raise MissingError(f"no field matches {request!r}: nothing to view")
        if "param" not in axes:
            raise BadRequestError("the fields have no 'param' key: the view names its arrays by param")
        schema_order = list(rows[0])
        if dims is None:
            dims = [k for k in schema_order if k != "param" and len(axes.get(k, ())) > 1]
        self._dims = list(dims)
        self._check_dims(axes)

        # Catalogue values of each dimension seen so far: a re-list keeps those gone since.
        self._raw: dict[str, frozenset[str]] = {
            d: frozenset(axes[d]) | (previous._raw[d] if previous is not None else frozenset()) for d in self._dims
        }
        self._coords: dict[str, tuple[list[Any], str]] = {}
        for d in self._dims:
            vals, kind = _coordinate(d, sorted(self._raw[d]))
            if previous is not None:
                old, old_kind = previous._coords[d]
                if kind != old_kind:
                    raise BadRequestError(
                        f"key {d!r}: its values are now {kind}, were {old_kind} when the view was opened: open it again"
                    )
                known = set(old)
                # Positions never move: new values go after the old ones, sorted among themselves.
                vals = list(old) + [v for v in vals if v not in known]
            self._coords[d] = (vals, kind)
        index_of = {d: {str(v): i for i, v in enumerate(vals)} for d, (vals, _) in self._coords.items()}
        # Catalogue values ("0000") and coordinate values (0) differ for integer keys.
        for d, (vals, kind) in self._coords.items():
            if kind == "int64":
                index_of[d] = {raw: index_of[d][str(int(raw))] for raw in self._raw[d]}

        if previous is None:
            params = list(axes["param"])
            names = _param_names(params, set(self._dims) | set(_GRID_NAMES))
            self._params = {name: _Param(value, name) for value, name in zip(params, names)}
        else:
            self._params = dict(previous._params)
            known_values = {p.value for p in self._params.values()}
            params = [v for v in axes["param"] if v not in known_values]
            names = _param_names(params, set(self._dims) | set(_GRID_NAMES) | set(self._params))
            self._params.update({name: _Param(value, name) for value, name in zip(params, names)})
        by_value = {p.value: p.name for p in self._params.values()}
        # (array name, chunk index) -> the field's whole key; its first row per param gives
        # the array's metadata.
        self._fields: dict[tuple[str, tuple[int, ...]], dict[str, str]] = {}
        self._first: dict[str, dict[str, str]] = dict(previous._first) if previous is not None else {}
        for key in rows:
            name = by_value[key["param"]]
            try:
                idx = tuple(index_of[d][key[d]] for d in self._dims)
            except KeyError as e:
                raise BadRequestError(f"field {key} has no value for dimension {e}: leave that key out of dims") from e
            if (name, idx) in self._fields:
                raise BadRequestError(
                    f"fields {self._fields[(name, idx)]} and {key} fall on the same chunk: a key that "
                    "differs between them must be one of dims"
                )
            self._fields[(name, idx)] = key
            self._first.setdefault(name, key)

    def refreshed(self) -> HaarZarrStore:
        """The view of the same request over the catalogue as it is now: fields flushed since
        this view was listed are in it. ``self`` when the store's statistics show no change
        (a check much cheaper than a listing).

        The layout only grows, so that a chunk key of this view means the same field in the
        new one: every coordinate value keeps its position, new values are appended after the
        old ones (sorted among themselves: the next step of a forecast is appended as it sorts,
        but a value that sorts before old ones, such as a member that comes late, leaves the
        coordinate unsorted: its attributes then say ``haar_sorted: false``), values whose
        fields are gone stay (their chunks absent: NaN), as do arrays of params gone. The
        dims stay those of this view. Fields learnt from (the grid, the arrays' attributes)
        are shared, not read again.

        Raises
        ------
        MissingError, BadRequestError
            As :func:`store`, for the catalogue as it is now (no field left, a key outside
            dims with several values now, two fields on one chunk); and a key whose values
            were integers and no longer are. This view is unchanged.
        """
        if _signature(self._fdb, self._request) == self._signature and self._signature is not None:
            return self
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)  # the store, the cache and the flags are shared
        other._list(self._dims, self)
        return other

    def _check_dims(self, axes: Mapping[str, Sequence[str]]) -> None:
        seen: set[str] = set()
        for d in self._dims:
            if d == "param":
                raise BadRequestError("dims: 'param' is not a dimension, each param is its own array")
            if d in _GRID_NAMES:
                raise BadRequestError(f"dims: {d!r} names one of the grid's dimensions, not a key")
            if d not in axes:
                raise BadRequestError(f"dims: the fields have no key {d!r}; they have {sorted(axes)}")
            if d in seen:
                raise BadRequestError(f"dims: {d!r} given twice")
            seen.add(d)
        for k, vals in axes.items():
            if k != "param" and k not in seen and len(vals) > 1:
                raise BadRequestError(
                    f"key {k!r} has {len(vals)} values {list(vals)[:6]}: name it in dims or give one value in the request"
                )

    def __getstate__(self) -> dict[str, Any]:
        """The view without its open store, for another process (dask, DataLoader workers)."""
        if self._config is None:
            raise TypeError(
                "a haar Zarr view made with fdb= cannot be pickled: make it with config= so that "
                "another process can open the store"
            )
        state = dict(self.__dict__)
        del state["_fdb"], state["_cache"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen the store from the view's configuration; the catalogue is not read again."""
        self.__dict__.update(state)
        self._fdb = FDB(self._config)
        self._cache = _Cache()

    # --- what the view holds --------------------------------------------------------------

    @property
    def dims(self) -> list[str]:
        """list of str: the keys that are dimensions, in order."""
        return list(self._dims)

    @property
    def variables(self) -> dict[str, str]:
        """dict: array name → param value as the catalogue holds it (``{"t": "130"}``)."""
        return {p.name: p.value for p in self._params.values()}

    def field_key(self, name: str, index: Sequence[int]) -> dict[str, str] | None:
        """The whole key of the field at a chunk index of an array, or None if missing.

        Parameters
        ----------
        name : str
            The data array's name.
        index : sequence of int
            One index per key dimension (the grid's dimensions left out).
        """
        key = self._fields.get((name, tuple(index)))
        return dict(key) if key is not None else None

    def _read(self, key: Mapping[str, str]) -> Any:
        """The bytes of one field (zero-copy on a local pmem store: the view of the pool)."""
        return memoryview(self._fdb.retrieve(dict(key)))

    def _grid_and_attrs(self, name: str) -> tuple[_Grid, dict[str, Any]]:
        """Metadata of one param's array, from its first field (read once, then cached).

        Serialised on one lock: zarr asks for several arrays' metadata at once, and each
        param's field must be read once, not once per asking thread.
        """
        with self._cache.lock:
            first = next(iter(self._params))
            if self._cache.grid is None and name != first:
                # The group's grid is the first param's: read it first so every array agrees.
                self._grid_and_attrs(first)
            if name in self._cache.attrs:
                assert self._cache.grid is not None
                return self._cache.grid, json.loads(self._cache.attrs[name])
            message = bytes(self._read(self._first[name]))
            import eccodes

            h = eccodes.codes_new_from_message(message)
            try:
                header = _header(h)
            finally:
                eccodes.codes_release(h)
            grid = _grid_of(header, message)
            if self._cache.grid is None:
                self._cache.grid = grid
            elif self._cache.grid.identity != grid.identity:
                raise BadRequestError(
                    f"param {self._params[name].value} ({name}) is on another grid than param "
                    f"{self._params[first].value} ({first}): {header['gridType']}, "
                    f"{header['numberOfDataPoints']} points; open one view per grid (select params in the request)"
                )
            attrs: dict[str, Any] = {
                "GRIB_paramId": header["paramId"],
                "GRIB_shortName": header["shortName"],
                "GRIB_name": header["name"],
                "GRIB_units": header["units"],
                "GRIB_cfName": header["cfName"],
                "GRIB_cfVarName": header["cfVarName"],
                "GRIB_typeOfLevel": header["typeOfLevel"],
                "GRIB_gridType": header["gridType"],
                "GRIB_numberOfPoints": header["numberOfDataPoints"],
                "long_name": header["name"],
                "units": header["units"],
            }
            if header["cfName"] and header["cfName"] != "unknown":
                attrs["standard_name"] = header["cfName"]
            if self._cache.grid.dims == ("values",):
                attrs["coordinates"] = "latitude longitude"
            attrs = {k: v for k, v in attrs.items() if v is not None}
            self._cache.attrs[name] = json.dumps(attrs).encode()
            return self._cache.grid, attrs

    def _grid_only(self) -> _Grid:
        if self._cache.grid is None:
            self._grid_and_attrs(next(iter(self._params)))
        assert self._cache.grid is not None
        return self._cache.grid

    # --- keys -----------------------------------------------------------------------------

    def _nodes(self) -> list[str]:
        return list(self._dims) + ["latitude", "longitude"] + list(self._params)

    def _metadata(self, key: str) -> bytes | None:
        if key == "zarr.json":
            attrs = {"Conventions": "CF-1.7", "haar_request": json.dumps(self._request, default=str)}
            return json.dumps({"zarr_format": 3, "node_type": "group", "attributes": attrs}).encode()
        node, _, rest = key.partition("/")
        if rest != "zarr.json":
            return None
        if node in self._coords:
            vals, kind = self._coords[node]
            coord: dict[str, Any] = {"long_name": node}
            if vals != sorted(vals):  # a re-list appended values that sort before older ones
                coord["haar_sorted"] = False
            return _array_json([len(vals)], [COORDINATE_CHUNK], kind, [node], coord)
        if node in ("latitude", "longitude"):
            grid = self._grid_only()
            n = grid.shape[0] if (node == "latitude" or len(grid.shape) == 1) else grid.shape[1]
            dim = node if len(grid.shape) == 2 else "values"
            units = "degrees_north" if node == "latitude" else "degrees_east"
            attrs = {"units": units, "standard_name": node, "long_name": node}
            return _array_json([n], [n], "float64", [dim], attrs)
        if node in self._params:
            grid, attrs = self._grid_and_attrs(node)
            shape = [len(self._coords[d][0]) for d in self._dims] + list(grid.shape)
            chunks = [1] * len(self._dims) + list(grid.shape)
            return _array_json(shape, chunks, self._dtype, self._dims + list(grid.dims), attrs)
        return None

    def _chunk_field(self, key: str) -> tuple[str, tuple[int, ...]] | None:
        """The (array, index) of a data chunk key, whether or not the field is present."""
        node, _, rest = key.partition("/")
        if node not in self._params or not rest.startswith("c/"):
            return None
        parts = rest[2:].split("/")
        if not all(p.isdigit() for p in parts):
            return None
        idx = tuple(int(p) for p in parts)
        n = len(self._dims)
        grid = self._grid_only()
        if len(idx) != n + len(grid.shape) or any(idx[n:]):
            return None
        return node, idx[:n]

    def _chunk(self, key: str) -> _Bytes | None:
        node, _, rest = key.partition("/")
        if node in self._coords:
            return self._coordinate_chunk(node, rest)
        if node in ("latitude", "longitude") and rest == "c/0":
            lats, lons = self._grid_only().coordinates()
            return _as_bytes(lats if node == "latitude" else lons, "<f8")
        where = self._chunk_field(key)
        if where is None:
            return None
        field = self._fields.get(where)
        if field is None:
            return None  # a missing field: zarr fills the chunk with NaN
        grid = self._grid_only()
        values = _decode(self._read(field))
        if values.size != int(np.prod(grid.shape)):
            raise StorageError(
                f"field {field} has {values.size} points; the view's grid has "
                f"{int(np.prod(grid.shape))}: open one view per grid"
            )
        return _as_bytes(values, "<f8" if self._dtype == "float64" else "<f4")

    def _coordinate_chunk(self, node: str, rest: str) -> bytes | None:
        """Chunk ``c/<i>`` of a key's coordinate: COORDINATE_CHUNK values, the last chunk's
        padded with the fill value (0 or ""), as Zarr stores an edge chunk whole."""
        vals, kind = self._coords[node]
        i = rest[2:] if rest.startswith("c/") else ""
        if not i.isdigit() or int(i) * COORDINATE_CHUNK >= max(len(vals), 1):
            return None
        part = list(vals[int(i) * COORDINATE_CHUNK : (int(i) + 1) * COORDINATE_CHUNK])
        if kind == "string":
            return _vlen_utf8(part + [""] * (COORDINATE_CHUNK - len(part)))
        return np.asarray(part + [0] * (COORDINATE_CHUNK - len(part)), dtype="<i8").tobytes()

    def _get_sync(self, key: str) -> _Bytes | None:
        meta = self._metadata(key) if key.endswith("zarr.json") else None
        return meta if meta is not None else self._chunk(key)

    def _keys(self) -> Iterable[str]:
        yield "zarr.json"
        for d in self._dims:
            yield f"{d}/zarr.json"
            for i in range(-(-len(self._coords[d][0]) // COORDINATE_CHUNK)):
                yield f"{d}/c/{i}"
        for node in ("latitude", "longitude"):
            yield f"{node}/zarr.json"
            yield f"{node}/c/0"
        grid_zeros = None
        for name in self._params:
            yield f"{name}/zarr.json"
        for name, idx in self._fields:
            if grid_zeros is None:
                grid_zeros = "/0" * len(self._grid_only().shape)
            yield f"{name}/c/" + "/".join(str(i) for i in idx) + grid_zeros

    # --- zarr.abc.store.Store ---------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, HaarZarrStore)
            and other._fdb is self._fdb
            and other._request == self._request
            and other._dims == self._dims
            and other._dtype == self._dtype
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<haar.zarr.HaarZarrStore {len(self._fields)} fields, dims={self._dims}, arrays={list(self._params)}>"

    def with_read_only(self, read_only: bool = False) -> HaarZarrStore:
        """Return the same view with zarr's ``read_only`` flag set as asked.

        Either way the view never writes (``supports_writes`` is False); the flag only decides
        which of zarr's modes accept it: ``"r"`` only when True, also ``"a"`` and ``"r+"``
        (which open an existing group without writing) when False.
        """
        # Not copy.copy: that goes through __getstate__, which drops the store and the cache
        # a copy must share.
        other = object.__new__(type(self))
        other.__dict__.update(self.__dict__)
        other._read_only = read_only
        return other

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        """Return the bytes of `key` (metadata, a coordinate or a decoded field), or None.

        A data chunk retrieves and decodes its field; None for a field the catalogue does not
        hold (zarr then fills the chunk with NaN) and for keys outside the layout.
        """
        data = await asyncio.to_thread(self._get_sync, key)
        if data is None:
            return None
        part = _slice(data, byte_range)
        if isinstance(part, np.ndarray):
            return prototype.buffer.from_array_like(part)  # the decoded values, not copied
        return prototype.buffer.from_bytes(part)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        """Return byte ranges of several keys, in order (None for absent keys)."""
        return list(await asyncio.gather(*(self.get(k, prototype, r) for k, r in key_ranges)))

    async def exists(self, key: str) -> bool:
        """Whether `key` exists: metadata and coordinates always, a data chunk when the
        catalogue holds its field (no field is read)."""
        if key == "zarr.json":
            return True
        node, _, rest = key.partition("/")
        if rest == "zarr.json":
            return node in self._nodes()
        if node in self._coords:
            return self._coordinate_chunk(node, rest) is not None
        if rest == "c/0" and node in ("latitude", "longitude"):
            return True
        where = await asyncio.to_thread(self._chunk_field, key)
        return where is not None and where in self._fields

    async def set(self, key: str, value: Buffer) -> None:
        """Refused: the view never writes (``ValueError``, as zarr's read-only stores)."""
        raise BadRequestError(f"cannot write {key!r}: a haar Zarr view is read-only; archive fields with haar.FDB.archive")

    async def delete(self, key: str) -> None:
        """Refused: the view never deletes (``ValueError``, as zarr's read-only stores)."""
        raise BadRequestError(f"cannot delete {key!r}: a haar Zarr view is read-only; remove fields with haar.FDB.wipe")

    async def list(self) -> AsyncIterator[str]:
        """Every key: metadata, coordinates and one chunk per field held."""
        for key in await asyncio.to_thread(lambda: list(self._keys())):
            yield key

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        """Every key under the node or directory `prefix` (``"t"`` and ``"t/"`` alike).

        `prefix` is a path, as zarr's LocalStore reads it, not a string prefix: zarr asks
        ``list_prefix("z")`` for array ``z``'s chunks, and must not be given ``zarr.json``.
        """
        path = prefix.rstrip("/")
        async for key in self.list():
            if not path or key == path or key.startswith(path + "/"):
                yield key

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        """Names directly under `prefix` (keys and sub-prefixes), without reading a field."""
        prefix = prefix.rstrip("/")
        if prefix == "":
            yield "zarr.json"
            for node in self._nodes():
                yield node
            return
        if prefix in self._nodes():
            yield "zarr.json"
            yield "c"
            return
        seen: set[str] = set()
        async for key in self.list_prefix(prefix + "/"):
            child = key[len(prefix) + 1 :].split("/")[0]
            if child not in seen:
                seen.add(child)
                yield child
