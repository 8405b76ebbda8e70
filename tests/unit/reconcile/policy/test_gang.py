"""Gang scheduling, pure: the PodGroup a job wants, its updates, the pods' decorations,
and the gate that keeps pods back until the gang may run (reconcile.policy.gang, reconcile.plan)."""

from __future__ import annotations

import copy
from decimal import Decimal
from typing import Any

import pytest

from reconcile.api.quantity import format_quantity, parse_quantity, same_resources
from reconcile.api.spec import read_job
from reconcile.objects.observed import observe_all
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from reconcile.policy.gang import (
    GANG_ADMITTED,
    POD_GROUP_LABEL,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_TASK_ANNOTATION,
    Gang,
    GangKind,
    decorated_pod,
    desired_podgroup,
    gang_from_flag,
    spec_patch,
)
from tests.builders import at, make_pod, make_tfjob

PLUGINS = Gang(GangKind.SCHEDULER_PLUGINS, "scheduler-plugins-scheduler")
VOLCANO = Gang(GangKind.VOLCANO, "volcano")


def res(
    requests: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    name: str = "tensorflow",
) -> Any:
    r: dict[str, Any] = {}
    if requests is not None:
        r["requests"] = requests
    if limits is not None:
        r["limits"] = limits
    return {"name": name, "image": "img", "resources": r}


def tpl(*containers: Any, priority_class: str | None = None, scheduler: str | None = None) -> Any:
    spec: dict[str, Any] = {"containers": list(containers)}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if scheduler:
        spec["schedulerName"] = scheduler
    return {"spec": spec}


def policy(job: dict[str, Any], **kw: Any) -> dict[str, Any]:
    job["spec"].setdefault("runPolicy", {})["schedulingPolicy"] = kw
    return job


def tfjob(job: dict[str, Any]) -> Any:
    view = read_job(job)
    assert view.tfjob is not None, view.invalid_message
    return view.tfjob


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("500m", Decimal("0.5")),
        ("1", Decimal(1)),
        (2, Decimal(2)),
        ("4Gi", Decimal(4 * 2**30)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("2E-3", Decimal("0.002")),
        ("100M", Decimal(10**8)),
        ("250u", Decimal("0.00025")),
    ],
)
def test_parse_quantity(text: Any, want: Decimal) -> None:
    assert parse_quantity(text) == want


def test_format_quantity_is_exact_or_rounds_up() -> None:
    assert format_quantity(Decimal("1.5")) == "1500m"
    assert format_quantity(Decimal(3)) == "3"
    assert format_quantity(Decimal("0.00025")) == "250u"
    assert format_quantity(Decimal("1e-10")) == "1n"
    assert same_resources({"cpu": "1000m"}, {"cpu": 1})
    assert not same_resources({"cpu": "1"}, {"cpu": "2"})
    assert not same_resources({"cpu": "1"}, {"cpu": "1", "memory": "1Gi"})


def test_flag_picks_the_mode_as_upstream() -> None:
    assert gang_from_flag("") is None and gang_from_flag(None) is None
    assert gang_from_flag("Volcano") == VOLCANO
    assert gang_from_flag("scheduler-plugins-scheduler") == PLUGINS
    assert PLUGINS.api_version == "scheduling.x-k8s.io/v1alpha1"
    assert VOLCANO.api_version == "scheduling.volcano.sh/v1beta1"


def test_podgroup_of_a_job_sums_the_gang_and_is_owned_by_it() -> None:
    job = make_tfjob("g", uid="u1").chief(1, template=tpl(res({"cpu": "1", "memory": "1Gi"})))
    job = job.worker(
        3, template=tpl(res(limits={"cpu": "500m"}), res({"memory": "2Gi"}, name="side"))
    )
    raw = job.obj()
    raw["metadata"]["annotations"] = {"team": "a"}
    pg = desired_podgroup(tfjob(raw), PLUGINS, {})
    assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1" and pg["kind"] == "PodGroup"
    assert pg["metadata"]["name"] == "g" and pg["metadata"]["annotations"] == {"team": "a"}
    (ref,) = pg["metadata"]["ownerReferences"]
    assert (ref["kind"], ref["uid"], ref["controller"]) == ("TFJob", "u1", True)
    # limits where a container has no requests: 1 + 3 x 0.5 CPU, 1Gi + 3 x 2Gi
    assert pg["spec"] == {
        "minMember": 4,
        "minResources": {"cpu": "2500m", "memory": str(7 * 2**30)},
    }


