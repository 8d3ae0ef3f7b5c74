"""A read-only Zarr store served over HTTP, with haar's tokens: ``python3 -m haar.zarr_http``.

This module owns HTTP and nothing else: GET and HEAD of a store's keys (byte ranges
included), the bearer-token check, TLS, and the consolidated metadata that lets a client that
cannot list (zarr over HTTP cannot) open the hierarchy from one document. It never writes,
and it knows nothing of the view's layout: it serves any ``zarr.abc.store.Store``, and its
command line serves :func:`haar.zarr.store` of a request. ``haar serve`` itself stays in Rust
and never starts Python; this is a sibling process, run beside it (or anywhere the store's
configuration reaches: a local root or haar servers).

Wire contract (HTTP/1.1, keep-alive; the URL path is the Zarr key)::

    GET|HEAD /<key>           200 and the bytes; 404 if the store has no such key (a data
                              chunk of a missing field: the client fills it with NaN)
    Range: bytes=A-B | A- | -N  206 with Content-Range (one range; several: 200, whole value);
                              416 when A is past the end
    PUT, POST, DELETE, PATCH  405 (Allow: GET, HEAD)
    no or wrong token         401 (WWW-Authenticate: Bearer), before anything else

``GET /zarr.json`` is the root group's document with zarr 3's ``consolidated_metadata``
(inline, every node's ``zarr.json`` under its path), so ``zarr.open_group(url)`` and
``xarray.open_zarr(url)`` read one document to open. Each node's own ``zarr.json`` is served
too, unchanged.

The served hierarchy follows the store (``refresh``): a request for metadata (any
``zarr.json``) at least ``refresh`` seconds after the last check asks the store for its
current state (``store.refreshed()`` if it has one, as the haar view has: a cheap check of
the catalogue, then a re-list; else the same store), consolidates it again and serves it from
then on, chunks included. The haar view's layout only grows (positions kept, new values
appended: :meth:`haar.zarr.HaarZarrStore.refreshed`), so a client that opened before still
reads the same field at every chunk key it knows. A metadata document carries an ``ETag`` (a
digest of its bytes: it changes when the layout does), ``Last-Modified`` (when the layout last
changed) and ``Cache-Control: no-cache``; ``If-None-Match`` with the current tag is answered
304. A refresh that fails (the catalogue unreachable, a param on another grid) is logged and
the previous layout kept, tried again after ``refresh`` seconds.

Authentication: ``Authorization: Bearer <token>``, where the token is one ``haar serve``
accepts: the read-write token (``--token-file`` or ``$HAAR_TOKEN``) or the read-only one
(``--read-token-file``), read as ``haar serve`` reads them (the file's content, trimmed; an
empty token is refused). Both grant the same here: reads. Tokens are compared as SHA-256
digests with :func:`hmac.compare_digest`, so the time taken depends neither on where a guess
differs nor on its length. Unlike haar's own protocol (an HMAC challenge, design §8), a
bearer token travels in the request: over plain HTTP anyone on the path reads it. The server
therefore refuses to listen on a non-loopback address without TLS unless told
``plain_http=True`` (``--plain-http``); give it the read-only token then, never the
read-write one. Without tokens (``--no-auth``) it listens on loopback addresses only.

A value is fetched whole from the store and the asked range cut from it: a data chunk of the
haar view is one decoded field, which ecCodes decodes whole anyway, and the 206 reply needs
the value's length.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import ipaddress
import json
import os
import signal
import socket
import socketserver
import ssl
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from email.utils import formatdate
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype

from ._errors import BadRequestError, Error, MissingError, StorageError

__all__ = ["RangeNotSatisfiable", "ZarrHTTPServer", "load_tokens", "main", "parse_range", "parse_refresh", "serve"]

#: The environment variable ``haar serve`` reads its read-write token from.
TOKEN_ENV = "HAAR_TOKEN"
#: Seconds a connection may stay silent (between requests, or in a TLS handshake) before it is
#: closed: a client that opens connections and sends nothing cannot hold threads for ever.
IDLE_TIMEOUT = 60.0
#: Connections served at once (one thread each), as ``haar serve --max-connections``'s default;
#: one more is answered 503 and closed, so idle or slow peers cannot take every thread.
MAX_CONNECTIONS = 1024
#: Seconds between two checks of the store for new fields (``--refresh``'s default): a
#: metadata request sooner than that after the last check is served the layout as it is.
REFRESH = 2.0


class RangeNotSatisfiable(BadRequestError):
    """A ``Range`` that starts past the end of the value (HTTP 416)."""


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The half-open byte range ``[start, stop)`` a ``Range`` header asks of a value of `size`
    bytes, or None to send the whole value.

    One range of ``bytes=A-B`` (inclusive, B clipped to the end), ``bytes=A-`` or
    ``bytes=-N`` (the last N bytes). None for no header, a header that does not parse or a
    unit other than bytes (RFC 9110 §14.2: a server ignores what it does not understand) and
    for several ranges (served whole, as RFC 9110 allows, instead of a multipart reply).

    Raises
    ------
    RangeNotSatisfiable
        The range starts at or past `size` (or asks the last 0 bytes).
    """
    if header is None:
        return None
    unit, _, spec = header.strip().partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash or not (first.isdigit() or last.isdigit()) or (first and not first.isdigit()) or (last and not last.isdigit()):
        return None
    if not first:  # suffix: the last N bytes
        n = int(last)
        if n == 0 or size == 0:
            raise RangeNotSatisfiable(f"range {header!r}: the value has {size} bytes")
        return max(0, size - n), size
    start = int(first)
    stop = size if not last else min(size, int(last) + 1)
    if last and int(last) < start:
        return None  # B < A: syntactically invalid, ignored
    if start >= size:
        raise RangeNotSatisfiable(f"range {header!r} starts past the end: the value has {size} bytes")
    return start, stop


