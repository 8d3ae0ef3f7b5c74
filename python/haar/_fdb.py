"""The pyfdb-shaped face of haar: :class:`FDB`, :class:`DataHandle`, :class:`ListElement`.

Everything here converts arguments and results; stores are opened, GRIB is keyed and fields
are read by the Rust library through ``haar._haar``, with the GIL released.
"""

from __future__ import annotations

import builtins
import io
import json
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from . import _haar
from ._errors import BadRequestError

__all__ = [
    "FDB",
    "DataHandle",
    "ListElement",
    "IndexAxis",
    "Event",
    "WipeReport",
    "PurgeReport",
    "StatsElement",
    "Selection",
    "Config",
]

Value = Union[str, int, float]
#: A selection: a MARS string (``"class=od,param=130/167"``) or keyword → value(s)
#: (``{"param": ["130", "167"], "step": 0}``).
Selection = Union[str, Mapping[str, Union[Value, Iterable[Value]]]]
#: A configuration: YAML text, a path, or a dict (haar's keys or FDB5's local TOC config).
Config = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def _selection(sel: Selection | None) -> Selection | None:
    # Values are read by the extension (strings split at "/", numbers, lists): this only
    # passes the selection on, checking its kind for a clear message.
    if sel is None or isinstance(sel, (str, Mapping)):
        return sel
    raise BadRequestError(
        f"selection {sel!r}: give a dict of keyword to values or a MARS string like 'class=od,param=130'"
    )


def _required(sel: Selection) -> Selection:
    out = _selection(sel)
    if out is None:
        raise BadRequestError("a selection is required here: give a dict or a MARS string")
    return out


def _config(config: Config | None) -> tuple[str, str | None]:
    if config is None:
        return ("env", None)
    if isinstance(config, os.PathLike):
        return ("file", os.fspath(config))
    if isinstance(config, Mapping):
        # JSON is YAML: the library parses it, FDB5's local TOC dicts included.
        return ("yaml", json.dumps(dict(config), default=str))
    if isinstance(config, str):
        if "\n" not in config and ":" not in config:
            return ("file", config)
        return ("yaml", config)
    raise BadRequestError(f"config {config!r}: give YAML text, a path or a dict")


