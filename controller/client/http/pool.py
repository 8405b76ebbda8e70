"""Connections to one server: connecting (TLS, proxy tunnels), keep-alive reuse, and
the bound on how many are open at once.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager

import anyio

from controller.client.http.endpoint import Endpoint, Proxy
from controller.client.http.stream import Stream, _Connection, _Expiry
from controller.client.http.wire import (
    MAX_HEAD,
    READ_LIMIT,
    REPEATABLE,
    ProtocolError,
    _check_header,
    _check_request_line,
    _Head,
    _parse_head,
    _Stale,
)


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
        if self._target_prefix:
            _check_request_line("GET", self._target_prefix)

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
        _check_request_line("CONNECT", target)
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

    def _encode(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> bytes:
        """The request's bytes, checked before any connection is taken for it."""
        _check_request_line(method, target)
        lines = [f"{method} {self._target_prefix}{target} HTTP/1.1\r\n", self._fixed_headers]
        for name, value in headers.items():
            _check_header(name, value)
            lines.append(f"{name}: {value}\r\n")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}\r\n")
        lines.append("\r\n")
        data = "".join(lines).encode("latin-1")
        return data + body if body else data

    async def _send(self, conn: _Connection, method: str, data: bytes) -> _Head:
        try:
            conn.writer.write(data)
            await conn.writer.drain()
            return await _read_head(conn, method)
        except asyncio.IncompleteReadError as exc:
            if conn.reused and not exc.partial:
                raise _Stale("the server closed the idle connection") from exc
            raise ProtocolError("the connection closed before an answer") from exc
        except (ConnectionResetError, BrokenPipeError) as exc:
            if conn.reused:
                raise _Stale(str(exc)) from exc
            raise
        except asyncio.LimitOverrunError as exc:
            raise ProtocolError(f"an answer head over {MAX_HEAD} bytes") from exc

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
        data = self._encode(method, target, headers, body)
        while True:
            conn = await self._acquire(expiry.deadline if expiry else None)
            if expiry is not None:
                expiry.watch(conn)
            try:
                return conn, await self._send(conn, method, data)
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

    async def pipeline(
        self,
        requests: Sequence[tuple[str, str, Mapping[str, str], bytes | None]],
        *,
        deadline: float | None = None,
    ) -> list[tuple[int, bytes] | OSError]:
        """``(method, target, headers, body)`` requests written at once on one connection
        (HTTP/1.1 pipelining, RFC 9112 9.3.2), their answers read in order: one send and
        a few reads for all of them instead of one each. For writes nobody waits for
        (events): an answer that does not come (the connection breaks or closes first,
        or ``deadline`` passes) fails its request and every one after it with an
        ``OSError`` in its place, sent or not, acted on or not, and none is sent again.
        A request we refuse to send raises before anything is sent, as ``request``."""
        if not requests:
            return []
        data = b"".join(self._encode(m, t, h, b) for m, t, h, b in requests)
        if self._slots is not None:
            await self._take_slot(deadline)
        expiry = _Expiry(deadline) if deadline is not None else None
        out: list[tuple[int, bytes] | OSError] = []
        conn: _Connection | None = None
        reusable = False
        try:
            conn = await self._acquire(expiry.deadline if expiry else None)
            if expiry is not None:
                expiry.watch(conn)
            conn.writer.write(data)
            await conn.writer.drain()
            keep_alive = True
            for method, *_ in requests:
                head = await _read_head(conn, method)
                out.append((head.status, await Stream(conn, head, None).read()))
                keep_alive = head.keep_alive
                if not keep_alive:
                    break  # the server answers no more on this connection
            reusable = keep_alive and len(out) == len(requests)
        except (OSError, EOFError, asyncio.LimitOverrunError) as exc:
            failure = _lost(exc, expiry)
            out += [failure] * (len(requests) - len(out))
        finally:
            if expiry is not None:
                expiry.cancel()
            if conn is not None:
                self._release(conn, reusable)
            if self._slots is not None:
                self._slots.release()
        missing = len(requests) - len(out)
        if missing:
            closed = ProtocolError(f"the server closed the connection with {missing} unanswered")
            out += [closed] * missing
        return out

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


async def _read_head(conn: _Connection, method: str) -> _Head:
    """The head of the next final answer on ``conn`` (interim 1xx answers skipped)."""
    while True:
        raw = await conn.reader.readuntil(b"\r\n\r\n")
        head = _parse_head(raw, method)
        if not 100 <= head.status < 200:
            return head
        # an interim answer (100 Continue, 103 Early Hints): the real one follows


def _lost(exc: BaseException, expiry: _Expiry | None) -> OSError:
    """Why a pipelined answer did not come, as the OSError that stands in for it."""
    if expiry is not None and expiry.fired:
        return TimeoutError("no answer in time")
    if isinstance(exc, asyncio.IncompleteReadError):
        return ProtocolError("the connection closed before an answer")
    if isinstance(exc, asyncio.LimitOverrunError):
        return ProtocolError(f"an answer head over {MAX_HEAD} bytes")
    if isinstance(exc, OSError):
        return exc
    return ProtocolError(f"{type(exc).__name__}: {exc}")