def parse_refresh(text: str) -> float | None:
    """``--refresh``'s value: seconds (``0``: check at every metadata request), or None for
    ``never`` (serve the layout listed at start, as a snapshot).

    Raises
    ------
    BadRequestError
        Neither ``never`` nor a finite number of seconds at least 0.
    """
    if text.strip().lower() == "never":
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise BadRequestError(f"refresh {text!r}: give seconds (0 or more) or 'never'")
    return seconds


def load_tokens(token_file: str | os.PathLike[str] | None = None, read_token_file: str | os.PathLike[str] | None = None) -> list[str]:
    """The tokens ``haar serve`` would accept with the same options: the read-write token from
    `token_file` (else ``$HAAR_TOKEN``, if set) and the read-only token from `read_token_file`.

    Each file's content is the token, trimmed. Returns an empty list when neither is given and
    ``$HAAR_TOKEN`` is unset.

    Raises
    ------
    BadRequestError
        A token is empty (it would let anyone in), naming the file or the variable.
    StorageError
        A token file cannot be read, naming it.
    """
    tokens = []
    if token_file is not None:
        tokens.append(_read_token(Path(token_file)))
    elif (env := os.environ.get(TOKEN_ENV)) is not None:
        if not env.strip():
            raise BadRequestError(f"${TOKEN_ENV} is empty: an empty token would let anyone in")
        tokens.append(env.strip())
    if read_token_file is not None:
        tokens.append(_read_token(Path(read_token_file)))
    return tokens


def _read_token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as e:
        raise StorageError(f"cannot read token file {path}: {e.strerror or e}") from e
    if not token:
        raise BadRequestError(f"token file {path} is empty: an empty token would let anyone in")
    return token


class _Tokens:
    """Accepted tokens, kept as SHA-256 digests: a check costs the same whatever it is given."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self._digests = [hashlib.sha256(t.encode()).digest() for t in tokens]

    def accepts(self, authorization: str | None) -> bool:
        scheme, _, given = (authorization or "").strip().partition(" ")
        if scheme.lower() != "bearer":
            return False
        digest = hashlib.sha256(given.strip().encode()).digest()
        ok = False
        for d in self._digests:  # every token compared, not stopping at a match
            ok |= hmac.compare_digest(digest, d)
        return ok


async def _get(store: Store, key: str) -> memoryview | None:
    """The bytes of `key`, as a view of the store's buffer (a decoded field is not copied)."""
    buf = await store.get(key, default_buffer_prototype())
    if buf is None:
        return None
    data: Any = np.ascontiguousarray(buf.as_numpy_array()).reshape(-1).view(np.uint8)
    return memoryview(data)


