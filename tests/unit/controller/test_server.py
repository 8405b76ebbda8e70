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


async def raw_request(bound: tuple[str, int], data: bytes) -> bytes:
    async with await anyio.connect_tcp(bound[0], bound[1]) as stream:
        await stream.send(data)
        out = b""
        try:
            while True:
                out += await stream.receive()
        except anyio.EndOfStream:
            return out


async def test_odd_requests_get_plain_answers() -> None:
    servers = ProbeServers(metrics_address="0", health_address="127.0.0.1:0")
    async with anyio.create_task_group() as tg:
        await tg.start(servers.serve)
        (bound,) = servers.bound.values()
        head = await raw_request(bound, b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 OK\r\n") and head.endswith(b"\r\n\r\n")
        assert b"Content-Length: 3\r\n" in head  # the length GET would have, no body
        post = await raw_request(bound, b"POST /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert post.startswith(b"HTTP/1.1 405 ")
        query = await raw_request(bound, b"GET /healthz?verbose HTTP/1.1\r\n\r\n")
        assert query.startswith(b"HTTP/1.1 200 ") and query.endswith(b"ok\n")
        garbage = await raw_request(bound, b"hello\r\n\r\n")
        assert garbage.startswith(b"HTTP/1.1 400 ")
        huge = await raw_request(bound, b"GET /healthz HTTP/1.1\r\nX: " + b"y" * 10_000)
        assert huge.startswith(b"HTTP/1.1 400 ")
        tg.cancel_scope.cancel()
