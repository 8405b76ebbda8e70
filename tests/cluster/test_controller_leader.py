"""Leader election between real processes against the real apiserver."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.kube import wait_for
from tests.conftest import REPO, Cluster

LEASE = "demo-lock"
LEASE_DURATION, RETRY_MAX = 15.0, 2.4


class Candidate:
    def __init__(self, cluster: Cluster, namespace: str, identity: str, log_dir: Path) -> None:
        self.identity = identity
        self.log_path = log_dir / f"leader-{namespace}-{identity}.log"
        self._log = open(self.log_path, "wb")  # closed in stop(): lives as long as the process
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.cluster.leader_demo",
                f"--kubeconfig={cluster.kubeconfig}",
                f"--namespace={namespace}",
                f"--name={LEASE}",
                f"--identity={identity}",
            ],
            cwd=REPO,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def events(self) -> list[str]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line)["event"])
            except (ValueError, KeyError):
                continue
        return out

    def acquired(self) -> bool:
        return "leader acquired" in self.events()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._log.close()


@pytest.fixture
def candidates(cluster: Cluster, namespace: str) -> Iterator[dict[str, Candidate]]:
    log_dir = cluster.dir / "logs"
    log_dir.mkdir(exist_ok=True)
    procs = {i: Candidate(cluster, namespace, i, log_dir) for i in ("a", "b")}
    yield procs
    for c in procs.values():
        c.stop()


def holder(cluster: Cluster, namespace: str) -> str | None:
    status, body = cluster.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}"
    )
    return body["spec"].get("holderIdentity") if status == 200 else None


def first_leader(cluster: Cluster, namespace: str, procs: dict[str, Candidate]) -> Candidate:
    leader_id = wait_for(lambda: holder(cluster, namespace), 30, "a lease holder")
    leader = procs[leader_id]
    wait_for(leader.acquired, 10, "the holder to report leadership")
    follower = next(c for c in procs.values() if c is not leader)
    wait_for(lambda: "waiting for leadership" in follower.events(), 10, "the follower to start")
    return leader


def test_exactly_one_leader(
    cluster: Cluster, namespace: str, candidates: dict[str, Candidate]
) -> None:
    leader = first_leader(cluster, namespace, candidates)
    follower = next(c for c in candidates.values() if c is not leader)
    # several renew periods pass: the holder keeps the lease, the follower never leads
    renew_before = cluster.api.request(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}"
    )[1]["spec"]["renewTime"]
    wait_for(
        lambda: (
            cluster.api.request(
                "GET", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{LEASE}"
            )[1]["spec"]["renewTime"]
            != renew_before
        ),
        10,
        "a renewal",
    )
    assert holder(cluster, namespace) == leader.identity
    assert not follower.acquired()
    assert leader.proc.poll() is None and follower.proc.poll() is None


def test_sigkill_of_leader_fails_over_within_lease_duration(
    cluster: Cluster, namespace: str, candidates: dict[str, Candidate]
) -> None:
    leader = first_leader(cluster, namespace, candidates)
    follower = next(c for c in candidates.values() if c is not leader)
    leader.proc.kill()
    killed_at = time.monotonic()
    wait_for(follower.acquired, LEASE_DURATION + RETRY_MAX + 10, "the follower to take over")
    elapsed = time.monotonic() - killed_at
    assert holder(cluster, namespace) == follower.identity
    # the follower trusts only its own observation of the last renewal, so it waits up to
    # a full lease after it, plus one jittered retry period (and some scheduling slack)
    assert elapsed <= LEASE_DURATION + RETRY_MAX + 2.0, elapsed


def test_sigterm_releases_and_follower_takes_over_fast(
    cluster: Cluster, namespace: str, candidates: dict[str, Candidate]
) -> None:
    leader = first_leader(cluster, namespace, candidates)
    follower = next(c for c in candidates.values() if c is not leader)
    leader.proc.send_signal(signal.SIGTERM)
    signalled_at = time.monotonic()
    wait_for(follower.acquired, 10, "the follower to take over a released lease")
    elapsed = time.monotonic() - signalled_at
    # drain (nothing in flight) + release + at most one jittered retry period
    assert elapsed <= RETRY_MAX + 2.0, elapsed
    assert leader.proc.wait(timeout=20) == 0
    assert "leader released" in leader.events()
    assert holder(cluster, namespace) == follower.identity
