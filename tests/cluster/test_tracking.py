"""Outcome tracking on the real cluster: every pod the controller creates carries its
tracking finalizer until the pod's end is in the job's status (reconcile.policy.tracking).

Each test here is a way a pod's end used to be lost or miscounted (issue 11): finished
while the controller was down and deleted before it came back, deleted before it ever
ran, force-deleted, or left behind by a job deleted while the controller was down. The
local kwok deletes pods the way a kubelet does (hack/kwok-delete-stages.yaml): a deleted
pod is killed (exit 137), then deleted for good, which a finalizer holds off.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from reconcile.api.names import TRACKING_FINALIZER
from reconcile.policy.tracking import PATCH_TYPE, release_patch
from tests.cluster.kube import (
    ApiFailure,
    ControllerProcess,
    Kube,
    PodHistory,
    wait_for,
    wait_job,
    wait_running,
)
from tests.cluster.policy_helpers import (
    TEMPLATE,
    cond_of,
    make_job,
    replaced_after_gone,
    rs,
    settled,
    uid_of,
)
from tests.conftest import Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only
#: another controller's finalizer
OTHER = "other.test/keep"


def terminating(pod: dict[str, Any] | None, phase: str) -> bool:
    return bool(
        pod
        and pod["metadata"].get("deletionTimestamp")
        and pod.get("status", {}).get("phase") == phase
    )


def kill_as_kubelet(kube: Kube, path: str, *, after: float) -> str:
    """Play the kubelet killing a held pod (exit 137), ``after`` seconds from now so the
    end falls in a later second than what came before; returns the kill's time."""
    start = time.time()
    wait_for(lambda: time.time() > start + after, after + 3, "a later second")
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    killed = {"exitCode": 137, "reason": "Error", "startedAt": now, "finishedAt": now}
    kube.req("PATCH", path + "/status", {"status": {"phase": "Failed", "containerStatuses": [
        {"name": "tensorflow", "image": "tf-test:latest", "imageID": "", "ready": False,
         "restartCount": 0, "state": {"terminated": killed}}]}},
        "application/merge-patch+json")  # fmt: skip
    return now