async def _consolidate(store: Store) -> bytes:
    await store._ensure_open()
    root = await _get(store, "zarr.json")
    if root is None:
        raise MissingError("the store has no zarr.json at its root: not a Zarr v3 hierarchy")
    doc = json.loads(bytes(root))
    if doc.get("zarr_format") != 3 or doc.get("node_type") != "group":
        raise BadRequestError("the store's root zarr.json is not a Zarr v3 group")
    nodes: dict[str, Any] = {}

    async def walk(prefix: str) -> None:
        children = [c async for c in store.list_dir(prefix)]
        for child in sorted(set(children)):
            if child == "zarr.json":
                continue
            path = f"{prefix}/{child}" if prefix else child
            meta = await _get(store, f"{path}/zarr.json")
            if meta is None:
                continue  # a directory of chunks (an array's "c"), not a node
            nodes[path] = json.loads(bytes(meta))
            if nodes[path].get("node_type") == "group":
                await walk(path)

    await walk("")
    doc["consolidated_metadata"] = {"kind": "inline", "must_understand": False, "metadata": nodes}
    return json.dumps(doc).encode()


def _etag(value: bytes | memoryview) -> str:
    return '"' + hashlib.sha256(value).hexdigest()[:32] + '"'


def _shrunk(old: bytes, new: bytes) -> list[str]:
    """How the hierarchy of consolidated document `new` fails to extend `old`'s, so that a
    chunk key a client of `old` knows may now mean other data: an array gone, or its data
    type, chunks or dimensions changed, or its shape smaller along a dimension."""
    before = json.loads(old)["consolidated_metadata"]["metadata"]
    after = json.loads(new)["consolidated_metadata"]["metadata"]
    problems = []
    for path, meta in before.items():
        if meta.get("node_type") != "array":
            continue
        now = after.get(path)
        if now is None:
            problems.append(f"array {path} is gone")
            continue
        for field in ("data_type", "chunk_grid", "chunk_key_encoding", "dimension_names", "codecs"):
            if now.get(field) != meta.get(field):
                problems.append(f"array {path}: {field} {meta.get(field)} is now {now.get(field)}")
        old_shape, new_shape = meta.get("shape", []), now.get("shape", [])
        if len(old_shape) != len(new_shape) or any(n < o for o, n in zip(old_shape, new_shape)):
            problems.append(f"array {path}: shape {old_shape} is now {new_shape}")
    return problems


@dataclass(frozen=True)
class _Layout:
    """What the server serves, swapped whole when a refresh changes it: the store, its
    consolidated root document, that document's tag and when the layout last changed."""

    store: Store
    root: bytes
    etag: str
    modified: float  # seconds since the epoch


