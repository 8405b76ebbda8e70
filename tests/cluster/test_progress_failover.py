"""Training-progress reports through a failover: 100 pods (10 jobs of 10 workers, so
each job's status lists every replica) report every second to two
replicas of the controller, as a Service in front of both would send them (to one,
and to the other when it refuses or is gone). The leader's Lease renewals are made to
hang behind tests/cluster/faultproxy.py until it fences itself and exits, and the
other takes over.

- No status write by the old leader arrives after the new one leads.
- A report the old leader took but never wrote was sent within one pacing interval
  (plus a second) of the old leader's end: reports are lost only from its last interval.
- Once the new leader leads, every pod's latest report is in the status within one
  pacing interval and a second.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from tests.cluster.faultproxy import Injection
from tests.cluster.kube import WatchThread, all_running, condition, wait_for
from tests.cluster.lease_stage import Stage, handover
from tests.cluster.policy_helpers import leading, make_job
from tests.cluster.progress_endpoint import (
    Endpoint,
    Reporter,
    audience,
    mint,
    progress_endpoint,
    report_path,
)

pytestmark = pytest.mark.local_only

JOBS, WORKERS = 10, 10
#: tests/cluster/progress_endpoint.py's --progress-status-interval
PACE = 1.0
EVERY = 1.0


class HungLease:
    """Once armed, every renewal of the Lease hangs."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.armed = False

    def __call__(self, method: str, path: str) -> Injection | None:
        if self.armed and path == self.path and method == "PUT":
            return Injection(hang=True)
        return None


@dataclass
class Sent:
    step: int
    at: float  # monotonic, when sent
    to: str  # which replica answered
    code: int


@dataclass
class Pod:
    job: str
    index: int
    token: str
    step: int = 0
    sent: list[Sent] = field(default_factory=list)


class Service:
    """What a Service in front of both replicas does for a client: its connection goes
    to one of them; when that one refuses (503) or is gone, the next goes to the other."""

    def __init__(self, endpoints: dict[str, Endpoint]) -> None:
        self.endpoints = endpoints
        self.ctx = ssl.create_default_context(cafile=str(next(iter(endpoints.values())).ca_file))

    def post(self, prefer: str, path: str, token: str, body: bytes) -> tuple[str, int]:
        names = [prefer, *(n for n in self.endpoints if n != prefer)]
        for name in names:
            host, port = self.endpoints[name].url.removeprefix("https://").rsplit(":", 1)
            conn = http.client.HTTPSConnection(host, int(port), context=self.ctx, timeout=5)
            try:
                conn.request(
                    "POST",
                    path,
                    body=body,
                    headers={
                        "Authorization": f"Bearer {token}",
                        "Content-Type": "application/json",
                    },
                )
                status = conn.getresponse().status
            except OSError:
                continue
            finally:
                conn.close()
            if status != 503:
                return name, status
        return "", 503


