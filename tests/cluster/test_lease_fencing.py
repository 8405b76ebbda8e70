"""A leader never acts once its lease could have expired, and a stop sends nothing
after the release (issue 11, bug 2 and item 3).

The leader runs behind tests/cluster/faultproxy.py, which keeps every request it sends
with the time it arrived, on the machine's monotonic clock, so what is asserted is what
left the process, not what it logged. Its client budget is tiny (2 requests/s) and it
is handed a job whose creates queue for a minute, so it is sending workload requests
right up to the moment it must stop: a fence that holds a second too long shows.

- Fencing: the proxy makes Lease GETs slow and, after one slow renewal got through,
  hangs every Lease PUT. The last workload request arrives no later than the renew
  deadline after the start of the last renewal that succeeded (when its GET arrived),
  the process exits 1 before the lease could have expired in another replica's view,
  and a second replica takes the lease over only after that and finishes the job.
  (The bug: each call got the whole renew deadline and the renewal counted from its
  response, so the old leader kept acting 19.5 s after its last renewal's start.)
- SIGTERM mid-burst: the queued creates are dropped or drained before the release, the
  Lease release is the last request the process sends, and it exits 0.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from typing import Any

import pytest

from tests.cluster.faultproxy import FaultProxy, Injection, Seen
from tests.cluster.kube import wait_for, wait_job
from tests.cluster.lease_stage import Stage, handover
from tests.cluster.policy_helpers import TEMPLATE, leading, make_job

#: needs kwok pods that exit on the test's say; a fault proxy in front of the local apiserver
pytestmark = pytest.mark.local_only

#: controller/runtime/leader.py's defaults, which the binary uses
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
#: Long enough to show in the record, short enough that the renewal it slows still fits
#: in what is left of the renew deadline (renewals start every 2 s + the GET).
SLOW_GET = 3.0
#: What may pass between the controller's clock reaching the fence and its last request
#: arriving: the loop turn that cancels the work, and loopback (measured: milliseconds).
#: Breaking the fence costs seconds (3 s: renewal counted from the response; 5 s: each
#: attempt given the whole deadline).
STOP_SLACK = 0.25
#: controller/runtime/manager.py's bounds on a graceful stop: the drain of in-flight reconciles,
#: then the event flush and the release
DRAIN_TIMEOUT = 30.0
RELEASE_TIMEOUT = 5.0
#: Creates queued at 2 requests/s: a minute of them, far beyond either test.
WORKERS = 60
LOW_QPS = ("--kube-api-qps=2", "--kube-api-burst=2")


def busy_job(name: str) -> dict[str, Any]:
    """A chief that can run and WORKERS workers no node takes: their pods and services
    are a long queue of creates that leave nothing running on the shared cluster."""
    job = make_job(name, chief="Never", workers=(WORKERS, "Never"))
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = {
        "spec": {**TEMPLATE["spec"], "nodeSelector": {"tfjob-test/none": "none"}}
    }
    return job


def creates(proxy: FaultProxy) -> int:
    return sum(
        1
        for s in list(proxy.record)
        if s.method == "POST" and s.path.endswith(("/pods", "/services"))
    )


def kinds(seen: list[Seen]) -> dict[str, int]:
    """How many of each method and resource, for the report."""
    return dict(Counter(f"{s.method} {s.path.rsplit('/', 1)[-1]}" for s in seen))


class SlowThenHungLease:
    """Once armed: every GET of the Lease is held SLOW_GET s; the first renewal whose GET
    was held still goes through, every PUT after it hangs (a slow GET and a hung PUT,
    the case of the bug)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.armed = False
        self._slowed = False
        self._let_through = False

    def __call__(self, method: str, path: str) -> Injection | None:
        if not self.armed or path != self.path:
            return None
        if method == "GET":
            self._slowed = True
            return Injection(delay=SLOW_GET)
        if method == "PUT" and self._slowed:
            if self._let_through:
                return Injection(hang=True)
            self._let_through = True
        return None


def last_renewal(record: list[Seen], path: str) -> tuple[Seen, Seen]:
    """The GET and PUT of the last renewal whose PUT succeeded."""
    lease = [s for s in record if s.path == path]
    i = max(n for n, s in enumerate(lease) if s.method == "PUT" and s.status == 200)
    get = next(s for s in reversed(lease[:i]) if s.method == "GET")
    return get, lease[i]


