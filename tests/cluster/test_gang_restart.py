"""Whole-gang restart on the real cluster (reconcile.policy.gang_restart): a job annotated
``training.kubeflow.org/gang-restart: "true"`` answers one worker's retried failure by
deleting every pod, waiting until all are gone, and creating all again together; that
is one restart against backoffLimit.

The test's controller waits 2 s before a replacement (--restart-backoff-base): kwok's
delete stage deletes a pod by name, and sometimes twice, so a same-named pod made within
milliseconds of the old one's end can be taken for it (a kubelet deletes with the pod's
UID as a precondition). The session controller's 0.5 s left that race open.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cluster import kube as k
from tests.cluster.kube import ControllerProcess, Kube, PodHistory, wait_for, wait_running
from tests.cluster.policy_helpers import HOLD, let_go, make_job, release_held, rs, settled
from tests.conftest import Cluster

#: needs the local cluster's gang scheduler and kwok pods
pytestmark = pytest.mark.local_only

ANNOTATION = "training.kubeflow.org/gang-restart"


@pytest.fixture
def slow_backoff(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> Iterator[ControllerProcess]:
    own = ControllerProcess(
        cluster,
        "--restart-backoff-base=2",
        "--restart-backoff-max=2",
        f"--namespace={namespace}",
        log_name="gang-restart",
    )
    with k.in_place_of(controller, own, kube):
        yield own


def test_a_worker_exit_restarts_the_whole_gang_once_and_backoff_limit_holds(
    cluster: Cluster, kube: Kube, namespace: str, slow_backoff: ControllerProcess
) -> None:
    ns, controller = namespace, slow_backoff
    job = make_job("gr", chief="ExitCode", workers=(2, "ExitCode"), run_policy={"backoffLimit": 1})
    job["metadata"]["annotations"] = {ANNOTATION: "true"}
    kube.create_tfjob(ns, job)
    with PodHistory(cluster, ns) as history:
        old = {p["metadata"]["uid"] for p in wait_running(kube, ns, "gr", 3)}
        kube.exit_pod(ns, "gr-worker-1", 137)  # retryable under ExitCode
        wait_for(lambda: not old & {p["metadata"]["uid"] for p in kube.pods(ns, "gr")}, 60,
                 "every pod replaced")  # fmt: skip
        new = {p["metadata"]["uid"] for p in wait_running(kube, ns, "gr", 3, timeout=60)}
        settled(kube, controller, ns, "gr")
        done = kube.tfjob(ns, "gr")
        assert rs(done, "Worker")["restarts"] == 1 and rs(done, "Chief")["restarts"] == 0
        assert rs(done, "Worker")["disruptions"] == rs(done, "Chief")["disruptions"] == 0
        assert (done or {})["status"]["gangEpoch"] == 1
        # all of the old gang gone before any of the new one was made, and the new one
        # made in one pass
        events = list(history.events)
        last_gone = max(i for i, (t, _, uid) in enumerate(events) if t == "DELETED" and uid in old)
        added = [i for i, (t, _, uid) in enumerate(events) if t == "ADDED" and uid in new]
        assert last_gone < min(added), events
        assert history.violations == []
    # events are written in the background
    wait_for(
        lambda: [
            e
            for e in kube.events(ns)
            if e["reason"] == "TFJobRestarting" and "whole gang" in e["message"]
        ],
        20,
        "the whole-gang Restarting event",
    )
    # the second failure is past backoffLimit 1: Failed, not another restart
    kube.exit_pod(ns, "gr-chief-0", 137)
    failed = k.wait_job(kube, ns, "gr", "Failed", timeout=60)
    why = k.condition(failed, "Failed") or {}
    assert why["reason"] == "TFJobFailed" and "backoff" in why["message"].lower(), why
    assert (failed["status"].get("gangEpoch"), rs(failed, "Chief")["restarts"]) == (1, 1)


def test_a_disruption_restarts_the_whole_gang_only_once_every_old_pod_is_gone(
    cluster: Cluster, kube: Kube, namespace: str, slow_backoff: ControllerProcess
) -> None:
    """A worker deleted by someone else (a disruption: no backoff, so only the wait for
    the old epoch to be gone keeps the new pods back). The old chief and worker 0 stay in
    their grace period (kwok holds them) after the restart deletes them: no pod of the
    new epoch may be made meanwhile, not even worker 1, whose name is free."""
    ns, controller = namespace, slow_backoff
    job = make_job("gd", chief="OnFailure", workers=(2, "OnFailure"))
    job["metadata"]["annotations"] = {ANNOTATION: "true"}
    for spec in job["spec"]["tfReplicaSpecs"].values():
        spec["template"] = {"metadata": {"annotations": {HOLD: "true"}}, **spec["template"]}
    kube.create_tfjob(ns, job)
    try:
        with PodHistory(cluster, ns) as history:
            running = wait_running(kube, ns, "gd", 3)
            old = {p["metadata"]["uid"] for p in running}
            worker_1 = next(p for p in running if p["metadata"]["name"] == "gd-worker-1")
            kube.delete_pod(ns, "gd-worker-1")
            let_go(kube, ns, "gd-worker-1")  # killed by the deletion: a disruption
            wait_for(lambda: all(
                (p := kube.pod(ns, f"gd-{n}")) is not None and not k.live(p)
                for n in ("chief-0", "worker-0")
            ), 60, "the old chief and worker 0 deleted by the restart")  # fmt: skip
            wait_for(lambda: (p := kube.pod(ns, "gd-worker-1")) is None
                     or p["metadata"]["uid"] != worker_1["metadata"]["uid"], 30,
                     "the old worker 1 gone")  # fmt: skip
            settled(kube, controller, ns, "gd")
            made = [uid for t, _, uid in history.events if t == "ADDED" and uid not in old]
            assert made == [], "a pod of the new epoch while the old one was still there"
            for name in ("gd-chief-0", "gd-worker-0"):
                let_go(kube, ns, name)
            new = {p["metadata"]["uid"] for p in wait_running(kube, ns, "gd", 3, timeout=60)}
            events = list(history.events)
            gone = max(i for i, (t, _, uid) in enumerate(events) if t == "DELETED" and uid in old)
            added = [i for i, (t, _, uid) in enumerate(events) if t == "ADDED" and uid in new]
            assert gone < min(added), events
            assert history.violations == []
        settled(kube, controller, ns, "gd")
        done = kube.tfjob(ns, "gd")
        assert (done or {})["status"]["gangEpoch"] == 1
        assert rs(done, "Worker")["disruptions"] == 1 and rs(done, "Chief")["disruptions"] == 0
    finally:
        release_held(kube, ns)
