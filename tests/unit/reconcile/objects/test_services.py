from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.spec import read_job
from reconcile.objects.observed import observe_all
from reconcile.objects.pods import JobRef
from reconcile.objects.services import build_service, service_ports
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from tests.builders import at, container, make_pod, make_service, make_tfjob

P = "training.kubeflow.org/"


def test_build_service_exact() -> None:
    tpl = {
        "spec": {"containers": [container(ports=[{"name": "tfjob-port", "containerPort": 2222}])]}
    }
    svc = build_service(JobRef("j", "ns", "u1"), "PS", 1, tpl, operator_name="tfjob-controller")
    labels = {
        P + "operator-name": "tfjob-controller",
        P + "job-name": "j",
        P + "replica-type": "ps",
        P + "replica-index": "1",
    }
    assert svc == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "j-ps-1",
            "namespace": "ns",
            "labels": labels,
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "j", "uid": "u1",
                 "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {
            "clusterIP": "None",
            "selector": labels,
            "ports": [{"name": "tfjob-port", "port": 2222}],
            "publishNotReadyAddresses": True,
        },
    }  # fmt: skip


@pytest.mark.parametrize(
    ("containers", "want"),
    [
        pytest.param([container()], [], id="no-ports"),
        pytest.param(
            [container(ports=[{"name": "tfjob-port", "containerPort": 2222},
                              {"name": "metrics", "containerPort": 9000, "protocol": "TCP"}])],
            [{"name": "tfjob-port", "port": 2222}, {"name": "metrics", "port": 9000}],
            id="named-ports",
        ),
        pytest.param(
            [container(ports=[{"containerPort": 1}, {"name": "a", "containerPort": 2},
                              {"name": "a", "containerPort": 3}])],
            [{"name": "a", "port": 2}], id="unnamed-skipped-duplicates-once",
        ),
        pytest.param(
            [container(ports=[{"name": "u", "containerPort": 5, "protocol": "UDP"}])],
            [{"name": "u", "port": 5, "protocol": "UDP"}], id="udp-kept",
        ),
        pytest.param(
            [container("side", ports=[{"name": "x", "containerPort": 1}]), container()],
            [], id="only-tensorflow-container",
        ),
    ],
)  # fmt: skip
def test_service_ports(containers: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    assert service_ports({"spec": {"containers": containers}}) == want


def _plan(job: dict[str, Any], pods: list[Any], svcs: list[Any]) -> Any:
    return compute_plan(Snapshot(read_job(job), observe_all(pods), svcs, at(100)), PlanConfig())


def test_one_service_per_replica_and_never_duplicated() -> None:
    job = make_tfjob("j").chief().worker(2).obj()
    plan = _plan(job, [], [])
    assert sorted(s["metadata"]["name"] for s in plan.create_services) == [
        "j-chief-0", "j-worker-0", "j-worker-1",
    ]  # fmt: skip
    existing = [make_service(job, "Chief", 0), make_service(job, "Worker", 0)]
    plan = _plan(job, [], existing)
    assert [s["metadata"]["name"] for s in plan.create_services] == ["j-worker-1"]
    assert plan.delete_services == []


def test_services_deleted_on_scale_down_and_duplicates() -> None:
    job = make_tfjob("j").worker(1).obj()
    dup = make_service(job, "Worker", 0)
    dup["metadata"]["name"] = "old-name"
    dup["metadata"]["uid"] = "dup"
    svcs = [make_service(job, "Worker", 0), make_service(job, "Worker", 1), dup]
    plan = _plan(job, [make_pod(job, "Worker", 0).running().obj()], svcs)
    assert sorted(s["metadata"]["name"] for s in plan.delete_services) == ["j-worker-1", "old-name"]
    assert plan.create_services == []


def test_services_recreated_if_deleted_while_running() -> None:
    job = make_tfjob("j").worker(2).obj()
    pods = [make_pod(job, "Worker", i).running().obj() for i in range(2)]
    plan = _plan(job, pods, [make_service(job, "Worker", 0)])
    assert [s["metadata"]["name"] for s in plan.create_services] == ["j-worker-1"]