class DataHandle(_haar.BufferExporter):
    """Retrieved fields, readable like a binary file and exporting the buffer protocol.

    Returned by :meth:`FDB.retrieve`; not created by user code. The bytes were read when the
    handle was made (with the GIL released), so reads never touch storage. For one complete
    key on a local pmem store the bytes are lent by the store's pool, and
    ``memoryview(handle)`` is a read-only view of the pool itself: no copy. The view (and the
    pool mapping) stays valid while the view or the handle lives, even after :meth:`close`.

    As in pyfdb, :meth:`open` and :meth:`close` bracket reading and the handle is a context
    manager; unlike pyfdb a new handle is already open, and reading past the end returns
    fewer bytes (never zero padding).

    Examples
    --------
    >>> with fdb.retrieve({"param": "167", "step": 0, **rest}) as h:  # doctest: +SKIP
    ...     assert h.read(4) == b"GRIB"
    >>> view = memoryview(fdb.retrieve(key))  # doctest: +SKIP
    """

    def __init__(self, buffer: _haar.Buffer, *, _internal: bool = False) -> None:
        if not _internal:
            raise TypeError("DataHandle is returned by FDB.retrieve, not created directly")
        self._buf = buffer
        self._size = len(buffer)
        self._pos = 0
        self._opened = True

    def _buffer_info(self) -> tuple[object, int, int]:
        return self._buf.buffer_info()

    @property
    def lent(self) -> bool:
        """bool: whether the bytes are lent by the store (zero-copy) rather than copied."""
        return self._buf.lent

    def __enter__(self) -> DataHandle:
        self.open()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def open(self) -> None:
        """Open the handle for reading, at the start. A handle is open when returned."""
        if not self._opened:
            self._opened = True
            self._pos = 0

    def close(self) -> None:
        """Close the handle; reads then raise :class:`haar.BadRequestError`."""
        self._opened = False

    @property
    def closed(self) -> bool:
        """bool: whether :meth:`close` was called (and no :meth:`open` since)."""
        return not self._opened

    def _check(self) -> None:
        if not self._opened:
            raise BadRequestError("read of a closed DataHandle: call open() first")

    def size(self) -> int:
        """Return the size of the retrieved data in bytes.

        Returns
        -------
        int
            All fields' bytes together.
        """
        return self._size

    def __len__(self) -> int:
        return self._size

    def readable(self) -> bool:
        """Return True: the handle is readable."""
        return True

    def seekable(self) -> bool:
        """Return True: the handle is seekable."""
        return True

    def tell(self) -> int:
        """Return the read position in bytes."""
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the read position, like :meth:`io.IOBase.seek`.

        Parameters
        ----------
        offset : int
            Bytes relative to `whence`.
        whence : int, optional
            ``io.SEEK_SET`` (default), ``io.SEEK_CUR`` or ``io.SEEK_END``.

        Returns
        -------
        int
            The new position.
        """
        self._check()
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}.get(whence)
        if base is None:
            raise BadRequestError(f"seek: whence {whence} is not SEEK_SET, SEEK_CUR or SEEK_END")
        if base + offset < 0:
            raise BadRequestError(f"seek to {base + offset}: negative position")
        self._pos = base + offset
        return self._pos

    def read(self, n: int = -1) -> bytes:
        """Read up to `n` bytes (all that remain if `n` < 0), as a copy.

        Parameters
        ----------
        n : int, optional
            Bytes to read; -1 (default) reads to the end.

        Returns
        -------
        bytes
            The bytes read; empty at the end.
        """
        self._check()
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        out = self._buf.slice(self._pos, end)
        self._pos = max(self._pos, end)
        return out

    def readall(self) -> bytes:
        """Read everything from the start, as pyfdb's ``readall``.

        Returns
        -------
        bytes
            All retrieved bytes.
        """
        self.open()
        self._pos = 0
        return self.read()

    def readinto(self, buffer: Any) -> int:
        """Read into a writable buffer (``bytearray``, ``memoryview``, numpy array).

        Parameters
        ----------
        buffer : writable bytes-like object
            Filled from the read position.

        Returns
        -------
        int
            Bytes read; 0 at the end.
        """
        self._check()
        target = memoryview(buffer).cast("B")
        n = max(0, min(len(target), self._size - self._pos))
        target[:n] = memoryview(self)[self._pos : self._pos + n]
        self._pos += n
        return n

    def __repr__(self) -> str:
        state = "open" if self._opened else "closed"
        kind = "lent" if self.lent else "owned"
        return f"<haar.DataHandle {state}, {self._size} bytes, {kind}>"


class ListElement:
    """One entry of :meth:`FDB.list`, in pyfdb 5's shape.

    ``element.keys()`` gives the key split by schema level, ``element.combined_key()`` the
    whole key; ``element["keys"]`` (older pyfdb's dict shape) is the whole key too.
    Location: :meth:`offset`, :meth:`length` and :attr:`uri` (the store and data object; a pmem
    field lives in a pool, not a file of its own).
    """

    def __init__(
        self,
        keys: list[dict[str, str]],
        location: tuple[str, int, int] | None,
        fdb: FDB,
        *,
        _internal: bool = False,
    ) -> None:
        if not _internal:
            raise TypeError("ListElement is returned by FDB.list, not created directly")
        self._keys = keys
        self._location = location
        self._fdb = fdb

    def has_location(self) -> bool:
        """Return whether the element is a field (level 3) with a location."""
        return self._location is not None

    def keys(self) -> list[dict[str, str]]:
        """Return the key split by schema level (database, index, datum)."""
        return [dict(k) for k in self._keys]

    def combined_key(self) -> dict[str, str]:
        """Return the whole key, keyword → value."""
        out: dict[str, str] = {}
        for k in self._keys:
            out.update(k)
        return out

    def offset(self) -> int | None:
        """Return the field's byte offset in its data object (None above level 3)."""
        return self._location[1] if self._location else None

    def length(self) -> int | None:
        """Return the field's length in bytes (None above level 3)."""
        return self._location[2] if self._location else None

    @property
    def uri(self) -> str | None:
        """str or None: the store and data object holding the field."""
        return self._location[0] if self._location else None

    @property
    def data_handle(self) -> DataHandle | None:
        """DataHandle or None: the field's bytes (a retrieve of its key)."""
        return self._fdb.retrieve(self.combined_key()) if self._location else None

    def __getitem__(self, name: str) -> Any:
        items = {
            "keys": self.combined_key(),
            "uri": self.uri,
            "path": self.uri,
            "offset": self.offset(),
            "length": self.length(),
        }
        if name not in items:
            raise KeyError(name)
        return items[name]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ListElement)
            and self._keys == other._keys
            and self._location == other._location
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        keys = "".join("{" + ",".join(f"{k}={v}" for k, v in d.items()) + "}" for d in self._keys)
        if self._location:
            uri, off, length = self._location
            return f"{keys}, uri={uri}, offset={off}, length={length}"
        return keys