class ZarrHTTPServer(ThreadingHTTPServer):
    """An HTTP server of one read-only Zarr store; made by :func:`serve`, which documents it.

    One thread per connection, and one event loop per connection on that thread, which runs
    the store's coroutines: a read costs no hop to a shared loop's thread (measured: such a
    hop added 1.4 ms to the view's own 2.8 ms for a 59 kB chunk, on 2 loaded cores).
    """

    daemon_threads = True
    # Many clients (dask workers) connect at once: a deeper backlog than socketserver's 5.
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        store: Store,
        tokens: Sequence[str] | None,
        tls: ssl.SSLContext | None,
        log: bool,
        max_connections: int = MAX_CONNECTIONS,
        refresh: float | None = None,
    ) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        super().__init__(address, _Handler)
        self.tokens = _Tokens(tokens) if tokens is not None else None
        self.tls = tls is not None
        self.log = log
        self._slots = threading.BoundedSemaphore(max_connections)
        #: Seconds between checks of the store for new fields; None: never (a snapshot).
        self.refresh = refresh
        #: What is served (:func:`serve` consolidates it before the first request).
        self.layout = _Layout(store, b"", _etag(b""), time.time())
        self._checked = time.monotonic()
        self._refreshing = threading.Lock()
        self._refresh_error = ""
        if tls is not None:
            # Handshakes happen in each connection's thread (on its first read, under its
            # timeout), not in the accepting thread, which a silent peer would otherwise stall.
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def server_bind(self) -> None:
        """Bind without HTTPServer's reverse DNS lookup of the address (``getfqdn``), which
        can take seconds on a host without a resolver."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread of its own if a slot is free; else answer 503
        (plain HTTP; a TLS connection is closed, its handshake not begun) and close it."""
        if not self._slots.acquire(blocking=False):
            if not self.tls:
                body = b"503: too many connections; retry later\n"
                try:
                    request.settimeout(1.0)
                    request.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n"
                        b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
                    )
                except OSError:
                    pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection, then give its slot back."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A peer that fails its TLS handshake, resets or times out costs one log line (with
        ``log``), not a traceback; anything else is socketserver's traceback on stderr."""
        if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError)):
            if self.log:
                print(f"haar.zarr_http: {client_address}: {sys.exc_info()[1]}", file=sys.stderr)
            return
        super().handle_error(request, client_address)

    @property
    def store(self) -> Store:
        """zarr.abc.store.Store: the store served now (a refresh may replace it)."""
        return self.layout.store

    @property
    def root(self) -> bytes:
        """bytes: the root group's zarr.json with the consolidated metadata, as served now."""
        return self.layout.root

    def consolidate(self, store: Store, loop: asyncio.AbstractEventLoop | None = None) -> _Layout:
        """Consolidate `store`'s metadata and serve it from now on; returns what is served.

        The tag and time of the previous layout are kept when the document is the same."""
        root = (loop.run_until_complete if loop is not None else asyncio.run)(_consolidate(store))
        old = self.layout
        if root == old.root:
            self.layout = _Layout(store, old.root, old.etag, old.modified)  # fields may have come into known chunks
            return self.layout
        if old.root:
            problems = _shrunk(old.root, root)
            for problem in problems:
                print(f"haar.zarr_http: the layout shrank, old chunk keys may now mean other data: {problem}", file=sys.stderr)
            if self.log and not problems:
                print("haar.zarr_http: the layout grew (a new ETag)", file=sys.stderr)
        self.layout = _Layout(store, root, _etag(root), time.time())
        return self.layout

    def current(self, loop: asyncio.AbstractEventLoop) -> _Layout:
        """The layout to answer a metadata request with: refreshed first if ``refresh``
        seconds passed since the last check. One thread refreshes at a time; the others wait
        for it and serve its result. A failure is logged (once while it repeats) and the
        previous layout kept."""
        if self.refresh is None or time.monotonic() - self._checked < self.refresh:
            return self.layout
        with self._refreshing:
            if time.monotonic() - self._checked < self.refresh:
                return self.layout  # refreshed by another thread while this one waited
            try:
                old = self.layout
                refreshed = getattr(old.store, "refreshed", None)
                store = refreshed() if callable(refreshed) else old.store
                if store is not old.store or not callable(refreshed):
                    self.consolidate(store, loop)
                self._refresh_error = ""
            except Exception as e:  # the previous layout stays served
                message = f"{type(e).__name__}: {e}"
                if message != self._refresh_error:
                    print(f"haar.zarr_http: cannot refresh, serving the previous layout: {message}", file=sys.stderr)
                self._refresh_error = message
            finally:
                self._checked = time.monotonic()
        return self.layout

    @property
    def address(self) -> str:
        """str: the bound ``HOST:PORT`` (``[HOST]:PORT`` for IPv6), as given to clients."""
        host, port = self.socket.getsockname()[:2]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def url(self) -> str:
        """str: the server's base URL, ``http://HOST:PORT`` (``https`` with TLS)."""
        return f"{'https' if self.tls else 'http'}://{self.address}"


