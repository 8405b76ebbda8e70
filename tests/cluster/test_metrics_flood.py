"""Connections to /metrics cannot end the controller or silence its probes (issue 29,
item 3).

The controller runs with the usual descriptor limit, 1,024, and 2,000 connections are
held against its metrics port on 127.0.0.1, each sending nothing or half a request
head; one the controller closes is opened again at once, until the test is done. It
used to exit 1 at about 1,009 (EMFILE on accept). Now the metrics server takes 256 at
a time and closes each after the 5 s head timeout, so meanwhile /healthz answers
within milliseconds, a TFJob runs to Succeeded and the process lives on.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import selectors
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from tests.cluster.kube import ControllerProcess, Kube, wait_for, wait_job, wait_running
from tests.cluster.policy_helpers import make_job
from tests.conftest import Cluster

#: needs kwok pods that exit on the test's say, and a controller of its own
pytestmark = pytest.mark.local_only

CONNECTIONS = 2000
#: the controller's descriptor limit: the usual default, where the crash was seen
CONTROLLER_NOFILE = 1024
#: controller/observability/server.py's cap on connections and its head timeout
MAX_CONNECTIONS = 256
HEAD_TIMEOUT = 5.0
#: the whole flood, start to end, whatever happens
FLOOD_BUDGET = 120.0


@contextmanager
def soft_nofile(limit: int, *, at_least: bool = False) -> Iterator[None]:
    """This process's soft descriptor limit (and its children's) set to ``limit``, or
    raised to it when ``at_least``."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < limit:
        pytest.skip(f"the hard descriptor limit is {hard}, under {limit}")
    if at_least and (soft == resource.RLIM_INFINITY or soft >= limit):
        yield
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@dataclass
class FloodStats:
    #: connects that completed
    connected: int = 0
    #: connections the server closed (or reset)
    closed_by_server: int = 0
    #: the most established at one time, as the client sees them (the server's held
    #: ones and those waiting in its listen backlog)
    peak_established: int = 0
    established: int = 0
    errors: dict[str, int] = field(default_factory=dict)


