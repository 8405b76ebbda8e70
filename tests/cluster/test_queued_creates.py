"""Creates queued on the client's rate limit (20 QPS) for a job that is then suspended
or deleted never go out, and do not hold other jobs' creates back (issue 29)."""

from __future__ import annotations

import threading
from typing import Any

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    WatchThread,
    wait_for,
    wait_job,
    wait_running,
)
from tests.cluster.policy_helpers import make_job, settled
from tests.conftest import Cluster

JOB_LABEL = "training.kubeflow.org/job-name"
#: Creates that may still go out after the change is made: those already sent, and
#: those made before the controller's informer saw the change (at 20/s, 0.5 s worth).
#: Without the drop, every queued one goes: 100+ in both tests.
LATE = 15
#: The client's burst (--kube-api-burst): that many creates go out with the job's first
#: pass, before the test can act, and the test's own watch may see them only after.
BURST = 30


class Added(WatchThread):
    """Counts the objects of a collection ADDED, per job (the job-name label)."""

    def __init__(self, cluster: Cluster, path: str) -> None:
        self._lock = threading.Lock()
        self._added: dict[str, int] = {}
        super().__init__(cluster, path)

    def _observe(self, type_: str, obj: dict[str, Any]) -> None:
        if type_ not in ("ADDED", "LISTED"):
            return
        job = (obj["metadata"].get("labels") or {}).get(JOB_LABEL, "")
        with self._lock:
            self._added[job] = self._added.get(job, 0) + 1

    def count(self, job: str) -> int:
        with self._lock:
            return self._added.get(job, 0)


def test_a_job_suspended_mid_creation_gets_no_more_pods(
    controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """Kueue preempts by suspending: quota must be free once the suspend is seen, not
    once 150 queued creates have gone out and their pods been deleted again."""
    with Added(cluster, f"/api/v1/namespaces/{namespace}/pods") as pods:
        kube.create_tfjob(namespace, make_job("big", workers=(150, "Never")))
        wait_for(lambda: pods.count("big") >= 3, 60, "the first pods of the job")
        kube.patch_tfjob(namespace, "big", {"spec": {"runPolicy": {"suspend": True}}})
        at_suspend = pods.count("big")
        wait_job(kube, namespace, "big", "Suspended", timeout=60)
        wait_for(lambda: not kube.pods(namespace, "big"), 60, "the job's pods gone")
        settled(kube, controller, namespace, "big")
        late = pods.count("big") - at_suspend
    assert late <= LATE, f"{late} pods created after the suspend"


def test_a_deleted_jobs_queued_creates_neither_go_out_nor_hold_others_back(
    controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    path = f"/api/v1/namespaces/{namespace}/services"
    with Added(cluster, path) as services:
        kube.create_tfjob(namespace, make_job("huge", workers=(400, "Never")))
        wait_for(lambda: services.count("huge") >= 3, 60, "the first services of the job")
        kube.req("DELETE", f"{kube.tfjobs(namespace)}/huge")
        # 800 creates were queued ahead of these at 20/s: 40 s, were they still sent
        kube.create_tfjob(namespace, make_job("small", workers=(2, "Never")))
        wait_running(kube, namespace, "small", 2, timeout=20)
        made = services.count("huge")
    # Counted in all, not from the delete on: the burst went out before the delete, and
    # the watch can see a burst's services after it (26 once, in a full suite)
    assert made <= BURST + LATE, f"{made} of the deleted job's 400 services created"
