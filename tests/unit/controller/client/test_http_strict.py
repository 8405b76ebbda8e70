"""controller.client.http against a misbehaving server: one test per defect of the audit (issue
29, item 8). Each names the defect; each failed against the client before it was made
strict (the line each depends on is in the test's doc)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import anyio
import pytest

from controller import errors
from controller.client import http
from controller.client.api import KubeApi
from controller.client.kube import LEASES, ResourceClient
from tests.unit.controller.client.test_http import (
    chunked,
    new_configuration_for,
    pool,
    raw_server,
    read_request,
)

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


async def one_answer(answer: bytes, *, method: str = "GET") -> tuple[int, bytes]:
    """What the client makes of ``answer`` sent raw to its one request (the server
    then closes)."""

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, [])
        w.write(answer)
        await w.drain()

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            with anyio.fail_after(10):
                return await p.request(method, "/", headers={})
        finally:
            await p.close()


# -- desync: bytes after a complete answer -------------------------------------------


@pytest.mark.parametrize("when", ["with the answer", "while idle"])
async def test_a_connection_with_bytes_left_after_an_answer_is_not_reused(when: str) -> None:
    """Depends on ``_unread(self.reader)`` in ``_Connection.open``: without it the
    second request reads the stray answer and every later one is one behind."""

    stray = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nwrong"

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        i = 0
        while True:
            await read_request(r, [])
            i += 1
            body = b"%d-%d" % (n, i)
            answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
            if n == 1 and when == "with the answer":
                w.write(answer + stray)  # one write: read along with the answer
            else:
                w.write(answer)
                await w.drain()
                if n == 1:
                    await asyncio.sleep(0.02)
                    w.write(stray)  # arrives while the connection waits in the pool

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            assert await p.request("GET", "/", headers={}) == (200, b"1-1")
            await asyncio.sleep(0.1)
            assert await p.request("GET", "/", headers={}) == (200, b"2-1")
            assert await p.request("GET", "/", headers={}) == (200, b"2-2")
        finally:
            await p.close()


# -- malformed answers refused -------------------------------------------------------

REFUSED = {
    # name: (answer, the ProtocolError's message) -- the line each depends on follows
    # _content_length's "seen != length"
    "two different Content-Lengths": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 2\r\n\r\n{}",
        "two different Content-Lengths",
    ),
    # _content_length's _LENGTH.fullmatch (int() takes a sign, spaces and underscores)
    "Content-Length +2": (b"HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n{}", "bad Content-Length"),
    "negative Content-Length": (
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}",
        "bad Content-Length",
    ),
    "Content-Length 1_0": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n0123456789",
        "bad Content-Length",
    ),
    # _HEAD's status group [0-9]{3} (int() takes 2_00)
    "status 2_00": (b"HTTP/1.1 2_00 OK\r\nContent-Length: 2\r\n\r\n{}", "bad status line"),
    # _CHUNK_LINE (int(x, 16) takes 0x2 and -1)
    "chunk size 0x2": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n{}\r\n0\r\n\r\n",
        "bad chunk line",
    ),
    "chunk size -1": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n{}\r\n0\r\n\r\n",
        "bad chunk line",
    ),
    # chunks()'s data[-2:] != b"\r\n"
    "chunk data not followed by CRLF": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XY0\r\n\r\n",
        "chunk data not followed by CRLF",
    ),
    # _framing's value.lower() != b"chunked" (it was a substring test)
    "Transfer-Encoding chunked, identity": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, identity\r\n\r\n" + chunked(b"{}"),
        "only chunked is read",
    ),
    "two Transfer-Encoding fields": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked(b"{}"),
        "two Transfer-Encoding fields",
    ),
    "Transfer-Encoding xchunkedx": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: xchunkedx\r\n\r\n" + chunked(b"{}"),
        "only chunked is read",
    ),
    # _HEAD's field lines (a line starting with a space is no token) and _bad_field_line
    "obs-fold": (
        b"HTTP/1.1 200 OK\r\nX-A: 1\r\n folded\r\nContent-Length: 2\r\n\r\n{}",
        r"obsolete line folding \(obs-fold\)",
    ),
    # _parse_head's len(raw) > MAX_HEAD
    "a 1.5 MiB head": (
        b"HTTP/1.1 200 OK\r\n"
        + b"X-Big: %s\r\n" % (b"x" * (3 << 19))
        + b"Content-Length: 0\r\n\r\n",
        r"an answer head over 262144 bytes",
    ),
    # _parse_head's "length is not None and chunked"
    "Content-Length with Transfer-Encoding": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked(b"{}"),
        "both Content-Length and Transfer-Encoding",
    ),
    # _HEAD's value class and _forbidden
    "a control character in a value": (
        b"HTTP/1.1 200 OK\r\nX-A: a\x01b\r\nContent-Length: 2\r\n\r\n{}",
        "a control character",
    ),
    "a bare CR in a value": (
        b"HTTP/1.1 200 OK\r\nX-A: a\rContent-Length: 0\r\nContent-Length: 2\r\n\r\n{}",
        "a bare CR",
    ),
    "space before the colon": (
        b"HTTP/1.1 200 OK\r\nContent-Length : 2\r\n\r\n{}",
        "bad field line",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
async def test_a_malformed_answer_is_refused(case: str) -> None:
    answer, message = REFUSED[case]
    with pytest.raises(http.ProtocolError, match=message):
        await one_answer(answer)


async def test_identical_content_lengths_are_one_length() -> None:
    """RFC 9112 6.3 allows them; refusing would be stricter than Go and h11."""
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: 2, 2\r\nContent-Length: 2\r\n\r\n{}"
    assert await one_answer(answer) == (200, b"{}")


# -- bodies read in bounded pieces, lines assembled in linear time -------------------


async def test_a_huge_chunk_is_handed_on_in_pieces_and_a_long_line_fails_early() -> None:
    """Depends on chunks()'s ``size <= READ_LIMIT`` split: before, one 48 MiB chunk was
    read whole (``readexactly(size + 2)``) before the line bound was even looked at, so
    here, where the server sends 3 MiB of a 48 MiB chunk and stalls, the client waited."""

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, [])
        w.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n" % (48 << 20))
        w.write(b"x" * (3 << 20))
        await w.drain()
        await asyncio.sleep(30)

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            with anyio.fail_after(10):
                async with p.stream("GET", "/w", headers={}) as s:
                    with pytest.raises(http.ProtocolError, match="a line longer than 1048576"):
                        async for _ in s.lines(1 << 20):
                            pass
            with anyio.fail_after(10):
                async with p.stream("GET", "/w", headers={}) as s:
                    pieces = s.chunks()
                    sizes = [len(await anext(pieces)) for _ in range(2)]
                    await pieces.aclose()
            assert 0 < max(sizes) <= http.READ_LIMIT
        finally:
            await p.close()


class _Fed(http.Stream):
    """A Stream whose body arrives in the given pieces (its lines() is the real one)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = pieces

    async def chunks(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


async def test_a_line_over_many_chunks_costs_linear_time() -> None:
    """Depends on lines() keeping a list of parts (before: ``pending + chunk`` for each
    chunk, quadratic: 300,000 pieces of 16 bytes copied 720 GB, over a minute; now 0.1 s)."""
    pieces = [b"0123456789abcdef"] * 300_000 + [b"\n", b"tail"]
    t0 = time.process_time()
    got = [line async for line in _Fed(pieces).lines(8 << 20)]
    assert time.process_time() - t0 < 3
    assert got == [b"0123456789abcdef" * 300_000 + b"\n", b"tail"]


async def test_lines_split_and_joined_at_every_edge() -> None:
    pieces = [b"a\nb", b"c", b"\nd\n", b"e", b"f\ng"]
    assert [line async for line in _Fed(pieces).lines(10)] == [
        b"a\n",
        b"bc\n",
        b"d\n",
        b"ef\n",
        b"g",
    ]
    with pytest.raises(http.ProtocolError, match="a line longer than 3"):
        _ = [line async for line in _Fed([b"ab", b"cd\n"]).lines(3)]


# -- every failure inside the hierarchy ----------------------------------------------


async def test_a_negative_length_and_a_body_that_is_not_json_are_api_errors() -> None:
    """Depends on _LENGTH (a negative length reached ``readexactly(-1)``: ValueError)
    and on KubeApi.request catching orjson.JSONDecodeError; both escaped every
    ``except errors.ApiError`` (LeaseElector.acquire's among them)."""
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nContent-Length: 15\r\n\r\n<html>hi</html>",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        + chunked(b'{"type":"ADDED"}\n', b"<html>\n"),
    ]

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, [])
        w.write(answers[n - 1])
        await w.drain()

    async with raw_server(script) as (url, _):
        api = KubeApi(new_configuration_for(url))
        leases = ResourceClient(api, LEASES)
        try:
            with pytest.raises(errors.ConnectionFailed, match="bad Content-Length"):
                await leases.get("ns", "leader")
            with pytest.raises(errors.ConnectionFailed, match="not JSON"):
                await leases.get("ns", "leader")
            with pytest.raises(errors.ConnectionFailed, match="not JSON"):
                async with leases.watch("ns") as events:
                    async for _ in events:
                        pass
        finally:
            await api.close()


