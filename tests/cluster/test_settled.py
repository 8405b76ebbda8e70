"""The tests' barrier (policy_helpers.settled) and the metrics behind it, on the real
cluster: work the queue depth does not show, creates waiting in the background for the
client's rate limit and a requeue parked for a restart's backoff, holds the barrier
until it is done, and operators see it in workqueue_waiting_items and
controller_background_work.

The controller here has a rate limit of 4 writes a second and a restart backoff of 6 s,
so both kinds of pending work last seconds after the queue has emptied; a barrier blind
to either returns while the job still lacks pods.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster.kube import ControllerProcess, Kube, in_place_of, wait_for, wait_running
from tests.cluster.policy_helpers import make_job, metric, rs, settled
from tests.conftest import Cluster

#: needs the local cluster's kwok pods (exit codes)
pytestmark = pytest.mark.local_only

BACKOFF = 6


@pytest.fixture
def slow(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> Iterator[ControllerProcess]:
    own = ControllerProcess(
        cluster,
        "--kube-api-qps=4",
        "--kube-api-burst=1",
        f"--restart-backoff-base={BACKOFF}",
        f"--restart-backoff-max={BACKOFF}",
        f"--namespace={namespace}",
        log_name="settled",
    )
    with in_place_of(controller, own, kube):
        yield own


def test_the_barrier_waits_for_creates_handed_to_the_background(
    kube: Kube, namespace: str, slow: ControllerProcess
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("wide", workers=(10, "Never")))
    # 20 creates at 4 a second: seconds of work that is in no queue and no worker
    wait_for(
        lambda: metric(slow.metrics(), "controller_background_work") > 0,
        20,
        "creates handed to the background",
    )
    assert len(kube.pods(ns, "wide")) < 10
    settled(kube, slow, ns, "wide")
    assert len(kube.pods(ns, "wide")) == 10
    assert len(kube.services(ns, "wide")) == 10
    assert metric(slow.metrics(), "controller_background_work") == 0
    state = slow.pending(f"{ns}/wide")
    assert state["spawned"] == 0 and not state["queued"] and not state["processing"]


def test_the_barrier_waits_for_a_requeue_parked_for_a_restart_backoff(
    kube: Kube, namespace: str, slow: ControllerProcess
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("back", workers=(2, "ExitCode")))
    old = {p["metadata"]["uid"] for p in wait_running(kube, ns, "back", 2, timeout=30)}
    settled(kube, slow, ns, "back")
    kube.exit_pod(ns, "back-worker-1", 137)  # retryable under ExitCode: a restart
    wait_for(
        lambda: "back-worker-1" not in {p["metadata"]["name"] for p in kube.pods(ns, "back")},
        30,
        "the failed pod deleted",
    )
    # the replacement waits for the backoff in a parked requeue
    wait_for(
        lambda: (slow.pending(f"{ns}/back")["requeue_in"] or 0) > 1,
        10,
        "a requeue parked for the backoff",
    )
    assert metric(slow.metrics(), "workqueue_waiting_items") >= 1
    settled(kube, slow, ns, "back")
    pods = {p["metadata"]["name"]: p["metadata"]["uid"] for p in kube.pods(ns, "back")}
    assert sorted(pods) == ["back-worker-0", "back-worker-1"]
    assert pods["back-worker-1"] not in old
    assert rs(kube.tfjob(ns, "back"), "Worker")["restarts"] == 1