def test_every_created_pod_carries_the_finalizer(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    kube.create_tfjob(namespace, make_job("fin", chief="Never", workers=(2, "OnFailure")))
    for pod in wait_running(kube, namespace, "fin", 3):
        assert TRACKING_FINALIZER in pod["metadata"]["finalizers"], pod["metadata"]["name"]


def test_a_chief_that_succeeds_while_the_controller_is_down_and_is_then_deleted(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("down", chief="Never", workers=(1, "Never")))
    with PodHistory(cluster, ns) as history:
        wait_running(kube, ns, "down", 2)
        controller.stop()
        try:
            kube.exit_pod(ns, "down-chief-0", 0)
            wait_for(lambda: (p := kube.pod(ns, "down-chief-0")) and
                     p["status"]["phase"] == "Succeeded", 20, "chief Succeeded")  # fmt: skip
            # pod GC, a cleanup cron: the ended pod is deleted before the controller is back
            kube.delete_pod(ns, "down-chief-0")
            wait_for(lambda: terminating(kube.pod(ns, "down-chief-0"), "Succeeded"), 20,
                     "the deleted chief held by the finalizer")  # fmt: skip
        finally:
            controller.start()
        done = wait_job(kube, ns, "down", "Succeeded")
        wait_for(lambda: kube.pod(ns, "down-chief-0") is None, 20, "chief let go")
        settled(kube, controller, ns, "down")
    chief = rs(done, "Chief")
    assert (chief["succeeded"], chief["disruptions"], chief["restarts"]) == (1, 0, 0)
    # never re-run: no pod created after the first ones (the watch may have started
    # after them, so each name is seen added at most once)
    added = [n for t, n, _ in history.events if t == "ADDED"]
    assert set(added) <= {"down-chief-0", "down-worker-0"} and len(added) == len(set(added))
    assert history.violations == []


def test_a_pod_deleted_before_it_ever_ran_is_counted_and_replaced(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    job = make_job("early", chief=None, workers=(2, "Never"))
    # no node can take the workers: they stay Pending, unscheduled
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = {
        "spec": {**TEMPLATE["spec"], "nodeSelector": {"tfjob-test/none": "none"}}
    }
    kube.create_tfjob(ns, job)
    wait_for(lambda: len(kube.pods(ns, "early")) == 2, 20, "two pending workers")
    with PodHistory(cluster, ns) as history:
        old = uid_of(kube, ns, "early-worker-1")
        kube.delete_pod(ns, "early-worker-1")  # a descheduler, a queue controller
        got = wait_for(lambda: (j := kube.tfjob(ns, "early")) and
                       rs(j, "Worker")["disruptions"] == 1 and j, 20, "disruption")  # fmt: skip
        wait_for(lambda: (p := kube.pod(ns, "early-worker-1")) and p["metadata"]["uid"] != old,
                 20, "replacement")  # fmt: skip
        replaced_after_gone(history, old, "early-worker-1")
        settled(kube, controller, ns, "early")
    worker = rs(got, "Worker")
    assert (worker["restarts"], worker["failed"]) == (0, 0)
    assert rs(kube.tfjob(ns, "early"), "Worker")["disruptions"] == 1
    assert history.violations == []


def test_a_force_deleted_running_pod_is_one_disruption(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("force", chief="Never", workers=(2, "Never")))
    with PodHistory(cluster, ns) as history:
        wait_running(kube, ns, "force", 3)
        old = uid_of(kube, ns, "force-worker-0")
        kube.delete_pod(ns, "force-worker-0", grace=0)
        wait_running(kube, ns, "force", 3)
        replaced_after_gone(history, old, "force-worker-0")
        settled(kube, controller, ns, "force")
    worker = rs(kube.tfjob(ns, "force"), "Worker")
    assert (worker["disruptions"], worker["restarts"], worker["failed"]) == (1, 0, 0)
    assert history.violations == []


def test_a_pod_stripped_of_its_finalizer_is_still_counted_when_it_vanishes(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """Pods created before tracking, or whose finalizer was removed by hand, fall back on
    the record of what was running (activeIndexes)."""
    ns = namespace
    kube.create_tfjob(ns, make_job("bare", chief="Never", workers=(1, "Never")))
    wait_running(kube, ns, "bare", 2)
    kube.req("PATCH", f"/api/v1/namespaces/{ns}/pods/bare-worker-0",
             {"metadata": {"finalizers": None}}, "application/merge-patch+json")  # fmt: skip
    kube.delete_pod(ns, "bare-worker-0", grace=0)
    wait_running(kube, ns, "bare", 2)
    settled(kube, controller, ns, "bare")
    worker = rs(kube.tfjob(ns, "bare"), "Worker")
    assert (worker["disruptions"], worker["restarts"], worker["failed"]) == (1, 0, 0)


def test_pods_of_a_job_deleted_while_the_controller_is_down_are_let_go(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("orphaned", chief="Never", workers=(2, "Never")))
    wait_running(kube, ns, "orphaned", 3)
    controller.stop()
    try:
        kube.req("DELETE", f"{kube.tfjobs(ns)}/orphaned", {"propagationPolicy": "Background"})
        # the garbage collector deletes them; the finalizer holds them, ended
        wait_for(lambda: (ps := kube.pods(ns, "orphaned")) and len(ps) == 3 and
                 all(terminating(p, "Failed") for p in ps), 30, "pods held")  # fmt: skip
    finally:
        controller.start()
    wait_for(lambda: kube.pods(ns, "orphaned") == [], 30, "pods let go")


def test_a_job_deleted_in_the_foreground_goes_with_its_pods(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("fg", chief="Never", workers=(2, "Never")))
    wait_running(kube, ns, "fg", 3)
    kube.req("DELETE", f"{kube.tfjobs(ns)}/fg", {"propagationPolicy": "Foreground"})
    wait_for(lambda: kube.tfjob(ns, "fg") is None, 30, "job gone")
    assert kube.pods(ns, "fg") == []


def test_a_job_recreated_under_the_same_name_lets_go_of_the_old_pods(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    ns = namespace
    kube.create_tfjob(ns, make_job("again", chief="Never", workers=(1, "Never")))
    wait_running(kube, ns, "again", 2)
    old = {p["metadata"]["uid"] for p in kube.pods(ns, "again")}
    controller.stop()
    try:
        kube.req("DELETE", f"{kube.tfjobs(ns)}/again", {"propagationPolicy": "Background"})
        wait_for(lambda: all(terminating(p, "Failed") for p in kube.pods(ns, "again")), 30,
                 "old pods held")  # fmt: skip
        kube.create_tfjob(ns, make_job("again", chief="Never", workers=(1, "Never")))
    finally:
        controller.start()
    pods = wait_running(kube, ns, "again", 2, timeout=60)
    assert not old & {p["metadata"]["uid"] for p in pods}


def test_a_pod_killed_by_a_graceful_delete_is_a_disruption_not_a_retry(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """The kubelet's final grace-0 delete moves deletionTimestamp to its own time, after
    the kill: a controller that was down meanwhile sees only that, and must still tell a
    pod killed by its deletion (a disruption) from one that failed first (a retry). The
    test plays the kubelet, so the final delete comes seconds after the kill (as it may
    on a loaded node), whatever the clock's second boundaries."""
    ns = namespace
    kube.create_tfjob(ns, make_job("drain", chief="Never", workers=(1, "OnFailure")))
    wait_running(kube, ns, "drain", 2)
    path = f"/api/v1/namespaces/{ns}/pods/drain-worker-0"
    kube.req("PATCH", path, {"metadata": {"annotations": {"kwok.test/hold-on-delete": "1"}}},
             "application/merge-patch+json")  # fmt: skip
    controller.stop()
    try:
        kube.delete_pod(ns, "drain-worker-0")  # graceful: the program gets SIGTERM ...
        now = kill_as_kubelet(kube, path, after=2)
        ended = time.time()  # ... and is killed when the grace period is over
        wait_for(lambda: time.time() > ended + 2, 5, "a later second")
        kube.delete_pod(ns, "drain-worker-0", grace=0)  # the kubelet's final delete
        pod = kube.pod(ns, "drain-worker-0")
        assert pod is not None and pod["metadata"]["deletionGracePeriodSeconds"] == 0
        assert pod["metadata"]["deletionTimestamp"] > now  # moved past the kill
    finally:
        controller.start()
    wait_running(kube, ns, "drain", 2)
    settled(kube, controller, ns, "drain")
    worker = rs(kube.tfjob(ns, "drain"), "Worker")
    assert (worker["disruptions"], worker["restarts"]) == (1, 0)


def test_a_pod_killed_by_the_suspend_and_seen_only_after_the_resume_is_no_disruption(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """A replica whose pod watch was cut sees the suspend's own kill (exit 137) only after
    the job was resumed (the chaos run of seed 11, exc-08): the pod was created before the
    resume, so its end is the suspend's doing, not a disruption. The test plays the
    kubelet and holds the pod, so the controller sees it in just that state."""
    ns = namespace
    kube.create_tfjob(ns, make_job("susp", chief=None, workers=(2, "OnFailure")))
    wait_running(kube, ns, "susp", 2)
    path = f"/api/v1/namespaces/{ns}/pods/susp-worker-0"
    kube.req("PATCH", path, {"metadata": {"annotations": {"kwok.test/hold-on-delete": "1"}}},
             "application/merge-patch+json")  # fmt: skip
    kube.patch_tfjob(ns, "susp", {"spec": {"runPolicy": {"suspend": True}}})

    def suspended() -> tuple[str, str, str] | None:
        return cond_of(kube.tfjob(ns, "susp"), "Suspended")

    wait_for(lambda: (suspended() or ("",))[0] == "True" and kube.pod(ns, "susp-worker-1") is None,
             20, "suspended")  # fmt: skip
    held = kube.pod(ns, "susp-worker-0")
    assert held is not None and held["metadata"].get("deletionTimestamp"), held
    controller.stop()
    try:
        kube.patch_tfjob(ns, "susp", {"spec": {"runPolicy": {"suspend": False}}})
        kill_as_kubelet(kube, path, after=1.2)
    finally:
        controller.start()
    wait_for(lambda: (suspended() or ("", ""))[:2] == ("False", "TFJobResumed"), 20, "resumed")
    settled(kube, controller, ns, "susp")
    job = kube.tfjob(ns, "susp")
    assert rs(job, "Worker")["disruptions"] == 0, (job or {}).get("status")
    kube.delete_pod(ns, "susp-worker-0", grace=0)  # the kubelet's final delete
    wait_running(kube, ns, "susp", 2)
    settled(kube, controller, ns, "susp")
    worker = rs(kube.tfjob(ns, "susp"), "Worker")
    assert (worker["disruptions"], worker["restarts"], worker["failed"]) == (0, 0, 0)


def test_a_release_lets_go_of_our_finalizer_only_and_never_of_a_successors(
    kube: Kube, namespace: str
) -> None:
    """The release patch (reconcile.policy.tracking.release_patch) against the real apiserver:
    it takes our finalizer off the pod it names and leaves another's, and sent for a pod
    that has since been replaced under the same name it is refused (422: the UID it
    carries is immutable), so the successor keeps ours."""
    ns = namespace
    path = f"/api/v1/namespaces/{ns}/pods/n"
    body = {
        "metadata": {"name": "n", "finalizers": [TRACKING_FINALIZER, OTHER]},
        "spec": {**TEMPLATE["spec"], "nodeSelector": {"tfjob-test/none": "none"}},
    }
    first = kube.req("POST", f"/api/v1/namespaces/{ns}/pods", body)
    unhold = {"metadata": {"finalizers": None}}
    try:
        kube.req("PATCH", path, release_patch(TRACKING_FINALIZER, first["metadata"]["uid"]),
                 PATCH_TYPE)  # fmt: skip
        assert kube.pod(ns, "n")["metadata"]["finalizers"] == [OTHER]  # type: ignore[index]
        # replaced under the same name while a release of the first was on its way
        kube.req("PATCH", path, unhold, "application/merge-patch+json")
        kube.delete_pod(ns, "n", grace=0)
        wait_for(lambda: kube.pod(ns, "n") is None, 30, "the first pod gone")
        second = kube.req("POST", f"/api/v1/namespaces/{ns}/pods", body)
        with pytest.raises(ApiFailure) as refused:
            kube.req("PATCH", path, release_patch(TRACKING_FINALIZER, first["metadata"]["uid"]),
                     PATCH_TYPE)  # fmt: skip
        assert refused.value.status == 422, refused.value.body
        now = kube.pod(ns, "n")
        assert now is not None and now["metadata"]["uid"] == second["metadata"]["uid"]
        assert now["metadata"]["finalizers"] == [TRACKING_FINALIZER, OTHER]
    finally:  # or the namespace could never go
        if kube.pod(ns, "n") is not None:
            kube.req("PATCH", path, unhold, "application/merge-patch+json")
