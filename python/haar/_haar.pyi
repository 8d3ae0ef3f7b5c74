"""Type stubs of the extension module ``haar._haar`` (crates/haar-py). Internal: use the
``haar`` package's classes, which wrap these."""

import builtins
from typing import final

from collections.abc import Iterable, Mapping

_Value = str | int | float
_Required = str | Mapping[str, _Value | Iterable[_Value]]
_Selection = _Required | None
_Row = tuple[dict[str, str], dict[str, str], dict[str, str], int, int, int, str | None]

def config_json(kind: str, value: str | None = None) -> str:
    """The configuration a source (``_config``'s pair) names, as JSON text; opens no store."""
    ...

class BufferExporter:
    """Base class whose instances export ``self._buffer_info()`` read-only."""

    def _buffer_info(self) -> tuple[object, int, int]: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final
class Buffer:
    """Retrieved bytes, owned or lent by the store."""

    def __len__(self) -> int: ...
    @property
    def lent(self) -> bool: ...
    def buffer_info(self) -> tuple[Buffer, int, int]: ...
    def slice(self, start: int, end: int) -> bytes: ...

@final
class Watcher:
    """Flush events of a selection."""

    def next(self, timeout: float | None = None) -> tuple[dict[str, str], int, str] | None: ...

@final
class Store:
    """One opened store."""

    def __init__(self, kind: str, value: str | None = None) -> None: ...
    def describe(self) -> str: ...
    def archive(self, data: bytes, key: _Selection = None) -> int: ...
    def flush(self) -> None: ...
    def retrieve(self, selection: _Required) -> Buffer: ...
    def read_located(
        self,
        db: str,
        object: int,
        offset: int,
        length: int,
        index: str | None = None,
        datum: str | None = None,
        crc: int | None = None,
    ) -> Buffer:
        """The bytes a listing located (keys as ``k=v,...``): how a masked copy is read, from
        any store kind; ``index`` and ``datum`` route it through dist, ``crc`` checks it."""
        ...
    def list(self, selection: _Selection = None, masked: bool = False) -> builtins.list[_Row]:
        """Flushed fields: ``(db, index, datum, object, offset, length, path)``, ``path`` the
        file holding the bytes at ``offset`` (None behind servers); with ``masked``, each
        followed by the masked copies of its key the store still holds, newest first."""
        ...
    def inspect(self, selection: _Required) -> builtins.list[_Row]:
        """The fields the selection names completely, as ``list`` gives them."""
        ...
    def axes(self, selection: _Selection = None) -> dict[str, builtins.list[str]]: ...
    def extract(
        self,
        selection: _Required,
        ranges: builtins.list[tuple[int, int]] | None = None,
        points: builtins.list[tuple[float, float]] | None = None,
    ) -> builtins.list[
        tuple[dict[str, str], str, builtins.list[tuple[int, int]], bytes]
    ]:
        """Values of each field of a selection at half-open index ranges (or nearest to
        points): ``(key, method, ranges, values)`` per field, ``values`` every range's values
        in order as little-endian float64 bytes."""
        ...
    def wipe(
        self, selection: _Required, doit: bool, unsafe_wipe_all: bool = False
    ) -> tuple[builtins.list[str], int, int, builtins.list[str]]:
        """``(databases removed whole, fields, bytes, files haar did not write)``."""
        ...
    def purge(self, selection: _Selection = None, doit: bool = False) -> tuple[int, int, int, int]: ...
    def stats(self, selection: _Selection = None) -> builtins.list[tuple[str, int, int, int, int, builtins.list[str]]]: ...
    def watch(self, selection: _Selection = None) -> Watcher: ...
    def wait(self, selection: _Required, timeout: float) -> int: ...