def test_min_available_takes_the_highest_priority_replicas_first() -> None:
    job = make_tfjob("g").ps(2, template=tpl(res({"cpu": "2"}), priority_class="low"))
    job = job.worker(4, template=tpl(res({"cpu": "1"}), priority_class="high"))
    raw = policy(job.obj(), minAvailable=5)
    spec = desired_podgroup(tfjob(raw), PLUGINS, {"high": 1000, "low": 10})["spec"]
    assert spec == {"minMember": 5, "minResources": {"cpu": "6"}}  # 4 workers, then 1 PS
    # the other way round when PS is the more important
    spec = desired_podgroup(tfjob(raw), PLUGINS, {"high": 1, "low": 10})["spec"]
    assert spec["minResources"] == {"cpu": "7"}  # 2 PS, then 3 workers


def test_volcano_and_plugins_specs_carry_their_own_fields() -> None:
    raw = make_tfjob("g").worker(2, template=tpl(res({"cpu": "1"}))).obj()
    raw = policy(
        raw,
        minAvailable=2,
        queue="q1",
        priorityClass="pc",
        minResources={"cpu": "8"},
        scheduleTimeoutSeconds=30,
    )
    assert desired_podgroup(tfjob(raw), VOLCANO, {})["spec"] == {
        "minMember": 2,
        "minResources": {"cpu": "8"},
        "queue": "q1",
        "priorityClassName": "pc",
    }
    assert desired_podgroup(tfjob(raw), PLUGINS, {})["spec"] == {
        "minMember": 2,
        "minResources": {"cpu": "8"},
        "scheduleTimeoutSeconds": 30,
    }
    bare = make_tfjob("g").worker(2).obj()
    assert desired_podgroup(tfjob(bare), VOLCANO, {})["spec"] == {
        "minMember": 2,
        "queue": "default",
    }


def test_spec_patch_compares_by_value_and_keeps_volcanos_queue() -> None:
    desired = {"spec": {"minMember": 3, "minResources": {"cpu": "1"}, "queue": "default"}}
    same = {"spec": {"minMember": 3, "minResources": {"cpu": "1000m"}, "queue": "default"}}
    assert spec_patch(same, desired, VOLCANO) is None
    placed = {"spec": {"minMember": 2, "minResources": {"cpu": "1"}, "queue": "team-a"}}
    assert spec_patch(placed, desired, VOLCANO) == {"spec": {"minMember": 3}}
    # a field the job no longer asks for is removed (merge patch null)
    timed = {"spec": {"minMember": 3, "scheduleTimeoutSeconds": 60}}
    assert spec_patch(timed, {"spec": {"minMember": 3}}, PLUGINS) == {
        "spec": {"scheduleTimeoutSeconds": None}
    }


def snapshot(job: dict[str, Any], podgroup: dict[str, Any] | None, pods: Any = ()) -> Snapshot:
    return Snapshot(read_job(job), observe_all(pods), [], at(100), podgroup=podgroup)


def stored(job: dict[str, Any], gang: Gang, phase: str | None = None) -> dict[str, Any]:
    pg = desired_podgroup(tfjob(job), gang, {})
    pg["metadata"]["uid"] = "pg-uid"
    if phase is not None:
        pg["status"] = {"phase": phase}
    return pg


