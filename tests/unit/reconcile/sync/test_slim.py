"""reconcile.sync.slim: the cache keeps only what the TFJob logic reads, so every plan computed
from slimmed pods and services equals the plan computed from the full objects."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from typing import Any

import pytest

from controller.cache.informer import strip_managed_fields
from controller.cache.store import index_by_controller_uid, key_of
from reconcile.api.labels import replica_index_of, replica_type_of
from reconcile.api.names import RETIRED_ANNOTATION
from reconcile.api.spec import read_job
from reconcile.api.status_types import format_time
from reconcile.objects import pods as P
from reconcile.objects.observed import observe, observe_all
from reconcile.plan import Plan, PlanConfig, Snapshot, compute_plan
from reconcile.sync.handlers import owner_job_key
from reconcile.sync.slim import slim_pod, slim_service
from tests.builders import at, make_pod, make_service, make_tfjob, ts
from tfjob_controller.app import POD_TRANSFORM, SERVICE_TRANSFORM

CFG = PlanConfig()
JSON = dict[str, Any]


# --- full objects: what the API server really sends --------------------------------------


def full_pod(pod: JSON) -> JSON:
    """A builder pod dressed like a real one: everything slim drops must be there."""
    pod = copy.deepcopy(pod)
    meta = pod["metadata"]
    meta.setdefault("resourceVersion", "42")
    meta["generateName"] = meta["name"][:-1]
    meta["annotations"] = {
        **meta.get("annotations", {}),
        "kwok.x-k8s.io/node": "fake",
        "note": "x" * 200,
    }
    meta["finalizers"] = ["example.com/keep"]
    meta["managedFields"] = [
        {
            "manager": "kubelet",
            "operation": "Update",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:status": {"f:phase": {}}},
        }
    ]
    for ref in meta.get("ownerReferences", []):
        ref.setdefault("blockOwnerDeletion", True)
    spec = pod.setdefault("spec", {})
    spec.update(
        nodeName="node-1",
        restartPolicy="Never",
        schedulerName="default-scheduler",
        serviceAccountName="default",
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        volumes=[{"name": "data", "emptyDir": {}}],
    )
    for c in spec.get("containers", []):
        c.update(
            command=["python", "train.py"],
            env=[{"name": "TF_CONFIG", "value": '{"cluster": {}}'}],
            resources={"limits": {"cpu": "1"}},
            ports=[{"name": "tfjob-port", "containerPort": 2222}],
        )
    status = pod.setdefault("status", {})
    status.update(podIP="10.0.0.7", hostIP="192.168.0.1", qosClass="Burstable")
    status.setdefault("conditions", [])
    status["conditions"] = [
        {**c, "message": "long text", "lastProbeTime": None} for c in status["conditions"]
    ] + [{"type": "PodScheduled", "status": "True", "lastTransitionTime": ts(1)}]
    for cs in status.get("containerStatuses", []):
        cs.update(image="img", imageID="sha256:abc", containerID="containerd://1", ready=False)
        term = (cs.get("state") or {}).get("terminated")
        if term is not None:
            term.update(message="Traceback ... " * 50, containerID="containerd://1")
    return pod


def full_service(svc: JSON) -> JSON:
    svc = copy.deepcopy(svc)
    svc["metadata"]["managedFields"] = [{"manager": "tfjob-controller"}]
    svc["metadata"]["resourceVersion"] = "7"
    svc["spec"]["clusterIPs"] = ["None"]
    svc["status"] = {"loadBalancer": {}}
    return svc


# --- comparing plans -----------------------------------------------------------------------


def ident(obj: JSON) -> tuple[str, str]:
    return obj["metadata"]["name"], obj["metadata"].get("uid", "")


def comparable(plan: Plan) -> dict[str, Any]:
    """The plan with deleted objects reduced to their identity (the full and the slim
    plan delete the same pods, as different dicts)."""
    return {
        "create_pods": plan.create_pods,
        "delete_pods": [ident(p) for p in plan.delete_pods],
        "create_services": plan.create_services,
        "delete_services": [ident(s) for s in plan.delete_services],
        "status": plan.status,
        "events": plan.events,
        "requeue_after": plan.requeue_after,
        "delete_job": plan.delete_job,
        "skip_reason": plan.skip_reason,
    }


def both(job: JSON, pods: list[JSON], services: list[JSON] = (), now: float = 100) -> Plan:  # type: ignore[assignment]
    """The plan from full objects, after checking the slim objects give the same one."""
    full_pods = [full_pod(p) for p in pods]
    full_svcs = [full_service(s) for s in services]
    slim_pods = [slim_pod(p) for p in full_pods]
    slim_svcs = [slim_service(s) for s in full_svcs]
    full = compute_plan(Snapshot(read_job(job), observe_all(full_pods), full_svcs, at(now)), CFG)
    slim = compute_plan(Snapshot(read_job(job), observe_all(slim_pods), slim_svcs, at(now)), CFG)
    assert comparable(slim) == comparable(full)
    return full


def advanced(job: JSON, plan: Plan) -> JSON:
    """The job after the plan's status write."""
    job = copy.deepcopy(job)
    if plan.status is not None:
        job["status"] = plan.status
    return job


