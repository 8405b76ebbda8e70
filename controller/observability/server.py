"""HTTP endpoints: /metrics, /debug/queue, /healthz, /readyz.

Contract: one server per socket. With the defaults (--metrics-bind-address :8443,
--health-probe-bind-address :8081) that is two servers, /metrics on the first and the
probes on the second; when both flags name the same socket (the same port on the same
interfaces, port 0 excepted: each port 0 is a socket of its own), one server serves all
three paths (plain metrics only). Addresses that overlap without being the same (":8081"
and "127.0.0.1:8081") are refused: the second could never be bound. An address of "0"
disables that endpoint set (controller-runtime's convention). ":8443" binds every
interface (controller.observability.addresses).

Secure metrics (--metrics-secure, the default, as Kubebuilder's since v4): the metrics
address speaks TLS, and each request passes a guard first (controller.serving.access:
TokenReview of the bearer token, SubjectAccessReview of ``get`` on the path) that
answers 401, 403 or 503 in its stead. The probes stay plain HTTP on their own port: a
kubelet probe carries no token.

- /debug/queue?key=<namespace>/<name> (on the metrics address, when the process gives
  a ``debug`` function): a JSON object saying what is pending for that key (queued, in
  a reconcile, a requeue parked, background work), for "why has nothing happened to my
  job yet", and the tests' barrier. 400 without a key.

- /healthz: 200 while every health check passes (the process is alive and, when
  leading, still renewing); 500 otherwise.
- /readyz: 200 once every readiness check passes (caches synced); 500 before.
Checks are plain callables returning bool, so this module knows nothing of informers.

The server is a few lines of HTTP/1.1 on anyio's TCP listeners: four GET paths, one
request per connection (``Connection: close``), which is all a kubelet probe or a
Prometheus scrape needs; a web framework for it cost 2 MB and 30 ms of start-up.

Whoever can reach a port must not be able to end the process or silence the probes:
- Each server takes at most ``max_connections`` (256; the probes'
  ``health_max_connections``, by default the same) at once; more wait in the
  kernel's listen backlog, costing no descriptor of ours. With the defaults that is
  512 descriptors at most, half the usual limit of 1,024, and a flood of /metrics
  never takes a slot of /healthz (keep the probes on a port of their own).
- A client has ``head_timeout`` (5 s) to send its request head and ``write_timeout``
  (10 s) to take the answer, so connections held open saying nothing, or half a
  request, or never reading, are closed and their slots reused.
- An accept that fails (EMFILE, ENFILE, ENOBUFS, ENOMEM, ECONNABORTED...) is retried
  after a backoff, 5 ms doubling to 1 s, as Go's net/http does; it never ends the
  process (it used to: 1,009 idle connections under a limit of 1,024 exited it 1).
"""

from __future__ import annotations

import argparse
import socket
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import anyio
import anyio.abc
import orjson
import structlog
from anyio.abc import ByteStream, SocketAttribute, SocketStream, TaskGroup, TaskStatus
from anyio.streams.tls import TLSStream

from controller.observability.addresses import OFF, Sharing, parse_address, sharing
from controller.observability.prometheus import CONTENT_TYPE, Registry

log = structlog.get_logger("controller.observability.server")

Check = Callable[[], bool]


#: a request head larger than this is answered 400
MAX_HEAD_BYTES = 8192
#: Go's ReadHeaderTimeout: what a client that sends nothing can hold a slot for. A
#: kubelet probe or a scrape sends its head at once.
HEAD_TIMEOUT_SECONDS = 5.0
#: and one that never reads its answer (a /metrics body outgrows the socket buffers)
WRITE_TIMEOUT_SECONDS = 10.0
#: connections one server holds open at once
MAX_CONNECTIONS = 256
#: Go's net/http backoff on a failed accept
ACCEPT_BACKOFF_MIN, ACCEPT_BACKOFF_MAX = 0.005, 1.0

Response = tuple[int, str, bytes]  # status, content type, body
Query = dict[str, str]  # a request's query parameters, the last value of each
Handler = Callable[[Query], Response]
Debug = Callable[[str], dict[str, object]]
TLSContext = Callable[[], ssl.SSLContext]


class Decision(Protocol):
    @property
    def status(self) -> int: ...  # 200 lets the request through

    @property
    def reason(self) -> str: ...


#: ``await guard(authorization header value, path)``: may this request be answered?
Guard = Callable[[str, str], Awaitable[Decision]]


