"""A small HTTP/1.1 client for one server: pools of keep-alive connections on asyncio streams.

Why not aiohttp: the controller talks to one apiserver, sends JSON with a length and
reads JSON back. aiohttp's general machinery around each request (URL objects, header
multidicts, tracing signals, cookies, payload writers) cost about as much CPU as the TLS
under it, and importing it costs some 13 MB of resident memory, a quarter of an idle
controller. What the apiserver needs is small, and all of it is here:

- requests with a ``Content-Length`` body; responses framed by ``Content-Length``,
  ``Transfer-Encoding: chunked`` (watches) or the connection's close;
- keep-alive reuse, a bound on connections open at once, and one retry on a fresh
  connection when a reused one turns out to have been closed by the server, for
  methods that may be repeated (a POST is never sent twice);
- TLS with a server name other than the host (kubeconfig ``tls-server-name``);
- an ``http://`` or ``https://`` proxy: CONNECT for an https server, absolute-form
  requests for a plain-http one, ``user:password@`` as Proxy-Authorization.

Contract:
- ``Pool.request`` returns ``(status, body)`` for any status; ``Pool.stream`` yields a
  ``Stream`` whose body is read as lines (a watch) or whole.
- Every transport failure, malformed answer and timeout raises an ``OSError``
  (``TimeoutError`` for timeouts), so a caller catches one type.
- A connection is returned to its pool only after its response was read to the end;
  one abandoned mid-response (cancelled, timed out, broken) is aborted instead.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import anyio

#: The stream buffer: a read returns up to this much at once, and a response head may
#: not exceed it.
READ_LIMIT = 2**21

#: Methods sent again on a fresh connection when a reused one was found closed
#: (RFC 9110 9.2.2 idempotent methods).
REPEATABLE = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class ProtocolError(OSError):
    """The server's answer is not HTTP/1.x as we read it, or the connection ended early."""