def test_a_leader_whose_renewals_hang_stops_before_its_lease_can_expire(stage: Stage) -> None:
    kube, namespace, path = stage.kube, stage.namespace, stage.lease_path
    fault = SlowThenHungLease(path)
    with stage.proxy(fault) as proxy:
        fenced = stage.replica("fenced", *LOW_QPS, proxy=proxy)
        successor = stage.replica("successor")
        try:
            fenced.start()
            wait_for(lambda: leading(fenced), 30, "the first replica's lease")
            successor.start()
            assert not leading(successor)
            name = kube.create_tfjob(namespace, busy_job("fenced"))["metadata"]["name"]
            wait_for(lambda: creates(proxy) >= 4, 30, "the first creates")
            fault.armed = True
            exited_at, acquired_at = handover(fenced, successor)

            record = list(proxy.record)
            get, put = last_renewal(record, path)
            last = [s for s in record if s.path != path][-1]
            renewed = get.received
            hung = [s for s in record if s.path == path and s.method == "PUT" and s.status is None]
            print(
                f"fencing: last renewal started at 0 (its GET held"
                f" {put.received - get.received:.2f} s); last workload request {last.method}"
                f" {last.path} at {last.received - renewed:.2f} s; exit at"
                f" {exited_at - renewed:.2f} s; the successor leads at"
                f" {acquired_at - renewed:.2f} s; {len(hung)} PUT(s) hung"
            )
            assert fenced.proc is not None and fenced.proc.returncode == 1
            assert put.received - get.received >= SLOW_GET * 0.9, "the renewal was not slowed"
            assert hung, "no renewal hung: the fault never bit"
            # It was busy up to the fence: a request every 0.5 s in the last second of it.
            assert last.received > renewed + RENEW_DEADLINE - 1.0, "the workload stopped early"
            assert last.received <= renewed + RENEW_DEADLINE + STOP_SLACK, (
                f"{last.method} {last.path} arrived {last.received - renewed:.2f} s after the"
                f" start of the last renewal; the renew deadline is {RENEW_DEADLINE} s"
            )
            assert exited_at < renewed + LEASE_DURATION
            assert acquired_at > last.received and acquired_at >= renewed + LEASE_DURATION

            # The successor takes the job over from where it was, to the end.
            chief = f"{name}-chief-0"
            wait_for(lambda: phase(kube.pod(namespace, chief)) == "Running", 30, "the chief")
            kube.exit_pod(namespace, chief, 0)
            wait_job(kube, namespace, name, "Succeeded", timeout=30)
            assert successor.stop() == 0
        finally:
            fenced.stop()
            successor.stop()


def phase(pod: dict[str, Any] | None) -> str | None:
    return ((pod or {}).get("status") or {}).get("phase")


def test_sigterm_mid_burst_releases_the_lease_last_and_exits_0(stage: Stage) -> None:
    path = stage.lease_path
    with stage.proxy(lambda method, path: None) as proxy:
        leader = stage.replica("sigterm", *LOW_QPS, proxy=proxy)
        try:
            leader.start()
            wait_for(lambda: leading(leader), 30, "the lease")
            stage.kube.create_tfjob(stage.namespace, busy_job("drained"))
            wait_for(lambda: creates(proxy) >= 6, 30, "the first creates")
            assert leader.proc is not None
            leader.proc.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            creates_before = creates(proxy)
            code = leader.proc.wait(DRAIN_TIMEOUT + RELEASE_TIMEOUT + 10)
            exited = time.monotonic()
        finally:
            leader.stop()

    record = list(proxy.record)
    release = record[-1]
    release_get = next(s for s in reversed(record) if s.path == path and s.method == "GET")
    after_sigterm = [s for s in record if s.received > sent and s.path != path]
    made = creates(proxy)
    last_work = after_sigterm[-1].received - sent if after_sigterm else 0.0
    print(
        f"sigterm: {made} of {2 * (WORKERS + 1)} creates sent, {made - creates_before} after"
        f" SIGTERM (workload requests after it: {kinds(after_sigterm)}); the last workload"
        f" request at {last_work:.2f} s, the release at {release.received - sent:.2f} s, exit"
        f" at {exited - sent:.2f} s"
    )
    assert code == 0
    assert exited - sent < DRAIN_TIMEOUT + RELEASE_TIMEOUT + 5
    assert made < 2 * (WORKERS + 1), "the creates were all sent: SIGTERM was not mid-burst"
    assert (release.method, release.path, release.status) == ("PUT", path, 200), (
        f"the last request was {release.method} {release.path} ({release.status})"
    )
    assert not (stage.kube.req("GET", path)["spec"].get("holderIdentity") or "")
    # Nothing but the release itself from the moment it began.
    late = [
        f"{s.method} {s.path}"
        for s in record
        if s.received >= release_get.received and s.path != path
    ]
    assert not late, late
