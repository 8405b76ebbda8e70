"""A slow apiserver does not cost the lease (issue 29, item 5).

The leader runs behind tests/cluster/faultproxy.py, which holds every request it sends
2 s before passing it on, for a minute: a renewal (a GET and a PUT) takes over 4 s. A
second replica, talking to the apiserver directly, waits to take over. The leader used
to wait a retry period after each renewal ended while its renew deadline counted from
the start of the one before: the next renewal had under 4 s left, timed out, and the
leader gave up and exited 1 ten seconds into the slow minute, and since the follower
must then wait out the lease, nobody worked for the rest of it. Now renewals start a
retry period after the START of the one before (back to back here), each with some 6 s
of its window left.

Asserted from what the proxy saw: the leader leads the whole minute (its metric, its
process, its log) and the follower never does; a TFJob submitted in the slow minute
reaches Succeeded; the Lease was renewed throughout; and no write left the leader
later than the renew deadline after the start of the last renewal that had succeeded
(the fence, 5 s before the lease could run out in another replica's view).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from tests.cluster.faultproxy import FaultProxy, Injection, Seen
from tests.cluster.kube import Kube, wait_for, wait_job
from tests.cluster.lease_stage import Stage
from tests.cluster.policy_helpers import leading, make_job

#: needs kwok pods that exit on the test's say; a fault proxy in front of the local apiserver
pytestmark = pytest.mark.local_only

#: controller/runtime/leader.py's defaults, which the binary uses
LEASE_DURATION = 15.0
RENEW_DEADLINE = 10.0
#: what the proxy adds to every request of the leader, and for how long
LATENCY = 2.0
SLOW_FOR = 60.0
#: between the controller's clock reaching the fence and its last request arriving
#: (tests/cluster/test_lease_fencing.py measured milliseconds)
STOP_SLACK = 0.25
WRITES = ("POST", "PUT", "PATCH", "DELETE")


class Slow:
    """Every request held LATENCY s while armed."""

    def __init__(self) -> None:
        self.armed = False

    def __call__(self, method: str, path: str) -> Injection | None:
        return Injection(delay=LATENCY) if self.armed else None


def phase(pod: dict[str, Any] | None) -> str | None:
    return ((pod or {}).get("status") or {}).get("phase")


def renewals(record: list[Seen], path: str) -> list[tuple[Seen, Seen]]:
    """(GET, write) of every renewal whose write succeeded, in order; the first is the
    acquisition, whose write created the Lease."""
    out = []
    last_get: Seen | None = None
    for s in record:
        if s.path == path and s.method == "GET":
            last_get = s
        elif last_get is not None and (
            (s.path == path and s.method == "PUT" and s.status == 200)
            or (s.path == path.rsplit("/", 1)[0] and s.method == "POST" and s.status == 201)
        ):
            out.append((last_get, s))
    return out


def test_a_minute_of_2s_round_trips_keeps_the_leader_leading(stage: Stage, kube: Kube) -> None:
    namespace, path = stage.namespace, stage.lease_path
    fault = Slow()
    proxy = FaultProxy(stage.cluster, stage.workdir, fault)
    proxy.start()
    leader = stage.replica("slow", proxy=proxy)
    follower = stage.replica("direct")
    try:
        leader.start()
        wait_for(lambda: leading(leader), 30, "the first replica's lease")
        follower.start()
        assert not leading(follower)
        assert leader.proc is not None

        fault.armed = True
        armed_at = time.monotonic()
        name = kube.create_tfjob(namespace, make_job("slow", chief="Never", workers=None))[
            "metadata"
        ]["name"]
        chief = f"{name}-chief-0"
        chief_told = False

        def a_slow_minute() -> bool:
            """One look: the leader still leads, the follower does not, the job moves
            on. True once the minute is over."""
            nonlocal chief_told
            if leader.proc is not None and leader.proc.poll() is not None:
                raise RuntimeError(f"the leader exited {leader.proc.returncode}")
            if not leading(leader):
                raise RuntimeError("the leader lost the lease")
            if leading(follower):
                raise RuntimeError("the follower took over")
            if not chief_told and phase(kube.pod(namespace, chief)) == "Running":
                kube.exit_pod(namespace, chief, 0)
                chief_told = True
            return time.monotonic() >= armed_at + SLOW_FOR

        wait_for(a_slow_minute, SLOW_FOR + 30, "a slow minute", interval=0.25)
        fault.armed = False
        disarmed_at = time.monotonic()
        assert chief_told, "the chief never ran in the slow minute"
        wait_job(kube, namespace, name, "Succeeded", timeout=30)
        assert leading(leader) and not leading(follower)
        assert "leader lost" not in leader.log_text()
        assert leader.stop() == 0
    finally:
        for c in (leader, follower):
            if c.proc is not None:
                c.stop()
        proxy.stop()

    record = list(proxy.record)
    all_renewals = renewals(record, path)
    slow = [(g, p) for g, p in all_renewals if armed_at <= g.received <= disarmed_at]
    took = [p.answered - g.received for g, p in slow if p.answered is not None]
    periods = [b.received - a.received for (a, _), (b, _) in itertools.pairwise(slow)]
    stored = [p.forwarded for _, p in slow if p.forwarded is not None]
    gaps = [b - a for a, b in itertools.pairwise([armed_at, *stored])]
    # the fence: each write against the start of the last renewal sent before it
    late = 0.0
    writes = 0
    for s in record:
        if s.method not in WRITES or s.path == path or s.received < armed_at:
            continue
        writes += 1
        before = [g.received for g, p in all_renewals if p.received <= s.received]
        assert before, f"{s.method} {s.path} before the lease was acquired"
        late = max(late, s.received - before[-1])
    print(
        f"latency: {len(slow)} renewals in the slow {disarmed_at - armed_at:.0f} s, each"
        f" {min(took):.2f}-{max(took):.2f} s GET to PUT answer; starts every"
        f" {min(periods):.2f}-{max(periods):.2f} s; the Lease"
        f" stored at most {max(gaps):.2f} s apart; {writes} writes, the latest"
        f" {late:.2f} s after the start of the renewal before it"
    )
    assert min(took) >= 2 * LATENCY, "the renewals were not slowed"
    assert len(slow) >= SLOW_FOR / (2 * LATENCY + 1.0), len(slow)
    assert max(gaps) < RENEW_DEADLINE, gaps
    assert writes > 0, "the leader wrote nothing in the slow minute"
    assert late <= RENEW_DEADLINE + STOP_SLACK, late
