from __future__ import annotations

import copy
from typing import Any

import pytest

from reconcile.api.names import TRACKING_FINALIZER
from reconcile.api.spec import read_job
from reconcile.objects.pods import (
    NO_EXIT_CODE,
    JobRef,
    build_pod,
    deletion_requested_at,
    exit_code,
    finished_at,
    pod_restart_policy,
    restart_count,
)
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from tests.builders import at, container, make_pod, make_tfjob

REF = JobRef(name="j", namespace="ns", uid="u1")
P = "training.kubeflow.org/"


def template() -> dict[str, Any]:
    return {
        "metadata": {
            "labels": {"app": "a", P + "replica-index": "7"},
            "annotations": {"note": "kept"},
            "finalizers": ["example.com/f"],
        },
        "spec": {
            "restartPolicy": "Always",
            "schedulerName": "custom",
            "futureField": {"x": 1},
            "containers": [
                container("sidecar"),
                container("tensorflow", ports=[{"name": "tfjob-port", "containerPort": 2222}])
                | {"env": [{"name": "A", "value": "1"}]},
                container("tensorflow"),
            ],
        },
    }


def test_build_pod_full_body() -> None:
    tpl = template()
    before = copy.deepcopy(tpl)
    pod = build_pod(
        REF, "Worker", 1, tpl, restart_policy="OnFailure", tf_config="{}", master_role=False,
        operator_name="tfjob-controller",
    )  # fmt: skip
    assert tpl == before  # the (cache-shared) template is never mutated
    meta = pod["metadata"]
    assert (pod["apiVersion"], pod["kind"], meta["name"], meta["namespace"]) == (
        "v1", "Pod", "j-worker-1", "ns",
    )  # fmt: skip
    assert meta["labels"] == {
        "app": "a",
        P + "operator-name": "tfjob-controller",
        P + "job-name": "j",
        P + "replica-type": "worker",
        P + "replica-index": "1",
    }
    assert meta["annotations"] == {"note": "kept"} and meta["finalizers"] == [
        "example.com/f",
        TRACKING_FINALIZER,
    ]
    assert meta["ownerReferences"] == [
        {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "name": "j", "uid": "u1",
         "controller": True, "blockOwnerDeletion": True},
    ]  # fmt: skip
    spec = pod["spec"]
    assert spec["restartPolicy"] == "OnFailure"
    assert spec["schedulerName"] == "custom" and spec["futureField"] == {"x": 1}
    # TF_CONFIG appended to the first tensorflow container only.
    sidecar, tf1, tf2 = spec["containers"]
    assert "env" not in sidecar and "env" not in tf2
    assert tf1["env"] == [{"name": "A", "value": "1"}, {"name": "TF_CONFIG", "value": "{}"}]


def test_build_pod_without_tf_config_sets_no_env() -> None:
    pod = build_pod(
        REF, "Worker", 0, {"spec": {"containers": [container()]}}, restart_policy="Never",
        tf_config=None, master_role=True, operator_name="tfjob-controller",
    )  # fmt: skip
    assert "env" not in pod["spec"]["containers"][0]
    assert pod["metadata"]["labels"][P + "job-role"] == "master"


@pytest.mark.parametrize(
    ("policy", "want"),
    [
        pytest.param("Always", "Always", id="always"),
        pytest.param("OnFailure", "OnFailure", id="onfailure"),
        pytest.param("Never", "Never", id="never"),
        pytest.param("ExitCode", "Never", id="exitcode"),
    ],
)
def test_pod_restart_policy(policy: str, want: str) -> None:
    assert pod_restart_policy(policy) == want


@pytest.mark.parametrize(
    ("builder", "rtype", "roles"),
    [
        pytest.param(make_tfjob("j").chief().worker(2), "Worker", [None, None], id="chief-present"),
        pytest.param(
            make_tfjob("j").worker(2).ps(1), "Worker", ["master", None], id="worker0-role"
        ),
        pytest.param(make_tfjob("j").master().worker(1), "Master", ["master"], id="master"),
    ],
)
def test_planned_pods_job_role(builder: Any, rtype: str, roles: list[str | None]) -> None:
    plan = compute_plan(Snapshot(read_job(builder.obj()), [], [], at(0)), PlanConfig())
    pods = sorted(
        (
            p
            for p in plan.create_pods
            if p["metadata"]["labels"][P + "replica-type"] == rtype.lower()
        ),
        key=lambda p: p["metadata"]["name"],
    )
    assert [p["metadata"]["labels"].get(P + "job-role") for p in pods] == roles


def test_planned_pods_cluster_domain() -> None:
    job = make_tfjob("j").worker(2).obj()
    plan = compute_plan(
        Snapshot(read_job(job), [], [], at(0)), PlanConfig(cluster_domain="cluster.local")
    )
    env = plan.create_pods[0]["spec"]["containers"][0]["env"]
    assert "j-worker-0.ns.svc.cluster.local:2222" in env[0]["value"]


def test_planned_pod_gets_default_port_in_template_copy() -> None:
    job = make_tfjob("j").worker(2).obj()
    before = copy.deepcopy(job)
    plan = compute_plan(Snapshot(read_job(job), [], [], at(0)), PlanConfig())
    assert job == before
    assert plan.create_pods[0]["spec"]["containers"][0]["ports"] == [
        {"name": "tfjob-port", "containerPort": 2222}
    ]


# --- facts ------------------------------------------------------------------------------------

JOB = make_tfjob("j").worker(2).obj()


@pytest.mark.parametrize(
    ("pod", "code"),
    [
        pytest.param(make_pod(JOB, "Worker", 0).failed(3).obj(), 3, id="terminated"),
        pytest.param(make_pod(JOB, "Worker", 0).failed(None).obj(), NO_EXIT_CODE, id="none"),
        pytest.param(make_pod(JOB, "Worker", 0).running().obj(), NO_EXIT_CODE, id="running"),
    ],
)
def test_exit_code(pod: dict[str, Any], code: int) -> None:
    assert exit_code(pod) == code


def test_restart_count_sums_containers_and_init_containers() -> None:
    pod = make_pod(JOB, "Worker", 0).running().restarts(2).obj()
    pod["status"]["initContainerStatuses"] = [{"name": "init", "restartCount": 1}]
    assert restart_count(pod) == 3


def test_times() -> None:
    pod = (
        make_pod(JOB, "Worker", 0).failed(1, finished=40).terminating(requested=50, grace=30).obj()
    )
    assert finished_at(pod) == at(40)
    assert deletion_requested_at(pod) == at(50)
