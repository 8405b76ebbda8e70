"""Odd input that the CRD accepts, against the real apiserver and controller (issue 10)."""

from __future__ import annotations

from typing import Any

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    condition,
    wait_for,
    wait_job,
    wait_running,
)
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
    wait_running(kube, namespace, name, 2)
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


REPLICAS = {"Chief": 1, "Master": 1, "PS": 2, "Worker": 3, "Evaluator": 1}


def test_names_of_every_length_either_fit_or_are_rejected_naming_the_limit(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """Job names of 40 to 63 characters with each replica type: admission rejects the
    job whose longest child name would pass 63 characters; every accepted job gets
    every pod and service it asks for (none wedged with missing services)."""
    accepted: dict[str, int] = {}
    for rtype, replicas in REPLICAS.items():
        for length in range(40, 64):
            name = f"{rtype.lower()[0]}{length}-".ljust(length, "x")
            job = make_job(name, workers=None)
            job["spec"]["tfReplicaSpecs"] = {
                rtype: {"replicas": replicas, "restartPolicy": "Never", "template": TEMPLATE}
            }
            longest = len(f"{name}-{rtype.lower()}-{replicas - 1}")
            status, body = kube.api.request("POST", kube.tfjobs(namespace), job)
            if longest <= 63:
                assert status == 201, (name, body)
                accepted[name] = replicas
            else:
                assert status == 422, (name, longest, body)
                assert "metadata.name" in body["message"], body["message"]
                assert "at most 63 characters" in body["message"], body["message"]
    assert len(accepted) == sum(24 - (len(rt) + 3) for rt in REPLICAS)

    def children_complete() -> bool:
        pods = {p["metadata"]["name"] for p in kube.pods(namespace)}
        services = {s["metadata"]["name"] for s in kube.services(namespace)}
        want = {
            f"{name}-{rtype.lower()}-{i}"
            for name, replicas in accepted.items()
            for rtype in REPLICAS
            if name.startswith(rtype.lower()[0] + str(len(name)))
            for i in range(replicas)
        }
        return want <= pods and want <= services

    wait_for(children_complete, 90, "every pod and service of every accepted job")


def _refused_job(kube: Kube, namespace: str, name: str, container: dict[str, Any]) -> str:
    job = make_job(name, chief="Never", workers=(2, "Never"))
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = {"spec": {"containers": [container]}}
    return str(kube.create_tfjob(namespace, job)["metadata"]["name"])


def _warnings(kube: Kube, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in kube.events(namespace)
        if e["involvedObject"].get("name") == name and e["reason"] == reason
    ]


def _assert_failed_by_refusal(kube: Kube, namespace: str, name: str, apiserver_says: str) -> None:
    (event, *_) = wait_for(
        lambda: _warnings(kube, namespace, name, "FailedCreatePod"), 30, "FailedCreatePod"
    )
    assert event["type"] == "Warning" and apiserver_says in event["message"], event
    failed = wait_job(kube, namespace, name, "Failed", timeout=60)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "FailedCreatePod", cond
    assert cond["message"].startswith(f"TFJob {namespace}/{name} has failed because pod ")
    assert apiserver_says in cond["message"], cond["message"]
    # cleanPodPolicy All: the pods that did start are removed, none is left holding a node
    wait_for(lambda: not kube.pods(namespace, name), 30, "pods cleaned up")


def test_a_create_the_pod_api_rejects_fails_the_job_with_its_message(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """422: a container field our schema leaves open and the Pod API refuses."""
    bad = {**TEMPLATE["spec"]["containers"][0], "imagePullPolicy": "Sometimes"}
    name = _refused_job(kube, namespace, "pod-api-422", bad)
    _assert_failed_by_refusal(kube, namespace, name, 'Unsupported value: "Sometimes"')


def test_a_create_a_limit_range_forbids_fails_the_job_with_its_message(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """403 from admission: the namespace's LimitRange caps a container at 1 CPU."""
    kube.req(
        "POST",
        f"/api/v1/namespaces/{namespace}/limitranges",
        {
            "metadata": {"name": "cap"},
            "spec": {"limits": [{"type": "Container", "max": {"cpu": "1"}}]},
        },
    )
    big = {**TEMPLATE["spec"]["containers"][0], "resources": {"limits": {"cpu": "2"}}}
    name = _refused_job(kube, namespace, "limit-range-403", big)
    _assert_failed_by_refusal(kube, namespace, name, "maximum cpu usage per Container is 1")


def test_an_unreadable_status_on_a_finished_job_fails_closed(
    controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    """A hand edit leaves a Succeeded job's status unreadable (the schema lets a year-0
    timestamp through): the job is not re-run, nothing is written, a Warning says why."""
    job = make_job("garbled", chief="Never", workers=(1, "Never"))
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    wait_running(kube, namespace, name, 2)
    kube.exit_pod(namespace, f"{name}-chief-0", 0)
    done = wait_job(kube, namespace, name, "Succeeded")
    wait_for(lambda: not kube.pods(namespace, name), 30, "pods cleaned up")

    garbled = {**done, "status": {**done["status"], "startTime": "0000-01-01T00:00:00Z"}}
    stored = kube.req("PUT", f"{kube.tfjobs(namespace)}/{name}/status", garbled)
    assert stored["status"]["startTime"] == "0000-01-01T00:00:00Z"
    (event,) = wait_for(
        lambda: _warnings(kube, namespace, name, "TFJobStatusUnreadable"), 15, "the Warning"
    )
    assert "status.startTime" in event["message"], event["message"]
    settled(kube, controller, namespace, name)
    assert kube.pods(namespace, name) == [] and kube.services(namespace, name) == []
    after = kube.tfjob(namespace, name)
    assert after is not None and after["status"] == stored["status"], "nothing was written"
