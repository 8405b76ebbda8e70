"""The report endpoint over real TLS on loopback: each answer of its contract, the
connection kept alive between reports, and nothing a client sends ending the server."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import orjson
import pytest
from anyio.abc import ByteStream

from controller.clock import SystemClock
from controller.observability.prometheus import Registry
from controller.serving.limits import Budget, KeyedLimiter
from controller.serving.reports import ReportServer
from controller.serving.tls import FileCertificate
from controller.serving.tokenreview import TokenReviewer, unverified_claims
from controller.types import Caller, Reply
from hack.cluster.pki import make_pki

PATH = "/v1/reports/job-a"
AUDIENCE = "test/job-a"


#: one expiry for every test token: a pod's token is the same string in each request
EXP = int(time.time()) + 3600


def pod_token(pod: str, *, aud: object = AUDIENCE, exp: float | None = None, **more: Any) -> str:
    """A token shaped as the kubelet's projected ones: bound to pod ``pod``."""
    claims = {
        "aud": aud,
        "exp": EXP if exp is None else exp,
        "kubernetes.io": {"namespace": "ns", "pod": {"name": pod, "uid": f"{pod}-uid"}},
        **more,
    }
    part = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{part}.c2ln"


def pod_of(token: str) -> str:
    claims = unverified_claims(token)
    return claims.pod_name if claims else ""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("pki")
    make_pki(d)
    return d


class Sink:
    def __init__(self) -> None:
        self.got: list[tuple[str, Caller, bytes]] = []
        self.deaf: list[tuple[datetime, str]] = []
        self.told = anyio.Event()
        self.fail = False
        #: addresses of pods of ours
        self.known: set[str] = set()

    def audience(self, path: str) -> str | None:
        return AUDIENCE if path == PATH else None

    def precheck(
        self, path: str, pod_name: str, pod_uid: str, issued_at: float | None
    ) -> Reply | None:
        if pod_name.startswith("unknown"):
            return Reply(503, "the pod is not known yet", retry_after=1.0)
        if pod_name.startswith("stranger"):
            return Reply(403, f"pod {pod_name} is not a pod of job-a")
        return None

    def accept(self, path: str, caller: Caller, body: bytes) -> Reply:
        if self.fail:
            raise RuntimeError("a bug in the sink")
        self.got.append((path, caller, body))
        return Reply(204)

    def unheard(self, at: datetime, why: str) -> None:
        self.deaf.append((at, why))
        self.told.set()

    def known_source(self, address: str) -> bool:
        return address in self.known


