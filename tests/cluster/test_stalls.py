"""Stalls and the restart guard against the real apiserver and the controller process
(docs/stalls.md). kwok runs the pods; their reports go to the controller's endpoint
with tokens the apiserver bound to them, as in test_progress.py. The session
controller writes progress at most once a second (--progress-status-interval=1)."""

from __future__ import annotations

import time
from typing import Any

import orjson
import pytest
from kubeflow.training import TrainingClient

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    PodHistory,
    all_running,
    condition,
    wait_for,
    wait_job,
    wait_running,
)
from tests.cluster.progress_endpoint import Reporter, audience, mint, report_path
from tests.conftest import Cluster

pytestmark = pytest.mark.local_only

DEADLINE = "training.kubeflow.org/progress-deadline-seconds"
FIRST = "training.kubeflow.org/first-progress-deadline-seconds"
ACTION = "training.kubeflow.org/stall-action"
GUARD = "training.kubeflow.org/restart-guard"
GANG = "training.kubeflow.org/gang-restart"
EPOCH = "training.kubeflow.org/gang-epoch"


def job(name: str, annotations: dict[str, str], **run_policy: Any) -> dict[str, Any]:
    tpl = {"spec": {"containers": [{"name": "tensorflow", "image": "tf:test"}]}}
    worker = {"replicas": 2, "restartPolicy": "ExitCode", "template": tpl}
    spec: dict[str, Any] = {"tfReplicaSpecs": {"Worker": worker}}
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": spec,
    }


class Replicas:
    """The job's pods reporting, each with a token bound to its current pod."""

    def __init__(self, kube: Kube, controller: ControllerProcess, ns: str, name: str) -> None:
        self.kube, self.ns, self.name = kube, ns, name
        self.conn = Reporter(controller)
        self.tokens: dict[str, tuple[str, str]] = {}  # pod name: (uid, token)

    def report(self, index: int, step: int, **fields: Any) -> None:
        pod_name = f"{self.name}-worker-{index}"
        pod = self.kube.pod(self.ns, pod_name)
        assert pod is not None, pod_name
        uid = pod["metadata"]["uid"]
        held = self.tokens.get(pod_name)
        if held is None or held[0] != uid:
            held = (uid, mint(self.kube, self.ns, pod, audience(self.ns, self.name)))
            self.tokens[pod_name] = held
        body = orjson.dumps({"step": step, **fields})
        status, _, doc = self.conn.post(report_path(self.ns, self.name), held[1], body)
        assert status == 204, doc

    def close(self) -> None:
        self.conn.close()


def wait_epoch(kube: Kube, ns: str, name: str, epoch: int) -> list[dict[str, Any]]:
    """Both pods of the job's gang ``epoch`` running (the earlier one's may linger)."""

    def running() -> list[dict[str, Any]] | None:
        pods = all_running(kube, ns, name, 2)
        if pods and all(p["metadata"]["labels"].get(EPOCH) == str(epoch) for p in pods):
            return pods
        return None

    return wait_for(running, 30, f"{name}'s epoch {epoch} running")


