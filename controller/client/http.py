"""A small HTTP/1.1 client for one server: pools of keep-alive connections on asyncio streams.

Why not aiohttp: the controller talks to one apiserver, sends JSON with a length and
reads JSON back. aiohttp's general machinery around each request (URL objects, header
multidicts, tracing signals, cookies, payload writers) cost about as much CPU as the TLS
under it, and importing it costs some 13 MB of resident memory, a quarter of an idle
controller. What the apiserver needs is small, and all of it is here:

- requests with a ``Content-Length`` body; responses framed by ``Content-Length``,
  ``Transfer-Encoding: chunked`` (watches) or the connection's close;
- keep-alive reuse, a bound on connections open at once, and one retry on a fresh
  connection when a reused one turns out to have been closed by the server, for the
  methods Go's transport replays (``REPEATABLE``: GET, HEAD, OPTIONS, TRACE; a PUT,
  DELETE or POST is never sent twice);
- TLS with a server name other than the host (kubeconfig ``tls-server-name``);
- an ``http://`` or ``https://`` proxy: CONNECT for an https server, absolute-form
  requests for a plain-http one, ``user:password@`` as Proxy-Authorization.

Contract:
- ``Pool.request`` returns ``(status, body)`` for any status; ``Pool.stream`` yields a
  ``Stream`` whose body is read as lines (a watch) or whole.
- Every transport failure, malformed answer and timeout raises an ``OSError``
  (``TimeoutError`` for timeouts, ``ProtocolError`` for an answer we refuse), so a caller
  catches one type. A request we refuse to send (a header or target that could write
  lines of its own, a character outside latin-1) raises ``InvalidRequest``, which is a
  ``ProtocolError`` and a ``ValueError``; nothing is sent then.
- A connection is returned to its pool only after its response was read to the end;
  one abandoned mid-response (cancelled, timed out, broken) is aborted instead, and so
  is one holding bytes nobody asked for (read with the last answer or arriving while it
  was idle): the server and we disagree on where that answer ended, and every later
  answer on it would be one request behind.

Strictness (RFC 9112; what Go's net/http refuses we refuse, and a little more):
- a head is CRLF-terminated lines of at most ``MAX_HEAD`` bytes in all, holding no
  control character but HTAB, no bare CR or LF (a lone LF is not read as a line end),
  and no obsolete line folding; the status line is ``HTTP/1.<digit> <3 digits>[ reason]``
  with a status from 100 (a 101 is refused: we never ask to switch protocols);
- each field line is ``token ":" value``, no space before the colon;
- ``Content-Length`` is 1 to 18 digits; several fields or a list are accepted only when
  every value is the same; ``Transfer-Encoding`` must be exactly ``chunked`` and given
  once; both in one answer is refused (RFC 9112 6.3: a smuggling sign);
- a chunk line is 1 to 16 hex digits, optionally ``;`` and an extension, optional
  trailing whitespace, CRLF; chunk data must be followed by CRLF; trailer fields follow
  the field rules and ``MAX_HEAD``;
- ``Connection`` is a comma-separated, case-insensitive token list;
- bodies are read in pieces of at most ``READ_LIMIT`` bytes, whatever a chunk's size,
  and ``Stream.lines`` refuses a line over its bound as soon as that many bytes are held.
"""

from __future__ import annotations

import asyncio
import base64
import re
import ssl
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

import anyio

#: The stream buffer: a read returns up to this much at once, and a chunk of the body is
#: handed on in pieces no larger. A head searched for its end stops here at the latest.
READ_LIMIT = 2**21

#: The largest response head (status line and fields) or trailer section we read. Go's
#: client allows 1 MiB; the apiserver's heads are under 1 KiB.
MAX_HEAD = 256 * 1024

#: Methods sent again on a fresh connection when a reused one was found closed: the ones
#: Go's transport replays (idempotent by definition and carrying no body). A PUT or
#: DELETE is idempotent too, but the first copy may have been acted on, and a resent
#: write races with whoever wrote after it.
REPEATABLE = frozenset({"GET", "HEAD", "OPTIONS", "TRACE"})


class ProtocolError(OSError):
    """The server's answer is not HTTP/1.x as we read it, or the connection ended early."""


class InvalidRequest(ProtocolError, ValueError):
    """A request we refuse to send: it would not be the request the caller meant."""


