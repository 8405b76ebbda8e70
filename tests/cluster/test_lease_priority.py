"""Lease renewals never wait behind the controller's own writes (issue 11).

A leader with a tiny client budget (2 requests/s) is handed a job whose creates queue
for well over a lease duration. Its renewals go through a client of their own, so it
keeps the lease the whole time (it used to lose it after the renew deadline and exit
1, and again after every restart).
"""

from __future__ import annotations

import time

from tests.cluster.kube import ControllerProcess, Kube, wait_for
from tests.cluster.policy_helpers import TEMPLATE, make_job, metric
from tests.conftest import Cluster

LEASE = "tfjob-controller-starve-test"


def test_renewals_keep_the_lease_while_creates_queue_for_longer_than_it(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    controller.stop()
    leader = ControllerProcess(
        cluster,
        "--leader-elect",
        "--leader-election-namespace=default",
        f"--leader-election-id={LEASE}",
        "--kube-api-qps=2",
        "--kube-api-burst=2",
        f"--namespace={namespace}",  # other tests' leftovers must not share its 2 QPS
        log_name="tfjob-controller-starve",
    )
    try:
        leader.start()
        wait_for(lambda: metric(leader.metrics(), "leader_election_master_status") == 1, 30,
                 "the lease")  # fmt: skip
        job = make_job("queued", chief="Never", workers=(60, "Never"))
        job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = {
            "spec": {**TEMPLATE["spec"], "nodeSelector": {"tfjob-test/none": "none"}}
        }
        kube.create_tfjob(namespace, job)
        # 122 creates at 2/s: a minute of queue; watch 20 s of it (> the 15 s lease)
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{LEASE}"
        renewals = set()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert leader.proc is not None and leader.proc.poll() is None, "leader exited"
            assert metric(leader.metrics(), "leader_election_master_status") == 1
            renewals.add(kube.req("GET", lease_path)["spec"]["renewTime"])
            time.sleep(0.5)
        assert len(renewals) >= 6, f"renewed every ~2 s: {sorted(renewals)}"
        created = len(kube.pods(namespace, "queued")) + len(kube.services(namespace, "queued"))
        assert created < 100, "the creates were still queued: the test loaded the bucket"
    finally:
        # The drain may take its whole 30 s: the creates already waiting for a token
        # (up to 64, at 2/s) are let finish or be cancelled then.
        code = leader.stop(timeout=60)
        controller.start()  # whatever happened: the tests after this one need it
    assert code == 0