def all_services(job: JSON) -> list[JSON]:
    return [
        make_service(job, rt, i)
        for rt, spec in job["spec"]["tfReplicaSpecs"].items()
        for i in range(spec.get("replicas", 1))
    ]


# --- plan equality over representative worlds -----------------------------------------------

PodFn = Callable[[JSON], list[JSON]]

SCENARIOS: dict[str, tuple[JSON, PodFn]] = {
    "pending-and-running": (
        make_tfjob("t").chief().worker(2).obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).running().obj(),
            make_pod(j, "Worker", 1).pending().obj(),
        ],
    ),
    "chief-succeeded": (
        make_tfjob("t").chief().worker(1).clean_pod_policy("Running").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).succeeded(finished=30).obj(),
            make_pod(j, "Worker", 0).running().obj(),
        ],
    ),
    "worker0-succeeded-no-chief": (
        make_tfjob("t").worker(3).obj(),
        lambda j: [
            make_pod(j, "Worker", 0).succeeded().obj(),
            make_pod(j, "Worker", 1).running().obj(),
            make_pod(j, "Worker", 2).running().obj(),
        ],
    ),
    "exit-code-permanent": (
        make_tfjob("t").chief().worker(1, restart_policy="ExitCode").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).failed(code=1).obj(),
        ],
    ),
    "exit-code-retryable": (
        make_tfjob("t").chief().worker(1, restart_policy="ExitCode").backoff_limit(5).obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).failed(code=137).obj(),
        ],
    ),
    "failed-without-exit-code": (
        make_tfjob("t").chief().worker(1, restart_policy="ExitCode").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).failed(code=None).obj(),
        ],
    ),
    "never-policy-failure": (
        make_tfjob("t").chief().worker(2, restart_policy="Never").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).running().obj(),
            make_pod(j, "Worker", 1).failed(code=2).obj(),
        ],
    ),
    "on-failure-restart-counts": (
        make_tfjob("t").chief().worker(1, restart_policy="OnFailure").backoff_limit(2).obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).running().restarts(3).obj(),
        ],
    ),
    "evicted": (
        make_tfjob("t").chief().worker(1, restart_policy="Never").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).evicted().obj(),
        ],
    ),
    "disruption-target": (
        make_tfjob("t").chief().worker(1, restart_policy="Never").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).failed(code=143).disruption_target().obj(),
        ],
    ),
    "failed-then-deleted": (
        # finished at 10, DELETE issued at 20: a failure, not a disruption
        make_tfjob("t").chief().worker(1, restart_policy="Never").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).failed(code=1, finished=10).terminating(requested=20).obj(),
        ],
    ),
    "killed-by-deletion": (
        # DELETE issued at 5, container finished at 10 because of it: a disruption
        make_tfjob("t").chief().worker(1, restart_policy="Never").obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0)
            .failed(code=137, finished=10)
            .terminating(requested=5, grace=30)
            .obj(),
        ],
    ),
    "running-pod-terminating": (
        make_tfjob("t").chief().worker(2).obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).running().terminating().obj(),
            make_pod(j, "Worker", 1).running().obj(),
        ],
    ),
    "scale-down-and-foreign-type": (
        make_tfjob("t").chief().worker(1).obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).running().obj(),
            make_pod(j, "Worker", 3).running().obj(),
            make_pod(j, "PS", 0).running().obj(),
        ],
    ),
    "active-deadline": (
        make_tfjob("t").chief().active_deadline(50).obj(),
        lambda j: [make_pod(j, "Chief", 0).running().obj()],
    ),
    "suspended": (
        make_tfjob("t").chief().worker(1).suspend().obj(),
        lambda j: [
            make_pod(j, "Chief", 0).running().obj(),
            make_pod(j, "Worker", 0).pending().obj(),
        ],
    ),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_slim_plan_equals_full_plan(name: str) -> None:
    job, pods_of = SCENARIOS[name]
    pods = pods_of(job)
    plan = both(job, pods, all_services(job))
    # and the pass after its status write, where the durable record (restarts,
    # lastPodUID, succeeded indexes) meets the same pods again
    both(advanced(job, plan), pods, all_services(job), now=200)