class _Stale(OSError):
    """A reused connection failed before any byte of the answer: the server had closed
    it while idle, so the request may be sent again on a fresh one."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    #: a path prefix the server is mounted under (some proxies put clusters there)
    base_path: str = ""

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{url!r}: not an http:// or https:// address")
        port = parts.port or (443 if scheme == "https" else 80)
        return cls(scheme, parts.hostname, port, parts.path.rstrip("/"))

    @property
    def authority(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Proxy:
    endpoint: Endpoint
    authorization: str | None = None

    @classmethod
    def parse(cls, url: str) -> Proxy:
        parts = urlsplit(url)
        auth = None
        if parts.username is not None:
            pair = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
            auth = "Basic " + base64.b64encode(pair.encode()).decode()
        return cls(Endpoint.parse(url), auth)


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def open(self) -> bool:
        return not (self.reader.at_eof() or self.writer.is_closing())

    def abort(self) -> None:
        self.writer.transport.abort()


@dataclass(slots=True)
class _Head:
    status: int
    length: int | None
    chunked: bool
    keep_alive: bool


def _check_header(name: str, value: str) -> None:
    # a value carrying a line break would let it write headers (or a request) of its own
    if "\r" in value or "\n" in value or "\r" in name or "\n" in name or ":" in name:
        raise ValueError(f"header {name!r}: a line break or colon where none may be")


def _parse_head(raw: bytes, method: str) -> _Head:
    lines = raw[:-4].split(b"\r\n")
    status_line = lines[0].split(b" ", 2)
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/1."):
        raise ProtocolError(f"not an HTTP/1.x answer: {lines[0][:80]!r}")
    try:
        status = int(status_line[1])
    except ValueError:
        raise ProtocolError(f"bad status line: {lines[0][:80]!r}") from None
    length: int | None = None
    chunked = False
    keep_alive = status_line[0] != b"HTTP/1.0"
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                raise ProtocolError(f"bad Content-Length: {value[:40]!r}") from None
        elif name == b"transfer-encoding":
            chunked = b"chunked" in value.lower()
        elif name == b"connection":
            token = value.strip().lower()
            if token == b"close":
                keep_alive = False
            elif token == b"keep-alive":
                keep_alive = True
    if method == "HEAD" or status in (204, 304):
        length, chunked = 0, False
    elif chunked:
        length = None  # RFC 9112 6.3: chunked framing wins over a length
    if length is None and not chunked:
        keep_alive = False  # the body ends when the server closes
    return _Head(status, length, chunked, keep_alive)


class _Expiry:
    """A request's deadline, kept by aborting its connection when it passes: one timer
    handle per request. A cancel scope per request (anyio.fail_at) cost about 4% of the
    controller's CPU at 20 QPS. Connecting, which is rare, has a cancel scope of its own
    that ends no later."""

    __slots__ = ("_conn", "_handle", "deadline", "fired")

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.fired = False
        self._conn: _Connection | None = None
        self._handle = asyncio.get_running_loop().call_at(deadline, self._fire)

    def watch(self, conn: _Connection) -> None:
        self._conn = conn
        if self.fired:  # it passed while the connection was being made
            conn.abort()

    def _fire(self) -> None:
        self.fired = True
        if self._conn is not None:
            self._conn.abort()

    def cancel(self) -> None:
        self._handle.cancel()


class Stream:
    """One response whose body is read as it comes. ``status`` is known on entry."""

    def __init__(self, conn: _Connection, head: _Head, read_timeout: float | None) -> None:
        self.status = head.status
        self._conn = conn
        self._head = head
        self._done = head.length == 0
        self._read_timeout = read_timeout
        self._timed_out = False
        self._timer: asyncio.TimerHandle | None = None
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()
        if read_timeout is not None:
            self._timer = self._loop.call_later(read_timeout, self._watchdog)

    @property
    def complete(self) -> bool:
        """The whole body was read: the connection may carry another request."""
        return self._done

    def _watchdog(self) -> None:
        # One timer per quiet period instead of a deadline per read: a watch may bring
        # hundreds of events a second, and each read only notes the time it was served.
        assert self._read_timeout is not None
        if self._done:
            return
        due = self._last + self._read_timeout
        if self._loop.time() >= due:
            self._timed_out = True
            self._conn.abort()
        else:
            self._timer = self._loop.call_at(due, self._watchdog)

    def close_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _failure(self, exc: BaseException) -> OSError:
        if self._timed_out:
            return TimeoutError(f"no data for {self._read_timeout:g} s")
        if isinstance(exc, OSError):
            return exc
        return ProtocolError(f"{type(exc).__name__}: {exc}")

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body in the pieces it arrives in (chunks, or buffer-fulls)."""
        reader = self._conn.reader
        head = self._head
        try:
            if head.chunked:
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    try:
                        size = int(size_line.split(b";", 1)[0], 16)
                    except ValueError:
                        raise ProtocolError(f"bad chunk size: {size_line[:40]!r}") from None
                    if size == 0:
                        while await reader.readuntil(b"\r\n") != b"\r\n":
                            pass  # trailer fields: nothing we use
                        self._done = True
                        return
                    data = await reader.readexactly(size + 2)
                    self._last = self._loop.time()
                    yield data[:-2]
            elif head.length is not None:
                remaining = head.length
                while remaining > 0:
                    data = await reader.read(min(remaining, READ_LIMIT))
                    if not data:
                        raise ProtocolError(f"body ended {remaining} bytes short")
                    self._last = self._loop.time()
                    remaining -= len(data)
                    yield data
                self._done = True
            else:
                while data := await reader.read(READ_LIMIT):
                    self._last = self._loop.time()
                    yield data
                self._done = True
        except (OSError, EOFError, asyncio.LimitOverrunError, ValueError) as exc:
            raise self._failure(exc) from exc

    async def read(self) -> bytes:
        head = self._head
        if head.length is not None and not head.chunked:
            if head.length == 0:
                return b""
            try:
                data = await self._conn.reader.readexactly(head.length)
            except (OSError, EOFError) as exc:
                raise self._failure(exc) from exc
            self._done = True
            return data
        return b"".join([c async for c in self.chunks()])

    async def lines(self, max_line: int) -> AsyncIterator[bytes]:
        """The body split at newlines, each line with its newline (the last may lack it)."""
        pending = b""
        async for chunk in self.chunks():
            if pending:
                chunk = pending + chunk
                pending = b""
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                yield chunk if start == 0 and end == len(chunk) - 1 else chunk[start : end + 1]
                start = end + 1
            if start < len(chunk):
                pending = chunk[start:]
                if len(pending) > max_line:
                    raise ProtocolError(f"a line longer than {max_line} bytes")
        if pending:
            yield pending


