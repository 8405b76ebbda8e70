"""reconcile.policy.children on its own: pod bodies for the indexes to create, pods of removed
replica types, the one-service-per-index diff, and de-duplication."""

from __future__ import annotations

import json
from typing import Any

import pytest

from reconcile.api.labels import JOB_ROLE_LABEL, REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from reconcile.objects.observed import observe, observe_all
from reconcile.policy.children import (
    foreign_pods,
    new_pods,
    service_diff,
    template_overrides,
    unique,
)
from tests.builders import TFJobBuilder, container, make_pod, make_service, make_tfjob, typed

OP = "tfjob-controller"


def names(objs: list[Any]) -> list[str]:
    return [o["metadata"]["name"] for o in objs]


def tf_config(pod: dict[str, Any]) -> dict[str, Any]:
    env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0].get("env", [])}
    return json.loads(env["TF_CONFIG"])


# --- new_pods ----------------------------------------------------------------------------


def test_new_pods_only_for_the_requested_indexes_in_order() -> None:
    job = typed(make_tfjob("t").ps(2).worker(3))
    pods = new_pods(job, {"Worker": [2, 0], "PS": [1]}, cluster_domain=None, operator_name=OP)
    assert names(pods) == ["t-worker-2", "t-worker-0", "t-ps-1"]
    assert new_pods(job, {}, cluster_domain=None, operator_name=OP) == []


def test_new_pod_identity_owner_and_tf_config() -> None:
    job = typed(make_tfjob("t", "kf").ps(1).worker(2, restart_policy="OnFailure"))
    (pod,) = new_pods(job, {"Worker": [1]}, cluster_domain=None, operator_name="my-op")
    meta = pod["metadata"]
    assert meta["namespace"] == "kf"
    assert meta["ownerReferences"][0]["uid"] == "uid-t"
    assert meta["ownerReferences"][0]["controller"] is True
    assert meta["labels"][REPLICA_TYPE_LABEL] == "worker"
    assert meta["labels"][REPLICA_INDEX_LABEL] == "1"
    assert meta["labels"]["training.kubeflow.org/operator-name"] == "my-op"
    assert pod["spec"]["restartPolicy"] == "OnFailure"
    assert tf_config(pod) == {
        "cluster": {
            "ps": ["t-ps-0.kf.svc:2222"],
            "worker": ["t-worker-0.kf.svc:2222", "t-worker-1.kf.svc:2222"],
        },
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }


def test_new_pods_use_the_cluster_domain() -> None:
    job = typed(make_tfjob("t").worker(2))
    (pod,) = new_pods(job, {"Worker": [0]}, cluster_domain="cluster.local", operator_name=OP)
    assert tf_config(pod)["cluster"]["worker"][0] == "t-worker-0.ns.svc.cluster.local:2222"


@pytest.mark.parametrize(
    ("builder", "creates", "masters"),
    [
        pytest.param(make_tfjob("t").chief().worker(2), {"Chief": [0], "Worker": [0, 1]},
                     ["t-chief-0"], id="chief"),
        pytest.param(make_tfjob("t").master().worker(1), {"Master": [0], "Worker": [0]},
                     ["t-master-0"], id="master"),
        pytest.param(make_tfjob("t").ps(1).worker(2), {"PS": [0], "Worker": [0, 1]},
                     ["t-worker-0"], id="worker0-without-chief"),
    ],
)  # fmt: skip
def test_new_pods_master_role(
    builder: TFJobBuilder, creates: dict[str, list[int]], masters: list[str]
) -> None:
    pods = new_pods(typed(builder), creates, cluster_domain=None, operator_name=OP)
    assert names([p for p in pods if JOB_ROLE_LABEL in p["metadata"]["labels"]]) == masters


def test_new_pods_leave_the_template_untouched() -> None:
    job = typed(make_tfjob("t").worker(2))
    before = job.replica_specs["Worker"].template
    snapshot = json.dumps(before, sort_keys=True)
    new_pods(job, {"Worker": [0, 1]}, cluster_domain=None, operator_name=OP)
    assert json.dumps(before, sort_keys=True) == snapshot


# --- foreign_pods ------------------------------------------------------------------------

RAW = make_tfjob("t").chief().worker(1).ps(1).evaluator().obj()


def test_foreign_pods_are_the_live_pods_of_removed_types() -> None:
    job = typed(make_tfjob("t").chief().worker(1))
    unlabelled = make_pod(RAW, "Worker", 0).obj()
    del unlabelled["metadata"]["labels"][REPLICA_TYPE_LABEL]
    pods = [
        make_pod(RAW, "Chief", 0).view(),
        make_pod(RAW, "Worker", 0).running().view(),
        make_pod(RAW, "PS", 0).running().view(),
        make_pod(RAW, "Evaluator", 0).running().terminating().view(),  # already going
        observe(unlabelled),
    ]
    assert [p.name for p in foreign_pods(job, pods)] == ["t-ps-0"]


