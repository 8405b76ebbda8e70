"""The HTTPS endpoint training processes push reports to.

One POST per report, on connections kept alive between them, so a pod reporting every
few seconds pays one TLS handshake per connection, not per report. Each request, in
this order:

1. its head read strictly (request line, header names and values, one Content-Length,
   no Transfer-Encoding): 400 otherwise, 411 without a length;
2. POST only (405), a path the sink knows (404), a bearer token (401), a body of at
   most ``max_body`` bytes (413, the connection closed unread) that says it is JSON
   (415);
3. while this process is not the one whose reports count (``leading()`` false): 503
   with Retry-After, so the client sends again later (a kept-alive connection is
   closed with it, and the next one may reach the leader);
4. the token refused here, with no review, when its own claims say it cannot be a pod
   token for the path's job (not a JWT, another audience, expired, no pod, a pod the
   sink does not know for that job: 401, or 503 for a pod not cached yet); else
   reviewed by the apiserver for the path's audience (a cached verdict within the
   process's review budget, controller.serving.tokenreview): 401 refused, 503 when the
   apiserver cannot be asked or the budget is spent;
5. at most ``rate`` reports a second per caller (the pod its token is bound to), with a
   burst: 429 with Retry-After;
6. the sink's answer: 204, or a refusal it explains (400 naming the field, 403, 404).

Refusals carry ``{"error": ..., "field": ...}`` (a 401's says only "unauthorized") and
are counted by status code. Nothing a client sends can end the server: every failure
inside a connection closes that connection only.

Nobody without a pod's token may hold what reporters need:
- only a connection that has had a report accepted (204, or 429 for a caller already
  authenticated) is kept alive, for ``idle_timeout`` between reports; every other
  answer closes it, and until its first accepted report a connection has
  ``first_timeout`` for each request head;
- one source address holds at most ``max_per_source`` connections; more are closed at
  accept;
- a connection from an address the sink does not know (``known_source``: not one of
  our pods') takes a token from ``strangers`` (new connections a second, for all such
  addresses together) or is closed at accept, before any TLS: a flood of strangers'
  handshakes cannot take the CPU that reporters' need, and a reporter's address never
  waits behind them;
- when every slot is taken, a new connection takes the slot of the oldest one that has
  had no report accepted and has no request in hand (an anonymous client holding slots
  only makes room for the next comer), and waits only when every slot holds an
  accepted reporter or a request being answered;
- ``degraded_at`` is the last time a reporter may have gone unheard for the server's
  own sake (a connection waiting for a slot, an accept failed, a review could not be
  had): the stall deadline does not count a window that holds it
  (reconcile.progress.stall).
"""

from __future__ import annotations

import itertools
import math
import re
import socket
import ssl
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import anyio
import anyio.abc
import anyio.lowlevel
import orjson
import structlog
from anyio.abc import SocketAttribute, SocketStream, TaskGroup, TaskStatus
from anyio.streams.tls import TLSStream

from controller.observability.addresses import parse_address
from controller.observability.prometheus import Counter, Registry, Sample
from controller.observability.server import accept_failed, listen_sockets
from controller.serving.access import bearer
from controller.serving.limits import Budget, KeyedLimiter
from controller.serving.tokenreview import TokenReviewer, implausible, unverified_claims
from controller.serving.verdicts import ReviewUnavailable
from controller.types import Reply, ReportSink

log = structlog.get_logger("controller.serving.reports")

