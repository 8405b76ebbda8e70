from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import anyio
import pytest

from controller.observability.addresses import parse_address
from controller.observability.metrics import Metrics
from controller.observability.server import ProbeServers
from controller.serving.certs import self_signed
from controller.serving.tls import memory_context


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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_one_server_when_addresses_are_one_socket() -> None:
    ready = False
    metrics = Metrics()
    port = free_port()
    servers = ProbeServers(
        metrics_address=f"127.0.0.1:{port}",
        health_address=f"127.0.0.1:{port}",
        registry=metrics.registry,
        ready_checks=[lambda: ready],
    )
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        bound = servers.bound["metrics"]
        assert servers.bound["health"] == bound
        assert (await fetch(session, bound, "/healthz"))[0] == 200
        assert (await fetch(session, bound, "/readyz"))[0] == 500
        ready = True
        assert (await fetch(session, bound, "/readyz"))[0] == 200
        status, text = await fetch(session, bound, "/metrics")
        assert status == 200 and "workqueue_depth" in text
        tg.cancel_scope.cancel()


async def test_port_zero_twice_is_two_servers() -> None:
    # the same string, two ephemeral sockets: make run's flags
    servers = ProbeServers(
        metrics_address="127.0.0.1:0", health_address="127.0.0.1:0", registry=Metrics().registry
    )
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        metrics_bound, health_bound = servers.bound["metrics"], servers.bound["health"]
        assert metrics_bound != health_bound
        assert (await fetch(session, metrics_bound, "/metrics"))[0] == 200
        assert (await fetch(session, metrics_bound, "/healthz"))[0] == 404
        assert (await fetch(session, health_bound, "/healthz"))[0] == 200
        tg.cancel_scope.cancel()


def test_overlapping_addresses_are_refused_before_binding() -> None:
    with pytest.raises(ValueError, match="overlapping interfaces"):
        ProbeServers(metrics_address=":9", health_address="127.0.0.1:9")


async def test_two_servers_when_addresses_differ() -> None:
    servers = ProbeServers(
        metrics_address="127.0.0.1:0", health_address="localhost:0", registry=Metrics().registry
    )
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        metrics_bound = servers.bound["metrics"]
        health_bound = servers.bound["health"]
        assert (await fetch(session, metrics_bound, "/metrics"))[0] == 200
        assert (await fetch(session, metrics_bound, "/healthz"))[0] == 404
        assert (await fetch(session, health_bound, "/healthz"))[0] == 200
        assert (await fetch(session, health_bound, "/metrics"))[0] == 404
        tg.cancel_scope.cancel()


async def test_debug_queue_answers_for_the_key_asked() -> None:
    asked: list[str] = []

    def pending(key: str) -> dict[str, object]:
        asked.append(key)
        return {"key": key, "queued": True}

    servers = ProbeServers(
        metrics_address="127.0.0.1:0", health_address="0", registry=Metrics().registry,
        debug=pending,
    )  # fmt: skip
    bare = ProbeServers(metrics_address="127.0.0.1:0", health_address="0")
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        await tg.start(bare.serve)
        (bound,) = servers.bound.values()
        status, text = await fetch(session, bound, "/debug/queue?key=team-a%2Fmnist&x=1")
        assert status == 200 and json.loads(text) == {"key": "team-a/mnist", "queued": True}
        assert (await fetch(session, bound, "/debug/queue"))[0] == 400
        assert (await fetch(session, bound, "/debug/queue?key="))[0] == 400
        assert asked == ["team-a/mnist"]
        # a process that gives no debug function serves no such path
        (bare_bound,) = bare.bound.values()
        assert (await fetch(session, bare_bound, "/debug/queue?key=a/b"))[0] == 404
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


#: A process serving /metrics and the probes on ports of their own under a descriptor
#: limit: argv is the soft RLIMIT_NOFILE, the connection cap and the head timeout. It
#: prints the bound addresses, then serves until killed.
FLOODED_SERVER = """
import json, resource, sys
limit, cap, head_timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
import anyio
from controller.observability.metrics import Metrics
from controller.observability.server import ProbeServers

async def main() -> None:
    servers = ProbeServers(
        metrics_address="127.0.0.1:0", health_address="127.0.0.2:0",
        registry=Metrics().registry, max_connections=cap, head_timeout=head_timeout,
    )
    async with anyio.create_task_group() as tg:
        await tg.start(servers.serve)
        print("bound", json.dumps(servers.bound), flush=True)

anyio.run(main)
"""
#: far more connections than the child's descriptors
FLOOD = 300
CHILD_NOFILE = 64


