"""HTTP endpoints: /metrics, /debug/queue, /healthz, /readyz.

Contract: one server per distinct bind address. With the defaults
(--metrics-bind-address :8080, --health-probe-bind-address :8081) that is two servers,
/metrics on the first and the probes on the second; when both flags name the same
address, one server serves all three paths. An address of "0" disables that endpoint
set (controller-runtime's convention). ":8080" binds every interface.

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
- Each server takes at most ``max_connections`` (256) at once; more wait in the
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
import urllib.parse
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio
import anyio.abc
import orjson
import structlog
from anyio.abc import SocketAttribute, SocketStream, TaskGroup, TaskStatus

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


class HasRegistry(Protocol):
    registry: Registry


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--metrics-bind-address", default=":8080", help='address for /metrics ("0" disables)'
    )
    parser.add_argument(
        "--health-probe-bind-address",
        default=":8081",
        help='address for /healthz and /readyz ("0" disables)',
    )


def parse_address(address: str) -> tuple[str | None, int]:
    """ ":8080" → (None, 8080) meaning all interfaces; "127.0.0.1:0" → ephemeral port."""
    host, sep, port = address.rpartition(":")
    if not sep:
        raise ValueError(f"bind address {address!r} has no port")
    host = host.strip("[]")
    return (host or None), int(port)


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
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


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
        max_connections: int = MAX_CONNECTIONS,
        head_timeout: float = HEAD_TIMEOUT_SECONDS,
        write_timeout: float = WRITE_TIMEOUT_SECONDS,
    ) -> None:
        self.registry = registry
        self.max_connections = max_connections
        self.head_timeout = head_timeout
        self.write_timeout = write_timeout
        self.health_checks = list(health_checks)
        self.ready_checks = list(ready_checks)
        #: the paths each bind address serves
        self._routes: dict[str, dict[str, Handler]] = {}
        self._debug = debug
        if metrics_address != "0":
            routes = self._routes.setdefault(metrics_address, {})
            routes["/metrics"] = lambda _: self._metrics()
            if debug is not None:
                routes["/debug/queue"] = self._debug_queue
        if health_address != "0":
            routes = self._routes.setdefault(health_address, {})
            routes["/healthz"] = lambda _: _check(self.health_checks, "healthz")
            routes["/readyz"] = lambda _: _check(self.ready_checks, "readyz")
        #: bound (host, port) per address after start, for tests using port 0
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
            for address, routes in self._routes.items():
                listeners = await listen_sockets(*parse_address(address))
                for one in listeners:
                    bound = one.extra(SocketAttribute.local_address)
                    if isinstance(bound, tuple):
                        self.bound.setdefault(address, (str(bound[0]), int(bound[1])))
                        break
                log.info(
                    "serving", address=address, bound=self.bound.get(address), paths=sorted(routes)
                )
                tg.start_soon(self._serve_address, listeners, routes)
            task_status.started()

    async def _serve_address(
        self,
        listeners: list[anyio.abc.SocketListener],
        routes: dict[str, Handler],
    ) -> None:
        # one cap for the address, however many sockets (IPv4, IPv6) it listens on
        slots = anyio.Semaphore(self.max_connections)
        try:
            async with anyio.create_task_group() as tg:
                for one in listeners:
                    tg.start_soon(self._accept, one, routes, slots, tg)
        finally:
            for one in listeners:
                with anyio.CancelScope(shield=True):
                    await one.aclose()

    async def _accept(
        self,
        listener: anyio.abc.SocketListener,
        routes: dict[str, Handler],
        slots: anyio.Semaphore,
        tg: TaskGroup,
    ) -> None:
        await accept_loop(
            listener, slots, lambda stream: tg.start_soon(self._handle, stream, routes, slots)
        )

    async def _handle(
        self,
        stream: SocketStream,
        routes: dict[str, Handler],
        slots: anyio.Semaphore,
    ) -> None:
        try:
            async with stream:
                await self._answer(stream, routes)
        finally:
            slots.release()

    async def _answer(self, stream: SocketStream, routes: dict[str, Handler]) -> None:
        try:
            with anyio.fail_after(self.head_timeout):
                head = await _read_head(stream)
        except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
            return
        if head is None:
            status, ctype, body = 400, "text/plain", b"bad request\n"
            method = "GET"
        else:
            method, path, query = head
            handler = routes.get(path)
            if handler is None:
                status, ctype, body = 404, "text/plain", b"not found\n"
            elif method not in ("GET", "HEAD"):
                status, ctype, body = 405, "text/plain", b"method not allowed\n"
            else:
                status, ctype, body = handler(query)
        reply = (
            f"HTTP/1.1 {status} {_REASONS.get(status, '')}\r\n"
            f"Content-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        ).encode()
        with anyio.move_on_after(self.write_timeout):
            try:
                await stream.send(reply if method == "HEAD" else reply + body)
            except (anyio.BrokenResourceError, OSError):
                return


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
            # Out of descriptors or buffers, or a connection reset before we took
            # it: a later accept may succeed, and the listening socket stays
            # readable meanwhile, so retrying at once would spin.
            backoff = min(max(backoff * 2, ACCEPT_BACKOFF_MIN), ACCEPT_BACKOFF_MAX)
            log.warning("accept failed, retrying", error=str(exc), retry_in=backoff)
            await anyio.sleep(backoff)
            continue
        except BaseException:
            slots.release()
            raise
        backoff = 0.0
        handle(stream)


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


async def _read_head(stream: SocketStream) -> tuple[str, str, Query] | None:
    """(method, path, query) of the request, or None for a malformed or oversized one."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            return None
        data += await stream.receive()
    parts = data.split(b"\r\n", 1)[0].split()
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/"):
        return None
    method = parts[0].decode("ascii", "replace")
    path, _, query = parts[1].decode("ascii", "replace").partition("?")
    return method, path, dict(urllib.parse.parse_qsl(query, keep_blank_values=True))


def serve_probes(
    *,
    metrics: HasRegistry | None = None,
    metrics_address: str = ":8080",
    health_address: str = ":8081",
    ready: Check | None = None,
    healthy: Check | None = None,
    debug: Debug | None = None,
) -> Callable[..., Coroutine[Any, Any, None]]:
    """A Manager service serving /metrics from ``metrics.registry``, /debug/queue from
    ``debug`` and the probes."""
    servers = ProbeServers(
        metrics_address=metrics_address,
        health_address=health_address,
        registry=metrics.registry if metrics is not None else None,
        health_checks=[healthy] if healthy else [],
        ready_checks=[ready] if ready else [],
        debug=debug,
    )
    return servers.serve