class _Handler(BaseHTTPRequestHandler):
    server: ZarrHTTPServer
    protocol_version = "HTTP/1.1"  # keep-alive: zarr reads many chunks over few connections
    server_version = "haar-zarr"
    timeout = IDLE_TIMEOUT
    # TCP_NODELAY, as haar serve: headers and body are two writes, and Nagle would hold the
    # body's last segment for the client's delayed ACK (measured: 47.5 ms a 59 kB chunk over
    # one http.client connection, 6.1 ms with it off).
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self._loop = asyncio.new_event_loop()

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_default_executor())
            self._loop.close()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        if self.server.log:
            super().log_message(format, *args)

    def _reply(self, status: int, body: bytes = b"", headers: Sequence[tuple[str, str]] = (), close: bool = False) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        if body or status >= 400:
            self.send_header("Content-Type", "text/plain; charset=utf-8")
        if status != 304:  # a 304's Content-Length would be the unsent value's
            self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authorised(self) -> bool:
        tokens = self.server.tokens
        if tokens is None or tokens.accepts(self.headers.get("Authorization")):
            return True
        # The body (if any) is not read: close the connection rather than parse it as a request.
        self._reply(
            401,
            b"401: give a token haar serve accepts, as the header 'Authorization: Bearer <token>'\n",
            [("WWW-Authenticate", 'Bearer realm="haar"')],
            close=True,
        )
        return False

    def _refuse_write(self) -> None:
        if self._authorised():
            self._reply(
                405,
                f"405: {self.command} refused: this Zarr store is read-only (GET and HEAD only)\n".encode(),
                [("Allow", "GET, HEAD")],
                close=True,
            )

    do_PUT = do_POST = do_DELETE = do_PATCH = _refuse_write

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        if not self._authorised():
            return
        key = self._key()
        if key is None:
            self._reply(404, f"404: {self.path!r} is not a Zarr key\n".encode())
            return
        metadata = key == "zarr.json" or key.endswith("/zarr.json")
        try:
            layout = self.server.current(self._loop) if metadata else self.server.layout
            value = memoryview(layout.root) if key == "zarr.json" else self._loop.run_until_complete(_get(layout.store, key))
        except Exception as e:  # any failure is this request's 500, never a dropped connection
            self.log_error("cannot read %r: %s: %s", key, type(e).__name__, e)
            self._reply(500, f"500: cannot read {key!r}: {e}\n".encode())
            return
        if value is None:
            self._reply(404, f"404: no key {key!r} (for a data chunk: no such field; zarr fills it)\n".encode())
            return
        # A field may come into a chunk (or be archived again) at any time: clients revalidate.
        cache = [("Cache-Control", "no-cache")]
        if metadata:
            tag = layout.etag if key == "zarr.json" else _etag(value)
            cache += [("ETag", tag), ("Last-Modified", formatdate(layout.modified, usegmt=True))]
            asked = self.headers.get("If-None-Match")
            if asked is not None and any(t.strip().removeprefix("W/") in (tag, "*") for t in asked.split(",")):
                self._reply(304, headers=cache)
                return
        size = len(value)
        try:
            part = parse_range(self.headers.get("Range"), size)
        except RangeNotSatisfiable as e:
            self._reply(416, f"416: {e}\n".encode(), [("Content-Range", f"bytes */{size}")])
            return
        kind = "application/json" if key.endswith("zarr.json") else "application/octet-stream"
        start, stop = part if part is not None else (0, size)
        self.send_response(200 if part is None else 206)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(stop - start))
        self.send_header("Accept-Ranges", "bytes")
        for name, header in cache:
            self.send_header(name, header)
        if part is not None:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{size}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(value[start:stop])  # a slice of the decoded values, not a copy

    do_HEAD = do_GET

    def _key(self) -> str | None:
        """The Zarr key of the request's path; None for a path no key can have."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).strip("/")
        parts = path.split("/")
        if not path or any(p in ("", ".", "..") for p in parts):
            return None
        return path


def _is_loopback(host: str) -> bool:
    try:
        infos = socket.getaddrinfo(host, None)
    except socket.gaierror:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(i[4][0]).split("%")[0]).is_loopback for i in infos)


def serve(
    store: Store,
    listen: str = "127.0.0.1:0",
    *,
    tokens: Sequence[str] | None,
    tls_cert: str | os.PathLike[str] | None = None,
    tls_key: str | os.PathLike[str] | None = None,
    plain_http: bool = False,
    log: bool = False,
    max_connections: int = MAX_CONNECTIONS,
    refresh: float | None = REFRESH,
) -> ZarrHTTPServer:
    """Bind an HTTP server of a read-only Zarr store; run it with ``serve_forever()``.

    Parameters
    ----------
    store : zarr.abc.store.Store
        What to serve, e.g. :func:`haar.zarr.store` of a request. Only read.
    listen : str
        ``HOST:PORT`` (``[::1]:PORT`` for IPv6); port 0 picks a free one (see ``url``).
    tokens : sequence of str or None
        Accepted bearer tokens (:func:`load_tokens` reads those ``haar serve`` accepts).
        None serves without authentication: refused unless `listen` is a loopback address.
    tls_cert, tls_key : path-like, optional
        TLS certificate chain and private key (PEM), as ``haar serve --tls-cert/--tls-key``;
        TLS 1.3 only, as haar serve.
    plain_http : bool
        Allow plain HTTP on a non-loopback address, where tokens cross the network in clear.
    log : bool
        Log each request on stderr (errors are logged always).
    max_connections : int
        Connections served at once, one thread each; more are answered 503 and closed.
    refresh : float or None
        Follow the store: a metadata request at least this many seconds after the last check
        serves the store as it is now (``store.refreshed()``, see the module's docstring);
        0 checks at every metadata request. None serves the layout consolidated at start
        (a snapshot, the behaviour before refreshing existed).

    Returns
    -------
    ZarrHTTPServer
        Bound and listening, its consolidated metadata built.

    Raises
    ------
    BadRequestError
        No tokens off loopback, an empty token, plain HTTP off loopback without `plain_http`,
        only one of `tls_cert` and `tls_key`, a negative `refresh`, or a store that is not a
        Zarr v3 group (or, for the haar view, params on two grids).
    StorageError
        The address cannot be bound, or the certificate or key cannot be read.
    """
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit():
        raise BadRequestError(f"listen {listen!r}: give HOST:PORT, e.g. 127.0.0.1:7080 ([::1]:7080 for IPv6)")
    loopback = _is_loopback(host)
    if tokens is None and not loopback:
        raise BadRequestError(
            f"refusing to serve {listen} without authentication: only a loopback address may go "
            "without tokens; give --token-file/--read-token-file or set $HAAR_TOKEN"
        )
    if tokens is not None and (not tokens or any(not t.strip() for t in tokens)):
        raise BadRequestError("no token, or an empty one: give the tokens haar serve accepts, or serve without auth on loopback")
    if max_connections < 1:
        raise BadRequestError(f"max_connections {max_connections}: give at least 1")
    if refresh is not None and not 0 <= refresh < float("inf"):
        raise BadRequestError(f"refresh {refresh}: give seconds (0 or more), or None never to refresh")
    if (tls_cert is None) != (tls_key is None):
        raise BadRequestError("TLS needs both a certificate (--tls-cert) and its key (--tls-key)")
    tls = None
    if tls_cert is not None and tls_key is not None:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.minimum_version = ssl.TLSVersion.TLSv1_3
        try:
            tls.load_cert_chain(os.fspath(tls_cert), os.fspath(tls_key))
        except (OSError, ssl.SSLError) as e:
            raise StorageError(f"cannot load TLS certificate {os.fspath(tls_cert)} and key {os.fspath(tls_key)}: {e}") from e
    elif not loopback and not plain_http:
        raise BadRequestError(
            f"refusing plain HTTP on {listen}: bearer tokens would cross the network in clear. "
            "Give --tls-cert and --tls-key, or --plain-http with a read-only token (--read-token-file)"
        )
    try:
        server = ZarrHTTPServer((host, int(port)), store, tokens, tls, log, max_connections, refresh)
    except OSError as e:
        raise StorageError(f"cannot listen on {listen}: {e.strerror or e}") from e
    try:
        # Before the first request: a view whose params are on two grids fails here, once,
        # naming them, rather than in every client.
        # On a thread of its own: the caller may be inside an event loop (a notebook).
        with ThreadPoolExecutor(1) as once:
            once.submit(server.consolidate, store).result()
    except BaseException:
        server.server_close()
        raise
    return server


def _refresh_arg(text: str) -> float | None:
    try:
        return parse_refresh(text)
    except BadRequestError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m haar.zarr_http",
        description="Serve the Zarr v3 view of a request (haar.zarr.store) read-only over HTTP, "
        "authenticated with the tokens haar serve accepts. Prints 'listening on HOST:PORT' first; "
        "SIGINT or SIGTERM stops it (exit 0).",
    )
    p.add_argument("--request", required=True, help="the fields, as a MARS string: 'class=ea,levelist=500'")
    p.add_argument("--dims", help="keys that become dimensions, comma-separated (default: every key with several values)")
    p.add_argument("--config", help="the store's configuration: a YAML file or YAML/JSON text (default: $HAAR_CONFIG, else haar's default store)")
    p.add_argument("--dtype", choices=["float64", "float32"], default="float64", help="the arrays' data type (default float64: ecCodes' values bit for bit)")
    p.add_argument("--listen", default="127.0.0.1:7080", metavar="ADDR", help="HOST:PORT (port 0 picks a free one; default 127.0.0.1:7080)")
    p.add_argument("--token-file", metavar="FILE", help="the read-write token haar serve takes (default: $HAAR_TOKEN)")
    p.add_argument("--read-token-file", metavar="FILE", help="the read-only token haar serve takes")
    p.add_argument("--no-auth", action="store_true", help="serve without tokens (loopback addresses only)")
    p.add_argument("--tls-cert", metavar="FILE", help="TLS certificate chain (PEM): serve HTTPS (TLS 1.3)")
    p.add_argument("--tls-key", metavar="FILE", help="TLS private key (PEM)")
    p.add_argument("--plain-http", action="store_true", help="allow plain HTTP off loopback (tokens travel in clear: use a read-only token)")
    p.add_argument("--max-connections", type=int, default=MAX_CONNECTIONS, metavar="N",
                   help=f"connections served at once, one thread each; more get 503 (default {MAX_CONNECTIONS})")
    p.add_argument("--refresh", type=_refresh_arg, default=REFRESH, metavar="SECONDS|never",
                   help=f"follow new fields: a metadata request at least SECONDS after the last check re-lists the "
                   f"request if the store changed (0: every metadata request; 'never': serve the listing made at "
                   f"start; default {REFRESH:g})")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request on stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """The command line: parse, open the view, :func:`serve` it until SIGINT or SIGTERM.

    Exit codes as haar's: 0 stopped by a signal, 1 bad usage or request, 2 no field matches,
    3 storage or network.
    """
    args = _parser().parse_args(argv)
    from . import zarr as haar_zarr  # needs zarr 3, as this module does

    try:
        tokens = None if args.no_auth else load_tokens(args.token_file, args.read_token_file)
        if tokens is not None and not tokens:
            raise BadRequestError("every request is authenticated: set $HAAR_TOKEN or give --token-file (and/or --read-token-file), or --no-auth on loopback")
        if args.no_auth and (args.token_file or args.read_token_file):
            raise BadRequestError("--no-auth with a token file: choose one")
        dims = [d.strip() for d in args.dims.split(",") if d.strip()] if args.dims is not None else None
        view = haar_zarr.store(args.request, dims=dims, config=args.config, dtype=args.dtype)
        server = serve(
            view, args.listen, tokens=tokens, tls_cert=args.tls_cert, tls_key=args.tls_key,
            plain_http=args.plain_http, log=args.verbose, max_connections=args.max_connections,
            refresh=args.refresh,
        )
    except Error as e:
        print(f"haar.zarr_http: {e}", file=sys.stderr)
        return 2 if isinstance(e, MissingError) else 3 if isinstance(e, StorageError) else 1
    print(f"listening on {server.address}", flush=True)

    def stop(signum: int, frame: object) -> None:
        # shutdown() waits for serve_forever to return: call it from another thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