def test_slim_plan_equals_full_plan_through_a_restart_cycle() -> None:
    """ExitCode retries over several passes: accounting, deletion, backoff, replacement,
    container restarts folded once per pod UID."""
    job = make_tfjob("t").chief().worker(1, restart_policy="ExitCode").backoff_limit(3).obj()
    chief = make_pod(job, "Chief", 0).running().obj()
    w1 = make_pod(job, "Worker", 0).uid("w-1").failed(code=137, finished=10).obj()
    plan = both(job, [chief, w1], now=11)
    assert plan.status is not None and plan.status["replicaStatuses"]["Worker"]["restarts"] == 1
    job = advanced(job, plan)
    plan = both(job, [chief, w1], now=12)  # accounted: now it is deleted
    assert [ident(p) for p in plan.delete_pods] == [ident(w1)]
    gone = make_pod(job, "Worker", 0).uid("w-1").failed(code=137, finished=10)
    plan = both(job, [chief, gone.terminating(requested=12, grace=0).obj()], now=13)
    plan = both(advanced(job, plan), [chief], now=14)  # backoff pending: requeue
    assert plan.requeue_after is not None
    job = advanced(job, plan)
    plan = both(job, [chief], now=40)  # backoff over: the replacement
    assert [p["metadata"]["name"] for p in plan.create_pods] == ["t-worker-0"]
    w2 = make_pod(job, "Worker", 0).uid("w-2").created(40).running(41).restarts(2).obj()
    plan = both(advanced(job, plan), [chief, w2], now=50)
    plan = both(advanced(advanced(job, plan), plan), [chief, w2], now=60)


def test_slim_plan_equals_full_plan_for_a_finished_job_cleanup() -> None:
    job = make_tfjob("t").chief().worker(2).clean_pod_policy("Running").ttl(30).obj()
    pods = [
        make_pod(job, "Chief", 0).succeeded(finished=20).obj(),
        make_pod(job, "Worker", 0).running().obj(),
        make_pod(job, "Worker", 1).failed(code=1).obj(),
    ]
    plan = both(job, pods, all_services(job), now=21)
    assert plan.status is not None
    job = advanced(job, plan)
    plan = both(job, pods, all_services(job), now=22)
    assert plan.delete_pods and plan.delete_services
    plan = both(job, pods, all_services(job), now=100)
    assert plan.delete_job