class Flooded:
    """The child process and what it has printed so far (read on a thread)."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.health_port = 0
        #: descriptors open before the flood
        self.idle_fds = 0
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self) -> str:
        return "".join(self.lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def wait_for(self, what: str, timeout: float = 10.0) -> None:
        """Until ``what`` is printed; fails at once if the process has exited."""
        deadline = time.monotonic() + timeout
        while what not in self.output():
            assert self.alive(), f"the server exited {self.proc.returncode}:\n{self.output()}"
            assert time.monotonic() < deadline, f"never printed {what!r}:\n{self.output()}"
            time.sleep(0.01)


@contextlib.contextmanager
def flooded_server(cap: int, head_timeout: float) -> Iterator[Flooded]:
    """The child, its /metrics port held by FLOOD connections that send nothing or half
    a request head."""
    child = Flooded(
        subprocess.Popen(
            [sys.executable, "-c", FLOODED_SERVER, str(CHILD_NOFILE), str(cap), str(head_timeout)],
            cwd=Path(__file__).resolve().parents[4],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
    )
    socks: list[socket.socket] = []
    try:
        child.wait_for("bound ")
        line = next(ln for ln in child.lines if ln.startswith("bound "))
        bound = json.loads(line.split(" ", 1)[1])
        metrics_port, child.health_port = bound["metrics"][1], bound["health"][1]
        child.idle_fds = child.fds()
        for i in range(FLOOD):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", metrics_port))
            socks.append(s)
            if i % 2:
                with contextlib.suppress(OSError):  # not connected yet: it sends nothing
                    s.send(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        yield child
    finally:
        for s in socks:
            s.close()
        child.proc.kill()
        child.proc.wait()


def healthz(port: int, timeout: float) -> float:
    """Seconds /healthz took to answer 200."""
    started = time.monotonic()
    with urllib.request.urlopen(f"http://127.0.0.2:{port}/healthz", timeout=timeout) as r:
        assert r.status == 200
    return time.monotonic() - started


def test_descriptors_run_out_and_the_process_lives_on() -> None:
    """No cap to speak of: the /metrics flood takes every descriptor and accepts fail
    with EMFILE. The server backs off and retries instead of ending the process, the
    idle connections are closed after the head timeout, and /healthz answers again."""
    with flooded_server(cap=10_000, head_timeout=1.0) as child:
        child.wait_for("Too many open files")
        ran_out = time.monotonic()
        deadline = ran_out + 20
        while True:
            assert child.alive(), f"the server exited:\n{child.output()}"
            try:
                healthz(child.health_port, timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "/healthz never answered"
        assert child.alive()
        # Backing off, each listener fails a few times (5 ms doubling to 1 s) per run of
        # failures (measured: 25 in all over 2.3 s); retrying at once, thousands a second.
        failures = child.output().count("accept failed, retrying")
        assert 0 < failures <= 100 * (time.monotonic() - ran_out + 1), failures


def test_a_metrics_flood_leaves_healthz_answering_at_once() -> None:
    """With a cap under the descriptor limit the /metrics flood holds its slots (the
    head timeout, 60 s, reaps nothing meanwhile), descriptors never run out and /healthz
    answers at once, every time."""
    with flooded_server(cap=16, head_timeout=60.0) as child:
        deadline = time.monotonic() + 10
        while child.fds() < child.idle_fds + 16:
            assert time.monotonic() < deadline, "the flood never took the slots"
            time.sleep(0.01)
        took = [healthz(child.health_port, timeout=2) for _ in range(20)]
        assert max(took) < 1.0, took
        assert child.alive()
        # the slots, and a /healthz connection or two that may not be closed yet
        assert child.fds() <= child.idle_fds + 16 + 2, "the cap did not hold"
        assert "accept failed" not in child.output()


class HugeMetrics(ProbeServers):
    """/metrics far larger than the socket buffers between a client and the server."""

    def _metrics(self) -> tuple[int, str, bytes]:
        return 200, "text/plain", b"#" * (64 << 20)


async def test_a_client_that_never_reads_its_answer_gives_its_slot_back() -> None:
    """One slot: a client asks for /metrics and reads nothing, so the answer can never be
    written. After the write timeout it is dropped, and the next client is answered."""
    servers = HugeMetrics(
        metrics_address="127.0.0.1:0", health_address="0", max_connections=1, write_timeout=0.5
    )
    async with anyio.create_task_group() as tg:
        await tg.start(servers.serve)
        (bound,) = servers.bound.values()
        async with await anyio.connect_tcp(*bound) as stuck:
            await stuck.send(b"GET /metrics HTTP/1.1\r\n\r\n")
            with anyio.fail_after(10):
                answer = await raw_request(bound, b"HEAD /metrics HTTP/1.1\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 200 ")
        tg.cancel_scope.cancel()


# -- secure metrics: TLS, and a guard that answers in the handler's stead ---------------


@dataclasses.dataclass(frozen=True)
class Said:
    status: int
    reason: str = ""


class Gatekeeper:
    """Lets through the token "scraper" only, and remembers what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def __call__(self, authorization: str, path: str) -> Said:
        self.asked.append((authorization, path))
        if not authorization:
            return Said(401, "a bearer token is required")
        if authorization != "Bearer scraper":
            return Said(403, "may not")
        return Said(200)


