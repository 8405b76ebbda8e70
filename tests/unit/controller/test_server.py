from __future__ import annotations

import aiohttp
import anyio
import pytest

from controller.metrics import Metrics
from controller.server import ProbeServers, parse_address


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        pytest.param(":8080", (None, 8080), id="all-interfaces"),
        pytest.param("127.0.0.1:0", ("127.0.0.1", 0), id="ephemeral"),
        pytest.param("[::1]:9000", ("::1", 9000), id="ipv6"),
    ],
)
def test_parse_address(address: str, expected: tuple[str | None, int]) -> None:
    assert parse_address(address) == expected


async def fetch(
    session: aiohttp.ClientSession, bound: tuple[str, int], path: str
) -> tuple[int, str]:
    async with session.get(f"http://{bound[0]}:{bound[1]}{path}") as resp:
        return resp.status, await resp.text()


async def test_one_server_when_addresses_match() -> None:
    ready = False
    metrics = Metrics()
    servers = ProbeServers(
        metrics_address="127.0.0.1:0",
        health_address="127.0.0.1:0",
        registry=metrics.registry,
        ready_checks=[lambda: ready],
    )
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        assert len(servers.bound) == 1
        (bound,) = servers.bound.values()
        assert (await fetch(session, bound, "/healthz"))[0] == 200
        assert (await fetch(session, bound, "/readyz"))[0] == 500
        ready = True
        assert (await fetch(session, bound, "/readyz"))[0] == 200
        status, text = await fetch(session, bound, "/metrics")
        assert status == 200 and "workqueue_depth" in text
        tg.cancel_scope.cancel()


async def test_two_servers_when_addresses_differ() -> None:
    servers = ProbeServers(
        metrics_address="127.0.0.1:0", health_address="localhost:0", registry=Metrics().registry
    )
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        metrics_bound = servers.bound["127.0.0.1:0"]
        health_bound = servers.bound["localhost:0"]
        assert (await fetch(session, metrics_bound, "/metrics"))[0] == 200
        assert (await fetch(session, metrics_bound, "/healthz"))[0] == 404
        assert (await fetch(session, health_bound, "/healthz"))[0] == 200
        assert (await fetch(session, health_bound, "/metrics"))[0] == 404
        tg.cancel_scope.cancel()