def stalled(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    return condition(kube.tfjob(ns, name), "Stalled")


def event(kube: Kube, ns: str, reason: str) -> dict[str, Any]:
    return wait_for(
        lambda: next((e for e in kube.events(ns) if e["reason"] == reason), None),
        20,
        f"the {reason} event",
    )


def test_a_stall_is_reported_within_the_deadline_and_clears_when_steps_advance(
    controller: ControllerProcess, cluster: Cluster, kube: Kube, namespace: str
) -> None:
    ns = namespace
    kube.create_tfjob(ns, job("st", {DEADLINE: "4", FIRST: "60"}))
    wait_running(kube, ns, "st", 2)
    pods = Replicas(kube, controller, ns, "st")
    try:
        for step in (1, 2, 3):
            pods.report(0, step)
            pods.report(1, step)
        last = time.monotonic()
        # the same step again is no progress: the deadline still counts from `last`
        pods.report(0, 3)
        found = wait_for(
            lambda: (c := stalled(kube, ns, "st")) and c["status"] == "True" and c, 20, "Stalled"
        )
        took = time.monotonic() - last
        # the deadline (4 s; times are stored in whole seconds, so up to one less) and
        # one status interval (1 s), and a little for the machine
        assert 4 - 1 <= took <= 4 + 1 + 2, took
        assert found["reason"] == "ProgressDeadlineExceeded"
        assert "progress deadline 4s" in found["message"]
        assert "worker-0 at step 3 since" in found["message"]
        assert "worker-1 at step 3 since" in found["message"]
        warned = event(kube, ns, "ProgressDeadlineExceeded")
        assert warned["type"] == "Warning" and warned["involvedObject"]["name"] == "st"
        stored = kube.tfjob(ns, "st") or {}
        assert stored["status"]["trainingProgress"]["furthestStep"] == 3
        assert stored["status"]["trainingProgress"]["lastProgressTime"]
        # Stalled is kept first: kubectl's State column and the SDK still say Running
        cells = kube.columns(ns, "st")
        assert cells["State"] == "Running"
        tc = TrainingClient(config_file=cluster.kubeconfig, namespace=ns, job_kind="TFJob")
        assert tc.is_job_running("st")
        # one step on: resumed
        pods.report(1, 4)
        wait_for(
            lambda: (c := stalled(kube, ns, "st")) and c["reason"] == "ProgressResumed", 10,
            "Stalled False, ProgressResumed",
        )  # fmt: skip
        assert event(kube, ns, "ProgressResumed")["type"] == "Normal"
    finally:
        pods.close()


def test_the_restart_action_restarts_the_gang_and_counts_against_backoff_limit(
    controller: ControllerProcess, cluster: Cluster, kube: Kube, namespace: str
) -> None:
    ns = namespace
    annotations = {DEADLINE: "3", FIRST: "5", ACTION: "restart"}
    kube.create_tfjob(ns, job("sr", annotations, backoffLimit=1))
    pods = Replicas(kube, controller, ns, "sr")
    with PodHistory(cluster, ns) as history:
        old = {p["metadata"]["uid"] for p in wait_running(kube, ns, "sr", 2)}
        try:
            pods.report(0, 7)
            pods.report(1, 7)
        finally:
            pods.close()
        # 3 s on: one whole-gang restart, counted
        restarted = wait_for(
            lambda: (j := kube.tfjob(ns, "sr")) and j["status"].get("gangEpoch") == 1 and j,
            20,
            "the stall's gang restart",
        )
        assert restarted["status"]["replicaStatuses"]["Worker"]["restarts"] == 1
        c = condition(restarted, "Stalled") or {}
        assert (c.get("status"), c.get("reason")) == ("False", "GangRestarted")
        assert "made no progress for" in (condition(restarted, "Restarting") or {})["message"]
        new = wait_epoch(kube, ns, "sr", 1)
        assert not old & {p["metadata"]["uid"] for p in new}
        # the new run never reports: 5 s after it is Running the first-progress deadline
        # runs out, and a second restart would pass backoffLimit 1: the job fails by it
        failed = wait_job(kube, ns, "sr", "Failed", timeout=30)
        why = condition(failed, "Failed") or {}
        assert why["reason"] == "TFJobFailed" and "backoff" in why["message"].lower(), why
        assert failed["status"]["gangEpoch"] == 1
        assert (condition(failed, "Stalled") or {})["reason"] == "FirstProgressDeadlineExceeded"
        assert history.violations == []
    assert event(kube, ns, "ProgressDeadlineExceeded")["type"] == "Warning"


def test_restarts_without_progress_fail_by_the_guard_before_backoff_limit(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    ns = namespace
    kube.create_tfjob(ns, job("rg", {GANG: "true", GUARD: "2"}, backoffLimit=10))
    pods = Replicas(kube, controller, ns, "rg")
    try:
        wait_running(kube, ns, "rg", 2)
        pods.report(0, 50)
        wait_for(
            lambda: ((kube.tfjob(ns, "rg") or {}).get("status", {}).get("trainingProgress") or {})
            .get("furthestStep") == 50, 10, "furthestStep 50",
        )  # fmt: skip
        for epoch, resumed in ((1, 40), (2, 45)):
            kube.exit_pod(ns, "rg-worker-1", 137)  # retryable: a whole-gang restart
            wait_for(
                lambda e=epoch: (kube.tfjob(ns, "rg") or {})["status"].get("gangEpoch") == e,  # type: ignore[misc]
                30,
                f"gang epoch {epoch}",
            )
            wait_epoch(kube, ns, "rg", epoch)
            pods.report(0, resumed)  # resumed below 50, then crashes again
        kube.exit_pod(ns, "rg-worker-1", 137)
        failed = wait_job(kube, ns, "rg", "Failed", timeout=30)
    finally:
        pods.close()
    why = condition(failed, "Failed") or {}
    assert why["reason"] == "TFJobRestartsWithoutProgress", why
    assert "restarted 2 times in a row and no replica's step got past 50" in why["message"]
    assert failed["status"]["replicaStatuses"]["Worker"]["restarts"] == 3  # of 10 allowed
    assert failed["status"]["restartGuard"] == {"sinceStep": 50}


def test_a_slow_replica_is_flagged_with_its_node_once_and_cleared_with_its_pod(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    ns = namespace
    body = job("sl", {})
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    kube.create_tfjob(ns, body)
    pods = Replicas(kube, controller, ns, "sl")
    try:
        running = wait_running(kube, ns, "sl", 3)
        nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in running}
        for step in range(1, 5):  # worker 2's compute takes three times as long
            for i in range(3):
                pods.report(i, step, sections={"compute": 0.3 if i == 2 else 0.1})
        flagged = wait_for(
            lambda: (
                (tp := (kube.tfjob(ns, "sl") or {})["status"].get("trainingProgress") or {})
                and tp.get("stragglers")
            ),
            10,
            "a straggler in the status",
        )
        (s,) = flagged
        assert (s["replicaType"], s["index"], s["basis"]) == ("Worker", 2, "section:compute")
        assert s["node"] == nodes["sl-worker-2"] and s["score"] == 0.33 and s["since"]
        warned = event(kube, ns, "StragglerDetected")
        assert warned["type"] == "Warning" and nodes["sl-worker-2"] in warned["message"]
        # more reports of the same: the same episode, no second event
        for i in range(3):
            pods.report(i, 5, sections={"compute": 0.3 if i == 2 else 0.1})
        # its pod replaced (deleted: a disruption, replaced at once): it clears
        kube.delete_pod(ns, "sl-worker-2", grace=0)
        wait_for(
            lambda: not ((kube.tfjob(ns, "sl") or {})["status"].get("trainingProgress") or {})
            .get("stragglers"),
            30,
            "the straggler cleared",
        )  # fmt: skip
        assert event(kube, ns, "StragglerRecovered")["type"] == "Normal"
    finally:
        pods.close()
    assert [e["reason"] for e in kube.events(ns)].count("StragglerDetected") == 1


def test_a_moved_straggler_comes_back_on_another_node_uncounted(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    ns = namespace
    body = job("mv", {"training.kubeflow.org/straggler-action": "move"})
    body["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4  # three peers: a move needs them
    kube.create_tfjob(ns, body)
    pods = Replicas(kube, controller, ns, "mv")
    try:
        running = {p["metadata"]["name"]: p for p in wait_running(kube, ns, "mv", 4)}
        slow = running["mv-worker-2"]
        for step in range(1, 5):
            for i in range(4):
                pods.report(i, step, sections={"compute": 0.3 if i == 2 else 0.1})
    finally:
        pods.close()
    moved = wait_for(
        lambda: (
            (p := kube.pod(ns, "mv-worker-2"))
            and p["metadata"]["uid"] != slow["metadata"]["uid"]
            and p["spec"].get("nodeName")
            and p
        ),
        30,
        "worker 2's new pod scheduled",
    )
    node = slow["spec"]["nodeName"]
    assert moved["spec"]["nodeName"] != node
    terms = moved["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": [node]}]}
    ]
    # the other workers' pods are as they were, and nothing is counted but the move
    assert {p["metadata"]["uid"] for p in kube.pods(ns, "mv")} >= {
        running[f"mv-worker-{i}"]["metadata"]["uid"] for i in (0, 1, 3)
    }
    rs = (kube.tfjob(ns, "mv") or {})["status"]["replicaStatuses"]["Worker"]
    assert (rs.get("moves"), rs.get("restarts", 0), rs.get("disruptions", 0)) == (1, 0, 0)
    assert rs["indexRetries"]["2"]["avoidNodes"] == [node]
    assert node in event(kube, ns, "StragglerMoved")["message"]


def test_a_straggler_with_nowhere_else_to_go_is_not_moved(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """Every worker may run on one node only: moving the slow one off it would leave its
    new pod nowhere to be scheduled, so it is flagged and left where it is."""
    ns = namespace
    body = job("pin", {"training.kubeflow.org/straggler-action": "move"})
    worker = body["spec"]["tfReplicaSpecs"]["Worker"]
    worker["replicas"] = 4
    worker["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "kwok-node-0"}
    kube.create_tfjob(ns, body)
    pods = Replicas(kube, controller, ns, "pin")
    try:
        running = {p["metadata"]["name"]: p for p in wait_running(kube, ns, "pin", 4)}
        assert {p["spec"]["nodeName"] for p in running.values()} == {"kwok-node-0"}
        for step in range(1, 5):
            for i in range(4):
                pods.report(i, step, sections={"compute": 0.3 if i == 2 else 0.1})
        # the pass that flags it is the pass that would move it (moves_due)
        (s,) = wait_for(
            lambda: (
                (tp := (kube.tfjob(ns, "pin") or {})["status"].get("trainingProgress") or {})
                and tp.get("stragglers")
            ),
            10,
            "a straggler in the status",
        )
        assert (s["index"], s["node"]) == (2, "kwok-node-0")
        for i in range(4):  # another pass, the straggler still slow
            pods.report(i, 5, sections={"compute": 0.3 if i == 2 else 0.1})
        wait_for(
            lambda: (
                (tp := (kube.tfjob(ns, "pin") or {})["status"].get("trainingProgress") or {})
                and (tp.get("replicas") or {}).get("Worker", {}).get("minStep") == 5
            ),
            10,
            "the fifth reports in the status",
        )
    finally:
        pods.close()
    now = kube.pod(ns, "pin-worker-2") or {}
    assert now["metadata"]["uid"] == running["pin-worker-2"]["metadata"]["uid"]
    rs = (kube.tfjob(ns, "pin") or {})["status"]["replicaStatuses"]["Worker"]
    assert rs.get("moves", 0) == 0 and not rs.get("indexRetries")
    assert "StragglerMoved" not in [e["reason"] for e in kube.events(ns)]