class IndexAxis(dict[str, list[str]]):
    """Keyword → sorted values present, as returned by :meth:`FDB.axes` (a dict)."""


@dataclass(frozen=True)
class Event:
    """A flushed field, from :meth:`FDB.watch`.

    Attributes
    ----------
    key : dict
        The field's whole key.
    length : int
        Its length in bytes.
    origin : str
        Where it was flushed (server or store).
    """

    key: dict[str, str]
    length: int
    origin: str


@dataclass(frozen=True)
class WipeReport:
    """What :meth:`FDB.wipe` removed, or would remove with ``doit=False``.

    Attributes
    ----------
    databases : list of str
        Databases removed entirely.
    fields : int
        Fields removed from databases that stay.
    bytes : int
        Bytes of those fields.
    doit : bool
        False for a dry run: nothing was removed.
    """

    databases: list[str]
    fields: int
    bytes: int
    doit: bool


@dataclass(frozen=True)
class PurgeReport:
    """What :meth:`FDB.purge` dropped, or would drop with ``doit=False``.

    Attributes
    ----------
    databases : int
        Databases examined.
    dropped_fields, dropped_bytes : int
        Masked or wiped fields dropped, and their bytes.
    freed_bytes : int
        Bytes returned to the system.
    doit : bool
        False for a dry run.
    """

    databases: int
    dropped_fields: int
    dropped_bytes: int
    freed_bytes: int
    doit: bool


@dataclass(frozen=True)
class StatsElement:
    """Statistics of one database, from :meth:`FDB.stats`.

    Attributes
    ----------
    db : str
        The database key.
    fields, bytes : int
        Live fields and their bytes.
    dead_fields, dead_bytes : int
        Masked or wiped fields still occupying storage (what :meth:`FDB.purge` frees).
    problems : list of str
        Segments that could not be read, with why.
    """

    db: str
    fields: int
    bytes: int
    dead_fields: int
    dead_bytes: int
    problems: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ExtractionResult:
    """One field's values from :meth:`FDB.extract`.

    Attributes
    ----------
    key : dict
        The field's key as stored.
    method : str
        ``"jump"``: only the bytes of the values were read; ``"eccodes-whole-field"``: the
        field's packing is not simple and it was decoded whole with ecCodes.
    ranges : list of (int, int)
        The ranges the values are of (for points: ``(index, index + 1)`` each).
    values : list of numpy.ndarray
        Per range, its values (float64; NaN where the field has none).
    """

    key: dict[str, str]
    method: str
    ranges: builtins.list[tuple[int, int]]
    values: builtins.list[Any]

    @property
    def values_flat(self) -> Any:
        """Every range's values in one array, in range order."""
        import numpy as np

        return np.concatenate(self.values) if self.values else np.empty(0)