class Flood:
    """``n`` connections to 127.0.0.1:``port``, every other one sending half a request
    head once connected, the rest nothing; one the server closes is replaced at once.
    Runs on a thread until stopped, or until FLOOD_BUDGET has passed."""

    def __init__(self, port: int, n: int) -> None:
        self.port = port
        self.n = n
        self.stats = FloodStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._sel = selectors.DefaultSelector()
        self._connecting: set[socket.socket] = set()
        self._seq = 0

    def __enter__(self) -> Flood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _open(self) -> None:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        code = s.connect_ex(("127.0.0.1", self.port))
        if code not in (0, errno.EINPROGRESS):
            self._count(errno.errorcode.get(code, str(code)))
            s.close()
            return
        self._seq += 1
        self._connecting.add(s)
        self._sel.register(s, selectors.EVENT_WRITE, self._seq % 2 == 0)

    def _count(self, what: str) -> None:
        self.stats.errors[what] = self.stats.errors.get(what, 0) + 1

    def _drop(self, s: socket.socket) -> None:
        """Close ``s``; one the server closed is replaced, one it refused is not (a
        server that is gone would have the flood spin)."""
        self._sel.unregister(s)
        s.close()
        if s in self._connecting:
            self._connecting.discard(s)
            return
        self.stats.established -= 1
        self.stats.closed_by_server += 1
        self._open()

    def _run(self) -> None:
        deadline = time.monotonic() + FLOOD_BUDGET
        for _ in range(self.n):
            self._open()
        while not self._stop.is_set() and time.monotonic() < deadline:
            for key, _mask in self._sel.select(0.1):
                s = key.fileobj
                assert isinstance(s, socket.socket)
                if s in self._connecting:
                    code = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    if code:
                        self._count(errno.errorcode.get(code, str(code)))
                        self._drop(s)
                        continue
                    self._connecting.discard(s)
                    self.stats.connected += 1
                    self.stats.established += 1
                    self.stats.peak_established = max(
                        self.stats.peak_established, self.stats.established
                    )
                    self._sel.modify(s, selectors.EVENT_READ)
                    if key.data:  # half a head: a request line and no blank line
                        try:
                            s.send(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                        except OSError:
                            self._drop(s)
                    continue
                try:
                    gone = s.recv(4096) == b""
                except OSError:
                    gone = True
                if gone:
                    self._drop(s)
        for key in list(self._sel.get_map().values()):
            key.fileobj.close()  # type: ignore[union-attr]
        self._sel.close()


@dataclass
class Probes:
    """/healthz asked every 0.1 s on a thread: how long each answer took, and how many
    descriptors the controller (``pid``) had open at the time."""

    port: int
    pid: int
    took: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Probes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            with contextlib.suppress(OSError):
                self.fds.append(len(os.listdir(f"/proc/{self.pid}/fd")))
            started = time.monotonic()
            try:
                with urllib.request.urlopen(
                    f"http://127.0.0.1:{self.port}/healthz", timeout=2
                ) as r:
                    assert r.status == 200
                self.took.append(time.monotonic() - started)
            except (OSError, AssertionError) as exc:
                self.failures.append(f"{time.monotonic() - started:.2f} s: {exc!r}")


@pytest.fixture
def own_controller(
    cluster: Cluster, controller: ControllerProcess, namespace: str
) -> Iterator[ControllerProcess]:
    """A controller of the test's own, seeing only its namespace and started under
    CONTROLLER_NOFILE; the session's is stopped meanwhile, so it cannot act beside it."""
    controller.stop()
    c = ControllerProcess(cluster, f"--namespace={namespace}", log_name="tfjob-controller-flood")
    try:
        with soft_nofile(CONTROLLER_NOFILE):
            c.start()
        yield c
    finally:
        if c.proc is not None:
            c.stop()
        controller.start()


def test_2000_connections_to_metrics_leave_healthz_and_the_controller_working(
    own_controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    c = own_controller
    proc = c.proc
    assert proc is not None

    def alive() -> bool:
        """True, or fails the wait at once: a controller that exited will not recover."""
        if proc.poll() is not None:
            raise RuntimeError(f"the controller exited {proc.returncode}; see {c.log_path}")
        return True

    with (
        soft_nofile(CONNECTIONS + 1024, at_least=True),
        Flood(c.metrics_port, CONNECTIONS) as flood,
    ):
        # the server is full: its slots and its backlog, and it has begun to reap
        wait_for(
            lambda: alive() and flood.stats.peak_established >= MAX_CONNECTIONS + 64,
            30,
            "the flood to fill the metrics server",
        )
        started = time.monotonic()
        with Probes(c.health_port, proc.pid) as probes:
            job = kube.create_tfjob(namespace, make_job("flooded", chief="Never", workers=None))
            name = job["metadata"]["name"]
            wait_running(kube, namespace, name, 1, timeout=60)
            kube.exit_pod(namespace, f"{name}-chief-0", 0)
            wait_job(kube, namespace, name, "Succeeded", timeout=60)
            # held connections are closed after the head timeout, and replaced: three
            # rounds of it
            wait_for(
                lambda: alive() and flood.stats.closed_by_server >= 3 * MAX_CONNECTIONS,
                HEAD_TIMEOUT * 6,
                "the held connections to be closed",
            )
            wait_for(lambda: alive() and len(probes.took) >= 20, 10, "20 answers from /healthz")
        stats = flood.stats
    took = sorted(probes.took)
    print(
        f"flood: {CONNECTIONS} connections held for {time.monotonic() - started:.1f} s;"
        f" {stats.connected} connects, at most {stats.peak_established} established at once,"
        f" {stats.closed_by_server} closed by the controller, errors {stats.errors};"
        f" /healthz answered {len(took)} times, median {took[len(took) // 2] * 1000:.1f} ms,"
        f" slowest {took[-1] * 1000:.1f} ms, {len(probes.failures)} failures;"
        f" the controller held at most {max(probes.fds)} descriptors"
    )
    assert not probes.failures, probes.failures[:5]
    assert took[-1] < 1.0, took[-5:]
    assert alive()
    # never near the limit: the cap held
    assert max(probes.fds) < CONTROLLER_NOFILE / 2, max(probes.fds)
    assert "accept failed" not in c.log_text()
    # the flood gone, /metrics answers again
    assert "process_open_fds" in c.metrics()
    assert c.stop() == 0
