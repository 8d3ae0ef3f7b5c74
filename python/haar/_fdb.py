"""The pyfdb-shaped face of haar: :class:`FDB`, :class:`DataHandle`, :class:`ListElement`.

Everything here converts arguments and results; stores are opened, GRIB is keyed and fields
are read by the Rust library through ``haar._haar``, with the GIL released.
"""

from __future__ import annotations

import builtins
import enum
import io
import json
import os
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Union
from urllib import parse

from . import _haar
from ._errors import BadRequestError

__all__ = [
    "FDB",
    "DataHandle",
    "ListElement",
    "IndexAxis",
    "Event",
    "URI",
    "WipeElement",
    "WipeElementType",
    "PurgeElement",
    "StatusElement",
    "ControlElement",
    "ControlAction",
    "ControlIdentifier",
    "StatsElement",
    "Selection",
    "MarsSelection",
    "MarsIdentifier",
    "Config",
]

Value = Union[str, int, float]
#: A selection: a MARS string (``"class=od,param=130/167"``) or keyword → value(s)
#: (``{"param": ["130", "167"], "step": 0}``).
Selection = Union[str, Mapping[str, Union[Value, Iterable[Value]]]]
#: A configuration: YAML text, a path, or a dict (haar's keys or FDB5's local TOC config).
Config = Union[str, "os.PathLike[str]", Mapping[str, Any]]
#: pyfdb 5's name for a selection given as keyword → value(s); haar takes MARS strings too.
MarsSelection = Selection
#: pyfdb 5's name for an archive identifier: one value per keyword, as a dict or pairs.
MarsIdentifier = Union[Mapping[str, Value], builtins.list[tuple[str, Value]]]


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


class URI:
    """A resource identifier, as pyfdb 5's ``URI``: where a field's bytes or a database are.

    For a local store it is the file (``file:///root/db/0123.data``; a pmem field's is the
    pool, the offset being within it); for fields behind a server, haar's name for the store
    and data object (``haar:remote host:7000#0123``), which is not a file.

    Parameters
    ----------
    uri : str or path-like
        The identifier; a path without a scheme is taken as is (``scheme`` is then empty).
    scheme : str, optional
        The scheme to assume where `uri` has none.

    Examples
    --------
    >>> u = URI("file:///dev/shm/haar/x.data")
    >>> u.scheme(), u.path()
    ('file', '/dev/shm/haar/x.data')
    """

    def __init__(self, uri: str | os.PathLike[str], scheme: str = "") -> None:
        self._parts = parse.urlsplit(os.fspath(uri), scheme=scheme)

    @classmethod
    def _of_path(cls, path: str) -> URI:
        return cls(parse.urlunsplit(("file", "", path, "", "")))

    def scheme(self) -> str:
        """Return the scheme (``file``, ``haar``), empty if none."""
        return self._parts.scheme

    def netloc(self) -> str:
        """Return the network location (``user@host:port``), empty for files."""
        return self._parts.netloc

    def username(self) -> str | None:
        """Return the user name of the network location, if any."""
        return self._parts.username

    def password(self) -> str | None:
        """Return the password of the network location, if any."""
        return self._parts.password

    def hostname(self) -> str | None:
        """Return the host of the network location, if any."""
        return self._parts.hostname

    def port(self) -> int | None:
        """Return the port of the network location, if any."""
        return self._parts.port

    def path(self) -> str:
        """Return the path (for ``file`` URIs, the file's path)."""
        return self._parts.path

    def query(self) -> str:
        """Return the query, empty if none."""
        return self._parts.query

    def fragment(self) -> str:
        """Return the fragment, empty if none."""
        return self._parts.fragment

    def __eq__(self, other: object) -> bool:
        return isinstance(other, URI) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __str__(self) -> str:
        return parse.urlunsplit(self._parts)

    def __repr__(self) -> str:
        return str(self)