class Pool:
    """Connections to one server. ``limit`` bounds how many are open at once (0: none)."""

    def __init__(
        self,
        endpoint: Endpoint,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        proxy: Proxy | None = None,
        limit: int = 0,
        connect_timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if endpoint.scheme == "https" and ssl_context is None:
            raise ValueError("an https server needs a TLS context")
        self.endpoint = endpoint
        self._ssl = ssl_context if endpoint.scheme == "https" else None
        self._server_hostname = server_hostname or endpoint.host
        self._proxy = proxy
        self._connect_timeout = connect_timeout
        self._slots = anyio.Semaphore(limit) if limit > 0 else None
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._closed = False
        fixed = {"Host": endpoint.authority, **(headers or {})}
        if proxy is not None and self._ssl is None and proxy.authorization:
            fixed["Proxy-Authorization"] = proxy.authorization
        for name, value in fixed.items():
            _check_header(name, value)
        self._fixed_headers = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        # a plain-http server behind a proxy is addressed in absolute form (RFC 9112 3.2.2)
        self._target_prefix = (
            f"http://{endpoint.authority}{endpoint.base_path}"
            if proxy is not None and self._ssl is None
            else endpoint.base_path
        )

    @property
    def closed(self) -> bool:
        return self._closed

    async def close(self) -> None:
        self._closed = True
        for conn in list(self._open):
            conn.abort()
        self._open.clear()
        self._idle.clear()

    async def _connect(self, deadline: float | None) -> _Connection:
        limit = asyncio.get_running_loop().time() + self._connect_timeout
        with anyio.fail_at(limit if deadline is None else min(limit, deadline)):
            proxy = self._proxy
            if proxy is None:
                reader, writer = await asyncio.open_connection(
                    self.endpoint.host,
                    self.endpoint.port,
                    ssl=self._ssl,
                    server_hostname=self._server_hostname if self._ssl else None,
                    limit=READ_LIMIT,
                )
                return _Connection(reader, writer)
            p = proxy.endpoint
            reader, writer = await asyncio.open_connection(
                p.host,
                p.port,
                ssl=ssl.create_default_context() if p.scheme == "https" else None,
                limit=READ_LIMIT,
            )
            conn = _Connection(reader, writer)
            try:
                if self._ssl is not None:
                    await self._tunnel(conn, proxy)
                    await writer.start_tls(self._ssl, server_hostname=self._server_hostname)
            except BaseException:
                conn.abort()
                raise
            return conn

    async def _tunnel(self, conn: _Connection, proxy: Proxy) -> None:
        target = self.endpoint.authority
        head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
        if proxy.authorization:
            head += f"Proxy-Authorization: {proxy.authorization}\r\n"
        conn.writer.write((head + "\r\n").encode("latin-1"))
        try:
            raw = await conn.reader.readuntil(b"\r\n\r\n")
        except (EOFError, asyncio.LimitOverrunError) as exc:
            raise ProtocolError(f"proxy {proxy.endpoint.authority}: {exc}") from exc
        answer = _parse_head(raw, "CONNECT")
        if answer.status != 200:
            raise ProtocolError(
                f"proxy {proxy.endpoint.authority} refused CONNECT {target}: {answer.status}"
            )

    async def _acquire(self, deadline: float | None) -> _Connection:
        if self._closed:
            raise ProtocolError("the client is closed")
        while self._idle:
            conn = self._idle.pop()
            if conn.open():
                conn.reused = True
                return conn
            self._discard(conn)
        conn = await self._connect(deadline)
        self._open.add(conn)
        return conn

    def _release(self, conn: _Connection, reusable: bool) -> None:
        if reusable and not self._closed and conn.open():
            self._idle.append(conn)
        else:
            self._discard(conn)

    def _discard(self, conn: _Connection) -> None:
        self._open.discard(conn)
        conn.abort()

    async def _send(
        self,
        conn: _Connection,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
    ) -> _Head:
        lines = [f"{method} {self._target_prefix}{target} HTTP/1.1\r\n", self._fixed_headers]
        for name, value in headers.items():
            _check_header(name, value)
            lines.append(f"{name}: {value}\r\n")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}\r\n")
        lines.append("\r\n")
        data = "".join(lines).encode("latin-1")
        try:
            conn.writer.write(data + body if body else data)
            await conn.writer.drain()
            while True:
                raw = await conn.reader.readuntil(b"\r\n\r\n")
                head = _parse_head(raw, method)
                if not 100 <= head.status < 200:
                    return head
                # an interim answer (100 Continue, 103 Early Hints): the real one follows
        except asyncio.IncompleteReadError as exc:
            if conn.reused and not exc.partial:
                raise _Stale("the server closed the idle connection") from exc
            raise ProtocolError("the connection closed before an answer") from exc
        except (ConnectionResetError, BrokenPipeError) as exc:
            if conn.reused:
                raise _Stale(str(exc)) from exc
            raise
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError(f"an answer head over {READ_LIMIT} bytes") from exc

    async def _exchange(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        expiry: _Expiry | None = None,
    ) -> tuple[_Connection, _Head]:
        """Send the request on a pooled connection (again on a fresh one if the pooled
        one was stale and the method may be repeated); the caller owns the connection."""
        while True:
            conn = await self._acquire(expiry.deadline if expiry else None)
            if expiry is not None:
                expiry.watch(conn)
            try:
                return conn, await self._send(conn, method, target, headers, body)
            except _Stale:
                self._discard(conn)
                if method not in REPEATABLE or (expiry is not None and expiry.fired):
                    raise
            except BaseException:
                self._discard(conn)
                raise

    async def request(
        self,
        method: str,
        target: str,
        *,
        headers: Mapping[str, str],
        body: bytes | None = None,
        deadline: float | None = None,
    ) -> tuple[int, bytes]:
        """One whole exchange, over by ``deadline`` (the event loop's clock) or failed
        with TimeoutError; waiting for a free connection counts too."""
        if self._slots is None:
            return await self._request(method, target, headers, body, deadline)
        await self._take_slot(deadline)
        try:
            return await self._request(method, target, headers, body, deadline)
        finally:
            self._slots.release()

    async def _take_slot(self, deadline: float | None) -> None:
        """A connection slot of the pool's bound; a cancel scope only when one must wait."""
        assert self._slots is not None
        try:
            self._slots.acquire_nowait()
        except anyio.WouldBlock:
            if deadline is None:
                await self._slots.acquire()
            else:
                with anyio.fail_at(deadline):
                    await self._slots.acquire()

    async def _request(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: bytes | None,
        deadline: float | None,
    ) -> tuple[int, bytes]:
        expiry = _Expiry(deadline) if deadline is not None else None
        conn: _Connection | None = None
        reusable = False
        try:
            conn, head = await self._exchange(method, target, headers, body, expiry)
            data = await Stream(conn, head, None).read()
            reusable = head.keep_alive
            return head.status, data
        except OSError as exc:
            if expiry is not None and expiry.fired:
                raise TimeoutError("no answer in time") from exc
            raise
        finally:
            if expiry is not None:
                expiry.cancel()
            if conn is not None:
                self._release(conn, reusable)

    @asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        *,
        headers: Mapping[str, str],
        read_timeout: float | None = None,
    ) -> AsyncIterator[Stream]:
        """A response to read as it comes; each read waits at most ``read_timeout``.
        The connection goes back to the pool only if the body was read to its end."""
        if self._slots is not None:
            await self._take_slot(None)
        try:
            with anyio.fail_after(read_timeout):
                conn, head = await self._exchange(method, target, headers, None)
            stream = Stream(conn, head, read_timeout)
            try:
                yield stream
            finally:
                stream.close_timer()
                self._release(conn, head.keep_alive and stream.complete)
        finally:
            if self._slots is not None:
                self._slots.release()
