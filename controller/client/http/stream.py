"""A connection, a request's deadline, and one response read off it as it comes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from controller.client.http.wire import (
    _CHUNK_LINE,
    MAX_HEAD,
    READ_LIMIT,
    ProtocolError,
    _check_trailers,
    _forbidden,
    _Head,
)


def _unread(reader: asyncio.StreamReader) -> int:
    # What arrived and nobody has read: StreamReader's buffer (CPython's since 3.4, and
    # uvloop's, which uses the same class). Reading it would take the bytes away.
    buffer: bytearray = reader._buffer  # type: ignore[attr-defined]
    return len(buffer)


class _Connection:
    __slots__ = ("reader", "reused", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.reused = False

    def open(self) -> bool:
        """Fit to carry a request: not closed, and no bytes waiting that no request
        asked for (see the module doc: a desynchronized connection)."""
        return not (self.reader.at_eof() or self.writer.is_closing() or _unread(self.reader))

    def abort(self) -> None:
        self.writer.transport.abort()


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
        if isinstance(exc, asyncio.IncompleteReadError):
            return ProtocolError("the connection closed mid-body")
        if isinstance(exc, OSError):
            return exc
        return ProtocolError(f"{type(exc).__name__}: {exc}")

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body in the pieces it arrives in: chunks, or buffer-fulls, never more
        than ``READ_LIMIT`` bytes at once however large a chunk says it is."""
        reader = self._conn.reader
        head = self._head
        try:
            if head.chunked:
                while True:
                    size_line = await reader.readuntil(b"\r\n")
                    m = _CHUNK_LINE.fullmatch(size_line)
                    if m is None:
                        _forbidden(size_line[:-2], "chunk line")
                        raise ProtocolError(f"bad chunk line: {size_line[:40]!r}")
                    size = int(m[1], 16)
                    if size == 0:
                        await self._trailers()
                        self._done = True
                        return
                    if size <= READ_LIMIT:
                        data = await reader.readexactly(size + 2)
                        if data[-2:] != b"\r\n":
                            raise ProtocolError("chunk data not followed by CRLF")
                        self._last = self._loop.time()
                        yield data[:-2]
                        continue
                    while size > 0:
                        data = await reader.read(min(size, READ_LIMIT))
                        if not data:
                            raise ProtocolError(f"a chunk ended {size} bytes short")
                        self._last = self._loop.time()
                        size -= len(data)
                        yield data
                    if await reader.readexactly(2) != b"\r\n":
                        raise ProtocolError("chunk data not followed by CRLF")
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

    async def _trailers(self) -> None:
        lines = []
        held = 0
        while (line := await self._conn.reader.readuntil(b"\r\n")) != b"\r\n":
            held += len(line)
            if held > MAX_HEAD:
                raise ProtocolError(f"a trailer section over {MAX_HEAD} bytes")
            lines.append(line)
        if lines:
            _check_trailers(b"".join(lines))

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
        """The body split at newlines, each line with its newline (the last may lack it).
        A line's pieces are kept in a list and only the newest is searched, so a line
        over many chunks costs time in proportion to its length; one over ``max_line``
        bytes fails as soon as that much of it is held."""
        parts: list[bytes] = []
        held = 0
        async for chunk in self.chunks():
            start = 0
            end = chunk.find(b"\n")
            if end >= 0 and parts:
                if held + end + 1 > max_line:
                    raise ProtocolError(f"a line longer than {max_line} bytes")
                parts.append(chunk[: end + 1])
                yield b"".join(parts)
                parts.clear()
                held = 0
                start = end + 1
                end = chunk.find(b"\n", start)
            while end >= 0:
                if end + 1 - start > max_line:
                    raise ProtocolError(f"a line longer than {max_line} bytes")
                yield chunk if start == 0 and end == len(chunk) - 1 else chunk[start : end + 1]
                start = end + 1
                end = chunk.find(b"\n", start)
            if start < len(chunk):
                held += len(chunk) - start
                if held > max_line:
                    raise ProtocolError(f"a line longer than {max_line} bytes")
                parts.append(chunk[start:] if start else chunk)
        if parts:
            yield b"".join(parts)
