"""Reading a job once: the typed view, the lenient run policy of an invalid job, and the
memo that spares status-only passes the pydantic work."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconcile.api import spec as spec_mod
from reconcile.api.spec import SpecCache, lenient_run_policy, read_job
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from tests.builders import at, make_tfjob

KEY = "ns/t"
FINISHED_FAILED = {
    "conditions": [
        {"type": "Failed", "status": "True", "reason": "TFJobFailedValidation", "message": "m",
         "lastUpdateTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
    ],
    "completionTime": "2024-01-01T00:00:00Z",
}  # fmt: skip


def invalid(job: dict[str, Any]) -> dict[str, Any]:
    bad = copy.deepcopy(job)
    bad["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "Sometimes"
    return bad


def test_a_valid_job_is_defaulted_and_typed() -> None:
    view = read_job(make_tfjob("t").worker(2).generation(3).obj())
    assert view.tfjob is not None and view.invalid_message is None
    assert (view.name, view.namespace, view.generation, view.deleting) == ("t", "ns", 3, False)
    assert view.tfjob.replica_specs["Worker"].restart_policy == "Never"  # defaulted
    assert view.run_policy.clean_pod_policy == "None"
    assert view.status.conditions == []


def test_an_invalid_job_names_the_field_and_keeps_its_readable_policy() -> None:
    job = invalid(make_tfjob("t").worker(1).ttl(30).clean_pod_policy("All").obj())
    job["spec"]["runPolicy"]["backoffLimit"] = "three"  # unreadable: dropped, not fatal
    view = read_job(job)
    assert view.tfjob is None
    # a field that does not parse is reported first, by its path
    assert view.invalid_message is not None
    assert "spec.runPolicy.backoffLimit" in view.invalid_message
    assert "restartPolicy" in (
        read_job(invalid(make_tfjob("t").worker(1).obj())).invalid_message or ""
    )
    assert view.run_policy.ttl_seconds_after_finished == 30
    assert view.run_policy.clean_pod_policy == "All"
    assert view.run_policy.backoff_limit is None


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(None, id="no-spec"),
        pytest.param({"runPolicy": "x"}, id="policy-not-an-object"),
        pytest.param({"runPolicy": {"suspend": "yes", "managedBy": 7}}, id="all-unreadable"),
    ],
)
def test_lenient_run_policy_never_raises(spec: Any) -> None:
    policy = lenient_run_policy({"spec": spec})
    assert policy.suspend is None and policy.managed_by is None


def test_an_invalid_finished_job_is_still_cleaned_up_and_ttl_deleted() -> None:
    job = invalid(make_tfjob("t").worker(1).ttl(5).obj())
    job["status"] = FINISHED_FAILED
    plan = compute_plan(Snapshot(read_job(job), [], [], at(10**9)), PlanConfig())
    assert plan.delete_job and plan.status is None


def test_the_cache_checks_a_spec_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    real = spec_mod.check_spec

    def counting(raw: dict[str, Any]) -> spec_mod.CheckedSpec:
        calls.append(raw["metadata"]["uid"])
        return real(raw)

    monkeypatch.setattr(spec_mod, "check_spec", counting)
    cache = SpecCache()
    job = make_tfjob("t").worker(2).obj()
    first = cache.read(KEY, job)
    # the same cached object, then an equal copy (a status-only update): no new check
    assert cache.read(KEY, job).spec is first.spec
    status_only = {**copy.deepcopy(job), "status": {"conditions": []}}
    assert cache.read(KEY, status_only).spec is first.spec
    assert len(calls) == 1
    # a spec change, and a new job under the same name, are checked again
    scaled = copy.deepcopy(job)
    scaled["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    assert cache.read(KEY, scaled).tfjob is not None
    reborn = {**copy.deepcopy(job), "metadata": {**job["metadata"], "uid": "another"}}
    cache.read(KEY, reborn)
    assert len(calls) == 3
    cache.forget(KEY)
    assert len(cache) == 0


def test_the_cache_reads_a_status_object_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stored status is read again only when the job's status is another object:
    passes between two status writes see the same one."""
    reads: list[object] = []
    real = spec_mod.JobStatus.read

    def counting(obj: object) -> Any:
        reads.append(obj)
        return real(obj)

    monkeypatch.setattr(spec_mod.JobStatus, "read", counting)
    cache = SpecCache()
    running = {"conditions": [], "replicaStatuses": {"Worker": {"active": 2}}}
    job = {**make_tfjob("t").worker(2).obj(), "status": running}
    first = cache.read(KEY, job)
    again = cache.read(KEY, {**job, "metadata": dict(job["metadata"])})
    assert again.status is first.status and len(reads) == 1
    # a new status object (the job's own write seen), even an equal one, is read
    done = {**job, "status": {"replicaStatuses": {"Worker": {"active": 0, "succeeded": 2}}}}
    assert cache.read(KEY, done).status.replica_statuses["Worker"].succeeded == 2
    assert cache.read(KEY, {**job, "status": dict(running)}).status == first.status
    assert len(reads) == 3
    # no status at all is an empty one
    bare = make_tfjob("t").worker(2).obj()
    assert cache.read(KEY, bare).status == spec_mod.JobStatus()


def test_the_cache_is_bounded() -> None:
    cache = SpecCache(size=2)
    for name in ("a", "b", "c"):
        cache.read(f"ns/{name}", make_tfjob(name).worker(1).obj())
    assert len(cache) == 2


@pytest.mark.parametrize(
    ("status", "error"),
    [
        pytest.param(None, None, id="none-yet"),
        pytest.param({}, None, id="empty"),
        pytest.param("garbage", "status: must be an object, not str", id="not-an-object"),
        pytest.param({"startTime": "0000-01-01T00:00:00Z"}, "status.startTime", id="bad-time"),
        pytest.param(
            {"replicaStatuses": {"Worker": {"active": -5}}},
            "status.replicaStatuses.Worker.active",
            id="negative-count",
        ),
        pytest.param(
            {"replicaStatuses": {"Worker": {"succeededIndexes": "all of them"}}},
            "status.replicaStatuses.Worker.succeededIndexes",
            id="bad-indexes",
        ),
    ],
)
def test_an_unreadable_status_is_reported_not_read_as_empty(status: Any, error: str | None) -> None:
    job = make_tfjob("t").worker(2).obj()
    job["status"] = status
    view = read_job(job)
    if error is None:
        assert view.status_error is None
    else:
        assert view.status_error is not None and view.status_error.startswith(error)


def test_a_job_with_an_unreadable_status_is_left_alone_with_a_warning() -> None:
    job = make_tfjob("t").clean_pod_policy("All").worker(2).obj()
    job["status"] = {"conditions": [], "startTime": "0000-01-01T00:00:00Z"}
    plan = compute_plan(Snapshot(read_job(job), [], [], at(10**9)), PlanConfig())
    assert plan.create_pods == [] and plan.create_services == [] and plan.status is None
    assert plan.delete_pods == [] and not plan.delete_job
    assert plan.skip_reason == "status-unreadable"
    (event,) = plan.events
    assert (event.type, event.reason) == ("Warning", "TFJobStatusUnreadable")
    assert "status.startTime" in event.message
