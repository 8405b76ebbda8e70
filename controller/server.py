"""HTTP endpoints: /metrics, /healthz, /readyz.

Contract: one aiohttp server per distinct bind address. With the defaults
(--metrics-bind-address :8080, --health-probe-bind-address :8081) that is two servers,
/metrics on the first and the probes on the second; when both flags name the same
address, one server serves all three paths. An address of "0" disables that endpoint
set (controller-runtime's convention). ":8080" binds every interface.

- /healthz: 200 while every health check passes (the process is alive and, when
  leading, still renewing); 500 otherwise.
- /readyz: 200 once every readiness check passes (caches synced); 500 before.
Checks are plain callables returning bool, so this module knows nothing of informers.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio
import structlog
from aiohttp import web
from anyio.abc import TaskStatus
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = structlog.get_logger("controller.server")

Check = Callable[[], bool]


class HasRegistry(Protocol):
    registry: CollectorRegistry


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


def _check_handler(checks: Sequence[Check], name: str) -> Callable[[web.Request], object]:
    async def handler(request: web.Request) -> web.Response:
        failing = []
        for check in checks:
            try:
                ok = check()
            except Exception:  # a broken check reports unhealthy, never crashes the server
                ok = False
            if not ok:
                failing.append(getattr(check, "__name__", repr(check)))
        if failing:
            return web.Response(status=500, text=f"{name} failed: {', '.join(failing)}\n")
        return web.Response(text="ok\n")

    return handler


class ProbeServers:
    """The HTTP servers of one process; ``serve`` is a Manager service."""

    def __init__(
        self,
        *,
        metrics_address: str = ":8080",
        health_address: str = ":8081",
        registry: CollectorRegistry | None = None,
        health_checks: Sequence[Check] = (),
        ready_checks: Sequence[Check] = (),
    ) -> None:
        self.registry = registry
        self.health_checks = list(health_checks)
        self.ready_checks = list(ready_checks)
        self._apps: dict[str, web.Application] = {}
        if metrics_address != "0":
            self._app_for(metrics_address).router.add_get("/metrics", self._metrics)
        if health_address != "0":
            app = self._app_for(health_address)
            app.router.add_get("/healthz", _check_handler(self.health_checks, "healthz"))  # type: ignore[arg-type]
            app.router.add_get("/readyz", _check_handler(self.ready_checks, "readyz"))  # type: ignore[arg-type]
        self._runners: list[web.AppRunner] = []
        #: bound (host, port) per address after start, for tests using port 0
        self.bound: dict[str, tuple[str, int]] = {}

    def _app_for(self, address: str) -> web.Application:
        if address not in self._apps:
            self._apps[address] = web.Application()
        return self._apps[address]

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.registry is None:
            return web.Response(status=404)
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def start(self) -> None:
        for address, app in self._apps.items():
            host, port = parse_address(address)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            await runner.setup()
            site = web.TCPSite(runner, host, port)
            await site.start()
            self._runners.append(runner)
            if runner.addresses:
                bound = runner.addresses[0]
                self.bound[address] = (str(bound[0]), int(bound[1]))
            paths = sorted(r.canonical for r in app.router.resources())
            log.info("serving", address=address, bound=self.bound.get(address), paths=paths)

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()

    async def serve(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Start, report started, run until cancelled, then stop (a Manager service)."""
        await self.start()
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await self.stop()


def serve_probes(
    *,
    metrics: HasRegistry | None = None,
    metrics_address: str = ":8080",
    health_address: str = ":8081",
    ready: Check | None = None,
    healthy: Check | None = None,
) -> Callable[..., Coroutine[Any, Any, None]]:
    """A Manager service serving /metrics from ``metrics.registry`` and the probes."""
    servers = ProbeServers(
        metrics_address=metrics_address,
        health_address=health_address,
        registry=metrics.registry if metrics is not None else None,
        health_checks=[healthy] if healthy else [],
        ready_checks=[ready] if ready else [],
    )
    return servers.serve
