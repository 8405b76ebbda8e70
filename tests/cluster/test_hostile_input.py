"""Odd input that the CRD accepts, against the real apiserver and controller (issue 10)."""

from __future__ import annotations

from typing import Any

from tests.cluster.kube import ControllerProcess, Kube, condition, wait_for, wait_job
from tests.cluster.policy_helpers import TEMPLATE, make_job, settled

LABEL = "training.kubeflow.org/"


def test_zero_replica_chief_counts_as_absent_and_worker0_decides(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    job = make_job("zero-chief", chief="Never", workers=(2, "Never"))
    job["spec"]["tfReplicaSpecs"]["Chief"]["replicas"] = 0
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    pods = wait_for(
        lambda: (ps := kube.pods(namespace, name)) and len(ps) == 2 and ps, 30, "2 worker pods"
    )
    assert [p["metadata"]["name"] for p in pods] == [f"{name}-worker-0", f"{name}-worker-1"]
    roles = [p["metadata"]["labels"].get(LABEL + "job-role") for p in pods]
    assert roles == ["master", None], "worker 0 coordinates when the Chief has no pods"
    settled(kube, controller, namespace, name)
    assert not condition(kube.tfjob(namespace, name), "Succeeded"), "0 of 0 is not success"
    wait_for(
        lambda: all(p["status"].get("phase") == "Running" for p in kube.pods(namespace, name)),
        30,
        "workers running",
    )
    kube.exit_pod(namespace, f"{name}-worker-0", 0)
    done = wait_job(kube, namespace, name, "Succeeded")
    assert done["status"]["replicaStatuses"]["Worker"]["succeeded"] >= 1


def test_template_restart_policy_overridden_with_upstreams_warning(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    job = make_job("tmpl-policy", workers=(1, "OnFailure"))
    template: dict[str, Any] = {"spec": {**TEMPLATE["spec"], "restartPolicy": "Always"}}
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = template
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    pod = wait_for(lambda: kube.pod(namespace, f"{name}-worker-0"), 30, "the worker pod")
    assert pod["spec"]["restartPolicy"] == "OnFailure"

    def warning() -> list[dict[str, Any]]:
        return [
            e
            for e in kube.events(namespace)
            if e["involvedObject"].get("name") == name
            and e["reason"] == "SettedPodTemplateRestartPolicy"
        ]

    (event,) = wait_for(warning, 15, "the SettedPodTemplateRestartPolicy event")
    assert event["type"] == "Warning"
    assert event["message"] == (
        "Restart policy in pod template will be overwritten by restart policy in replica spec"
    )