class Reviews:
    """The apiserver's TokenReview, as far as these tests need it."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    async def post(self, path: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        self.calls += 1
        if self.down:
            raise OSError("connection refused")
        spec = body["spec"]
        pod = pod_of(spec["token"])
        if pod.startswith("good") and spec["audiences"] == [AUDIENCE]:
            user = {
                "username": "system:serviceaccount:ns:default",
                "extra": {"authentication.kubernetes.io/pod-uid": [pod]},
            }
            return {"status": {"authenticated": True, "user": user, "audiences": [AUDIENCE]}}
        return {"status": {"authenticated": False, "error": "invalid bearer token"}}


class Env:
    def __init__(self, server: ReportServer, sink: Sink, reviews: Reviews, ctx: ssl.SSLContext):
        self.server, self.sink, self.reviews, self.ctx = server, sink, reviews, ctx
        self.leading = True
        self.registry = Registry()

    @asynccontextmanager
    async def connect(self, tls: bool = True) -> AsyncIterator[ByteStream]:
        assert self.server.bound is not None
        host, port = self.server.bound
        stream: ByteStream
        if tls:
            stream = await anyio.connect_tcp(
                host, port, tls=True, ssl_context=self.ctx, tls_standard_compatible=False
            )
        else:
            stream = await anyio.connect_tcp(host, port)
        async with stream:
            yield stream


@asynccontextmanager
async def running(pki: Path, **kw: Any) -> AsyncIterator[Env]:
    clock = SystemClock()
    sink, reviews = Sink(), Reviews()
    cert = FileCertificate(pki / "apiserver.crt", pki / "apiserver.key", clock)
    registry = Registry()
    env: Env
    server = ReportServer(
        address="127.0.0.1:0",
        tls=cert.context,
        sink=sink,
        reviewer=TokenReviewer(reviews.post, clock),
        limiter=KeyedLimiter(clock, rate=kw.pop("rate", 100.0), burst=kw.pop("burst", 100)),
        leading=lambda: env.leading,
        registry=registry,
        **kw,
    )
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    env = Env(server, sink, reviews, ctx)
    env.registry = registry
    async with anyio.create_task_group() as tg:
        await tg.start(server.serve)
        yield env
        tg.cancel_scope.cancel()


def request(
    body: bytes = b'{"step": 1}',
    *,
    path: str = PATH,
    token: str | None = "good-1",
    method: str = "POST",
    headers: Mapping[str, str] | None = None,
    raw_token: str | None = None,
) -> bytes:
    """``token``: the pod a projected token is bound to; ``raw_token``: the token as is."""
    h = {"Host": "x", "Content-Type": "application/json", "Content-Length": str(len(body))}
    if raw_token is not None:
        h["Authorization"] = f"Bearer {raw_token}"
    elif token is not None:
        h["Authorization"] = f"Bearer {pod_token(token)}"
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
    return head.encode() + b"\r\n" + body


async def answer(stream: ByteStream) -> tuple[int, dict[str, str], dict[str, Any]]:
    data = b""
    with anyio.fail_after(5):
        while b"\r\n\r\n" not in data:
            data += await stream.receive()
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode().split("\r\n")
        headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(rest) < length:
            rest += await stream.receive()
    return int(lines[0].split()[1]), headers, orjson.loads(rest) if length else {}


async def exchange(env: Env, raw: bytes) -> tuple[int, dict[str, str], dict[str, Any]]:
    async with env.connect() as s:
        await s.send(raw)
        return await answer(s)


async def test_a_report_is_kept_over_one_kept_alive_connection(pki: Path) -> None:
    async with running(pki) as env, env.connect() as s:
        for step in range(3):
            await s.send(request(orjson.dumps({"step": step})))
            status, headers, _ = await answer(s)
            assert status == 204 and "connection" not in headers
        assert env.server.connections == 1
        assert [b for _, _, b in env.sink.got] == [b'{"step":0}', b'{"step":1}', b'{"step":2}']
        caller = env.sink.got[0][1]
        assert caller.username == "system:serviceaccount:ns:default" and caller.key == "good-1"
        # one review for the token, however many reports
        assert env.reviews.calls == 1


@pytest.mark.parametrize(
    ("raw", "status", "words"),
    [
        (request(token=None), 401, "bearer token is required"),
        (request(token="bad"), 401, "unauthorized"),
        (request(headers={"Authorization": "Basic abc"}), 401, "bearer"),
        (request(path="/v1/reports/other"), 404, "no reports are taken"),
        (request(method="GET", body=b""), 405, "only POST"),
        (request(headers={"Content-Type": "text/plain"}), 415, "application/json"),
        (b"POST /x HTTP/1.1\r\nHost: x\r\n\r\n", 411, "Content-Length"),
        (
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            411,
            "Transfer-Encoding",
        ),
        (request(b"x" * 20000), 413, "at most"),
        (b"POST /x HTTP/1.0\r\n\r\n", 400, "request line"),
        (b"POST  /x HTTP/1.1\r\n\r\n", 400, "request line"),
        (b"POST /x HTTP/1.1\r\nA: 1\r\nA: 2\r\n\r\n", 400, "repeated"),
        (b"POST /x HTTP/1.1\r\nBad Name: 1\r\n\r\n", 400, "header line"),
        (b"POST /x HTTP/1.1\r\n folded\r\n\r\n", 400, "header line"),
        (b"POST /x HTTP/1.1\r\nA: \x01\r\n\r\n", 400, "control character"),
        (b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "Content-Length"),
        (b"POST /x HTTP/1.1\r\nX: " + b"a" * 9000 + b"\r\n\r\n", 431, "too large"),
    ],
)
async def test_refusals(pki: Path, raw: bytes, status: int, words: str) -> None:
    async with running(pki) as env:
        got, headers, doc = await exchange(env, raw)
        assert got == status, doc
        assert words.lower() in doc["error"].lower()
        if status == 401:
            assert headers["www-authenticate"] == "Bearer"
        assert env.sink.got == []
        # and the server goes on
        assert (await exchange(env, request()))[0] == 204


async def test_a_malformed_document_is_the_sinks_to_refuse(pki: Path) -> None:
    async with running(pki) as env:
        env.sink.accept = lambda path, caller, body: Reply(400, "step: required", "step")  # type: ignore[method-assign]
        status, _, doc = await exchange(env, request(b"{}"))
        assert (status, doc) == (400, {"error": "step: required", "field": "step"})


async def test_a_pod_over_its_rate_is_told_when_to_come_back(pki: Path) -> None:
    async with running(pki, rate=0.5, burst=2) as env, env.connect() as s:
        statuses = []
        for _ in range(3):
            await s.send(request(token="good-fast"))
            status, headers, _ = await answer(s)
            statuses.append((status, headers.get("retry-after")))
        assert statuses == [(204, None), (204, None), (429, "2")]
        # another pod is not held back by it
        assert (await exchange(env, request(token="good-other")))[0] == 204


async def test_not_the_leader_answers_503_and_closes(pki: Path) -> None:
    async with running(pki) as env:
        env.leading = False
        status, headers, doc = await exchange(env, request())
        assert (status, headers["retry-after"], headers["connection"]) == (503, "1", "close")
        assert "leader" in doc["error"] and env.reviews.calls == 0


async def test_an_apiserver_that_cannot_be_asked_is_503_not_401(pki: Path) -> None:
    async with running(pki) as env:
        env.reviews.down = True
        status, headers, _ = await exchange(env, request())
        assert status == 503 and headers["retry-after"] == "2"
        env.reviews.down = False
        assert (await exchange(env, request()))[0] == 204  # nothing was cached


async def test_a_broken_sink_is_a_500_and_the_server_goes_on(pki: Path) -> None:
    async with running(pki) as env:
        env.sink.fail = True
        assert (await exchange(env, request()))[0] == 500
        env.sink.fail = False
        assert (await exchange(env, request()))[0] == 204


async def test_plain_http_and_garbage_end_only_their_connection(pki: Path) -> None:
    async with running(pki) as env:
        async with env.connect(tls=False) as s:
            await s.send(request())
            with anyio.fail_after(5):
                try:
                    data = await s.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    data = b""
            assert not data.startswith(b"HTTP/1.1 204")
        rng = os.urandom
        for n in range(20):
            async with env.connect() as s:
                await s.send(rng(50 + n * 37) + b"\r\n\r\n")
                status, _, _ = await answer(s)
                assert status in (400, 431)
        assert (await exchange(env, request()))[0] == 204


async def test_a_silent_client_is_closed(pki: Path) -> None:
    async with running(pki, first_timeout=0.2) as env, env.connect() as s:
        await s.send(b"POST /x HTTP/1.1\r\n")  # half a head, then nothing
        with anyio.fail_after(5):
            with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, OSError)):
                while True:
                    await s.receive()


async def test_the_listen_backlog_takes_a_whole_job_connecting_at_once(pki: Path) -> None:
    # 1,600 pods connecting together overflowed a backlog of 128: the kernel's SYN
    # retries then held connections for over a minute (hack/bench_progress.py)
    async with running(pki) as env:
        assert env.server.bound is not None
        port = env.server.bound[1]
        done = await anyio.run_process(["ss", "-Hltn", f"sport = :{port}"], check=True)
        out = done.stdout.decode()
        (line,) = out.splitlines()
        assert int(line.split()[2]) == 4096  # Send-Q of a listening socket: its backlog


async def test_a_body_over_the_limit_is_read_before_the_413(pki: Path) -> None:
    # a client still sending found the connection closed before it could read the
    # answer (tests/cluster/test_progress.py saw it once in four runs)
    body = b"x" * 100_000
    async with running(pki) as env, env.connect() as s:
        await s.send(request(body)[: -len(body)])
        for i in range(0, len(body), 10_000):
            await s.send(body[i : i + 10_000])
        status, headers, doc = await answer(s)
        assert (status, headers["connection"]) == (413, "close") and "at most" in doc["error"]


async def closed(stream: ByteStream, within: float = 5.0) -> bool:
    """Whether the server closes ``stream`` within ``within`` seconds."""
    with anyio.move_on_after(within):
        try:
            while await stream.receive():
                pass
        except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
            return True
    return False


@pytest.mark.parametrize(
    "raw",
    [
        request(path="/nothing"),  # 404, before any token is looked at
        request(token="bad"),  # reviewed and refused
        request(raw_token="not-a-jwt"),  # refused unreviewed
        request(token="stranger-1"),  # a pod the sink does not know for the job
        request(headers={"Content-Type": "text/plain"}),  # 415
    ],
    ids=["404", "refused", "not-a-jwt", "stranger", "415"],
)
async def test_only_an_accepted_caller_keeps_its_connection(pki: Path, raw: bytes) -> None:
    # one anonymous client held all 4,096 slots with 404s on kept-alive connections
    async with running(pki) as env, env.connect() as s:
        await s.send(raw)
        status, headers, _ = await answer(s)
        assert status != 204 and headers["connection"] == "close"
        assert await closed(s)


async def test_a_connection_has_a_short_wait_until_its_first_accepted_report(pki: Path) -> None:
    async with running(pki, first_timeout=0.3, idle_timeout=30) as env:
        async with env.connect() as idle:
            t0 = time.monotonic()
            assert await closed(idle)  # never said anything
            assert time.monotonic() - t0 < 3
        async with env.connect() as s:
            await s.send(request())
            assert (await answer(s))[0] == 204
            # kept well past first_timeout once a report was taken
            assert not await closed(s, within=1.0)
            await s.send(request())
            assert (await answer(s))[0] == 204


async def test_tokens_that_cannot_be_the_jobs_are_refused_without_a_review(pki: Path) -> None:
    # a flood of made-up tokens was one TokenReview each (6,510 for 6,510 requests)
    tokens = [
        "x.y",
        "a.b.c",
        pod_token("good-1", aud="other"),
        pod_token("good-1", aud=["other", "more"]),
        pod_token("good-1", exp=time.time() - 3600),
        pod_token("good-1", nbf=time.time() + 3600),
        pod_token(""),
    ]
    async with running(pki) as env:
        for token in tokens:
            status, _, doc = await exchange(env, request(raw_token=token))
            assert (status, doc["error"]) == (401, "unauthorized"), token
        # a pod the sink says is not the job's: its refusal, still unreviewed
        status, _, doc = await exchange(env, request(raw_token=pod_token("stranger-1")))
        assert (status, doc["error"]) == (403, "pod stranger-1 is not a pod of job-a")
        assert env.reviews.calls == 0
        # a pod ahead of the cache is told to come back, still unreviewed
        status, headers, _ = await exchange(env, request(token="unknown-1"))
        assert (status, headers["retry-after"]) == (503, "1") and env.reviews.calls == 0
        # the audience may be one of several
        tok = pod_token("good-1", aud=["other", AUDIENCE])
        assert (await exchange(env, request(raw_token=tok)))[0] == 204


async def test_a_source_holds_at_most_its_share_of_connections(pki: Path) -> None:
    async with running(pki, max_per_source=3) as env:
        async with contextlib.AsyncExitStack() as stack:
            held = [await stack.enter_async_context(env.connect()) for _ in range(3)]
            for s in held:
                await s.send(request())
                assert (await answer(s))[0] == 204
            with pytest.raises(
                (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError)
            ):
                async with env.connect() as extra:
                    await extra.send(request())
                    await answer(extra)
        # the share is given back as connections end
        assert (await exchange(env, request()))[0] == 204


async def test_full_slots_and_failed_reviews_mark_the_endpoint_degraded(pki: Path) -> None:
    async with running(pki, max_connections=2) as env:
        async with env.connect() as a, env.connect() as b:
            await a.send(request())
            await b.send(request(token="good-2"))
            assert (await answer(a))[0] == 204 and (await answer(b))[0] == 204
            # full of accepted reporters, but nobody waits: not degraded
            assert env.server.degraded_at is None
            # a third comer finds nobody to make room: it waits, and that is said
            async with env.connect(tls=False):
                with anyio.fail_after(5):
                    await env.sink.told.wait()
            assert env.server.degraded_at is not None
            assert "slot" in env.server.degraded_reason
        env.server.degraded_at = None
        env.reviews.down = True
        assert (await exchange(env, request(token="good-3")))[0] == 503
        assert env.server.degraded_at is not None
        assert "review" in env.server.degraded_reason
        # the sink is told each time, the last with when the window was last seen
        whys = [why for _, why in env.sink.deaf]
        assert any("slot" in w for w in whys) and "review" in whys[-1]
        assert env.sink.deaf[-1][0] == env.server.degraded_at


async def test_a_full_window_is_marked_again_at_its_end(pki: Path) -> None:
    async with running(pki, max_connections=1) as env:
        async with env.connect() as a:
            await a.send(request())
            assert (await answer(a))[0] == 204
            async with env.connect(tls=False):
                with anyio.fail_after(5):
                    await env.sink.told.wait()
                began = env.server.degraded_at
                assert began is not None  # b waits for a's slot
                env.sink.told = anyio.Event()
                await a.aclose()
                # a's slot given back to b: the window's end is marked then
                with anyio.fail_after(5):
                    await env.sink.told.wait()
                assert env.server.degraded_at is not None and env.server.degraded_at > began


async def test_at_the_cap_the_oldest_anonymous_connection_makes_room(pki: Path) -> None:
    # one client held every slot with connections that never reported; a new job's
    # pods then could not get a report through and were failed as stalled
    async with running(pki, max_connections=3, first_timeout=30) as env:
        async with contextlib.AsyncExitStack() as stack:
            reporter = await stack.enter_async_context(env.connect())
            await reporter.send(request())
            assert (await answer(reporter))[0] == 204
            idle = [await stack.enter_async_context(env.connect(tls=False)) for _ in range(2)]
            for i in range(2):
                newcomer = await stack.enter_async_context(env.connect())
                await newcomer.send(request(token=f"good-new-{i}"))
                assert (await answer(newcomer))[0] == 204
                assert await closed(idle[i], within=1.0)  # the oldest first
            # the accepted reporter kept its connection through it all
            await reporter.send(request())
            assert (await answer(reporter))[0] == 204
            assert env.registry.sample("reports_connections_evicted_total") == 2
            assert env.server.degraded_at is None
            # every slot now holds an accepted reporter: the next comer waits, said so
            async with env.connect(tls=False):
                with anyio.fail_after(5):
                    await env.sink.told.wait()
            assert "slot" in env.server.degraded_reason


async def test_strangers_share_a_budget_of_new_connections_and_our_pods_are_not_held_to_it(
    pki: Path,
) -> None:
    # a flood of strangers' TLS handshakes took the CPU reporters needed: a kept
    # connection's report waited 1.7 s (p50), a new job's first report 6.3 s
    clock = SystemClock()
    async with running(pki, strangers=Budget(clock, rate=0.001, burst=2)) as env:
        for _ in range(2):
            assert (await exchange(env, request()))[0] == 204
        # the third stranger is closed at accept, before any TLS
        with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError)):
            await exchange(env, request())
        assert (
            env.registry.sample("reports_connections_refused_total", {"reason": "strangers"}) == 1
        )
        # an address a pod of ours has is never held to it
        env.sink.known = {"127.0.0.1"}
        for _ in range(3):
            assert (await exchange(env, request()))[0] == 204