def test_foreign_pods_match_replica_types_case_insensitively() -> None:
    job = typed(make_tfjob("t").replica("worker", 1))  # defaulting re-cases it to Worker
    assert foreign_pods(job, [make_pod(RAW, "Worker", 0).view()]) == []


# --- service_diff ------------------------------------------------------------------------


def test_service_diff_creates_one_headless_service_per_index() -> None:
    job = typed(make_tfjob("t").chief().worker(2).ps(0))
    create, delete = service_diff(job, [], operator_name=OP)
    assert names(create) == ["t-chief-0", "t-worker-0", "t-worker-1"]  # none for 0 replicas
    assert delete == []
    assert all(s["spec"]["clusterIP"] == "None" for s in create)
    assert create[2]["spec"]["selector"][REPLICA_INDEX_LABEL] == "1"
    assert create[2]["metadata"]["ownerReferences"][0]["uid"] == "uid-t"


def test_service_diff_is_empty_when_every_index_has_its_service() -> None:
    job = typed(make_tfjob("t").chief().worker(2))
    svcs = [make_service(RAW, "Chief", 0)] + [make_service(RAW, "Worker", i) for i in range(2)]
    assert service_diff(job, svcs, operator_name=OP) == ([], [])


def test_service_diff_deletes_scaled_down_removed_and_duplicate_services() -> None:
    job = typed(make_tfjob("t").worker(1))
    dup = make_service(RAW, "Worker", 0)
    dup["metadata"]["uid"] = "svc-dup"
    renamed = make_service(RAW, "Worker", 0)
    renamed["metadata"].update(name="adopted-orphan", uid="svc-orphan")  # same labels
    svcs = [
        make_service(RAW, "Worker", 0),
        dup,
        renamed,
        make_service(RAW, "Worker", 1),  # scale-down
        make_service(RAW, "PS", 0),  # removed type
    ]
    create, delete = service_diff(job, svcs, operator_name=OP)
    assert create == []
    assert [s["metadata"]["uid"] for s in delete] == [
        "svc-dup", "svc-orphan", "svc-t-worker-1", "svc-t-ps-0",
    ]  # fmt: skip
    assert names(delete) == ["t-worker-0", "adopted-orphan", "t-worker-1", "t-ps-0"]


def test_service_diff_waits_for_a_terminating_service() -> None:
    job = typed(make_tfjob("t").worker(1))
    wanted, extra = make_service(RAW, "Worker", 0), make_service(RAW, "Worker", 1)
    for svc in (wanted, extra):
        svc["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:30Z"
    # Neither recreated under the same name while it goes, nor deleted a second time.
    assert service_diff(job, [wanted, extra], operator_name=OP) == ([], [])


# --- unique ------------------------------------------------------------------------------


def obj(name: str, uid: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if uid is not None:
        meta["uid"] = uid
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("objs", "want"),
    [
        pytest.param([], [], id="empty"),
        pytest.param([obj("a", "1"), obj("b", "2"), obj("a2", "1")], [("a", "1"), ("b", "2")],
                     id="by-uid-first-kept"),
        pytest.param([obj("a", "1"), obj("a", "2")], [("a", "1"), ("a", "2")],
                     id="same-name-new-uid-kept"),
        pytest.param([obj("a"), obj("b"), obj("a")], [("a", None), ("b", None)],
                     id="by-name-without-uid"),
    ],
)  # fmt: skip
def test_unique(objs: list[dict[str, Any]], want: list[tuple[str, str | None]]) -> None:
    pods = observe_all(objs)
    got = unique(pods)
    assert [(o.name, o.uid or None) for o in got] == want
    assert all(any(g is o for o in pods) for g in got)  # the pods themselves, not copies


def _with_template_restart_policy(policy: str) -> TFJobBuilder:
    template = {"spec": {"restartPolicy": policy, "containers": [container()]}}
    return make_tfjob().ps(1).worker(2, restart_policy="OnFailure", template=template)


@pytest.mark.parametrize(
    ("builder", "creates", "warned"),
    [
        pytest.param(_with_template_restart_policy("Always"), {"Worker": [0]}, True, id="set"),
        pytest.param(_with_template_restart_policy("Always"), {"PS": [0]}, False, id="other-type"),
        pytest.param(
            _with_template_restart_policy("Always"), {"Worker": []}, False, id="no-create"
        ),
        pytest.param(_with_template_restart_policy(""), {"Worker": [0, 1]}, False, id="empty"),
    ],
)
def test_template_restart_policy_is_overridden_with_upstreams_warning(
    builder: TFJobBuilder, creates: dict[str, list[int]], warned: bool
) -> None:
    job = typed(builder)
    events = template_overrides(job, creates)
    assert [(e.type, e.reason) for e in events] == (
        [("Warning", "SettedPodTemplateRestartPolicy")] if warned else []
    )
    want = {"worker": "OnFailure", "ps": "Never"}  # the replicas' policies, not "Always"
    for pod in new_pods(job, creates, cluster_domain=None, operator_name=OP):
        assert pod["spec"]["restartPolicy"] == want[pod["metadata"]["labels"][REPLICA_TYPE_LABEL]]