class FDB:
    """A haar store, opened with pyfdb's call.

    Parameters
    ----------
    config : str, path-like, dict or None, optional
        ``None``: the environment: ``$HAAR_CONFIG``, else FDB5's ``FDB5_CONFIG``,
        ``FDB5_CONFIG_FILE`` or ``$FDB_HOME/etc/fdb/config.yaml`` (a local TOC config maps onto
        a posix root and its schema), else haar's defaults. A ``str`` holding ``:`` or a
        newline is YAML text, any other ``str`` or a path-like is a file, a ``dict`` is the
        configuration itself (haar's keys, or FDB5's ``{"type": "local", "engine": "toc",
        "schema": ..., "spaces": [...]}``).
    user_config : dict or None, optional
        Accepted for pyfdb compatibility and ignored: haar has no per-user options.

    Notes
    -----
    One ``FDB`` may be shared by threads: calls are serialised on the store and release the
    GIL while they work. :meth:`flush` makes durable what any thread archived through this
    object. As in pyfdb, leaving a ``with FDB(...)`` block flushes, even when it is left by an
    exception: fields archived before the exception become visible.

    Examples
    --------
    >>> with haar.FDB({"backend": "pmem", "roots": ["/dev/shm/haar"]}) as fdb:  # doctest: +SKIP
    ...     fdb.archive(open("fields.grib", "rb").read())
    >>> fdb.retrieve("class=od,param=167,step=0,...").read(4)  # doctest: +SKIP
    b'GRIB'
    """

    def __init__(self, config: Config | None = None, user_config: Mapping[str, Any] | None = None) -> None:
        kind, value = _config(config)
        self._store = _haar.Store(kind, value)

    def __enter__(self) -> FDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()

    def __repr__(self) -> str:
        return f"<haar.FDB {self._store.describe()}>"

    def archive(self, data: bytes | bytearray | memoryview, identifier: Selection | None = None) -> int:
        """Archive GRIB messages keyed by ecCodes, or bytes under a given key.

        Parameters
        ----------
        data : bytes-like
            One or more GRIB messages back to back; with `identifier`, any bytes.
        identifier : dict or str, optional
            The key to store `data` under, one value per keyword; its bytes are not checked
            against it (as in pyfdb).

        Returns
        -------
        int
            Fields archived.

        Raises
        ------
        BadRequestError
            Data that is not GRIB, a truncated message, keys the schema refuses: nothing of
            `data` is archived.

        Notes
        -----
        Invisible to readers until :meth:`flush`.
        """
        payload = data if isinstance(data, bytes) else bytes(data)
        return self._store.archive(payload, _selection(identifier))

    def flush(self) -> None:
        """Make every field archived through this object durable and visible."""
        self._store.flush()

    def retrieve(self, selection: Selection) -> DataHandle:
        """Retrieve the fields of a selection.

        Parameters
        ----------
        selection : dict or str
            What to retrieve; lists and ``a/b`` select several values.

        Returns
        -------
        DataHandle
            The fields' bytes in request-expansion order, file-like; zero-copy through
            ``memoryview`` for one complete key on a local pmem store.

        Raises
        ------
        MissingError
            Some selected fields are not stored (FDB5 would return less, silently).
        """
        return DataHandle(self._store.retrieve(_required(selection)), _internal=True)

    def extract(
        self,
        request: Selection,
        ranges: Iterable[tuple[int, int]] | None = None,
        *,
        points: Iterable[tuple[float, float]] | None = None,
    ) -> builtins.list[ExtractionResult]:
        """Values of each field of a request at index ranges, reading only their bytes.

        Shaped like ``pygribjump``'s ``extract``: ``ranges`` are half-open ``(i, j)`` pairs
        of grid indices; each field's result holds one array of values per range.

        Parameters
        ----------
        request : dict or str
            The fields; lists and ``a/b`` select several values.
        ranges : iterable of (int, int), optional
            Half-open ranges ``[i, j)`` over each field's grid, in scanning order.
        points : iterable of (float, float), optional
            Instead of ``ranges``: (latitude, longitude) pairs in degrees, each resolved to
            the nearest grid point of each field (regular lat/lon grids only).

        Returns
        -------
        list of ExtractionResult
            One per stored field of the request (absent fields are left out), in list order.

        Notes
        -----
        Simple-packed fields are decoded from a jump record without reading the rest of the
        field; other packings are decoded whole with ecCodes and say so in ``method``.
        Missing points (bitmap) are NaN.

        Examples
        --------
        >>> res = fdb.extract({"param": "130"}, [(0, 10), (500, 505)])  # doctest: +SKIP
        >>> res[0].values[1]  # doctest: +SKIP
        array([...])
        """
        import numpy as np

        if (ranges is None) == (points is None):
            raise BadRequestError("give ranges=[(i, j), ...] or points=[(lat, lon), ...]")
        out = self._store.extract(
            _required(request),
            ranges=None if ranges is None else [(int(i), int(j)) for i, j in ranges],
            points=None if points is None else [(float(a), float(b)) for a, b in points],
        )
        results = []
        for key, method, rngs, flat in out:
            # One array per field, split into views per range (no Python float per value).
            arr = np.frombuffer(flat, dtype="<f8")
            cuts = np.cumsum([j - i for i, j in rngs])[:-1]
            results.append(
                ExtractionResult(
                    key=key,
                    method=method,
                    ranges=[(int(i), int(j)) for i, j in rngs],
                    values=np.split(arr, cuts) if rngs else [],
                )
            )
        return results

    def list(
        self,
        selection: Selection | None = None,
        include_masked: bool = False,
        level: int = 3,
        keys: bool = True,
    ) -> Iterator[ListElement]:
        """List flushed fields, sorted by key.

        Parameters
        ----------
        selection : dict or str, optional
            What to list; ``None`` lists everything.
        include_masked : bool, optional
            Must be False: haar lists live fields (masked ones are counted by :meth:`stats`).
        level : {1, 2, 3}, optional
            3: one element per field with its location; 2: per (database, index); 1: per
            database.
        keys : bool, optional
            Accepted for older pyfdb code; keys are always given.

        Yields
        ------
        ListElement
        """
        if include_masked:
            raise BadRequestError("list(include_masked=True): haar lists live fields only")
        if level not in (1, 2, 3):
            raise BadRequestError(f"list(level={level}): give 1, 2 or 3")
        rows = self._store.list(_selection(selection))
        where = self._store.describe()
        seen: set[str] = set()
        for db, index, datum, obj, offset, length in rows:
            if level == 3:
                yield ListElement([db, index, datum], (f"{where}#{obj:016x}", offset, length), self, _internal=True)
                continue
            parts = [db, index][:level]
            tag = json.dumps(parts, sort_keys=True)
            if tag not in seen:
                seen.add(tag)
                yield ListElement(parts, None, self, _internal=True)

    def axes(self, selection: Selection | None = None, level: int = 3) -> IndexAxis:
        """Values present per keyword among the fields of a selection.

        Parameters
        ----------
        selection : dict or str, optional
            What to look at; ``None``: everything.
        level : {1, 2, 3}, optional
            Keywords of schema levels up to this one.

        Returns
        -------
        IndexAxis
            Keyword → sorted list of values.
        """
        if level == 3:
            return IndexAxis(self._store.axes(_selection(selection)))
        out: dict[str, set[str]] = {}
        for el in self.list(selection, level=level):
            for k, v in el.combined_key().items():
                if v:
                    out.setdefault(k, set()).add(v)
        return IndexAxis({k: sorted(v) for k, v in sorted(out.items())})

    def wipe(self, selection: Selection, doit: bool = False) -> WipeReport:
        """Remove the fields of a selection; a dry run unless `doit`.

        Parameters
        ----------
        selection : dict or str
            What to remove (an empty selection is refused).
        doit : bool, optional
            Remove for real (default: report only).

        Returns
        -------
        WipeReport
        """
        dbs, fields, nbytes = self._store.wipe(_required(selection), doit)
        return WipeReport(list(dbs), fields, nbytes, doit)

    def purge(self, selection: Selection | None = None, doit: bool = False) -> PurgeReport:
        """Drop masked (overwritten) and wiped fields; a dry run unless `doit`.

        Parameters
        ----------
        selection : dict or str, optional
            Databases to purge; ``None``: all.
        doit : bool, optional
            Drop for real (default: report only).

        Returns
        -------
        PurgeReport
        """
        dbs, fields, nbytes, freed = self._store.purge(_selection(selection), doit)
        return PurgeReport(dbs, fields, nbytes, freed, doit)

    def stats(self, selection: Selection | None = None) -> builtins.list[StatsElement]:
        """Per-database statistics.

        Parameters
        ----------
        selection : dict or str, optional
            Databases to look at; ``None``: all.

        Returns
        -------
        list of StatsElement
        """
        return [StatsElement(db, f, b, df, dbytes, list(p)) for db, f, b, df, dbytes, p in self._store.stats(_selection(selection))]

    def watch(self, selection: Selection | None = None, timeout: float | None = None) -> Iterator[Event]:
        """Flush events for the fields of a selection, as they are flushed.

        Fields already flushed come first; each field once. From servers, their push
        notifications; on a local store, its catalogue polled every 10 ms.

        Parameters
        ----------
        selection : dict or str, optional
            Fields to watch; ``None``: all.
        timeout : float, optional
            Stop when no event came for this many seconds; ``None``: never stop.

        Yields
        ------
        Event
        """
        watcher = self._store.watch(_selection(selection))
        while True:
            ev = watcher.next(timeout)
            if ev is None:
                return
            yield Event(*ev)

    def wait(self, selection: Selection, timeout: float) -> int:
        """Wait until every field of a selection (a step) is flushed.

        Parameters
        ----------
        selection : dict or str
            Every keyword's values named explicitly (no ``all``).
        timeout : float
            Seconds to wait at most.

        Returns
        -------
        int
            Fields the selection names (all flushed).

        Raises
        ------
        haar.TimeoutError
            `timeout` passed first; ``.missing`` lists the keys still missing.
        """
        return self._store.wait(_required(selection), float(timeout))