def _uri(path: str | None, fallback: str) -> URI:
    return URI._of_path(path) if path else URI(f"haar:{fallback}")


class ListElement:
    """One entry of :meth:`FDB.list` or :meth:`FDB.inspect`, in pyfdb 5's shape.

    ``element.keys()`` gives the key split by schema level, ``element.combined_key()`` the
    whole key; ``element["keys"]`` (older pyfdb's dict shape) is the whole key too.
    Location: :meth:`offset`, :meth:`length` and :attr:`uri` (the file holding the bytes at
    that offset: a posix data file, or a pmem pool; see :class:`URI`).
    """

    def __init__(
        self,
        keys: list[dict[str, str]],
        location: tuple[URI, int, int] | None,
        fdb: FDB,
        *,
        _internal: bool = False,
        _masked: tuple[str, str, str, int] | None = None,
    ) -> None:
        if not _internal:
            raise TypeError("ListElement is returned by FDB.list, not created directly")
        self._keys = keys
        self._location = location
        self._fdb = fdb
        # A masked copy (list(include_masked=True)): its key by level and data object, for
        # reading it where it lies (a retrieve of its key reads the live copy); the index and
        # datum route the read through dist.
        self._masked = _masked

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
    def uri(self) -> URI | None:
        """URI or None: the file holding the field's bytes at :meth:`offset` (None above
        level 3)."""
        return self._location[0] if self._location else None

    @property
    def data_handle(self) -> DataHandle | None:
        """DataHandle or None: the field's bytes, a retrieve of its exact key (None above
        level 3).

        The key is the one listed, optional keywords the field lacks included with their
        empty value (``levelist=`` of a surface field), so exactly this field is read.
        """
        if self._location is None:
            return None
        if self._masked is not None:
            db, index, datum, obj = self._masked
            _, offset, length = self._location
            buffer = self._fdb._store.read_located(db, obj, offset, length, index, datum)
            return DataHandle(buffer, _internal=True)
        return self._fdb.retrieve(self.combined_key())

    def __getitem__(self, name: str) -> Any:
        uri = self.uri
        items = {
            "keys": self.combined_key(),
            "uri": None if uri is None else str(uri),
            "path": None if uri is None else (uri.path() if uri.scheme() == "file" else str(uri)),
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


class WipeElementType(enum.IntEnum):
    """What a :class:`WipeElement` reports, as pyfdb 5 (FDB5's ``WipeElementType``)."""

    ERROR = 0
    CATALOGUE_INFO = 1
    CATALOGUE = 2
    CATALOGUE_INDEX = 3
    CATALOGUE_SAFE = 4
    CATALOGUE_CONTROL = 5
    STORE = 6
    STORE_AUX = 7
    STORE_SAFE = 8
    UNKNOWN = 9

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


class WipeElement:
    """One part of what :meth:`FDB.wipe` removed, or would remove with ``doit=False``.

    haar reports, in this order: a ``CATALOGUE_INFO`` summary (store, fields, bytes); one
    ``CATALOGUE`` element per database removed whole (the message names it); a ``STORE``
    element for fields removed from databases that stay; and an ``UNKNOWN`` element listing
    files haar did not write in databases to be removed whole (a wipe with ``doit=True``
    refuses them unless ``unsafe_wipe_all=True``, which removes them too).
    """

    def __init__(
        self, kind: WipeElementType, msg: str, uris: builtins.list[URI], *, _internal: bool = False
    ) -> None:
        if not _internal:
            raise TypeError("WipeElement is returned by FDB.wipe, not created directly")
        self._type = kind
        self._msg = msg
        self._uris = uris

    def type(self) -> WipeElementType:
        """Return what the element reports."""
        return self._type

    def msg(self) -> str:
        """Return the element's message."""
        return self._msg

    def uris(self) -> builtins.list[URI]:
        """Return the files the element names (may be empty)."""
        return builtins.list(self._uris)

    def __repr__(self) -> str:
        files = "".join(f"\n    {u}" for u in self._uris)
        return f"{self._msg}{files}"


class PurgeElement:
    """One line of what :meth:`FDB.purge` dropped, or would drop with ``doit=False``.

    As in pyfdb 5 the element is its text (``str(element)``); haar's lines give the store,
    the masked or wiped fields dropped and their bytes, and the bytes freed.
    """

    def __init__(self, line: str, *, _internal: bool = False) -> None:
        if not _internal:
            raise TypeError("PurgeElement is returned by FDB.purge, not created directly")
        self._line = line

    def __str__(self) -> str:
        return self._line

    def __repr__(self) -> str:
        return self._line


class ControlAction(enum.IntEnum):
    """What :meth:`FDB.control` does to the identifiers it is given, as pyfdb 5."""

    NONE = 0
    DISABLE = 1
    ENABLE = 2

    def __repr__(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name


class ControlIdentifier(enum.IntFlag):
    """An operation that FDB5 can disable per database or configuration, as pyfdb 5.

    haar disables none of them: :meth:`FDB.enabled` is True for each, and
    :meth:`FDB.control` refuses ``ControlAction.DISABLE``.
    """

    NONE = 0
    LIST = 1
    RETRIEVE = 2
    ARCHIVE = 4
    WIPE = 8
    UNIQUEROOT = 16

    def __repr__(self) -> str:
        names = [m.name for m in type(self) if m.value and self.value & m.value and m.name]
        return "|".join(n for n in names if n) or "NONE"

    def __str__(self) -> str:
        return repr(self)


class StatusElement:
    """One database and the operations disabled on it, from :meth:`FDB.status`.

    As pyfdb 5: :meth:`key`, :meth:`location` and :meth:`controlIdentifiers`; haar disables
    nothing, so the last is always empty.
    """

    def __init__(
        self,
        key: dict[str, str],
        location: URI,
        identifiers: builtins.list[ControlIdentifier],
        *,
        _internal: bool = False,
    ) -> None:
        if not _internal:
            raise TypeError(f"{type(self).__name__} is returned by FDB, not created directly")
        self._key = key
        self._location = location
        self._identifiers = identifiers

    def key(self) -> dict[str, builtins.list[str]]:
        """Return the database key, keyword → values (one each), as pyfdb 5."""
        return {k: [v] for k, v in self._key.items()}

    def location(self) -> URI:
        """Return where the database is (posix: its directory; pmem: the pool)."""
        return self._location

    def controlIdentifiers(self) -> builtins.list[ControlIdentifier]:  # noqa: N802 (pyfdb's name)
        """Return the operations disabled on the database (haar: none)."""
        return builtins.list(self._identifiers)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, StatusElement)
            and self.key() == other.key()
            and self.location() == other.location()
            and self.controlIdentifiers() == other.controlIdentifiers()
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(control_identifiers={self.controlIdentifiers()}, "
            f"key={self.key()}, location={self.location()})"
        )


class ControlElement(StatusElement):
    """One database :meth:`FDB.control` acted on, as pyfdb 5 (the shape of
    :class:`StatusElement`)."""


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

    def index_statistics(self) -> str:
        """Return the fields' figures as text, as pyfdb 5's ``StatsElement`` does."""
        return (
            f"Fields                          : {self.fields + self.dead_fields:,}\n"
            f"Size of fields                  : {self.bytes + self.dead_bytes:,}\n"
            f"Reacheable fields               : {self.fields:,}\n"
            f"Reachable size                  : {self.bytes:,}"
        )

    def db_statistics(self) -> str:
        """Return the database's figures as text, as pyfdb 5's ``StatsElement`` does."""
        lines = [f"Database                        : {self.db}"]
        lines += [f"Problem                         : {p}" for p in self.problems]
        return "\n".join(lines)


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
    user_config : str, path-like, dict or None, optional
        Accepted for pyfdb compatibility (read the same ways as `config`) and given back by
        :meth:`config`; haar has no per-user options, so nothing else reads it.

    Notes
    -----
    As in pyfdb, making an ``FDB`` only checks the kind of `config`: the store is opened (the
    configuration and schema read, a server reached) by the first call that needs it, and a
    configuration that cannot be used fails there, naming what is wrong.

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

    def __init__(self, config: Config | None = None, user_config: Config | None = None) -> None:
        self._source = _config(config)
        self._user_source = None if user_config is None else _config(user_config)
        self._opened: _haar.Store | None = None
        self._opening = threading.Lock()
        self._dirty = False

    @property
    def _store(self) -> _haar.Store:
        # Opened on first use (pyfdb's FDB fails on use, not when made); once, under a lock,
        # since one FDB may be shared by threads. A failed open is tried again next call.
        store = self._opened
        if store is None:
            with self._opening:
                if self._opened is None:
                    self._opened = _haar.Store(*self._source)
                store = self._opened
        return store

    def __enter__(self) -> FDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.flush()

    def __repr__(self) -> str:
        if self._opened is None:
            kind, value = self._source
            shown = "the environment" if kind == "env" else f"{kind} {value!r}"[:80]
            return f"<haar.FDB not opened yet, from {shown}>"
        return f"<haar.FDB {self._opened.describe()}>"

    def archive(
        self, data: bytes | bytearray | memoryview, identifier: Selection | MarsIdentifier | None = None
    ) -> int:
        """Archive GRIB messages keyed by ecCodes, or bytes under a given key.

        Parameters
        ----------
        data : bytes-like
            One or more GRIB messages back to back; with `identifier`, any bytes.
        identifier : dict, list of (str, str) or str, optional
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
        if isinstance(identifier, builtins.list):
            # pyfdb 5's pairs; a keyword given twice is refused, as there.
            pairs = dict(identifier)
            if len(pairs) != len(identifier):
                raise BadRequestError(f"identifier {identifier!r}: a keyword is given twice")
            identifier = pairs
        n = self._store.archive(payload, _selection(identifier))
        if n:
            self._dirty = True
        return n

    def flush(self) -> None:
        """Make every field archived through this object durable and visible."""
        self._store.flush()
        self._dirty = False

    def dirty(self) -> bool:
        """Return whether fields were archived through this object since the last flush.

        Returns
        -------
        bool
            True if :meth:`flush` has something to make visible, as pyfdb 5's ``dirty``.
        """
        return self._dirty

    def config(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """Return the system and user configuration, as pyfdb 5's ``config``.

        Returns
        -------
        tuple of (dict, dict)
            The configuration as given or read (a dict as passed, YAML text or a file parsed,
            or the one the environment names: ``$HAAR_CONFIG``, then FDB5's variables), in
            its own keys (haar's, or FDB5's for a TOC configuration); where nothing names one,
            haar's defaults as the library uses them. Then `user_config` as given (``{}`` for
            none); haar reads nothing from it.

        Raises
        ------
        haar.Error
            A file that cannot be read or text that is not YAML. The store is not opened.
        """
        system = json.loads(_haar.config_json(*self._source))
        user = {} if self._user_source is None else json.loads(_haar.config_json(*self._user_source))
        return system, user

    def enabled(self, control_identifier: ControlIdentifier) -> bool:
        """Return whether an operation is enabled, as pyfdb 5's ``enabled``.

        Parameters
        ----------
        control_identifier : ControlIdentifier
            The operation (flags may be combined).

        Returns
        -------
        bool
            Always True: haar has no per-database or per-configuration switches that disable
            listing, retrieving, archiving or wiping (see :meth:`control`).
        """
        ControlIdentifier(control_identifier)  # a value pyfdb would refuse is refused here
        return True

    def retrieve(self, mars_selection: Selection) -> DataHandle:
        """Retrieve the fields of a selection.

        Parameters
        ----------
        mars_selection : dict or str
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
        return DataHandle(self._store.retrieve(_required(mars_selection)), _internal=True)

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
            the nearest grid point of each field on the sphere (regular lat/lon grids and
            global Gaussian grids, reduced such as O1280 or regular).

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
            # One array per field, cut into views per range (no Python float per value) by
            # slicing: np.split took 310 us for 100 ranges, slices 34 us, most of the time
            # FDB.extract spent over the store (bench/extract_bench.py).
            arr = np.frombuffer(flat, dtype="<f8")
            values = []
            at = 0
            for i, j in rngs:
                values.append(arr[at : at + j - i])
                at += j - i
            results.append(ExtractionResult(key=key, method=method, ranges=rngs, values=values))
        return results

    def list(
        self,
        mars_selection: Selection | None = None,
        include_masked: bool = False,
        level: int = 3,
        keys: bool = True,
    ) -> Iterator[ListElement]:
        """List flushed fields, sorted by key.

        Parameters
        ----------
        mars_selection : dict or str, optional
            What to list; ``None`` lists everything.
        include_masked : bool, optional
            As in pyfdb 5: also list the masked copies of re-archived keys, each right after
            the live copy of its key, newest first, until :meth:`purge` drops them, from a
            local store or through servers alike (a server too old to list them is an error
            naming it, never a plain listing). Found by replaying each database's commit
            log, so it costs a pass over everything archived there.
        level : {1, 2, 3}, optional
            3: one element per field with its location; 2: per (database, index); 1: per
            database.
        keys : bool, optional
            Accepted for older pyfdb code; keys are always given.

        Yields
        ------
        ListElement

        Raises
        ------
        StorageError
            When the store reports a damaged index, TOC, commit slot or pool under the
            selection: the listing would be incomplete, so it is refused, naming each damaged
            file and what to do (the CLI's ``haar list`` exits 3 likewise).
        """
        if level not in (1, 2, 3):
            raise BadRequestError(f"list(level={level}): give 1, 2 or 3")
        rows = self._store.list(_selection(mars_selection), include_masked and level == 3)
        seen: set[str] = set()
        previous = None
        for row in rows:
            if level == 3:
                # A masked copy follows its key's live copy (or a newer masked one).
                masked = include_masked and previous is not None and previous[:3] == row[:3]
                previous = row
                yield self._element(row, masked)
                continue
            parts = [row[0], row[1]][:level]
            tag = json.dumps(parts, sort_keys=True)
            if tag not in seen:
                seen.add(tag)
                yield ListElement(parts, None, self, _internal=True)

    def _element(
        self,
        row: tuple[dict[str, str], dict[str, str], dict[str, str], int, int, int, str | None],
        masked: bool = False,
    ) -> ListElement:
        db, index, datum, obj, offset, length, path = row
        uri = _uri(path, f"{self._store.describe()}#{obj:016x}")
        def text(key: dict[str, str]) -> str:
            return ",".join(f"{k}={v}" for k, v in key.items())

        where = (text(db), text(index), text(datum), obj) if masked else None
        return ListElement([db, index, datum], (uri, offset, length), self, _internal=True, _masked=where)

    def inspect(self, mars_selection: Selection) -> Iterator[ListElement]:
        """The fields a selection names completely, as pyfdb 5's ``inspect``.

        Parameters
        ----------
        mars_selection : dict or str
            Complete keys (lists select several); keywords the schema makes optional may be
            left out.

        Yields
        ------
        ListElement
            One per stored field whose whole key the selection names; a selection that leaves
            out a keyword the schema needs matches nothing (use :meth:`list` for that).
        """
        for row in self._store.inspect(_required(mars_selection)):
            yield self._element(row)

    def _databases(self, selection: Selection | None) -> Iterator[tuple[dict[str, str], URI]]:
        # One entry per database with a field matching the selection, and where it is.
        posix = self._store.describe().startswith("local posix")
        seen: set[str] = set()
        for db, _, _, obj, _, _, path in self._store.list(_selection(selection)):
            tag = json.dumps(db, sort_keys=True)
            if tag in seen:
                continue
            seen.add(tag)
            if path and posix:
                path = os.path.dirname(path)  # a posix database is a directory of data files
            name = ",".join(f"{k}={v}" for k, v in db.items())
            yield db, _uri(path, f"{self._store.describe()}#{{{name}}}")

    def status(self, mars_selection: Selection | None = None) -> Iterator[StatusElement]:
        """The databases of a selection and the operations disabled on each, as pyfdb 5.

        Parameters
        ----------
        mars_selection : dict or str, optional
            Databases to look at; ``None``: all.

        Yields
        ------
        StatusElement
            One per database holding a matching field; ``controlIdentifiers()`` is always
            empty: haar disables nothing.
        """
        for db, location in self._databases(mars_selection):
            yield StatusElement(db, location, [], _internal=True)

    def control(
        self,
        mars_selection: Selection,
        control_action: ControlAction,
        control_identifiers: Collection[ControlIdentifier],
    ) -> Iterator[ControlElement]:
        """Enable or disable operations on the databases of a selection, as pyfdb 5 asks.

        haar has no per-database locks (FDB5 writes ``retrieve.lock`` and the like into a
        database's directory): every operation is always enabled. Enabling, or an action or
        identifiers of ``NONE``, therefore changes nothing and yields each database as
        :meth:`status` does; disabling is refused.

        Parameters
        ----------
        mars_selection : dict or str
            The databases.
        control_action : ControlAction
            ``ENABLE``, ``DISABLE`` or ``NONE``.
        control_identifiers : collection of ControlIdentifier
            The operations.

        Yields
        ------
        ControlElement
            One per database, its ``controlIdentifiers()`` empty (nothing disabled).

        Raises
        ------
        BadRequestError
            ``DISABLE`` of any operation: nothing is changed. As in pyfdb, raised when the
            iterator is first advanced.
        """
        action = ControlAction(control_action)
        asked = ControlIdentifier.NONE
        for ident in control_identifiers:
            asked |= ControlIdentifier(ident)
        if action == ControlAction.DISABLE and asked != ControlIdentifier.NONE:
            raise BadRequestError(
                f"control: haar cannot disable {asked!r} on databases: it has no per-database "
                "locks (every operation is always enabled); nothing was changed"
            )
        for db, location in self._databases(_required(mars_selection)):
            yield ControlElement(db, location, [], _internal=True)

    def axes(self, mars_selection: Selection | None = None, level: int = 3) -> IndexAxis:
        """Values present per keyword among the fields of a selection.

        Parameters
        ----------
        mars_selection : dict or str, optional
            What to look at; ``None``: everything.
        level : {1, 2, 3}, optional
            Keywords of schema levels up to this one.

        Returns
        -------
        IndexAxis
            Keyword → sorted list of values.
        """
        if level == 3:
            return IndexAxis(self._store.axes(_selection(mars_selection)))
        out: dict[str, set[str]] = {}
        for el in self.list(mars_selection, level=level):
            for k, v in el.combined_key().items():
                if v:
                    out.setdefault(k, set()).add(v)
        return IndexAxis({k: sorted(v) for k, v in sorted(out.items())})

    def wipe(
        self,
        mars_selection: Selection,
        doit: bool = False,
        porcelain: bool = False,
        unsafe_wipe_all: bool = False,
    ) -> Iterator[WipeElement]:
        """Remove the fields of a selection; a dry run unless `doit`, as pyfdb 5's ``wipe``.

        A selection naming whole databases (database-level keywords only) removes them with
        their files; a narrower one hides its fields (:meth:`purge` frees their storage).

        Parameters
        ----------
        mars_selection : dict or str
            What to remove (an empty selection is refused).
        doit : bool, optional
            Remove for real (default: report what would be removed, change nothing).
        porcelain : bool, optional
            Yield only the elements naming databases and files (no summary).
        unsafe_wipe_all : bool, optional
            Also delete files haar did not write in the databases removed whole; without
            it, a wipe with `doit` that meets such files removes nothing and raises.

        Yields
        ------
        WipeElement
            See :class:`WipeElement` for what each says.

        Raises
        ------
        BadRequestError
            With `doit`: a database to remove whole holds files haar did not write (they are
            named), and `unsafe_wipe_all` is False. Nothing was removed.

        Notes
        -----
        As in pyfdb 5, nothing happens until the iterator is advanced: consume it
        (``list(fdb.wipe(..., doit=True))``) for the wipe to take place.
        """
        dbs, fields, nbytes, unowned = self._store.wipe(_required(mars_selection), doit, unsafe_wipe_all)
        where = self._store.describe()
        verb = "Wiped" if doit else "Would wipe (dry run; doit=True removes)"
        if not porcelain:
            yield WipeElement(
                WipeElementType.CATALOGUE_INFO,
                f"{verb} from {where}: {len(dbs)} database(s) whole, {fields} field(s), {nbytes} bytes",
                [],
                _internal=True,
            )
        for db in dbs:
            yield WipeElement(WipeElementType.CATALOGUE, f"Database {'removed' if doit else 'to remove'}: {db}", [], _internal=True)
        if unowned:
            if unsafe_wipe_all:
                what = "Files haar did not write, removed with their database" if doit else (
                    "Files haar did not write, to remove with their database (unsafe_wipe_all)"
                )
            else:
                what = "Files haar did not write: a wipe with doit=True refuses them unless unsafe_wipe_all=True"
            yield WipeElement(WipeElementType.UNKNOWN, what, [URI._of_path(p) for p in unowned], _internal=True)

    def purge(self, mars_selection: Selection | None = None, doit: bool = False, porcelain: bool = False) -> Iterator[PurgeElement]:
        """Drop masked (overwritten) and wiped fields; a dry run unless `doit`, as pyfdb 5's
        ``purge``.

        Parameters
        ----------
        mars_selection : dict or str, optional
            Databases to purge; ``None``: all.
        doit : bool, optional
            Drop for real (default: report only).
        porcelain : bool, optional
            Yield only the figures (no line saying it was a dry run).

        Yields
        ------
        PurgeElement
            Lines: the store and databases examined, the fields and bytes dropped (or to be
            dropped), the bytes freed.

        Notes
        -----
        As in pyfdb 5, nothing happens until the iterator is advanced.
        """
        dbs, fields, nbytes, freed = self._store.purge(_selection(mars_selection), doit)
        where = self._store.describe()
        if doit:
            yield PurgeElement(
                f"Purged {where}: {dbs} database(s) examined, {fields} masked or wiped field(s) "
                f"dropped, {nbytes} bytes, {freed} bytes freed",
                _internal=True,
            )
        else:
            yield PurgeElement(
                f"Would purge {where}: {dbs} database(s) examined, {fields} masked or wiped field(s) "
                f"to drop, {nbytes} bytes",
                _internal=True,
            )
            if not porcelain:
                yield PurgeElement("Dry run: nothing dropped; purge with doit=True drops them", _internal=True)

    def stats(self, mars_selection: Selection | None = None) -> builtins.list[StatsElement]:
        """Per-database statistics.

        Parameters
        ----------
        mars_selection : dict or str, optional
            Databases to look at; ``None``: all.

        Returns
        -------
        list of StatsElement
        """
        return [StatsElement(db, f, b, df, dbytes, list(p)) for db, f, b, df, dbytes, p in self._store.stats(_selection(mars_selection))]

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
