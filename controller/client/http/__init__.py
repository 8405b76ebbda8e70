"""A small HTTP/1.1 client for one server: pools of keep-alive connections on asyncio streams.

Why not aiohttp: the controller talks to one apiserver, sends JSON with a length and
reads JSON back. aiohttp's general machinery around each request (URL objects, header
multidicts, tracing signals, cookies, payload writers) cost about as much CPU as the TLS
under it, and importing it costs some 13 MB of resident memory, a quarter of an idle
controller. What the apiserver needs is small, and all of it is here:

- requests with a ``Content-Length`` body, one at a time or pipelined; responses
  framed by ``Content-Length``, ``Transfer-Encoding: chunked`` (watches) or the
  connection's close;
- keep-alive reuse, a bound on connections open at once, and one retry on a fresh
  connection when a reused one turns out to have been closed by the server, for the
  methods Go's transport replays (``REPEATABLE``: GET, HEAD, OPTIONS, TRACE; a PUT,
  DELETE or POST is never sent twice);
- TLS with a server name other than the host (kubeconfig ``tls-server-name``);
- an ``http://`` or ``https://`` proxy: CONNECT for an https server, absolute-form
  requests for a plain-http one, ``user:password@`` as Proxy-Authorization.

Contract:
- ``Pool.request`` returns ``(status, body)`` for any status; ``Pool.stream`` yields a
  ``Stream`` whose body is read as lines (a watch) or whole; ``Pool.pipeline`` writes
  several requests at once on one connection (HTTP/1.1 pipelining, for writes nobody
  waits for) and returns each ``(status, body)`` in order, or the ``OSError`` that
  stands in for an answer that never came (that one and every one after it; none is
  sent twice).
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

The parts: ``endpoint`` (the server's address, proxies), ``wire`` (what we send and
what we accept: RFC 9112 read strictly), ``stream`` (a connection and one response read
off it), ``pool`` (connections to one server: connecting, TLS, proxy tunnels, keep-alive
reuse, the bound on open connections).
"""

from controller.client.http.endpoint import Endpoint, Proxy, redact
from controller.client.http.pool import Pool
from controller.client.http.stream import Stream
from controller.client.http.wire import (
    MAX_HEAD,
    READ_LIMIT,
    REPEATABLE,
    InvalidRequest,
    ProtocolError,
)

__all__ = [
    "MAX_HEAD",
    "READ_LIMIT",
    "REPEATABLE",
    "Endpoint",
    "InvalidRequest",
    "Pool",
    "ProtocolError",
    "Proxy",
    "Stream",
    "redact",
]