class HasRegistry(Protocol):
    registry: Registry


@dataclass(slots=True)
class Site:
    """What one bind address serves, and how: its paths, over TLS when ``tls`` is set,
    to the callers ``guard`` lets through when it is set."""

    routes: dict[str, Handler] = field(default_factory=dict)
    tls: TLSContext | None = None
    guard: Guard | None = None


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-bind-address",
        default=":8443",
        help='address for /metrics ("0" disables; default :8443)',
    )
    parser.add_argument(
        "--metrics-secure",
        type=_boolean,
        default=True,
        metavar="true|false",
        help="serve /metrics over HTTPS to callers whose bearer token the apiserver accepts"
        " (TokenReview) and whose user may get the path (SubjectAccessReview); false serves"
        " plain HTTP to anyone who reaches the port (default true)",
    )
    parser.add_argument(
        "--metrics-cert-dir",
        default="",
        help="directory holding tls.crt and tls.key for /metrics, re-read when they change"
        " (default: a self-signed certificate made at start-up, in memory)",
    )
    parser.add_argument(
        "--health-probe-bind-address",
        default=":8081",
        help='address for /healthz and /readyz ("0" disables)',
    )


def _boolean(text: str) -> bool:
    value = text.strip().lower()
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not true or false")


def _check(checks: Sequence[Check], name: str) -> Response:
    failing = []
    for check in checks:
        try:
            ok = check()
        except Exception:  # a broken check reports unhealthy, never crashes the server
            ok = False
        if not ok:
            failing.append(getattr(check, "__name__", repr(check)))
    if failing:
        return 500, "text/plain", f"{name} failed: {', '.join(failing)}\n".encode()
    return 200, "text/plain", b"ok\n"