MAX_HEAD_BYTES = 8192
DEFAULT_MAX_BODY = 16 * 1024
HANDSHAKE_TIMEOUT = 10.0
#: a client that sent part of a request has this long for the rest
REQUEST_TIMEOUT = 10.0
#: a kept-alive connection with no request for this long is closed
IDLE_TIMEOUT = 90.0
#: a connection that has had no report accepted yet waits this long for a request head
FIRST_TIMEOUT = 5.0
MAX_CONNECTIONS = 4096
#: one pod keeps one connection; a node's host-network pods share its address
MAX_PER_SOURCE = 128
#: new connections a second from addresses no pod of ours has: a TLS handshake costs the
#: endpoint about a millisecond of CPU, so this is a few percent of a core
STRANGER_CONNECTIONS = 50.0
#: answers after which a connection is kept: the caller's token was accepted
KEEP_ALIVE = frozenset({204, 429})
#: a body over the limit but under this is read and dropped before the 413
DRAIN_LIMIT = 256 * 1024
#: the kernel caps it at net.core.somaxconn (4096 by default since Linux 5.4)
LISTEN_BACKLOG = 4096
#: connections taken off the listening socket before other tasks get a turn
ACCEPT_BATCH = 64
CODES = (204, 400, 401, 403, 404, 405, 411, 413, 415, 429, 431, 500, 503)
_REASONS = {
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    411: "Length Required",
    413: "Content Too Large",
    415: "Unsupported Media Type",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
# Checked with regular expressions, not byte by byte in Python: a report's head carries a
# token of a kilobyte, and at hundreds of reports a second a loop over it shows.
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
#: a control character other than HTAB, in a header value
_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
#: a request target: printable ASCII, no space
_TARGET = re.compile(rb"/[\x21-\x7e]*")


def _utcnow() -> datetime:
    return datetime.now(UTC)


class _Close(Exception):
    """The connection ends here (after the answer, if one was sent)."""


@dataclass(frozen=True, slots=True)
class _Request:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names; a repeated header is refused, not merged
    length: int | None


class _Refused(Exception):
    """The request is answered with ``reply`` and the connection closed."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.message)
        self.reply = reply


class ReportServer:
    def __init__(
        self,
        *,
        address: str,
        tls: Callable[[], ssl.SSLContext],
        sink: ReportSink,
        reviewer: TokenReviewer,
        limiter: KeyedLimiter,
        leading: Callable[[], bool],
        registry: Registry,
        max_body: int = DEFAULT_MAX_BODY,
        max_connections: int = MAX_CONNECTIONS,
        max_per_source: int = MAX_PER_SOURCE,
        strangers: Budget | None = None,
        idle_timeout: float = IDLE_TIMEOUT,
        first_timeout: float = FIRST_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        metric_prefix: str = "reports",
        now: Callable[[], datetime] = _utcnow,
    ) -> None:
        """``tls()`` gives the context for the next handshake (a rotated certificate is
        picked up by new connections). ``max_per_source`` 0: no cap per address;
        ``strangers`` None: no limit on connections from addresses nobody knows."""
        self.address = address
        self._tls = tls
        self._sink = sink
        self._reviewer = reviewer
        self._limiter = limiter
        self._leading = leading
        self.max_body = max_body
        self.max_connections = max_connections
        self.max_per_source = max_per_source
        self._strangers = strangers
        self.idle_timeout = idle_timeout
        self.first_timeout = first_timeout
        self.request_timeout = request_timeout
        self.bound: tuple[str, int] | None = None
        self._now = now
        #: the last time reporters may have gone unheard through no fault of theirs
        self.degraded_at: datetime | None = None
        self.degraded_reason = ""
        self._per_source: dict[str, int] = {}
        #: connections that may be closed to make room, oldest first
        self._evictable: OrderedDict[int, anyio.CancelScope] = OrderedDict()
        self._keys = itertools.count()
        requests = Counter(
            f"{metric_prefix}_requests_total",
            "Reports received, by the status code they were answered with.",
            ["code"],
            registry=registry,
        )
        self._by_code = {c: requests.labels(str(c)) for c in CODES}
        self._other = requests.labels("other")
        reviews_name = f"{metric_prefix}_token_reviews_total"

        def reviews() -> list[tuple[str, str, str, list[Sample]]]:
            samples = [(reviews_name, {"result": r}, float(n)) for r, n in reviewer.counts.items()]
            doc = (
                "Token verdicts: hit (cached), accepted, refused (by the apiserver), error,"
                " local (refused unreviewed), over_budget (no review to spare)."
            )
            return [(reviews_name, "counter", doc, samples)]

        registry.add_collector(reviews)
        refused = Counter(
            f"{metric_prefix}_connections_refused_total",
            "Connections closed at accept: their source address held its share already"
            " (source_share), or came from an address no pod of ours has when strangers'"
            " budget of new connections was spent (strangers).",
            ["reason"],
            registry=registry,
        )
        self._over_source = refused.labels("source_share")
        self._over_strangers = refused.labels("strangers")
        self._evicted = Counter(
            f"{metric_prefix}_connections_evicted_total",
            "Connections closed to make room at the cap: the oldest that had no report"
            " accepted and no request in hand.",
            registry=registry,
        )
        self.connections = 0

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        # Every pod of a large job connects at once when training starts: a short listen
        # backlog overflows, and the kernel's SYN retries (1, 2, 4, ... s) kept
        # connections of 1,600 pods waiting over a minute.
        listeners = await listen_sockets(
            *parse_address(self.address), backlog=min(self.max_connections, LISTEN_BACKLOG)
        )
        bound = listeners[0].extra(SocketAttribute.local_address)
        if isinstance(bound, tuple):
            self.bound = (str(bound[0]), int(bound[1]))
        log.info("serving reports", address=self.address, bound=self.bound)
        slots = anyio.Semaphore(self.max_connections)
        try:
            async with anyio.create_task_group() as tg:
                for one in listeners:
                    tg.start_soon(self._accept, one, slots, tg)
                task_status.started()
        finally:
            for one in listeners:
                with anyio.CancelScope(shield=True):
                    await one.aclose()

    def degraded(self, why: str) -> None:
        """Reporters may be going unheard for the server's own sake, now."""
        if self.degraded_reason != why or self.degraded_at is None:
            log.warning("the progress endpoint cannot hear every reporter", why=why)
        self.degraded_at, self.degraded_reason = self._now(), why
        try:
            self._sink.unheard(self.degraded_at, why)
        except Exception:
            log.exception("report sink failed to take a degraded window")

    async def _accept(
        self, listener: anyio.abc.SocketListener, slots: anyio.Semaphore, tg: TaskGroup
    ) -> None:
        """Take connections off the listening socket itself, as many as wait: one that
        is refused (its address's share taken, or strangers' budget spent) is closed
        there and then, before anything is made for it; the rest wait for a slot."""
        sock: socket.socket = listener.extra(SocketAttribute.raw_socket)
        backoff = 0.0
        while True:
            await anyio.wait_readable(sock)
            for _ in range(ACCEPT_BATCH):
                try:
                    conn, peer = sock.accept()
                except BlockingIOError:
                    break
                except OSError as exc:
                    self.degraded(f"accept failed: {exc}")
                    backoff = await accept_failed(exc, backoff)
                    break
                backoff = 0.0
                source = str(peer[0]) if isinstance(peer, tuple) else str(peer)
                if not self._admit(source):
                    conn.close()
                    continue
                try:
                    conn.setblocking(False)
                    if conn.family in (socket.AF_INET, socket.AF_INET6):
                        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    await self._slot(slots)
                    stream = await SocketStream.from_socket(conn)
                except BaseException:
                    conn.close()
                    raise
                self._per_source[source] = self._per_source.get(source, 0) + 1
                tg.start_soon(self._connection, stream, slots, source)
            await anyio.lowlevel.checkpoint()

    def _admit(self, source: str) -> bool:
        """Whether a connection from ``source`` may wait for a slot (counted if not)."""
        if self.max_per_source and self._per_source.get(source, 0) >= self.max_per_source:
            self._over_source.inc()
            return False
        if self._strangers is not None and not self._known(source):
            if self._strangers.take() > 0:
                self._over_strangers.inc()
                return False
        return True

    def _known(self, source: str) -> bool:
        try:
            return self._sink.known_source(source)
        except Exception:
            log.exception("report sink failed to say whether it knows an address")
            return False

    async def _slot(self, slots: anyio.Semaphore) -> None:
        """Take a slot for a connection accepted and waiting: at once, or from the
        oldest evictable connection, or when one ends (a window in which reporters
        may go unheard, marked as it opens and as it closes)."""
        try:
            slots.acquire_nowait()
            return
        except anyio.WouldBlock:
            pass
        if self._evictable:
            _, scope = self._evictable.popitem(last=False)
            scope.cancel()
            self._evicted.inc()
            await slots.acquire()  # given back as the evicted connection unwinds
            return
        self.degraded("every connection slot is taken")
        await slots.acquire()
        self.degraded("every connection slot is taken")

    def _release(self, slots: anyio.Semaphore, source: str) -> None:
        self.connections -= 1
        slots.release()
        left = self._per_source.get(source, 1) - 1
        if left > 0:
            self._per_source[source] = left
        else:
            self._per_source.pop(source, None)

    async def _connection(
        self, raw: anyio.abc.SocketStream, slots: anyio.Semaphore, source: str
    ) -> None:
        self.connections += 1
        key = next(self._keys)
        try:
            with anyio.CancelScope() as scope:
                self._evictable[key] = scope
                try:
                    with anyio.fail_after(HANDSHAKE_TIMEOUT):
                        stream = await TLSStream.wrap(
                            raw,
                            server_side=True,
                            ssl_context=self._tls(),
                            standard_compatible=False,
                        )
                except BaseException:
                    with anyio.CancelScope(shield=True):
                        await raw.aclose()
                    raise
                async with stream:
                    await _Conversation(self, stream, key, scope).run()
        except Exception as e:
            log.debug("report connection ended", error=f"{type(e).__name__}: {e}")
        finally:
            self._evictable.pop(key, None)
            self._release(slots, source)

    def _waiting(self, key: int, scope: anyio.CancelScope) -> None:
        """The connection waits for a request and has no report accepted: evictable,
        as the newest."""
        self._evictable[key] = scope
        self._evictable.move_to_end(key)

    def _working(self, key: int) -> None:
        """A request read whole, being answered; or the connection accepted."""
        self._evictable.pop(key, None)

    def count(self, status: int) -> None:
        self._by_code.get(status, self._other).inc()

    async def answer(self, request: _Request, body: bytes) -> Reply:
        """Steps 3 to 6 of the module docstring, for a request read whole."""
        audience = self._sink.audience(request.path)
        if audience is None:
            return Reply(404, f"no reports are taken at {request.path[:200]}")
        token = bearer(request.headers.get("authorization", ""))
        if not token:
            return Reply(401, "a bearer token is required")
        if not self._leading():
            return Reply(503, "not the leader: send again later", retry_after=1.0)
        claims = unverified_claims(token)
        why = implausible(claims, audience, self._now().timestamp())
        if why is not None or claims is None:
            self._reviewer.counts["local"] += 1
            return UNAUTHORIZED
        early = self._sink.precheck(request.path, claims.pod_name, claims.pod_uid, claims.issued_at)
        if early is not None:
            self._reviewer.counts["local"] += 1
            return UNAUTHORIZED if early.status == 401 else early
        try:
            verdict = await self._reviewer.review(token, audience)
        except ReviewUnavailable as e:
            self.degraded(f"token reviews: {e}")
            return Reply(503, "the token cannot be reviewed now", retry_after=e.retry_after)
        if verdict.caller is None:
            log.debug("token refused", reason=verdict.reason)
            return UNAUTHORIZED
        wait = self._limiter.take(verdict.caller.key)
        if wait > 0:
            return Reply(429, "reporting faster than allowed", retry_after=wait)
        try:
            return self._sink.accept(request.path, verdict.caller, body)
        except Exception:
            log.exception("report sink failed", path=request.path[:200])
            return Reply(500, "the report could not be taken")


class _Conversation:
    """One connection's requests, one after the other."""

    def __init__(
        self,
        server: ReportServer,
        stream: anyio.abc.ByteStream,
        key: int,
        scope: anyio.CancelScope,
    ) -> None:
        self.server = server
        self.stream = stream
        self.buf = b""
        self.key, self.scope = key, scope

    async def run(self) -> None:
        accepted = False  # a report was taken on this connection
        while True:
            if not accepted:
                self.server._waiting(self.key, self.scope)
            wait = self.server.idle_timeout if accepted else self.server.first_timeout
            try:
                with anyio.fail_after(wait):
                    if not await self._fill_until_head():
                        return  # closed between requests
                request = self._parse_head()
                with anyio.fail_after(self.server.request_timeout):
                    body = await self._body(request)
            except _Refused as r:
                await self._send(r.reply)
                return
            self.server._working(self.key)
            reply = await self.server.answer(request, body)
            accepted = accepted or reply.status == 204
            close = (
                request.headers.get("connection", "").lower() == "close"
                or reply.status not in KEEP_ALIVE
            )
            await self._send(reply, close=close)
            if close:
                return

    async def _fill_until_head(self) -> bool:
        while b"\r\n\r\n" not in self.buf:
            if len(self.buf) > MAX_HEAD_BYTES:
                raise _Refused(Reply(431, "request head too large"))
            try:
                chunk = await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
                if self.buf:
                    raise _Close() from None
                return False
            self.buf += chunk
        return True

    def _parse_head(self) -> _Request:
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            raise _Refused(Reply(431, "request head too large"))
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or parts[2] != b"HTTP/1.1" or not _is_token(parts[0]):
            raise _Refused(Reply(400, "malformed request line"))
        target = parts[1]
        if not _TARGET.fullmatch(target):
            raise _Refused(Reply(400, "malformed request target"))
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _is_token(name):
                # also a folded line (obs-fold), which RFC 9112 lets a server refuse
                raise _Refused(Reply(400, "malformed header line"))
            if _CONTROL.search(value):
                raise _Refused(Reply(400, "control character in a header value"))
            key = name.decode("ascii").lower()
            if key in headers:
                raise _Refused(Reply(400, f"header {key} repeated"))
            headers[key] = value.strip(b" \t").decode("latin-1")
        if "transfer-encoding" in headers:
            raise _Refused(Reply(411, "send a Content-Length, not a Transfer-Encoding"))
        length = None
        if "content-length" in headers:
            text = headers["content-length"]
            if not (text.isascii() and text.isdigit()) or len(text) > 12:
                raise _Refused(Reply(400, "malformed Content-Length"))
            length = int(text)
        path = target.split(b"?", 1)[0].decode("ascii")
        return _Request(parts[0].decode("ascii"), path, headers, length)

    async def _body(self, request: _Request) -> bytes:
        if request.method != "POST":
            raise _Refused(Reply(405, "only POST"))
        if request.length is None:
            raise _Refused(Reply(411, "a Content-Length is required"))
        if request.length > self.server.max_body:
            if request.length <= DRAIN_LIMIT:
                # a client still sending the body would find the connection closed
                # before it reads the answer (as Go's net/http, read the rest first)
                await self._discard(request.length)
            raise _Refused(Reply(413, f"a report is at most {self.server.max_body} bytes"))
        ctype = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if ctype != "application/json":
            raise _Refused(Reply(415, "Content-Type must be application/json"))
        while len(self.buf) < request.length:
            try:
                self.buf += await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
                raise _Close() from None
        body, self.buf = self.buf[: request.length], self.buf[request.length :]
        return body

    async def _discard(self, length: int) -> None:
        while len(self.buf) < length:
            length -= len(self.buf)
            try:
                self.buf = await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
                raise _Close() from None
        self.buf = self.buf[length:]

    async def _send(self, reply: Reply, *, close: bool = True) -> None:
        self.server.count(reply.status)
        lines = [f"HTTP/1.1 {reply.status} {_REASONS.get(reply.status, 'Error')}"]
        body = b""
        if reply.status != 204:
            doc: dict[str, str] = {"error": reply.message}
            if reply.field_name:
                doc["field"] = reply.field_name
            body = orjson.dumps(doc) + b"\n"
            lines.append("Content-Type: application/json")
            lines.append(f"Content-Length: {len(body)}")
        if reply.retry_after is not None:
            lines.append(f"Retry-After: {max(1, math.ceil(reply.retry_after))}")
        if reply.status == 401:
            lines.append("WWW-Authenticate: Bearer")
        if close:
            lines.append("Connection: close")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body
        with anyio.move_on_after(self.server.request_timeout):
            await self.stream.send(data)


UNAUTHORIZED = Reply(401, "unauthorized")


def _is_token(text: bytes) -> bool:
    return _TOKEN.fullmatch(text) is not None