async def test_a_header_value_outside_latin_1_is_refused_before_sending() -> None:
    """Depends on _check_header's _FIELD_VALUE (before: UnicodeEncodeError from the
    encode, no OSError)."""
    p = pool("http://127.0.0.1:1")
    try:
        with pytest.raises(http.InvalidRequest, match="outside latin-1") as caught:
            await p.request("GET", "/", headers={"Authorization": "Bearer \u20ac"})
        assert isinstance(caught.value, OSError) and "Bearer" not in str(caught.value)
    finally:
        await p.close()


async def test_obs_text_in_an_answer_head_is_read_as_bytes() -> None:
    """Not a regression (heads were bytes before): bytes over 0x7f in a reason or a
    value are obs-text, allowed, and never decoded."""
    answer = b"HTTP/1.1 200 \xc3\xa9t\xe9\r\nX-A: \xff\xfe\r\nContent-Length: 2\r\n\r\n{}"
    assert await one_answer(answer) == (200, b"{}")


# -- Connection, replays, the request line -------------------------------------------


async def test_connection_close_among_other_tokens_is_honoured() -> None:
    """Depends on _framing's token list (before: the whole value had to be "close")."""
    connections = 0

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        nonlocal connections
        connections = n
        while True:
            await read_request(r, [])
            w.write(b"HTTP/1.1 200 OK\r\nConnection: X-Foo , CLOSE\r\nContent-Length: 2\r\n\r\n{}")

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            for _ in range(2):
                assert await p.request("GET", "/", headers={}) == (200, b"{}")
        finally:
            await p.close()
    assert connections == 2, "the server said close: a new connection for the second"


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
async def test_a_write_is_not_replayed_on_a_stale_connection(method: str) -> None:
    """Depends on REPEATABLE (before: PUT and DELETE were in it)."""
    heads: list[bytes] = []

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        await read_request(r, heads)
        w.write(OK)
        await w.drain()
        await read_request(r, heads)  # then closes without an answer, as if idle-closed

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            assert await p.request("GET", "/a", headers={}) == (200, b"{}")
            with pytest.raises(OSError):
                await p.request(method, "/b", headers={}, body=b"{}")
        finally:
            await p.close()
    assert [h.split(b" ", 1)[0] for h in heads] == [b"GET", method.encode()], "sent once"


@pytest.mark.parametrize("target", ["/a\r\nX-Evil: 1", "/a b", "/a\x00", "/a\tb", "/caf\u00e9", ""])
async def test_a_request_target_that_could_write_lines_is_refused(target: str) -> None:
    """Depends on _check_request_line (before: sent as given; a CRLF wrote a field)."""
    received: list[bytes] = []

    async def script(r: asyncio.StreamReader, w: asyncio.StreamWriter, n: int) -> None:
        received.append(await r.read())

    async with raw_server(script) as (url, _):
        p = pool(url)
        try:
            with pytest.raises(http.InvalidRequest, match="target"):
                deadline = asyncio.get_running_loop().time() + 5
                await p.request("GET", target, headers={}, deadline=deadline)
        finally:
            await p.close()
        await asyncio.sleep(0.05)
    assert received in ([], [b""]), "nothing was sent"
