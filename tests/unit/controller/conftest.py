from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from aiohttp import web

from controller.clock import FakeClock
from controller.queue.ratelimit import ItemExponentialRateLimiter
from controller.queue.workqueue import WorkQueue

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@asynccontextmanager
async def running_queue(clock: FakeClock) -> AsyncIterator[WorkQueue[str]]:
    """A queue with its delay loop running and a 1s→10s per-item limiter. (A context
    manager, not a fixture: pytest-asyncio runs fixture teardown in another task, and
    a task group must be exited by the task that entered it.)"""
    q = WorkQueue[str]("test", clock=clock, rate_limiter=ItemExponentialRateLimiter[str](1.0, 10.0))
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.run)
        yield q
        q.shut_down()


async def get_soon(q: WorkQueue[str]) -> str:
    """get() with a safety net so a broken queue fails the test instead of hanging."""
    with anyio.fail_after(5):
        return await q.get()


@asynccontextmanager
async def serving(
    gets: Mapping[str, Handler],
    posts: Mapping[str, Handler] | None = None,
    tls: ssl.SSLContext | None = None,
) -> AsyncIterator[str]:
    """Handlers by route, served on a free loopback port (over TLS when given a server
    context): the base URL (a local stand-in for the apiserver or another server, for
    the real HTTP client)."""
    app = web.Application()
    for route, handler in gets.items():
        app.router.add_get(route, handler)
    for route, handler in (posts or {}).items():
        app.router.add_post(route, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def self_signed(tmp_path: Path, name: str = "test", san: str = "IP:127.0.0.1") -> tuple[Path, Path]:
    """A throwaway certificate (for 127.0.0.1 unless ``san`` says otherwise) and its key
    (openssl): (cert, key)."""
    crt, key = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    subprocess.run(
        "openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1"
        f" -subj /CN={name} -addext subjectAltName={san} -keyout {key} -out {crt}".split(),
        check=True,
        capture_output=True,
    )
    return crt, key