class Statuses(WatchThread):
    """Each trainingProgress of the jobs, with when this process saw it: the steps shown,
    by (job, index)."""

    def __init__(self, stage: Stage) -> None:
        self.seen: list[tuple[float, dict[tuple[str, int], int]]] = []
        self.now: dict[tuple[str, int], int] = {}
        super().__init__(
            stage.cluster, f"/apis/kubeflow.org/v1/namespaces/{stage.namespace}/tfjobs"
        )

    def _observe(self, type_: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        tp = (obj.get("status") or {}).get("trainingProgress") or {}
        workers = (tp.get("replicas") or {}).get("Worker") or {}
        steps = {(name, r["index"]): r["step"] for r in workers.get("replicas") or []}
        if steps:
            self.seen.append((time.monotonic(), steps))
            self.now.update(steps)


def test_reports_through_a_failover(stage: Stage) -> None:
    kube, ns = stage.kube, stage.namespace
    fault = HungLease(stage.lease_path)
    eps = {"old": progress_endpoint(stage.cluster), "new": progress_endpoint(stage.cluster)}
    with stage.proxy(fault) as proxy:
        # These pods send from this host's loopback, which no pod has, and open a new
        # connection for each report: 100 a second, over the budget strangers' addresses
        # share. A cluster's pods send from their own addresses, which it never holds.
        stranger = "--progress-stranger-connections=0"
        old = stage.replica("old", *eps["old"].flags, stranger, proxy=proxy)
        new = stage.replica("new", *eps["new"].flags, stranger)
        try:
            old.start()
            wait_for(lambda: leading(old), 30, "the first replica's lease")
            new.start()
            names = [f"many-{j}" for j in range(JOBS)]
            for name in names:
                kube.create_tfjob(ns, make_job(name, workers=(WORKERS, "OnFailure")))
            pods = []
            for name in names:
                running = wait_for(
                    lambda n=name: all_running(kube, ns, n, WORKERS), 120, f"the pods of {name}"
                )
                for p in running:
                    index = int(p["metadata"]["labels"]["training.kubeflow.org/replica-index"])
                    pods.append(Pod(name, index, mint(kube, ns, p, audience(ns, name))))
            service = Service(eps)
            stop = threading.Event()

            def report(share: list[Pod]) -> None:
                prefer = "old"
                while not stop.is_set():
                    started = time.monotonic()
                    for p in share:
                        p.step += 1
                        body = orjson.dumps({"step": p.step, "totalSteps": 10_000})
                        at = time.monotonic()
                        path = f"/v1/namespaces/{ns}/tfjobs/{p.job}/progress"
                        to, code = service.post(prefer, path, p.token, body)
                        prefer = to or prefer
                        p.sent.append(Sent(p.step, at, to, code))
                    stop.wait(max(0.0, EVERY - (time.monotonic() - started)))

            with Statuses(stage) as statuses:
                threads = [
                    threading.Thread(target=report, args=(pods[i::10],), daemon=True)
                    for i in range(10)
                ]
                for t in threads:
                    t.start()
                wait_for(lambda: len(statuses.now) == len(pods), 30, "every pod shown")
                fault.armed = True
                exited_at, acquired_at = handover(old, new)
                wait_for(
                    lambda: all(any(s.to == "new" and s.code == 204 for s in p.sent) for p in pods),
                    30,
                    "every pod reporting to the new leader",
                )
                stop.set()
                for t in threads:
                    t.join(15)
                ended = time.monotonic()
                final = {
                    (p.job, p.index): max(s.step for s in p.sent if s.code == 204) for p in pods
                }
                shown_at = wait_for(
                    lambda: statuses.now == final and time.monotonic(),
                    PACE + 5,
                    "every pod's last report in the status",
                )
        finally:
            old.stop()
            new.stop()

    record = list(proxy.record)
    writes = [s for s in record if s.method == "PUT" and s.path.endswith("/status")]
    assert writes, "the old leader wrote no status"
    last_write = max(s.received for s in writes)
    last_request = max(s.received for s in record if s.path != stage.lease_path)
    print(
        f"failover: old leader's last status write {acquired_at - last_write:.2f} s before the"
        f" new one led; it exited {acquired_at - exited_at:.2f} s before; the latest reports"
        f" shown {shown_at - ended:.2f} s after the last was sent"
    )
    # no status write by the old leader once the new one leads
    assert last_write < acquired_at and last_request < acquired_at

    # a report the old leader took and never wrote came within its last interval
    shown_by_old: dict[tuple[str, int], int] = {}
    for t, steps in statuses.seen:
        if t < acquired_at:
            for k, step in steps.items():
                shown_by_old[k] = max(shown_by_old.get(k, 0), step)
    lost = [
        (p.job, p.index, s)
        for p in pods
        for s in p.sent
        if s.to == "old" and s.code == 204 and s.step > shown_by_old.get((p.job, p.index), 0)
    ]
    late = [
        (j, i, s.step, round(last_request - s.at, 2))
        for j, i, s in lost
        if last_request - s.at > PACE + 1.0
    ]
    assert not late, f"reports lost beyond one pacing interval: {late[:10]}"
    # and the new leader shows every pod's latest report within one interval and a second
    assert shown_at - ended <= PACE + 1.0 + EVERY
    answered = {s.to for p in pods for s in p.sent if s.code == 204}
    assert answered == {"old", "new"}


#: the progress deadline of the failover's stall test, and how long after the last
#: report the leader goes: a new leader counting from its own start would be late by that
STALL_DEADLINE = 12
HANDOVER_AFTER = 6


def test_a_new_leader_keeps_the_progress_deadline_the_old_one_counted(stage: Stage) -> None:
    """The times a deadline counts from live in the status (trainingProgress.
    lastProgressTime), not in the leader's memory: the job whose reports stopped is
    Stalled when the deadline says, though the leader that saw the last report is gone."""
    kube, ns = stage.kube, stage.namespace
    eps = {"old": progress_endpoint(stage.cluster), "new": progress_endpoint(stage.cluster)}
    old = stage.replica("old", *eps["old"].flags)
    new = stage.replica("new", *eps["new"].flags)
    old.progress, new.progress = eps["old"], eps["new"]
    job = make_job("kept", workers=(2, "OnFailure"))
    job["metadata"]["annotations"] = {
        "training.kubeflow.org/progress-deadline-seconds": str(STALL_DEADLINE)
    }
    try:
        old.start()
        wait_for(lambda: leading(old), 30, "the first replica's lease")
        new.start()
        kube.create_tfjob(ns, job)
        running = wait_for(lambda: all_running(kube, ns, "kept", 2), 60, "the pods of kept")
        conn = Reporter(old)
        try:
            for p in running:
                token = mint(kube, ns, p, audience(ns, "kept"))
                index = p["metadata"]["labels"]["training.kubeflow.org/replica-index"]
                for step in (1, 2):
                    status, _, doc = conn.post(
                        report_path(ns, "kept"), token, orjson.dumps({"step": step + int(index)})
                    )
                    assert status == 204, doc
        finally:
            conn.close()
        last = datetime.now(UTC)
        wait_for(
            lambda: ((kube.tfjob(ns, "kept") or {}).get("status") or {})
            .get("trainingProgress", {}).get("lastProgressTime"),
            10,
            "the last progress stored",
        )  # fmt: skip
        time.sleep(HANDOVER_AFTER)  # the quiet spell before the leader goes: the point
        old.stop()  # releases the lease
        wait_for(lambda: leading(new), 30, "the new leader")
        stalled = wait_for(
            lambda: (
                (c := condition(kube.tfjob(ns, "kept"), "Stalled")) and c["status"] == "True" and c
            ),
            STALL_DEADLINE + 20,
            "Stalled, by the new leader",
        )
    finally:
        old.stop()
        new.stop()
    at = datetime.fromisoformat(stalled["lastTransitionTime"].replace("Z", "+00:00"))
    after = (at - last).total_seconds()
    print(f"Stalled {after:.0f}s after the last report (deadline {STALL_DEADLINE}s)")
    # from the stored time (whole seconds: one early at most; the status interval late),
    # not from the new leader's start, HANDOVER_AFTER s and more later
    assert STALL_DEADLINE - 2 <= after <= STALL_DEADLINE + 2, after
