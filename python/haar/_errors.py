"""haar's exceptions: one root, :class:`Error`, and subclasses that are also the builtin
exception they resemble, so that ``except KeyError`` or ``except OSError`` written for other
libraries catches them too (the zarr-python convention).

The extension module raises these classes by name; keep the names.
"""

from __future__ import annotations

import builtins

__all__ = ["Error", "MissingError", "BadRequestError", "StorageError", "TimeoutError"]


class Error(Exception):
    """Root of every exception haar raises.

    A bare ``Error`` (no subclass) means an internal error in haar: a bug to report. The
    handle it came from may refuse further calls; open a new :class:`haar.FDB`.
    """


class MissingError(Error, KeyError):
    """Requested data is not in the store: a retrieve found no field for some of the keys a
    selection names. The message names them. Unlike FDB5, which returns nothing, haar never
    answers a retrieve with silence.
    """

    def __str__(self) -> str:
        # KeyError's str() is the repr of its argument; a message reads better plain.
        return str(self.args[0]) if self.args else ""


class BadRequestError(Error, ValueError):
    """A selection, key, identifier or configuration that cannot be used as given; the
    message says which and why. Change the input and try again.
    """


class StorageError(Error, OSError):
    """Storage, a server or the network failed (I/O error, corruption, full pool, busy
    database, unreachable server); the message names the file or server. Nothing already
    flushed is lost.
    """


class TimeoutError(Error, builtins.TimeoutError):
    """:meth:`haar.FDB.wait` timed out before every field of the step was flushed.

    Attributes
    ----------
    missing : list of dict
        The keys (request keywords only) still missing, in request order.
    """

    missing: list[dict[str, str]]

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.missing = []
