"""A tenant whom RBAC limits to its own namespace tries to decide another namespace's
job (issue 29): children are the job's only in the job's own namespace, and a name the
job needs that somebody else holds is reported, counted and, past the grace, fails the
job naming the holder."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    condition,
    live,
    wait_for,
    wait_job,
    wait_running,
)
from tests.cluster.policy_helpers import TEMPLATE, make_job, rs, settled
from tests.cluster.tenant import Tenant
from tests.conftest import Cluster

HOLD = "tenant.test/hold"


@pytest.fixture
def tenant(cluster: Cluster) -> Iterator[Tenant]:
    """A namespace of the tenant's own; its pods' finalizers are let go at the end, or
    the namespace would never go."""
    name = f"tenant-{uuid.uuid4().hex[:8]}"
    cluster.api.create_namespace(name, {"tfjob-test": "1"})
    t = Tenant(cluster, name)
    yield t
    for pod in t.req("GET", t.pods())["items"]:
        if pod["metadata"].get("finalizers"):
            t.merge(f"{t.pods()}/{pod['metadata']['name']}", {"metadata": {"finalizers": None}})
    cluster.api.request("DELETE", f"/api/v1/namespaces/{name}")


def _phase(tenant: Tenant, name: str) -> str:
    return str(tenant.req("GET", f"{tenant.pods()}/{name}").get("status", {}).get("phase", ""))


@pytest.mark.local_only  # kwok pods that exit on the test's say
def test_a_pod_in_another_namespace_never_decides_a_jobs_outcome(
    controller: ControllerProcess, kube: Kube, namespace: str, tenant: Tenant
) -> None:
    job = kube.create_tfjob(namespace, make_job("victim", workers=(2, "Never")))
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    real = wait_running(kube, namespace, name, 2)
    labels = real[0]["metadata"]["labels"]
    # The tenant's pods: the victim's labels, a finalizer of its own, succeeded.
    forged = [f"{name}-worker-{i}" for i in range(3)]
    for pod_name in forged:
        tenant.req(
            "POST",
            tenant.pods(),
            {
                "metadata": {"name": pod_name, "labels": labels, "finalizers": [HOLD]},
                "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"},
            },
        )
    for pod_name in forged:
        wait_for(lambda n=pod_name: _phase(tenant, n) == "Running", 30, f"{pod_name} running")
        tenant.merge(
            f"{tenant.pods()}/{pod_name}",
            {"metadata": {"annotations": {"kwok.test/exit-code": "0"}}},
        )
    for pod_name in forged:
        wait_for(lambda n=pod_name: _phase(tenant, n) == "Succeeded", 30, f"{pod_name} done")
    # Then they claim the victim job as their controller. An ownerReference names no
    # namespace, so the apiserver takes it; the garbage collector finds no such owner
    # in the tenant's namespace and deletes them, and the tenant's finalizer keeps them.
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "name": name,
        "uid": uid,
        "controller": True,
    }
    for pod_name in forged:
        tenant.merge(f"{tenant.pods()}/{pod_name}", {"metadata": {"ownerReferences": [owner]}})

    def claimed_and_collected() -> bool:
        pods = tenant.req("GET", tenant.pods())["items"]
        return len(pods) == 3 and all(not live(p) for p in pods)

    wait_for(claimed_and_collected, 60, "the forged pods claimed and marked deleted")
    settled(kube, controller, namespace, name)
    got = kube.tfjob(namespace, name)
    assert condition(got, "Succeeded") is None and condition(got, "Failed") is None
    assert rs(got, "Worker") == {
        "active": 2, "succeeded": 0, "failed": 0, "restarts": 0, "disruptions": 0
    }  # fmt: skip
    # and nothing of the tenant's was touched: its finalizer is the only one
    for pod in tenant.req("GET", tenant.pods())["items"]:
        assert pod["metadata"]["finalizers"] == [HOLD]


@pytest.mark.parametrize("kind", ["Pod", "Service"])
def test_a_name_the_job_needs_held_by_someone_else_fails_it_naming_the_holder(
    controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str, kind: str
) -> None:
    """A tenant of the job's own namespace takes a name the job's pod or Service must
    have first. The job's TF_CONFIG names that Service: traffic meant for worker 1 would
    go to the tenant's pods. Every refused create is a Warning naming the holder, and
    the job fails once the create grace (3 s here) has passed."""
    tenant = Tenant(cluster, namespace)
    job = make_job("squat", workers=(2, "Never"))
    held = "squat-worker-1"
    if kind == "Pod":
        body = {
            "metadata": {"name": held, "labels": {"app": "tenant"}},
            "spec": {**TEMPLATE["spec"], "restartPolicy": "Never"},
        }
        tenant.req("POST", tenant.pods(), body)
    else:
        body = {
            "metadata": {"name": held},
            "spec": {"clusterIP": "None", "selector": {"app": "tenant"}, "ports": [{"port": 2222}]},
        }
        tenant.req("POST", tenant.services(), body)
    kube.create_tfjob(namespace, job)
    failed = wait_job(kube, namespace, "squat", "Failed", timeout=60)
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == f"FailedCreate{kind}", cond
    assert f"{kind.lower()} {held} already exists and is not controlled by this TFJob" in (
        cond["message"]
    )
    warnings = [
        e
        for e in kube.events(namespace)
        if e["reason"] == f"FailedCreate{kind}" and e["type"] == "Warning"
        and e["involvedObject"].get("name") == "squat"
    ]  # fmt: skip
    assert warnings and all(held in e["message"] for e in warnings), warnings
    # the holder is left as it was: not ours to touch
    path = tenant.pods() if kind == "Pod" else tenant.services()
    kept = tenant.req("GET", f"{path}/{held}")
    assert not kept["metadata"].get("ownerReferences") and live(kept)
