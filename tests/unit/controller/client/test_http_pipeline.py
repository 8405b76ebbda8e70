"""http.Pool.pipeline and KubeApi.pipeline against a scripted server: several requests in
one write, their answers read in order, and what stands in for the answers that never
come."""

from __future__ import annotations

import asyncio

from controller import errors
from controller.client import http
from controller.client.api import ClientSettings, KubeApi
from controller.client.auth.kubeconfig import new_configuration
from controller.client.kube import EVENTS, ResourceClient
from tests.unit.controller.client.test_http import pool, raw_server, read_request


def answer(status: int, body: bytes, *extra: bytes) -> bytes:
    head = b"HTTP/1.1 %d X\r\nContent-Length: %d\r\n" % (status, len(body))
    return head + b"".join(extra) + b"\r\n" + body


async def test_requests_go_out_in_one_write_and_their_answers_come_back_in_order() -> None:
    chunks: list[bytes] = []
    connections = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal connections
        connections = n
        # all three requests must be there before the first answer goes out
        while sum(c.count(b"HTTP/1.1\r\n") for c in chunks) < 3:
            chunks.append(await r.read(65536))
        data = b"".join(chunks)
        bodies = [part.split(b"\r\n\r\n", 1)[1][:1] for part in data.split(b"POST ")[1:]]
        w.write(b"".join(answer(201, b'{"n":"%s"}' % b) for b in bodies))
        await read_request(r, [])  # the connection is kept: a fourth request follows
        w.write(answer(200, b"{}"))

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            requests = [("POST", "/e", {}, b"%d" % i) for i in range(3)]
            got = await p.pipeline(requests)
            assert got == [(201, b'{"n":"0"}'), (201, b'{"n":"1"}'), (201, b'{"n":"2"}')]
            assert await p.request("GET", "/after", headers={}) == (200, b"{}")
        finally:
            await p.close()
    assert connections == 1, "the pipelined connection went back to the pool"


async def test_answers_missing_when_the_server_closes_fail_their_requests() -> None:
    connections = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal connections
        connections = n
        await read_request(r, [])
        if n == 1:
            w.write(answer(201, b"{}"))
            w.close()  # two requests left unanswered
        else:
            w.write(answer(200, b"{}"))

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            got = await p.pipeline([("POST", "/e", {}, b"x")] * 3)
            assert got[0] == (201, b"{}")
            assert all(isinstance(g, http.ProtocolError) for g in got[1:]), got
            assert await p.request("GET", "/after", headers={}) == (200, b"{}")
        finally:
            await p.close()
    assert connections == 2, "a broken pipelined connection is not reused"


async def test_connection_close_ends_the_answers_and_the_connection() -> None:
    connections = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal connections
        connections = n
        await read_request(r, [])
        w.write(answer(201, b"{}", b"Connection: close\r\n"))
        if n > 1:
            w.write(answer(200, b"{}"))

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            got = await p.pipeline([("POST", "/e", {}, b"x")] * 2)
            assert got[0] == (201, b"{}")
            assert isinstance(got[1], http.ProtocolError)
            await p.request("GET", "/after", headers={})
        finally:
            await p.close()
    assert connections == 2


async def test_a_request_that_cannot_be_sent_refuses_the_whole_batch_before_sending() -> None:
    sent = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal sent
        sent += 1

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            bad = ("POST", "/e", {"X": "a\r\nInjected: 1"}, b"x")
            try:
                await p.pipeline([("POST", "/e", {}, b"x"), bad])
            except http.InvalidRequest:
                pass
            else:
                raise AssertionError("a header with a line break went out")
        finally:
            await p.close()
    assert sent == 0


async def test_kubeapi_pipeline_decodes_each_answer_or_its_error() -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        for _ in range(3):
            await read_request(r, [])
        conflict = b'{"kind":"Status","reason":"AlreadyExists","code":409,"message":"exists"}'
        w.write(answer(201, b'{"a":1}') + answer(409, conflict) + answer(201, b"not json"))
        await r.read()

    async with raw_server(script) as (url, _):
        cfg = new_configuration()
        cfg.host = url
        api = KubeApi(cfg, ClientSettings(qps=0))
        try:
            got = await api.pipeline(
                "POST", [("/api/v1/namespaces/a/events", {"n": i}) for i in range(3)]
            )
        finally:
            await api.close()
    assert got[0] == {"a": 1}
    assert isinstance(got[1], errors.AlreadyExists)
    assert isinstance(got[2], errors.ConnectionFailed), "a 2xx whose body is not JSON"


async def test_a_writer_that_needs_no_answers_decodes_only_the_failures() -> None:
    """ResourceClient(answers=False): what succeeded comes back as {} without its body
    being read (even one that is not JSON); a refusal is still its API error."""
    conflict = b'{"kind":"Status","reason":"AlreadyExists","code":409,"message":"exists"}'

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        for _ in range(3):
            await read_request(r, [])
        w.write(answer(201, b'{"a":1}') + answer(409, conflict) + answer(201, b"not json"))
        await read_request(r, [])
        w.write(answer(201, b'{"kind":"Event"}'))
        await read_request(r, [])
        w.write(answer(409, conflict))
        await r.read()

    async with raw_server(script) as (url, _):
        cfg = new_configuration()
        cfg.host = url
        api = KubeApi(cfg, ClientSettings(qps=0))
        quiet = ResourceClient(api, EVENTS, answers=False)
        try:
            got = await quiet.create_many([("a", {"n": i}) for i in range(3)])
            single = await quiet.create("a", {"n": 3})
            try:
                await quiet.create("a", {"n": 4})
            except errors.AlreadyExists as exc:
                refused: Exception | None = exc
            else:
                refused = None
        finally:
            await api.close()
    assert got[0] == {} and got[2] == {}
    assert isinstance(got[1], errors.AlreadyExists)
    assert single == {}
    assert isinstance(refused, errors.AlreadyExists) and "exists" in str(refused)


async def test_a_401_in_a_batch_renews_the_credential_once() -> None:
    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        for _ in range(2):
            await read_request(r, [])
        refused = b'{"kind":"Status","reason":"Unauthorized","code":401,"message":"no"}'
        w.write(answer(201, b"{}") + answer(401, refused))
        await r.read()

    async with raw_server(script) as (url, _):
        cfg = new_configuration()
        cfg.host = url
        api = KubeApi(cfg, ClientSettings(qps=0))
        renewed: list[str] = []

        async def renew(method: str, path: str) -> bool:
            renewed.append(path)
            return True

        api._renew_credentials = renew  # type: ignore[method-assign]
        try:
            got = await api.pipeline("POST", [("/a", {}), ("/b", {})])
        finally:
            await api.close()
    assert got[0] == {} and isinstance(got[1], errors.Unauthorized)
    assert renewed == ["/a"], "renewed once, for the writes after; none sent again"