def tls_pair() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting the server's CA)."""
    pair = self_signed(["localhost", "127.0.0.1"], datetime.now(UTC), "test CA")
    client = ssl.create_default_context(cadata=pair.ca_crt.decode())
    return memory_context(pair.tls_crt, pair.tls_key), client


async def test_secure_metrics_need_tls_and_pass_the_guard_first() -> None:
    server_ctx, client_ctx = tls_pair()
    guard = Gatekeeper()
    servers = ProbeServers(
        metrics_address="127.0.0.1:0",
        health_address="localhost:0",
        registry=Metrics().registry,
        debug=lambda key: {"key": key},
        metrics_tls=lambda: server_ctx,
        metrics_guard=guard,
    )
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        host, port = servers.bound["metrics"]
        url = f"https://{host}:{port}/metrics"

        async def get(url: str, **headers: str) -> tuple[int, str, str | None]:
            async with session.get(url, ssl=client_ctx, headers=headers) as resp:
                return resp.status, await resp.text(), resp.headers.get("WWW-Authenticate")

        status, text, challenge = await get(url)
        assert (status, text, challenge) == (
            401,
            "a bearer token is required\n",
            'Bearer realm="metrics"',
        )
        assert (await get(url, Authorization="Bearer other"))[:2] == (403, "may not\n")
        status, text, _ = await get(url, Authorization="Bearer scraper")
        assert status == 200 and "workqueue_depth" in text
        # the debug path is behind the same guard, asked for its own path
        debug = f"https://{host}:{port}/debug/queue?key=ns/a"
        assert (await get(debug, Authorization="Bearer other"))[0] == 403
        assert guard.asked[-1] == ("Bearer other", "/debug/queue")
        # an unknown path is a 404 without asking anyone
        before = len(guard.asked)
        assert (await get(f"https://{host}:{port}/nope", Authorization="Bearer x"))[0] == 404
        assert len(guard.asked) == before
        # plain HTTP to the TLS port gets no answer, and the probes stay plain
        with pytest.raises(aiohttp.ClientError):
            await fetch(session, (host, port), "/metrics")
        assert (await fetch(session, servers.bound["health"], "/healthz"))[0] == 200
        tg.cancel_scope.cancel()


async def test_a_guard_that_raises_refuses_and_the_server_goes_on() -> None:
    calls = 0

    async def broken(authorization: str, path: str) -> Said:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("boom")
        return Said(200)

    servers = ProbeServers(
        metrics_address="127.0.0.1:0",
        health_address="0",
        registry=Metrics().registry,
        metrics_guard=broken,
    )
    async with anyio.create_task_group() as tg, aiohttp.ClientSession() as session:
        await tg.start(servers.serve)
        bound = servers.bound["metrics"]
        assert (await fetch(session, bound, "/metrics"))[0] == 500
        assert (await fetch(session, bound, "/metrics"))[0] == 200
        tg.cancel_scope.cancel()


def test_secure_metrics_refuse_to_share_the_probes_address() -> None:
    with pytest.raises(ValueError, match="probes on a socket of their own"):
        ProbeServers(
            metrics_address="127.0.0.1:9", health_address="127.0.0.1:9", metrics_guard=Gatekeeper()
        )
    # two ephemeral ports are two sockets: allowed
    ProbeServers(
        metrics_address="127.0.0.1:0", health_address="127.0.0.1:0", metrics_guard=Gatekeeper()
    )


async def test_a_header_line_without_a_colon_or_two_authorizations_is_a_bad_request() -> None:
    servers = ProbeServers(metrics_address="127.0.0.1:0", health_address="0", registry=None)
    async with anyio.create_task_group() as tg:
        await tg.start(servers.serve)
        host, port = servers.bound["metrics"]
        for head in (
            b"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\nAuthorization: a\r\nauthorization: b\r\n\r\n",
            b"GET /metrics HTTP/1.1\r\n Host: folded\r\n\r\n",
        ):
            async with await anyio.connect_tcp(host, port) as stream:
                await stream.send(head)
                answer = await stream.receive()
            assert answer.startswith(b"HTTP/1.1 400 "), head
        tg.cancel_scope.cancel()