_REASONS = {
    200: "OK",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


def probe_address_problem(metrics: str, health: str, *, secure: bool) -> str | None:
    """Why the metrics and probe addresses cannot be served as given, or None."""
    try:
        shared = sharing(metrics, health)
    except ValueError as e:
        return str(e)
    if shared is Sharing.OVERLAP:
        return (
            f"--metrics-bind-address {metrics} and --health-probe-bind-address {health} are"
            " the same port on overlapping interfaces: name one address for both, or two ports"
        )
    if secure and shared is Sharing.SAME:
        # a kubelet probe sends no token: the probes would fail
        return (
            "--metrics-secure needs the health probes on a socket of their own: give"
            " --health-probe-bind-address another port than --metrics-bind-address"
            " (a kubelet probe sends no token)"
        )
    return None


class ProbeServers:
    """The HTTP servers of one process; ``serve`` is a Manager service."""

    def __init__(
        self,
        *,
        metrics_address: str = ":8080",
        health_address: str = ":8081",
        registry: Registry | None = None,
        health_checks: Sequence[Check] = (),
        ready_checks: Sequence[Check] = (),
        debug: Debug | None = None,
        metrics_tls: TLSContext | None = None,
        metrics_guard: Guard | None = None,
        max_connections: int = MAX_CONNECTIONS,
        health_max_connections: int | None = None,
        head_timeout: float = HEAD_TIMEOUT_SECONDS,
        write_timeout: float = WRITE_TIMEOUT_SECONDS,
    ) -> None:
        self.registry = registry
        self.max_connections = max_connections
        #: the probes' own cap, when they have a socket of their own
        self.health_max_connections = health_max_connections or max_connections
        self.head_timeout = head_timeout
        self.write_timeout = write_timeout
        self.health_checks = list(health_checks)
        self.ready_checks = list(ready_checks)
        problem = probe_address_problem(
            metrics_address,
            health_address,
            secure=metrics_tls is not None or metrics_guard is not None,
        )
        if problem:
            raise ValueError(problem)
        #: (role, bind address, what it serves): one entry per socket
        self._sites: list[tuple[str, str, Site]] = []
        self._debug = debug
        if metrics_address != OFF:
            site = Site(tls=metrics_tls, guard=metrics_guard)
            self._sites.append(("metrics", metrics_address, site))
            site.routes["/metrics"] = lambda _: self._metrics()
            if debug is not None:
                site.routes["/debug/queue"] = self._debug_queue
        if health_address != OFF:
            if sharing(metrics_address, health_address) is Sharing.SAME:
                routes = self._sites[0][2].routes
            else:
                site = Site()
                self._sites.append(("health", health_address, site))
                routes = site.routes
            routes["/healthz"] = lambda _: _check(self.health_checks, "healthz")
            routes["/readyz"] = lambda _: _check(self.ready_checks, "readyz")
        #: (host, port) bound per role ("metrics", "health") after start, for tests and
        #: callers using port 0; both roles name one address when they share a socket
        self.bound: dict[str, tuple[str, int]] = {}

    def _metrics(self) -> Response:
        if self.registry is None:
            return 404, "text/plain", b"not found\n"
        return 200, CONTENT_TYPE, self.registry.expose()

    def _debug_queue(self, query: Query) -> Response:
        key = query.get("key")
        if not key or self._debug is None:
            return 400, "text/plain", b"key=<namespace>/<name> is required\n"
        return 200, "application/json", orjson.dumps(self._debug(key)) + b"\n"

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen on every address, report started, serve until cancelled."""
        async with anyio.create_task_group() as tg:
            for role, address, site in self._sites:
                listeners = await listen_sockets(*parse_address(address))
                for one in listeners:
                    bound = one.extra(SocketAttribute.local_address)
                    if isinstance(bound, tuple):
                        self.bound.setdefault(role, (str(bound[0]), int(bound[1])))
                        break
                if role == "metrics" and "/healthz" in site.routes and role in self.bound:
                    self.bound["health"] = self.bound[role]
                log.info(
                    "serving",
                    address=address,
                    bound=self.bound.get(role),
                    paths=sorted(site.routes),
                    tls=site.tls is not None,
                    authorized=site.guard is not None,
                )
                cap = self.health_max_connections if role == "health" else self.max_connections
                tg.start_soon(self._serve_address, listeners, site, cap)
            task_status.started()

    async def _serve_address(
        self, listeners: list[anyio.abc.SocketListener], site: Site, cap: int
    ) -> None:
        # one cap for the address, however many sockets (IPv4, IPv6) it listens on
        slots = anyio.Semaphore(cap)
        try:
            async with anyio.create_task_group() as tg:
                for one in listeners:
                    tg.start_soon(self._accept, one, site, slots, tg)
        finally:
            for one in listeners:
                with anyio.CancelScope(shield=True):
                    await one.aclose()

    async def _accept(
        self,
        listener: anyio.abc.SocketListener,
        site: Site,
        slots: anyio.Semaphore,
        tg: TaskGroup,
    ) -> None:
        await accept_loop(
            listener, slots, lambda stream: tg.start_soon(self._handle, stream, site, slots)
        )

    async def _handle(self, raw: SocketStream, site: Site, slots: anyio.Semaphore) -> None:
        try:
            stream: ByteStream = raw
            if site.tls is not None:
                try:
                    # the handshake counts against the time a client has for its head
                    with anyio.fail_after(self.head_timeout):
                        stream = await TLSStream.wrap(
                            raw, server_side=True, ssl_context=site.tls(), standard_compatible=False
                        )
                except (
                    TimeoutError,
                    ssl.SSLError,
                    anyio.EndOfStream,
                    anyio.BrokenResourceError,
                    OSError,
                ):
                    with anyio.CancelScope(shield=True):
                        await raw.aclose()
                    return
            async with stream:
                await self._answer(stream, site)
        finally:
            slots.release()

    async def _answer(self, stream: ByteStream, site: Site) -> None:
        try:
            with anyio.fail_after(self.head_timeout):
                head = await _read_head(stream)
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
            return
        if head is None:
            status, ctype, body = 400, "text/plain", b"bad request\n"
            method = "GET"
        else:
            method, path, query, authorization = head
            handler = site.routes.get(path)
            if handler is None:
                status, ctype, body = 404, "text/plain", b"not found\n"
            elif method not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain", b"method not allowed\n"
            else:
                status, ctype, body = await self._guarded(site, handler, query, authorization, path)
        reply = (
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            + ('WWW-Authenticate: Bearer realm="metrics"\r\n' if status == 401 else "")
            + "Connection: close\r\n\r\n"
        ).encode()
        with anyio.move_on_after(self.write_timeout):
            try:
                await stream.send(reply if method == "HEAD" else reply + body)
            except (anyio.BrokenResourceError, ssl.SSLError, OSError):
                return

    async def _guarded(
        self, site: Site, handler: Handler, query: Query, authorization: str, path: str
    ) -> Response:
        if site.guard is not None:
            try:
                decision = await site.guard(authorization, path)
            except Exception:  # a broken guard refuses, never crashes the server
                log.exception("request guard failed", path=path[:200])
                return 500, "text/plain", b"the request could not be reviewed\n"
            if decision.status != 200:
                return decision.status, "text/plain", f"{decision.reason}\n".encode()
        return handler(query)


async def accept_loop(
    listener: anyio.abc.SocketListener,
    slots: anyio.Semaphore,
    handle: Callable[[SocketStream], object],
) -> None:
    """Accept connections for ever, each after taking one of ``slots`` (released by
    whoever ``handle`` starts, when the connection ends)."""
    backoff = 0.0
    while True:
        # At the cap, connections wait in the backlog rather than take descriptors.
        await slots.acquire()
        try:
            stream = await listener.accept()
        except OSError as exc:
            slots.release()
            backoff = await accept_failed(exc, backoff)
            continue
        except BaseException:
            slots.release()
            raise
        backoff = 0.0
        handle(stream)


async def accept_failed(exc: OSError, backoff: float) -> float:
    """Wait after a failed accept; the next backoff. Out of descriptors or buffers, or
    a connection reset before we took it: a later accept may succeed, and the listening
    socket stays readable meanwhile, so retrying at once would spin."""
    backoff = min(max(backoff * 2, ACCEPT_BACKOFF_MIN), ACCEPT_BACKOFF_MAX)
    log.warning("accept failed, retrying", error=str(exc), retry_in=backoff)
    await anyio.sleep(backoff)
    return backoff


async def listen_sockets(
    host: str | None, port: int, *, backlog: int = 128
) -> list[anyio.abc.SocketListener]:
    """Listening sockets for every address ``host`` names (all interfaces for None),
    resolved here, at start-up, instead of on a worker thread: the process keeps one
    thread. Port 0 binds the first address to an ephemeral port and the rest to it."""
    infos = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE | socket.AI_ADDRCONFIG
    )
    listeners: list[anyio.abc.SocketListener] = []
    for family, kind, proto, _name, addr in dict.fromkeys(infos):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and listeners:
                addr = (addr[0], listeners[0].extra(SocketAttribute.local_port), *addr[2:])
            sock.bind(addr)
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError:
            sock.close()
            if listeners:
                continue  # e.g. IPv6 configured but not usable: the others serve
            raise
        listeners.append(await anyio.abc.SocketListener.from_socket(sock))
    return listeners


async def _read_head(stream: ByteStream) -> tuple[str, str, Query, str] | None:
    """(method, path, query, Authorization value) of the request, or None for a
    malformed or oversized one (a header line without a colon, or two Authorization
    headers)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            return None
        data += await stream.receive()
    head = data.split(b"\r\n\r\n", 1)[0]
    if len(head) > MAX_HEAD_BYTES:
        return None
    first, *lines = head.split(b"\r\n")
    parts = first.split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return None
    authorization: str | None = None
    for line in lines:
        name, colon, value = line.partition(b":")
        if not colon or not name or name != name.strip():
            return None
        if name.lower() == b"authorization":
            if authorization is not None:
                return None
            authorization = value.strip().decode("latin-1")
    method = parts[0].decode("ascii", "replace")
    path, _, query = parts[1].decode("ascii", "replace").partition("?")
    return (
        method,
        path,
        dict(urllib.parse.parse_qsl(query, keep_blank_values=True)),
        (authorization or ""),
    )


def serve_probes(
    *,
    metrics: HasRegistry | None = None,
    metrics_address: str = ":8080",
    health_address: str = ":8081",
    ready: Check | None = None,
    healthy: Check | None = None,
    debug: Debug | None = None,
    metrics_tls: TLSContext | None = None,
    metrics_guard: Guard | None = None,
    max_connections: int = MAX_CONNECTIONS,
    health_max_connections: int | None = None,
) -> Callable[..., Coroutine[Any, Any, None]]:
    """A Manager service serving /metrics from ``metrics.registry``, /debug/queue from
    ``debug`` (both over TLS and behind ``metrics_guard`` when given) and the probes."""
    servers = ProbeServers(
        metrics_address=metrics_address,
        health_address=health_address,
        registry=metrics.registry if metrics is not None else None,
        health_checks=[healthy] if healthy else [],
        ready_checks=[ready] if ready else [],
        debug=debug,
        metrics_tls=metrics_tls,
        metrics_guard=metrics_guard,
        max_connections=max_connections,
        health_max_connections=health_max_connections,
    )
    return servers.serve
