"""KubeApi.request under a ticking rate limit: the creates one tick releases go out
together on one connection (http.Pool.pipeline), each caller with its own answer; a
lost answer fails the creates behind it; nothing waits for company without a tick."""

from __future__ import annotations

import asyncio

import pytest

from controller import errors
from controller.client.api import ClientSettings, KubeApi
from controller.client.auth.kubeconfig import new_configuration
from tests.unit.controller.client.test_http import raw_server, read_request
from tests.unit.controller.client.test_http_pipeline import answer


def client(url: str, tick: float) -> KubeApi:
    cfg = new_configuration()
    cfg.host = url
    return KubeApi(cfg, ClientSettings(qps=20, burst=10, tick=tick))


async def answer_one(r: asyncio.StreamReader, w: asyncio.StreamWriter, status: int) -> None:
    """Answer one request with an empty object and keep the connection open."""
    await read_request(r, [])
    w.write(answer(status, b"{}"))
    await r.read()


def create(api: KubeApi, i: int) -> asyncio.Task[dict[str, object]]:
    return asyncio.ensure_future(api.request("POST", f"/api/v1/x/{i}", body={"n": i}))


async def test_creates_released_together_go_out_in_one_write_each_with_its_answer() -> None:
    writes: list[int] = []

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        data = b""
        while data.count(b"POST ") < 3:
            chunk = await r.read(65536)
            if not chunk:
                return  # the client gave up
            writes.append(chunk.count(b"POST "))
            data += chunk
        # each answer echoes its request's path, so a mix-up shows
        paths = [part.split(b" ", 1)[0] for part in data.split(b"POST ")[1:]]
        w.write(b"".join(answer(201, b'{"path":"%s"}' % p) for p in paths))
        await r.read()

    async with raw_server(script) as (url, _):
        api = client(url, tick=0.1)
        try:
            # the server answers once all three are in: alone they would wait for ever
            got = await asyncio.wait_for(asyncio.gather(*(create(api, i) for i in range(3))), 10)
            assert len(api._get_pool(stream=False)._open) == 1
        finally:
            await api.close()
    assert got == [{"path": f"/api/v1/x/{i}"} for i in range(3)]
    assert writes == [3], "the three in one write"


async def test_without_a_tick_each_create_goes_on_its_own() -> None:
    connections = 0
    arrived = asyncio.Event()

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal connections
        connections = n
        await read_request(r, [])
        if n == 3:
            arrived.set()
        await arrived.wait()  # none is answered before all three are in flight
        w.write(answer(201, b"{}"))
        await r.read()

    async with raw_server(script) as (url, _):
        api = client(url, tick=0.0)
        try:
            got = await asyncio.gather(*(create(api, i) for i in range(3)))
        finally:
            await api.close()
    assert got == [{}, {}, {}]
    assert connections == 3


async def test_a_lost_answer_fails_the_creates_behind_it_and_not_the_one_before() -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        if n == 1:
            for _ in range(3):
                await read_request(r, [])
            w.write(answer(201, b'{"first":true}'))
            w.close()  # the second and third are never answered
            return
        await answer_one(r, w, 201)

    async with raw_server(script) as (url, _):
        api = client(url, tick=0.1)
        try:
            got = await asyncio.wait_for(
                asyncio.gather(*(create(api, i) for i in range(3)), return_exceptions=True), 10
            )
            # the client goes on: a later create gets a connection of its own
            assert await api.request("POST", "/api/v1/x/later", body={}) == {}
        finally:
            await api.close()
    assert got[0] == {"first": True}
    assert all(isinstance(g, errors.ConnectionFailed) for g in got[1:]), got


async def test_creates_waiting_on_a_first_one_that_is_cancelled_fail_unsent() -> None:
    received = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal received
        while await r.read(65536):
            received += 1

    async with raw_server(script) as (url, _):
        api = client(url, tick=0.1)
        try:
            tasks = [create(api, i) for i in range(3)]
            await asyncio.sleep(0)  # each took its token; the first waits one turn for company
            assert len(api._departing["POST"]) == 2
            tasks[0].cancel()
            got = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        finally:
            await api.close()
    assert isinstance(got[0], asyncio.CancelledError)
    assert all(isinstance(g, errors.ConnectionFailed) for g in got[1:]), got
    assert "ended first" in str(got[1])
    assert received == 0, "nothing was sent"


@pytest.mark.parametrize("method", ["PUT", "PATCH", "GET"])
async def test_only_creates_wait_for_company(method: str) -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await answer_one(r, w, 200)

    async with raw_server(script) as (url, _):
        api = client(url, tick=0.1)
        try:
            task = asyncio.ensure_future(api.request(method, "/api/v1/x/0", body={}))
            await asyncio.sleep(0)
            assert api._departing == {}
            assert await task == {}
        finally:
            await api.close()
