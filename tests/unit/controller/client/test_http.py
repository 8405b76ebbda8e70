"""controller.client.http against a scripted server that writes raw bytes: framing (length,
chunked, until close), keep-alive reuse and the stale-connection retry, the read
watchdog, the pool's bound, proxies in absolute form, header injection."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial

import anyio
import pytest

from controller import errors
from controller.client import http
from controller.client.api import KubeApi
from controller.client.auth.kubeconfig import new_configuration

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


@asynccontextmanager
async def raw_server(script: Script) -> AsyncIterator[tuple[str, list[bytes]]]:
    """Runs ``script(reader, writer, n)`` for the n-th connection; yields the base URL
    and the request heads received, in order."""
    heads: list[bytes] = []
    count = 0

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal count
        count += 1
        try:
            await script(reader, writer, count)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", heads
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader, heads: list[bytes]) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    heads.append(head)
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length) if length else b""


def pool(url: str, **kwargs: object) -> http.Pool:
    return http.Pool(http.Endpoint.parse(url), ssl_context=None, **kwargs)  # type: ignore[arg-type]


def chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def test_length_framed_answers_reuse_one_connection() -> None:
    heads: list[bytes] = []
    connections = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal connections
        connections = n
        while True:
            body = await read_request(r, heads)
            answer = b'{"echo":"%s"}' % body
            w.write(b"HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s" % (len(answer), answer))

    async with raw_server(script) as (url, _):
        p = pool(url, headers={"User-Agent": "t"})
        try:
            for i in range(3):
                status, body = await p.request("POST", "/x", headers={}, body=b"%d" % i)
                assert (status, body) == (201, b'{"echo":"%d"}' % i)
        finally:
            await p.close()
    assert connections == 1, "keep-alive: one connection for all three"
    assert heads[0].startswith(b"POST /x HTTP/1.1\r\nHost: 127.0.0.1:")
    assert b"User-Agent: t\r\n" in heads[0] and b"Content-Length: 1\r\n" in heads[0]


async def test_chunked_bodies_and_watch_lines_across_chunk_edges() -> None:
    events = [b'{"type":"ADDED","object":{"n":%d}}\n' % i for i in range(4)]
    # one event split over two chunks, two events in one chunk, blank keep-alive lines
    parts = [events[0][:10], events[0][10:], events[1] + events[2], b"\n", b"  \r\n", events[3]]

    connections = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal connections
        connections = n
        heads: list[bytes] = []
        while True:
            await read_request(r, heads)
            if b"watch=1" in heads[-1]:
                w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(*parts))
            else:
                w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")

    async with raw_server(script) as (url, _):
        api = KubeApi(new_configuration_for(url))
        try:
            for _ in range(2):
                async with api.stream("/api/v1/pods", params={"watch": "1"}) as lines:
                    got = [e async for e in lines]
                assert got == [{"type": "ADDED", "object": {"n": i}} for i in range(4)]
            assert await api.request("GET", "/api/v1") == {}
        finally:
            await api.close()
    assert connections == 2, "a watch read to its end leaves its connection for the next"


async def test_a_body_until_close_and_a_short_body() -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, [])
        if n == 1:
            w.write(b"HTTP/1.0 200 OK\r\n\r\n" + b"x" * 100000)
        else:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            assert await p.request("GET", "/", headers={}) == (200, b"x" * 100000)
            with pytest.raises(OSError, match=r"closed|short|EOF|bytes"):
                await p.request("GET", "/", headers={})
        finally:
            await p.close()


async def test_a_stale_keepalive_connection_is_retried_for_a_get_only() -> None:
    heads: list[bytes] = []
    served = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal served
        await read_request(r, heads)
        served += 1
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await w.drain()
        # the server reads the next request but drops the connection without answering,
        # as a server closing an idle connection at that very moment does
        await read_request(r, heads)

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            assert await p.request("GET", "/a", headers={}) == (200, b"{}")
            assert await p.request("GET", "/b", headers={}) == (200, b"{}")
            assert served == 2, "the GET was sent again on a fresh connection"
            with pytest.raises(OSError):
                await p.request("POST", "/c", headers={}, body=b"{}")
            assert served == 2 and heads[-1].startswith(b"POST /c"), "a POST is never repeated"
        finally:
            await p.close()


async def test_a_silent_stream_times_out_and_a_slow_one_does_not() -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, [])
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(4 if n == 1 else 1):
            await asyncio.sleep(0.15)  # slower than a read timeout's half, faster than it
            w.write(b"%x\r\n%s\r\n" % (3, b"{}\n"))
        await w.drain()
        await asyncio.sleep(30)

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            got: list[bytes] = []
            with pytest.raises(TimeoutError, match=r"no data for 0\.25 s"):
                async with p.stream("GET", "/w", headers={}, read_timeout=0.25) as s:
                    async for line in s.lines(1000):
                        got.append(line)
            assert got == [b"{}\n"] * 4
        finally:
            await p.close()


async def test_the_pool_bound_holds_requests_until_a_connection_is_free() -> None:
    inflight = peak = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal inflight, peak
        while True:
            await read_request(r, [])
            inflight += 1
            peak = max(peak, inflight)
            await asyncio.sleep(0.02)
            inflight -= 1
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    async with raw_server(script) as (url, _):
        p = pool(url, limit=2)
        try:
            async with anyio.create_task_group() as tg:
                for _ in range(8):
                    tg.start_soon(partial(p.request, "GET", "/", headers={}))
        finally:
            await p.close()
    assert peak == 2


async def test_a_plain_http_server_behind_a_proxy_gets_the_absolute_form() -> None:
    heads: list[bytes] = []

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, heads)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    async with raw_server(script) as (proxy_url, _):
        proxy = http.Proxy.parse(proxy_url.replace("http://", "http://u%3A1:p@"))
        p = http.Pool(
            http.Endpoint.parse("http://10.0.0.1:8080/base"), ssl_context=None, proxy=proxy
        )
        try:
            assert await p.request("GET", "/api?x=1", headers={}) == (200, b"")
        finally:
            await p.close()
    assert heads[0].startswith(b"GET http://10.0.0.1:8080/base/api?x=1 HTTP/1.1\r\n")
    assert b"Proxy-Authorization: Basic %s\r\n" % base64.b64encode(b"u:1:p") in heads[0]


async def test_a_header_value_with_a_line_break_is_refused() -> None:
    received: list[bytes] = []

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        received.append(await r.read())

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            with pytest.raises(ValueError, match="line break"):
                await p.request("GET", "/", headers={"Authorization": "Bearer x\r\nEvil: 1"})
        finally:
            await p.close()
        await asyncio.sleep(0.05)
    # refused before a connection was even taken for it
    assert received in ([], [b""]), "nothing was sent"


async def test_an_answer_that_is_not_http_fails_as_a_connection_failure() -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, [])
        w.write(b"SSH-2.0-OpenSSH\r\n\r\n")

    async with raw_server(script) as (url, _):
        api = KubeApi(new_configuration_for(url))
        try:
            with pytest.raises(errors.ConnectionFailed, match=r"not an HTTP/1\.x answer"):
                await api.request("GET", "/api/v1")
        finally:
            await api.close()


def new_configuration_for(url: str):  # type: ignore[no-untyped-def]
    cfg = new_configuration()
    cfg.host = url
    return cfg


async def test_a_request_past_its_deadline_fails_and_its_connection_is_dropped() -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, [])
        if n == 1:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf")  # then nothing
            await asyncio.sleep(30)
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        await r.read()

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            with pytest.raises(TimeoutError):
                await p.request("GET", "/", headers={}, deadline=t0 + 0.2)
            assert 0.2 <= loop.time() - t0 < 2
            # the half-read connection was not pooled: the next request gets a fresh one
            assert await p.request("GET", "/", headers={}, deadline=loop.time() + 5) == (200, b"{}")
        finally:
            await p.close()
