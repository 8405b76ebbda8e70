"""Issue 4 acceptance: the TFJob contract against the real apiserver and our controller."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    PodHistory,
    all_running,
    condition,
    env_of,
    is_true,
    sample,
    wait_for,
    wait_job,
    wait_running,
)
from tests.conftest import Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only

LABEL = "training.kubeflow.org/"


def test_sample_job_pods_services_labels_tf_config(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    job = sample()
    before = kube.apiserver_requests()
    created = kube.create_tfjob(namespace, job)
    name, uid = created["metadata"]["name"], created["metadata"]["uid"]
    pods = wait_for(lambda: all_running(kube, namespace, name, 4), 60, "4 running pods")
    services = wait_for(
        lambda: len(kube.services(namespace, name)) == 4 and kube.services(namespace, name),
        30,
        "4 services",
    )
    assert [p["metadata"]["name"] for p in pods] == [
        f"{name}-chief-0",
        f"{name}-ps-0",
        f"{name}-worker-0",
        f"{name}-worker-1",
    ]
    assert [s["metadata"]["name"] for s in services] == [p["metadata"]["name"] for p in pods]
    for p in pods:
        rtype, idx = p["metadata"]["name"].split("-")[-2:]
        labels = p["metadata"]["labels"]
        expected = {
            LABEL + "operator-name": "tfjob-controller",
            LABEL + "job-name": name,
            LABEL + "replica-type": rtype,
            LABEL + "replica-index": idx,
        }
        if rtype == "chief":
            expected[LABEL + "job-role"] = "master"
        assert {k: v for k, v in labels.items() if k.startswith(LABEL)} == expected
        ref = p["metadata"]["ownerReferences"]
        assert ref == [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "TFJob",
                "name": name,
                "uid": uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        want_restart = "OnFailure" if rtype == "worker" else "Never"
        assert p["spec"]["restartPolicy"] == want_restart
        cluster = (
            f'{{"chief":["{name}-chief-0.{namespace}.svc:2222"],'
            f'"ps":["{name}-ps-0.{namespace}.svc:2222"],'
            f'"worker":["{name}-worker-0.{namespace}.svc:2222","{name}-worker-1.{namespace}.svc:2222"]}}'
        )
        assert env_of(p, "TF_CONFIG") == (
            f'{{"cluster":{cluster},"task":{{"type":"{rtype}","index":{idx}}},"environment":"cloud"}}'
        )
    for s in services:
        assert s["spec"]["clusterIP"] == "None"
        assert s["spec"]["publishNotReadyAddresses"] is True
        assert [(pt["name"], pt["port"]) for pt in s["spec"]["ports"]] == [("tfjob-port", 2222)]
        assert "training.kubeflow.org/job-role" not in s["spec"]["selector"]
        assert s["metadata"]["ownerReferences"][0]["uid"] == uid
    after = kube.apiserver_requests()
    posts = {
        r: after.get(("POST", r, "201"), 0) - before.get(("POST", r, "201"), 0)
        for r in ("pods", "services")
    }
    conflicts = {
        r: after.get(("POST", r, "409"), 0) - before.get(("POST", r, "409"), 0)
        for r in ("pods", "services")
    }
    assert posts == {"pods": 4, "services": 4}
    assert conflicts == {"pods": 0, "services": 0}
    got = wait_job(kube, namespace, name, "Running")
    assert is_true(got, "Created")
    assert got["status"]["startTime"]


def test_chief_success_finishes_job(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    job = sample()
    job["spec"]["runPolicy"]["cleanPodPolicy"] = "None"
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    wait_running(kube, namespace, name, 4, timeout=60)
    kube.exit_pod(namespace, f"{name}-chief-0", 0)
    done = wait_job(kube, namespace, name, "Succeeded")
    running = condition(done, "Running")
    assert running is not None and running["status"] == "False"
    succ = condition(done, "Succeeded")
    assert succ is not None and succ["reason"] == "TFJobSucceeded"
    assert succ["message"] == f"TFJob {namespace}/{name} successfully completed."
    assert done["status"]["completionTime"]
    assert done["status"]["replicaStatuses"]["Chief"]["succeeded"] == 1
    created = condition(done, "Created")
    assert created is not None and created["reason"] == "TFJobCreated"
    assert created["message"] == f"TFJob {name} is created."

    # Events: upstream reasons, one per transition or object, no per-reconcile repeats.
    def ours() -> list[dict[str, Any]]:
        return [
            e
            for e in kube.events(namespace)
            if e["involvedObject"].get("name") == name
            and e["source"].get("component") == "tfjob-controller"
        ]

    events = wait_for(
        lambda: (ev := ours()) and any(e["reason"] == "TFJobSucceeded" for e in ev) and ev,
        15,
        "TFJobSucceeded event",
    )
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_reason.setdefault(e["reason"], []).append(e)
    assert len(by_reason["SuccessfulCreatePod"]) == 4
    assert len(by_reason["SuccessfulCreateService"]) == 4
    assert len(by_reason["TFJobSucceeded"]) == 1
    assert all(e.get("count", 1) == 1 for e in events), [
        (e["reason"], e.get("count")) for e in events
    ]


def test_worker_failure_under_never_fails_job(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    job = sample("tfjob-chief-ps-workers")
    job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    wait_running(kube, namespace, name, 4, timeout=60)
    kube.exit_pod(namespace, f"{name}-worker-1", 1)
    failed = wait_job(kube, namespace, name, "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "TFJobFailed"
    assert (
        cond["message"]
        == f"TFJob {namespace}/{name} has failed because 1 Worker replica(s) failed."
    )
    assert condition(failed, "Running")["status"] == "False"  # type: ignore[index]


def test_no_duplicate_creates_when_spec_edited_during_creation(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    job = sample()
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    before = kube.apiserver_requests()
    with PodHistory(cluster, namespace) as history:
        name = kube.create_tfjob(namespace, job)["metadata"]["name"]
        # Edit the spec while its pods are being created: 3 → 5 workers.
        kube.patch_tfjob(namespace, name, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": 5}}}})
        wait_for(lambda: all_running(kube, namespace, name, 7), 60, "7 running pods")
        wait_for(lambda: len(kube.services(namespace, name)) == 7, 30, "7 services")
    after = kube.apiserver_requests()
    assert history.violations == []
    for r in ("pods", "services"):
        assert after.get(("POST", r, "201"), 0) - before.get(("POST", r, "201"), 0) == 7, r
        assert after.get(("POST", r, "409"), 0) - before.get(("POST", r, "409"), 0) == 0, r