def test_init_container_restarts_and_terminated_state_survive() -> None:
    job = make_tfjob("t").chief().worker(1, restart_policy="OnFailure").obj()
    pod = make_pod(job, "Worker", 0).running().obj()
    pod["status"]["initContainerStatuses"] = [
        {
            "name": "init",
            "restartCount": 2,
            "state": {"terminated": {"exitCode": 0, "finishedAt": ts(3), "message": "ok"}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": ts(2)}},
        }
    ]
    both(job, [make_pod(job, "Chief", 0).running().obj(), pod])
    slim = slim_pod(full_pod(pod))
    assert P.restart_count(slim) == 2
    init = slim["status"]["initContainerStatuses"][0]
    assert init["lastState"] == {"terminated": {"exitCode": 1, "finishedAt": ts(2)}}
    assert "message" not in init["state"]["terminated"]


# --- every fact the controller reads is unchanged ------------------------------------------


def facts(pod: JSON) -> dict[str, Any]:
    return {
        "key": key_of(pod),
        "rv": pod["metadata"].get("resourceVersion"),
        "name": P.name_of(pod),
        "uid": P.uid_of(pod),
        "phase": P.phase_of(pod),
        "terminating": P.is_terminating(pod),
        "created": P.created_at(pod),
        "exit_code": P.exit_code(pod),
        "restarts": P.restart_count(pod),
        "started": P.started_at(pod),
        "finished": P.finished_at(pod),
        "deletion_requested": P.deletion_requested_at(pod),
        "disruption_target": P.has_condition(pod, "DisruptionTarget"),
        "observed": observe(pod),  # every field of the view a pass reads
        "retired": P.is_retired(pod),
        "rtype": replica_type_of(pod),
        "index": replica_index_of(pod),
        "owner_index": index_by_controller_uid(pod),
        "owner_job": owner_job_key(pod),
    }


def representative_pods() -> list[JSON]:
    job = make_tfjob("t").chief().worker(2).obj()
    b = make_pod
    return [
        b(job, "Chief", 0).obj(),
        b(job, "Worker", 0).running().obj(),
        b(job, "Worker", 0).running().restarts(4).obj(),
        b(job, "Worker", 1).succeeded().obj(),
        b(job, "Worker", 1).failed(code=3).obj(),
        b(job, "Worker", 1).failed(code=None).obj(),
        b(job, "Worker", 1).evicted().obj(),
        b(job, "Worker", 1).failed(code=143).disruption_target().terminating().obj(),
        b(job, "Worker", 1).running().terminating(requested=7, grace=0).obj(),
        _retired(b(job, "Worker", 1).running().terminating().obj()),
    ]


def _retired(pod: JSON) -> JSON:
    pod["metadata"]["annotations"] = {RETIRED_ANNOTATION: "true"}
    return pod


@pytest.mark.parametrize("pod", representative_pods(), ids=lambda p: str(p["status"]))
def test_every_fact_read_is_kept(pod: JSON) -> None:
    full = full_pod(pod)
    assert facts(slim_pod(full)) == facts(full)
    assert facts(POD_TRANSFORM(copy.deepcopy(full))) == facts(full)


def test_service_facts_are_kept() -> None:
    job = make_tfjob("t").worker(1).obj()
    svc = full_service(make_service(job, "Worker", 0))
    svc["metadata"]["deletionTimestamp"] = ts(5)
    slim = slim_service(svc)
    for f in (P.name_of, P.uid_of, P.is_terminating, key_of, owner_job_key, replica_type_of):
        assert f(slim) == f(svc)
    assert slim.keys() == {"apiVersion", "kind", "metadata"}


# --- what slim does to the object ---------------------------------------------------------


def test_dropped_fields() -> None:
    job = make_tfjob("t").worker(1).obj()
    full = full_pod(make_pod(job, "Worker", 0).failed(code=1).obj())
    slim = slim_pod(full)
    meta = slim["metadata"]
    assert not {"managedFields", "annotations", "generateName"} & meta.keys()
    # of the annotations, only the controller's own mark is kept
    retired = _retired(make_pod(job, "Worker", 0).obj())
    assert slim_pod(full_pod(retired))["metadata"]["annotations"] == {RETIRED_ANNOTATION: "true"}
    # finalizers are kept: reconcile.policy.tracking reads them
    assert meta["finalizers"] == ["example.com/keep"]
    assert slim["spec"] == {
        "nodeName": "node-1",
        "restartPolicy": "Never",
        "containers": [{"name": "tensorflow"}],
    }
    assert not {"hostIP", "qosClass"} & slim["status"].keys()
    assert slim["status"]["podIP"] == full_pod(retired)["status"]["podIP"]  # the endpoint knows it
    cs = slim["status"]["containerStatuses"][0]
    assert cs.keys() == {"name", "restartCount", "state"}
    assert cs["state"]["terminated"] == {"exitCode": 1, "finishedAt": ts(10)}
    assert all("message" not in c for c in slim["status"]["conditions"])
    assert meta["ownerReferences"] == [
        {
            k: v
            for k, v in full["metadata"]["ownerReferences"][0].items()
            if k != "blockOwnerDeletion"
        }
    ]


def test_input_untouched_and_no_mutable_container_shared_with_it() -> None:
    job = make_tfjob("t").worker(1).obj()
    full = full_pod(make_pod(job, "Worker", 0).failed(code=1).disruption_target().obj())
    before = copy.deepcopy(full)
    slim = slim_pod(full)
    assert full == before

    def containers(obj: Any) -> set[int]:
        if isinstance(obj, dict):
            return {id(obj)}.union(*(containers(v) for v in obj.values()))
        if isinstance(obj, list):
            return {id(obj)}.union(*(containers(v) for v in obj))
        return set()

    assert not containers(slim) & containers(full)


def test_low_cardinality_strings_are_interned_and_shared() -> None:
    job = make_tfjob("t").worker(2).obj()
    a, b = (slim_pod(full_pod(make_pod(job, "Worker", i).running().obj())) for i in range(2))
    # decoded JSON never shares strings between objects; the slim pods do
    a_ns, b_ns = "".join("ns"), "".join("ns")
    assert a_ns is not b_ns and sys.intern(a_ns) is a["metadata"]["namespace"]
    assert a["metadata"]["namespace"] is b["metadata"]["namespace"]
    assert a["status"]["phase"] is b["status"]["phase"]
    # one controller reference per job, one container list per template and node
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    assert a["spec"] is b["spec"]
    assert a["status"]["conditions"][0] is b["status"]["conditions"][0]


def test_malformed_objects_shrink_rather_than_fail() -> None:
    assert slim_pod({}) == {"metadata": {}}
    odd = {
        "kind": "Pod",
        "metadata": {"name": "x", "labels": None, "ownerReferences": ["junk", {"uid": "u"}]},
        "spec": {"containers": ["junk", {"name": "c"}]},
        "status": {"phase": "Running", "conditions": "junk", "containerStatuses": [None]},
    }
    slim = slim_pod(odd)
    assert slim["metadata"] == {"name": "x", "ownerReferences": [{"uid": "u"}]}
    assert slim["spec"] == {"containers": [{"name": "c"}]}
    assert slim["status"] == {"phase": "Running", "containerStatuses": []}


def test_production_transforms_strip_then_slim() -> None:
    job = make_tfjob("t").worker(1).obj()
    full = full_pod(make_pod(job, "Worker", 0).running().obj())
    assert POD_TRANSFORM(copy.deepcopy(full)) == slim_pod(strip_managed_fields(copy.deepcopy(full)))
    svc = full_service(make_service(job, "Worker", 0))
    assert SERVICE_TRANSFORM(copy.deepcopy(svc)) == slim_service(svc)


def test_timestamps_keep_their_format() -> None:
    job = make_tfjob("t").worker(1).obj()
    slim = slim_pod(full_pod(make_pod(job, "Worker", 0).succeeded(finished=9).obj()))
    assert slim["metadata"]["creationTimestamp"] == format_time(at(1))
    assert slim["status"]["startTime"] == ts(2)