class _Stale(OSError):
    """A reused connection failed before any byte of the answer: the server had closed
    it while idle, so the request may be sent again on a fresh one."""


def redact(url: str) -> str:
    """``url`` with the password of its userinfo replaced, for messages and logs."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, hostpart = rest.rpartition("@")
    if not (sep and at) or ":" not in userinfo:
        return url
    return f"{scheme}://{userinfo.partition(':')[0]}:xxxxx@{hostpart}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    #: a path prefix the server is mounted under (some proxies put clusters there)
    base_path: str = ""

    @classmethod
    def parse(cls, url: str) -> Endpoint:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise ValueError(f"{redact(url)!r}: not a URL ({exc})") from None
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{redact(url)!r}: not an http:// or https:// address")
        port = port or (443 if scheme == "https" else 80)
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


@dataclass(slots=True)
class _Head:
    status: int
    length: int | None
    chunked: bool
    keep_alive: bool


# -- what we send --------------------------------------------------------------------

_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_METHOD = re.compile(_TOKEN)
_FIELD_NAME = re.compile(_TOKEN)
#: a value as latin-1 can carry it, with no control character but HTAB
_FIELD_VALUE = re.compile(r"[\t\x20-\x7e\x80-\xff]*")


#: the names sent on every request, known to be tokens
_COMMON_NAMES = frozenset({"Accept", "Authorization", "Content-Type", "Host", "User-Agent"})
_COMMON_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _check_header(name: str, value: str) -> None:
    # the usual case in C-level string tests; the exact rule (HTAB, obs-text) after it
    if value.isascii() and value.isprintable() and name in _COMMON_NAMES:
        return
    if _FIELD_NAME.fullmatch(name) and _FIELD_VALUE.fullmatch(value):
        return
    # never the value in the message: it may be a credential
    if any(c in "\r\n" for c in name + value):
        why = "a line break (it would write fields of its own)"
    elif any(ord(c) > 0xFF for c in name + value):
        why = "a character outside latin-1"
    else:
        why = "a control character or, in the name, a separator"
    raise InvalidRequest(f"header {name[:40]!r}: {why}")


def _check_request_line(method: str, target: str) -> None:
    if method not in _COMMON_METHODS and _METHOD.fullmatch(method) is None:
        raise InvalidRequest(f"method {method[:20]!r}: not a token")
    # origin- or absolute-form: visible ASCII only (anything else is percent-encoded)
    if not (target.isascii() and target.isprintable() and target and " " not in target):
        raise InvalidRequest(
            f"target {target[:80]!r}: empty, or a space, control or non-ASCII character"
        )


# -- what we read --------------------------------------------------------------------

_BTOKEN = _TOKEN.encode()
#: any byte a head or trailer section may not hold: control characters but HTAB, and
#: CR or LF other than as a CRLF pair
_FORBIDDEN = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]|\r(?!\n)|(?<!\r)\n")
#: a whole head: the status line, then field lines, with no control character but HTAB
#: and no CR or LF but as line ends (one pass; _forbidden says what failed, if it does)
_HEAD = re.compile(
    rb"HTTP/1\.([0-9]) ([0-9]{3})(?: [\t\x20-\x7e\x80-\xff]*)?\r\n"
    rb"((?:" + _BTOKEN + rb":[\t\x20-\x7e\x80-\xff]*\r\n)*)\r\n"
)
_FIELDS = re.compile(rb"(?:" + _BTOKEN + rb":[\t\x20-\x7e\x80-\xff]*\r\n)*")
#: the fields that frame a message, each from its line's start (the CRLF before it)
_FRAMING = re.compile(
    rb"\r\n(content-length|transfer-encoding|connection):[ \t]*([^\r\n]*?)[ \t]*(?=\r\n)",
    re.IGNORECASE,
)
_LENGTH = re.compile(rb"[0-9]{1,18}")
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(?:;[\t\x20-\x7e\x80-\xff]*)?[ \t]*\r\n")


def _forbidden(raw: bytes, where: str) -> None:
    bad = _FORBIDDEN.search(raw)
    if bad is None:
        return
    byte = bad.group()[:1]
    if byte in (b"\r", b"\n"):
        name = "CR" if byte == b"\r" else "LF"
        raise ProtocolError(f"a bare {name} in the {where}")
    raise ProtocolError(f"a control character {byte!r} in the {where}")


def _bad_field_line(block: bytes, where: str) -> ProtocolError:
    """Why a field section that passed _forbidden does not parse (the slow path)."""
    for line in block.split(b"\r\n"):
        if line[:1] in (b" ", b"\t"):
            return ProtocolError(f"obsolete line folding (obs-fold) in the {where}")
        if line and re.fullmatch(_BTOKEN + rb":.*", line, re.DOTALL) is None:
            return ProtocolError(f"bad field line in the {where}: {line[:80]!r}")
    return ProtocolError(f"bad {where}")


@dataclass(slots=True)
class _Framing:
    length: bytes | None = None
    chunked: bool = False
    #: the Connection tokens, lower-cased
    connection: frozenset[bytes] = frozenset()


def _content_length(value: bytes, seen: bytes | None) -> bytes:
    """The digits of a Content-Length field. RFC 9112 6.3: a list, or several fields,
    is one length only if every value is the same (the same text, as Go and h11 read it:
    "5" and "05" are two)."""
    if _LENGTH.fullmatch(value) is None:
        values = {v.strip(b" \t") for v in value.split(b",")}
        if len(values) != 1 or _LENGTH.fullmatch(value := values.pop()) is None:
            raise ProtocolError(f"bad Content-Length: {value[:40]!r}")
    if seen is not None and seen != value:
        raise ProtocolError(f"two different Content-Lengths: {seen!r} and {value!r}")
    return value


def _framing(raw: bytes, start: int, where: str) -> _Framing:
    """The framing fields of the field lines in ``raw`` after ``start`` (which is at the
    CRLF ending the line before them), with their values checked."""
    found = _Framing()
    for m in _FRAMING.finditer(raw, start):
        name, value = m[1].lower(), m[2]
        if name == b"content-length":
            found.length = _content_length(value, found.length)
        elif name == b"transfer-encoding":
            if found.chunked:
                raise ProtocolError(f"two Transfer-Encoding fields in the {where}")
            if value.lower() != b"chunked":
                raise ProtocolError(f"Transfer-Encoding {value[:40]!r}: only chunked is read")
            found.chunked = True
        else:
            tokens = {t.strip(b" \t") for t in value.lower().split(b",")}
            found.connection = found.connection | tokens
    return found


def _parse_head(raw: bytes, method: str) -> _Head:
    if len(raw) > MAX_HEAD:
        raise ProtocolError(f"an answer head over {MAX_HEAD} bytes")
    m = _HEAD.fullmatch(raw)
    if m is None:
        if not raw.startswith(b"HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.x answer: {raw[:80]!r}")
        _forbidden(raw, "answer head")
        line, _, fields = raw.partition(b"\r\n")
        if re.fullmatch(rb"HTTP/1\.[0-9] [0-9]{3}(?: .*)?", line, re.DOTALL) is None:
            raise ProtocolError(f"bad status line: {line[:80]!r}")
        raise _bad_field_line(fields, "answer head")
    status = int(m[2])
    if status < 100 or status == 101:
        raise ProtocolError(f"status {status}: not one we can take")
    framing = _framing(raw, m.start(3) - 2, "answer head")
    length = None if framing.length is None else int(framing.length)
    chunked = framing.chunked
    if length is not None and chunked:
        # RFC 9112 6.3: it "ought to be handled as an error"; a sign of smuggling
        raise ProtocolError("both Content-Length and Transfer-Encoding")
    if m[1] == b"0":
        keep_alive = b"keep-alive" in framing.connection
    else:
        keep_alive = b"close" not in framing.connection
    if method == "HEAD" or status in (204, 304) or status < 200:
        length, chunked = 0, False
    if length is None and not chunked:
        keep_alive = False  # the body ends when the server closes
    return _Head(status, length, chunked, keep_alive)


def _check_trailers(raw: bytes) -> None:
    """The trailer section (each line with its CRLF, the blank line not included):
    nothing of it is used, but it is read by the field rules."""
    if _FIELDS.fullmatch(raw) is None:
        _forbidden(raw, "trailer section")
        raise _bad_field_line(raw, "trailer section")
    _framing(b"\r\n" + raw, 0, "trailer section")


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
