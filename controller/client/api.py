"""The HTTP layer: cluster config, authentication, throttling, timeouts, JSON.

Contract:
- ``load_configuration`` reads a kubeconfig (explicit path/context, else $KUBECONFIG or
  ~/.kube/config) or, inside a pod, the service-account token; kubernetes-asyncio does
  the parsing (controller.client.auth.kubeconfig), and its generated client is never even loaded.
- ``KubeApi.request`` sends one request and returns the body decoded by orjson into
  plain dicts (no generated models: they cost a double JSON round-trip per object).
  Non-2xx answers and transport failures raise ``controller.errors`` types.
- Bodies are encoded and decoded by controller.client.codec (orjson; large bodies with
  the garbage collector paused).
- All requests, watches included, pass the client's token bucket (qps/burst;
  ``qps <= 0`` disables it), so a hot loop cannot flood the apiserver. Waiting requests
  are served in priority order (``request(priority=...)``). ``sibling()`` gives another
  budget (a bucket of its own, same qps/burst) on the same connections: client-go builds
  one bucket per REST client, so a controller's kinds of traffic (creates, status
  writes, events) do not wait for each other, and this is how to do the same.
- Creates released by the same tick of the rate limit (``ClientSettings.tick`` > 0) go
  out together: the first to arrive waits one turn of the event loop for the others,
  then writes them all at once on one connection (``http.Pool.pipeline``), up to
  ``COALESCE_MAX``; one alone goes as usual. One send and one wake-up for the answers
  instead of one each. Their answers and failures are each caller's own, except that
  an answer that never comes fails the creates behind it too (never sent again: a
  create whose answer is lost is found, or made, by the next pass, as after any
  broken connection). Without a tick nothing waits for company.
- The transport is ``controller.client.http`` (HTTP/1.1 on asyncio streams). Watches use their
  own connection pool: over HTTP/1.1 every open watch pins a connection and would
  otherwise starve ordinary requests. Every request has a total timeout; a stream has a
  per-read timeout instead, so a half-open connection is noticed even though the stream
  itself is long-lived.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import orjson
import structlog

from controller import errors
from controller.client import http
from controller.client.auth import credentials
from controller.client.auth.kubeconfig import config_module, new_configuration, settle_transport
from controller.client.codec import decode_error, decode_json, encode_json
from controller.client.flowcontrol import PRIORITY_NORMAL, TokenBucket, committed
from controller.clock import SystemClock
from controller.observability.logging import remember_secret
from controller.types import JSON, Answers, Clock

if TYPE_CHECKING:
    from kubernetes_asyncio.client.configuration import Configuration

log = structlog.get_logger(__name__)

#: At most this many creates go out together (module doc); at 20 QPS a tick releases 2.
COALESCE_MAX = 8
#: The methods that go out together: creates. A lost answer fails the ones behind it,
#: which is no worse for a create than a broken connection (never retried either way);
#: updates and patches keep the pool's resend of a request a stale connection dropped.
COALESCED_METHODS = frozenset({"POST"})


@dataclass(eq=False, slots=True)
class _Departure:
    """A create waiting to go out with the one that arrived first (``_coalesced``)."""

    target: str
    headers: dict[str, str]
    data: bytes | None
    deadline: float
    answer: asyncio.Future[tuple[int, bytes]]


#: Largest single watch event line we accept (etcd caps objects at 1.5 MiB; JSON of a
#: full object can exceed that a little).
MAX_LINE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ClientSettings:
    qps: float = 50.0
    burst: int = 100
    request_timeout: float = 30.0
    connect_timeout: float = 10.0
    #: No bytes for this long on a stream means the connection is dead. The apiserver
    #: sends a bookmark about every minute on watches that ask for them.
    stream_read_timeout: float = 90.0
    pool_size: int = 50
    #: 0 = unlimited: each watch holds one connection for its whole life.
    stream_pool_size: int = 0
    user_agent: str = "tfjob-controller"
    #: requests waiting for the rate limit go out on multiples of this many seconds
    #: (controller.client.flowcontrol.TokenBucket); 0: each the moment its token is due
    tick: float = 0.0
    #: tokens of the burst only urgent (high-priority) requests may take
    #: (controller.client.flowcontrol.TokenBucket)
    high_reserve: int = 0


async def load_configuration(
    kubeconfig: str | None = None, context: str | None = None
) -> Configuration:
    """Cluster address and credentials: an explicit kubeconfig wins, then in-cluster
    service-account config when running in a pod, then the default kubeconfig."""
    kube_config = config_module()
    cfg = new_configuration()
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
        kube_config.load_incluster_config(client_configuration=cfg)
    else:
        # persist_config: an OIDC refresh saves the new tokens back, as kubectl does
        loader = await kube_config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=cfg, persist_config=True
        )
        credentials.install(cfg, loader)  # an exec plugin's or OIDC token, fetched when due
    settle_transport(cfg, os.environ)  # insecure with a CA refused; proxy env honoured
    return cfg


def _ssl_context(cfg: Configuration) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class KubeApi:
    """One apiserver: two connection pools, auth, throttling, decoding."""

    def __init__(
        self,
        configuration: Configuration,
        settings: ClientSettings | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.configuration = configuration
        self.settings = settings or ClientSettings()
        self._clock = clock or SystemClock()
        self._bucket = TokenBucket(
            self.settings.qps,
            self.settings.burst,
            self._clock,
            tick=self.settings.tick,
            high_reserve=self.settings.high_reserve,
        )
        self._endpoint = http.Endpoint.parse(str(configuration.host))
        self._pool: http.Pool | None = None
        self._stream_pool: http.Pool | None = None
        self._remembered_auth: str | None = None
        #: the creates gathering behind the first of a tick (``_coalesced``), by method
        self._departing: dict[str, list[_Departure]] = {}
        #: the client certificate the pools were opened with (an exec plugin's may
        #: change); pools of an older one, still carrying their streams, are closed
        #: with the client
        self._tls_generation = 0
        self._retired: list[http.Pool] = []
        #: the client whose connections a sibling uses (and closes)
        self._owner: KubeApi | None = None

    def sibling(
        self, *, tick: float | None = None, high_reserve: int = 0, qps: float | None = None
    ) -> KubeApi:
        """The same client with a budget of its own: a token bucket with the same qps (or
        ``qps``; <= 0: none) and burst, over this client's connections (which this
        client closes)."""
        settings = replace(
            self.settings,
            tick=self.settings.tick if tick is None else tick,
            high_reserve=high_reserve,
            qps=self.settings.qps if qps is None else qps,
        )
        child = KubeApi(self.configuration, settings, self._clock)
        child._owner = self._owner or self
        return child

    @classmethod
    async def from_kubeconfig(
        cls,
        kubeconfig: str | None = None,
        context: str | None = None,
        settings: ClientSettings | None = None,
    ) -> KubeApi:
        return cls(await load_configuration(kubeconfig, context), settings)

    async def __aenter__(self) -> KubeApi:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owner is not None:
            return  # the connections are the owner's
        for pool in (self._pool, self._stream_pool, *self._retired):
            if pool is not None:
                await pool.close()
        self._pool = self._stream_pool = None
        self._retired.clear()

    def _new_pool(self, limit: int) -> http.Pool:
        cfg = self.configuration
        # Building a TLS context loads CA certificates (system ones when the kubeconfig
        # names none: ~0.1 s): skip it for a plain-HTTP apiserver (local stand-ins).
        tls = self._endpoint.scheme == "https"
        return http.Pool(
            self._endpoint,
            ssl_context=_ssl_context(cfg) if tls else None,
            server_hostname=cfg.tls_server_name or None,
            proxy=http.Proxy.parse(str(cfg.proxy)) if cfg.proxy else None,
            limit=limit,
            connect_timeout=self.settings.connect_timeout,
            headers={"User-Agent": self.settings.user_agent, "Accept": "application/json"},
        )

    def _get_pool(self, stream: bool) -> http.Pool:
        if self._owner is not None:
            return self._owner._get_pool(stream)
        creds = credentials.of(self.configuration)
        if creds is not None and creds.tls_generation != self._tls_generation:
            # a new client certificate: new connections carry it, open streams go on
            self._tls_generation = creds.tls_generation
            self._retired += [p for p in (self._pool, self._stream_pool) if p is not None]
            self._pool = self._stream_pool = None
        if stream:
            if self._stream_pool is None:
                self._stream_pool = self._new_pool(self.settings.stream_pool_size)
            return self._stream_pool
        if self._pool is None:
            self._pool = self._new_pool(self.settings.pool_size)
        return self._pool

    async def _auth_headers(self) -> dict[str, str]:
        headers: dict[str, str] = {}
        creds = credentials.of(self.configuration)
        if creds is not None and "BearerToken" not in self.configuration.api_key:
            # a client certificate from an exec plugin: no token whose read runs the hook
            await creds.refresh(self.configuration)
        # auth_settings() runs the token refresh hook (in-cluster projected tokens rotate)
        settings = await self.configuration.auth_settings()
        bearer = settings.get("BearerToken")
        if bearer and bearer.get("value"):
            headers["Authorization"] = str(bearer["value"])
        elif self.configuration.username:
            headers["Authorization"] = str(self.configuration.get_basic_auth_token())
        auth = headers.get("Authorization")
        if auth is not None and auth != self._remembered_auth:
            # once per credential (tokens rotate), not once per request
            remember_secret(auth)
            remember_secret(str(self.configuration.password or ""))
            self._remembered_auth = auth
        return headers

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
        priority: int = PRIORITY_NORMAL,
        decode: bool = True,
    ) -> JSON:
        """Send one request; return the decoded JSON body ({} when empty). ``priority``
        orders it among requests waiting for the client-side rate limit
        (``controller.queue.ratelimit.PRIORITY_*``; lower goes first). ``decode=False``:
        a 2xx answer's body is not decoded and {} is returned (for callers that only
        need to know the write was made); a failure is decoded and raised as ever."""
        data = None if body is None else encode_json(body)
        total = request_timeout if request_timeout is not None else self.settings.request_timeout
        target = _target(path, params)
        loop = asyncio.get_running_loop()
        for attempt in range(2):
            headers = await self._auth_headers()
            pool = self._get_pool(stream=False)  # after: the credential may be new
            if data is not None:
                headers["Content-Type"] = content_type
            await self._bucket.acquire(priority)
            committed()  # from here the request goes out: background work can't recall it
            try:
                deadline = loop.time() + total
                if self.settings.tick > 0 and method in COALESCED_METHODS:
                    status, raw = await self._coalesced(
                        pool, method, target, headers, data, deadline
                    )
                else:
                    status, raw = await pool.request(
                        method, target, headers=headers, body=data, deadline=deadline
                    )
            except OSError as exc:  # TimeoutError included
                msg = f"{method} {path}: {type(exc).__name__}: {exc}"
                raise errors.ConnectionFailed(msg) from exc
            if status == 401 and attempt == 0 and await self._renew_credentials(method, path):
                continue  # a fresh credential: the same request once more
            break
        return _answer(method, path, status, raw, decode)

    async def _coalesced(
        self,
        pool: http.Pool,
        method: str,
        target: str,
        headers: dict[str, str],
        data: bytes | None,
        deadline: float,
    ) -> tuple[int, bytes]:
        """One create, sent with the others the same tick released (module doc)."""
        waiting = self._departing.get(method)
        if waiting is not None and len(waiting) < COALESCE_MAX:
            answer: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
            waiting.append(_Departure(target, headers, data, deadline, answer))
            return await answer
        company: list[_Departure] = []
        self._departing[method] = company
        try:
            # one turn of the loop: the tasks the same tick woke take their tokens and
            # join before this one goes on
            await asyncio.sleep(0)
        except BaseException as exc:
            _fail_all(company, exc)
            raise
        finally:
            if self._departing.get(method) is company:
                del self._departing[method]
        if not company:
            return await pool.request(method, target, headers=headers, body=data, deadline=deadline)
        try:
            answers = await pool.pipeline(
                [(method, target, headers, data)]
                + [(method, d.target, d.headers, d.data) for d in company],
                deadline=min(deadline, *(d.deadline for d in company)),
            )
        except BaseException as exc:
            _fail_all(company, exc)
            raise
        for d, got in zip(company, answers[1:], strict=True):
            if d.answer.done():
                continue  # its caller was cancelled meanwhile
            if isinstance(got, BaseException):
                d.answer.set_exception(got)
            else:
                d.answer.set_result(got)
        first = answers[0]
        if isinstance(first, BaseException):
            raise first
        return first

    async def pipeline(
        self,
        method: str,
        writes: Sequence[tuple[str, Any]],
        *,
        content_type: str = "application/json",
        request_timeout: float | None = None,
        decode: bool = True,
    ) -> Answers:
        """``(path, body)`` writes of one method sent together on one connection
        (http.Pool.pipeline), each with its own token of the rate limit: for writes
        nobody waits for, such as events. Each gets its decoded answer (``decode``, as
        for ``request``) or the exception ``request`` would have raised; one that fails
        is not sent again (a 401 only renews the credential for the writes after)."""
        if not writes:
            return []
        bodies = [encode_json(body) for _, body in writes]
        total = request_timeout if request_timeout is not None else self.settings.request_timeout
        headers = await self._auth_headers()
        headers["Content-Type"] = content_type
        pool = self._get_pool(stream=False)
        for _ in writes:
            await self._bucket.acquire(PRIORITY_NORMAL)
        committed()
        loop = asyncio.get_running_loop()
        answers = await pool.pipeline(
            [
                (method, _target(path, None), headers, data)
                for (path, _), data in zip(writes, bodies, strict=True)
            ],
            deadline=loop.time() + total,
        )
        out: Answers = []
        for (path, _), answer in zip(writes, answers, strict=True):
            if isinstance(answer, OSError):
                msg = f"{method} {path}: {type(answer).__name__}: {answer}"
                out.append(errors.ConnectionFailed(msg))
                continue
            try:
                out.append(_answer(method, path, *answer, decode))
            except errors.ApiError as exc:
                out.append(exc)
        if any(isinstance(a, errors.Unauthorized) for a in out):
            await self._renew_credentials(method, writes[0][0])
        return out

    async def _renew_credentials(self, method: str, path: str) -> bool:
        """A 401: fetch the kubeconfig's expiring credential again (exec plugin, OIDC),
        if it has one. True when that gave a new one worth one more try."""
        creds = credentials.of(self.configuration)
        renewed = creds is not None and await creds.renew(self.configuration)
        if not renewed:
            log.warning(
                "unauthorized: the apiserver refused the credential",
                request=f"{method} {path}",
                refreshable=creds is not None,
            )
        return renewed

    @asynccontextmanager
    async def stream(
        self,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        read_timeout: float | None = None,
    ) -> AsyncIterator[AsyncIterator[JSON]]:
        """Open a newline-delimited JSON stream (a watch). The yielded iterator ends on
        a clean close; a read timeout or broken connection raises ConnectionFailed."""
        sock_read = read_timeout if read_timeout is not None else self.settings.stream_read_timeout
        target = _target(path, params)
        async with AsyncExitStack() as stack:
            for attempt in range(2):
                headers = await self._auth_headers()
                pool = self._get_pool(stream=True)
                await self._bucket.acquire()
                try:
                    resp = await stack.enter_async_context(
                        pool.stream("GET", target, headers=headers, read_timeout=sock_read)
                    )
                except OSError as exc:
                    raise errors.ConnectionFailed(
                        f"GET {path}: {type(exc).__name__}: {exc}"
                    ) from exc
                if resp.status == 401 and attempt == 0:
                    await stack.aclose()
                    if await self._renew_credentials("GET", path):
                        continue
                    raise errors.error_from_status(401, {"message": "Unauthorized"})
                break
            if not 200 <= resp.status < 300:
                try:
                    raw = await resp.read()
                except OSError:
                    raw = b""
                raise decode_error(resp.status, raw)
            yield _lines(resp, path)


async def _lines(resp: http.Stream, path: str) -> AsyncIterator[JSON]:
    lines = resp.lines(MAX_LINE_BYTES)
    while True:
        try:
            line = await anext(lines, None)
        except OSError as exc:
            raise errors.ConnectionFailed(f"stream {path}: {type(exc).__name__}: {exc}") from exc
        if line is None:
            return
        # orjson accepts the trailing newline (JSON whitespace): no copy to strip it
        if not line.isspace():
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                msg = f"stream {path}: a line that is not JSON ({exc})"
                raise errors.ConnectionFailed(msg) from exc
            yield event


def _fail_all(company: Sequence[_Departure], exc: BaseException) -> None:
    """The creates waiting on a first one that failed before their answers came: each
    fails as a broken connection would fail it (sent or not, never sent again)."""
    lost = exc
    if not isinstance(exc, OSError):
        lost = ConnectionAbortedError(
            f"the create it was sent with ended first: {type(exc).__name__}"
        )
    for d in company:
        if not d.answer.done():
            d.answer.set_exception(lost)


def _answer(method: str, path: str, status: int, raw: bytes, decode: bool = True) -> JSON:
    """A 2xx answer's decoded body ({} when empty, or not to be decoded); any other
    status as its API error."""
    if not 200 <= status < 300:
        raise decode_error(status, raw)
    if not raw or not decode:
        return {}
    try:
        decoded = decode_json(raw)
    except orjson.JSONDecodeError as exc:
        # a proxy's or load balancer's page, a truncated body: no usable answer
        msg = f"{method} {path}: a {status} answer whose body is not JSON ({exc})"
        raise errors.ConnectionFailed(msg) from exc
    return decoded if isinstance(decoded, dict) else {"items": decoded}


def _target(path: str, params: Mapping[str, str] | None) -> str:
    return f"{path}?{urlencode(params)}" if params else path
