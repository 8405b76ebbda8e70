"""An HTTPS reverse proxy in front of the local apiserver that answers some requests
itself with an error, for storms a real apiserver would send under overload, or holds
them, for a slow or hung apiserver.

The controller is pointed at the proxy (``kubeconfig()``); every request it makes either
goes through unchanged (bodies and watch streams are relayed as they arrive) or, when
``fault(method, path)`` returns an Injection, is held (``delay``), never answered
(``hang``) or answered with its status and a Kubernetes Status body, before or after it
reached the apiserver. The proxy serves a certificate signed by the cluster's CA and
speaks to the apiserver as the cluster admin.

Every request is kept in ``record`` with monotonic times (``time.monotonic()``, the
same clock in every process of the machine), so a test can say from what the apiserver
side saw when a process sent what, and compare that with its own clock.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
import json
import ssl
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml
from aiohttp import web

import hack.cluster as cluster_mod
from tests.conftest import Cluster


@dataclass(frozen=True)
class Injection:
    #: answer with this error; None: the apiserver's own answer (after ``delay``)
    status: int | None = None
    #: send the request on first and replace the apiserver's answer (the write happened,
    #: the client is told it failed: a timeout or a proxy error after the fact)
    forwarded: bool = False
    #: seconds the request is held before anything else happens; a client that gives up
    #: meanwhile is not forwarded (nobody would read the answer)
    delay: float = 0.0
    #: never answered, nor forwarded: held until the client drops the connection
    hang: bool = False


@dataclass
class Seen:
    """One request as the proxy saw it; times are ``time.monotonic()``."""

    method: str
    path: str
    user_agent: str
    received: float
    #: when it was sent on to the apiserver; None: never
    forwarded: float | None = None
    #: what the client was answered; None: nothing (hung, or the client left first)
    status: int | None = None
    #: when a relayed answer was all written to the client (a watch: when it ended)
    answered: float | None = None


Fault = Callable[[str, str], Injection | None]
REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}
#: How often a held request looks whether its client is still there.
HOLD_POLL = 0.05


def _gone() -> web.Response:
    """The answer to a client that has left: aiohttp drops it, nobody reads it."""
    return web.Response(status=504)


def _serving_cert(pki: Path, out: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    ca_key = serialization.load_pem_private_key((pki / "ca.key").read_bytes(), None)
    ca = x509.load_pem_x509_certificate((pki / "ca.crt").read_bytes())
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fault-proxy")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + dt.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    )
    crt, pem = out / "proxy.crt", out / "proxy.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    return crt, pem


class FaultProxy:
    def __init__(self, cluster: Cluster, workdir: Path, fault: Fault) -> None:
        self.cluster = cluster
        self.workdir = workdir
        self.fault = fault
        self.injected: Counter[tuple[str, str, int, bool]] = Counter()
        self.relayed = 0
        #: every request, in the order received (appended from the proxy's thread)
        self.record: list[Seen] = []
        self.port = cluster_mod.free_port()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None

    # --- life ---------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def kubeconfig(self) -> str:
        """A kubeconfig like the cluster's, pointing at the proxy."""
        cfg = yaml.safe_load(Path(self.cluster.kubeconfig).read_text())
        cfg["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path = self.workdir / "proxy.kubeconfig"
        path.write_text(yaml.safe_dump(cfg))
        return str(path)

    async def _start(self) -> None:
        pki = self.cluster.dir / "pki"
        upstream = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        upstream.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=upstream, limit=0),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            auto_decompress=False,
        )
        serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        serving.load_cert_chain(*_serving_cert(pki, self.workdir))
        app = web.Application(client_max_size=64 * 2**20)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port, ssl_context=serving).start()

    async def _stop(self) -> None:
        # Upstream first: that ends the relayed watches, which would hold the server.
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- requests -----------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        seen = Seen(
            request.method,
            request.path,
            request.headers.get("User-Agent", ""),
            received=time.monotonic(),
        )
        self.record.append(seen)
        injection = self.fault(request.method, request.path)
        if injection is None:
            return await self._relay(request, seen)
        if injection.hang:
            await self._hold(request, None)
            return _gone()
        if injection.delay and not await self._hold(request, injection.delay):
            return _gone()
        if injection.status is None:
            return await self._relay(request, seen)
        kind = request.path.rsplit("/", 1)[-1]
        self.injected[(request.method, kind, injection.status, injection.forwarded)] += 1
        if injection.forwarded:
            await self._relay(request, seen, discard=True)
        else:
            await request.read()
        seen.status = injection.status
        return self._error(injection.status)

    async def _hold(self, request: web.Request, seconds: float | None) -> bool:
        """Wait ``seconds`` (None: for ever); False as soon as the client has gone.
        aiohttp does not cancel a handler whose client left, so this looks."""
        end = None if seconds is None else time.monotonic() + seconds
        while end is None or time.monotonic() < end:
            transport = request.transport
            if transport is None or transport.is_closing():
                return False
            await asyncio.sleep(
                HOLD_POLL if end is None else min(HOLD_POLL, end - time.monotonic())
            )
        return True

    def _error(self, status: int) -> web.Response:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": REASONS.get(status, "InternalError"),
            "message": "injected by the test's fault proxy",
            "code": status,
        }
        headers = {"Retry-After": "1"} if status == 429 else {}
        return web.Response(
            status=status, text=json.dumps(body), content_type="application/json", headers=headers
        )

    async def _relay(
        self, request: web.Request, seen: Seen, discard: bool = False
    ) -> web.StreamResponse:
        self.relayed += 1
        assert self._session is not None
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() in ("content-type", "accept", "user-agent", "accept-encoding")
        }
        upstream = f"https://127.0.0.1:{self.cluster.api.base.rsplit(':', 1)[1]}{request.path_qs}"
        data = await request.read()
        seen.forwarded = time.monotonic()
        async with self._session.request(
            request.method, upstream, data=data, headers=headers
        ) as resp:
            if discard:
                await resp.read()
                return web.Response(status=204)
            seen.status = resp.status
            out = web.StreamResponse(status=resp.status)
            for key in ("Content-Type", "Content-Encoding"):
                if key in resp.headers:
                    out.headers[key] = resp.headers[key]
            await out.prepare(request)
            async for chunk in resp.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            seen.answered = time.monotonic()
            return out