def test_no_pod_before_the_podgroup_exists() -> None:
    job = make_tfjob("g").chief(1).worker(2).obj()
    plan = compute_plan(snapshot(job, None), PlanConfig(gang=PLUGINS))
    assert plan.podgroup is not None and plan.podgroup.verb == "create"
    assert plan.create_pods == [] and len(plan.create_services) == 3
    # it exists: every pod, each carrying the group label and the schedulerName
    plan = compute_plan(snapshot(job, stored(job, PLUGINS)), PlanConfig(gang=PLUGINS))
    assert plan.podgroup is None and len(plan.create_pods) == 3
    for pod in plan.create_pods:
        assert pod["metadata"]["labels"][POD_GROUP_LABEL] == "g"
        assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_volcano_pods_wait_for_admission_with_one_condition() -> None:
    job = make_tfjob("g").worker(2).obj()
    cfg = PlanConfig(gang=VOLCANO)
    for phase in ("", "Pending"):
        plan = compute_plan(snapshot(job, stored(job, VOLCANO, phase)), cfg)
        assert plan.create_pods == [] and plan.podgroup is None
        assert plan.status is not None
        first = plan.status["conditions"][0]
        assert (first["type"], first["status"], first["reason"]) == (
            GANG_ADMITTED,
            "False",
            "PodGroupPending",
        )
        assert plan.status["conditions"][-1]["type"] == "Created"  # kubectl's State
    # the waiting status stored, nothing more is written while it waits
    job["status"] = plan.status
    again = compute_plan(snapshot(job, stored(job, VOLCANO, "Pending")), cfg)
    assert again.status is None and again.create_pods == [] and again.requeue_after is None
    # admitted: the pods, annotated for Volcano, and the condition turns True
    plan = compute_plan(snapshot(job, stored(job, VOLCANO, "Inqueue")), cfg)
    assert len(plan.create_pods) == 2
    pod = plan.create_pods[0]
    assert pod["spec"]["schedulerName"] == "volcano"
    assert pod["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION] == "g"
    assert pod["metadata"]["annotations"][VOLCANO_TASK_ANNOTATION] == "worker"
    assert plan.status is not None
    assert [(c["type"], c["status"]) for c in plan.status["conditions"][:1]] == [
        (GANG_ADMITTED, "True")
    ]


def test_a_spec_change_patches_the_podgroup() -> None:
    job = make_tfjob("g").worker(2).obj()
    pg = stored(job, PLUGINS)
    job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 4
    plan = compute_plan(snapshot(job, pg), PlanConfig(gang=PLUGINS))
    assert plan.podgroup is not None and plan.podgroup.verb == "patch"
    assert plan.podgroup.body == {"spec": {"minMember": 4}}


def test_the_podgroup_goes_when_the_job_is_suspended_or_finishes() -> None:
    job = make_tfjob("g").worker(1).suspend().obj()
    pg = stored(job, PLUGINS)
    plan = compute_plan(snapshot(job, pg), PlanConfig(gang=PLUGINS))
    assert plan.podgroup is not None and plan.podgroup.verb == "delete"
    job = make_tfjob("g").worker(1).obj()
    pod = make_pod(job, "Worker", 0).succeeded().obj()
    plan = compute_plan(snapshot(job, stored(job, PLUGINS), [pod]), PlanConfig(gang=PLUGINS))
    assert plan.status is not None
    assert any(c["type"] == "Succeeded" for c in plan.status["conditions"])
    assert plan.podgroup is not None and plan.podgroup.verb == "delete"
    # finished and already deleted: nothing more
    job["status"] = plan.status
    plan = compute_plan(snapshot(job, None, [pod]), PlanConfig(gang=PLUGINS))
    assert plan.podgroup is None


def test_an_earlier_jobs_podgroup_holds_the_pods_back() -> None:
    job = make_tfjob("g", uid="new").worker(1).obj()
    old = stored(make_tfjob("g", uid="old").worker(1).obj(), PLUGINS)
    plan = compute_plan(snapshot(job, old), PlanConfig(gang=PLUGINS))
    assert plan.podgroup is None and plan.create_pods == []


def test_a_template_naming_another_scheduler_keeps_it_with_a_warning() -> None:
    job = make_tfjob("g").worker(1, template=tpl(res({"cpu": "1"}), scheduler="mine")).obj()
    plan = compute_plan(snapshot(job, stored(job, PLUGINS)), PlanConfig(gang=PLUGINS))
    assert plan.create_pods[0]["spec"]["schedulerName"] == "mine"
    assert [e.reason for e in plan.events if e.type == "Warning"] == ["SetPodTemplateSchedulerName"]


def test_a_podgroup_being_deleted_is_waited_out() -> None:
    job = make_tfjob("g").worker(1).obj()
    pg = stored(job, PLUGINS)
    pg["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    plan = compute_plan(snapshot(job, pg), PlanConfig(gang=PLUGINS))
    assert plan.podgroup is None and plan.create_pods == []


@pytest.mark.parametrize("gang", [PLUGINS, VOLCANO], ids=["scheduler-plugins", "volcano"])
def test_decorated_pod_is_a_new_body(gang: Gang) -> None:
    """The planner's pod bodies are decorated into new ones: the given body (and its
    labels, annotations and spec) are left as they were."""
    pod = {
        "metadata": {"name": "t-worker-0", "labels": {"a": "b"}, "annotations": {"c": "d"}},
        "spec": {"containers": []},
    }
    before = copy.deepcopy(pod)
    out = decorated_pod(pod, gang, "t", "Worker")
    assert pod == before
    assert out["spec"]["schedulerName"] == gang.scheduler_name
