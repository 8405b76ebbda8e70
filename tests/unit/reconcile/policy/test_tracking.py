"""Outcome tracking (reconcile.policy.tracking): which pods' finalizers come off, and when.

The rule under test: a tracked pod is let go only when it is on its way out and its end
is in the *stored* status (or no longer matters), so nothing the status has not
recorded can vanish from the API."""

from __future__ import annotations

from typing import Any

import structlog

from controller.clock import FakeClock
from controller.queue.workqueue import WorkQueue
from controller.runtime.expectations import ControllerExpectations
from controller.types import JSON
from reconcile.api.spec import read_job
from reconcile.objects.observed import observe_all
from reconcile.plan import PlanConfig, Snapshot, compute_plan
from reconcile.policy.pod_outcome import PodOutcome, pod_outcome
from reconcile.policy.tracking import strays
from reconcile.sync.handlers import pod_handler
from reconcile.sync.keys import releases_key
from reconcile.sync.tfjob import UNSATISFIED_RECHECK_SECONDS
from tests.builders import at, make_pod, make_tfjob
from tests.fakes import ReconcilerWorld
from tests.unit.reconcile.sync.test_tfjob import reconcile

JOB = make_tfjob("t").chief().worker(2).obj()


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


def released(job: dict[str, Any], pods: list[dict[str, Any]], now: float = 100) -> list[str]:
    plan = compute_plan(Snapshot(read_job(job), observe_all(pods), [], at(now)), PlanConfig())
    return names(plan.release_pods)


def with_status(job: dict[str, Any], **worker: Any) -> dict[str, Any]:
    status = {
        "conditions": [
            {"type": "Created", "status": "True", "reason": "TFJobCreated"},
            {"type": "Running", "status": "True", "reason": "TFJobRunning"},
        ],
        "startTime": "2024-01-01T00:00:01Z",
        "replicaStatuses": {"Chief": {"active": 1}, "Worker": worker},
    }
    return {**job, "status": status}


def test_an_end_not_yet_stored_keeps_its_pod() -> None:
    # Worker 0 succeeded and was deleted (pod GC) while the controller was down: its
    # success is not in the stored status yet, so the pod stays.
    done = make_pod(JOB, "Worker", 0).succeeded().terminating().tracked().obj()
    chief = make_pod(JOB, "Chief", 0).running().tracked().obj()
    assert released(with_status(JOB), [done, chief]) == []
    # Once the status recording it is stored, it goes.
    assert released(with_status(JOB, succeededIndexes="0"), [done, chief]) == ["t-worker-0"]


def test_an_accounted_end_releases_only_that_pod() -> None:
    killed = make_pod(JOB, "Worker", 1).failed(code=137).terminating().tracked().uid("old")
    stored = with_status(JOB, disruptions=1, indexRetries={"1": {"lastPodUID": "old"}})
    assert released(stored, [killed.obj()]) == ["t-worker-1"]
    # the same index, another pod: not the one recorded
    other = make_pod(JOB, "Worker", 1).failed(code=137).terminating().tracked().uid("new")
    assert released(stored, [other.obj()]) == []


def test_recorded_pods_nobody_deletes_keep_their_finalizer() -> None:
    done = make_pod(JOB, "Worker", 0).succeeded().tracked().obj()
    assert released(with_status(JOB, succeededIndexes="0"), [done]) == []


def test_pods_outside_the_spec_and_untracked_pods() -> None:
    scaled_away = make_pod(JOB, "Worker", 5).running().terminating().tracked().obj()
    untracked = make_pod(JOB, "Worker", 0).succeeded().terminating().obj()
    assert released(with_status(JOB, succeededIndexes="0"), [scaled_away, untracked]) == [
        "t-worker-5"
    ]


def test_a_finished_job_lets_go_of_what_is_deleted() -> None:
    job = {
        **JOB,
        "status": {
            "conditions": [{"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded"}],
            "completionTime": "2024-01-01T00:00:09Z",
        },
    }
    gone = make_pod(JOB, "Worker", 0).running().terminating().tracked().obj()
    kept = make_pod(JOB, "Worker", 1).succeeded().tracked().obj()
    assert released(job, [gone, kept]) == ["t-worker-0"]


def test_a_job_being_deleted_lets_go_of_every_pod() -> None:
    job = make_tfjob("t").chief().worker(2).deleting().obj()
    pods = [
        make_pod(job, "Chief", 0).running().tracked().obj(),
        make_pod(job, "Worker", 0).pending().tracked().obj(),
        make_pod(job, "Worker", 1).running().obj(),
    ]
    assert released(job, pods) == ["t-chief-0", "t-worker-0"]


def test_suspend_lets_go_of_what_it_deletes() -> None:
    job = make_tfjob("t").worker(2).suspend().obj()
    pods = [make_pod(job, "Worker", i).running().tracked().obj() for i in range(2)]
    assert released(job, pods) == ["t-worker-0", "t-worker-1"]


def test_a_pod_deleted_before_any_node_took_it_is_a_disruption() -> None:
    never_ran = make_pod(JOB, "Worker", 0).pending().unscheduled().terminating().tracked().view()
    assert pod_outcome(never_ran, "Never") is PodOutcome.DISRUPTED
    on_a_node = make_pod(JOB, "Worker", 0).pending().terminating().tracked().view()
    assert pod_outcome(on_a_node, "Never") is PodOutcome.TERMINATING


def test_strays_are_tracked_pods_of_another_job_of_that_name() -> None:
    old = make_tfjob("t", uid="old").worker(1).obj()
    stray = make_pod(old, "Worker", 0).succeeded().tracked().obj()
    mine = make_pod(JOB, "Worker", 0).running().tracked().obj()
    untracked = make_pod(old, "Worker", 1).running().obj()
    pods = [stray, mine, untracked]
    assert [p["metadata"]["uid"] for p in strays(pods, JOB["metadata"]["uid"])] == [
        stray["metadata"]["uid"]
    ]
    assert len(strays(pods, None)) == 2


def test_a_release_is_observed_when_the_finalizer_is_seen_gone() -> None:
    clock = FakeClock()
    exp = ControllerExpectations(clock)
    queue = WorkQueue[str]("t", clock=clock)
    handler = pod_handler(exp, queue)
    pod = make_pod(JOB, "Worker", 0).succeeded().terminating().tracked().obj()
    key = releases_key("ns/t")
    exp.expect_deletions(key, [pod["metadata"]["uid"]])
    assert not exp.satisfied(key)
    assert handler.on_update is not None
    handler.on_update(pod, {**pod, "metadata": {**pod["metadata"], "resourceVersion": "9"}})
    assert not exp.satisfied(key)
    released_pod = {**pod, "metadata": {**pod["metadata"], "finalizers": []}}
    handler.on_update(pod, released_pod)
    assert exp.satisfied(key)


async def test_record_then_release_through_the_reconciler() -> None:
    """The pass that records a deleted pod's success does not let it go; the pass after
    the status is stored does, once, and waits to see it."""
    w = ReconcilerWorld(make_tfjob("t").chief().worker(1).obj())
    job = w.jobs.get("ns", "t")
    assert job is not None
    w.pods.upsert(make_pod(job, "Chief", 0).running().tracked().obj())
    w.pods.upsert(make_pod(job, "Worker", 0).succeeded().terminating().tracked().obj())
    await reconcile(w)
    assert w.writer.patched == []
    assert w.writer.statuses[-1]["replicaStatuses"]["Worker"]["succeededIndexes"] == "0"
    w.store_status()
    await reconcile(w)
    assert [name for name, _ in w.writer.patched] == ["t-worker-0"]
    # not observed yet: the next pass waits instead of patching again
    assert await reconcile(w) == ("awaiting-expectations", UNSATISFIED_RECHECK_SECONDS)
    assert len(w.writer.patched) == 1


async def test_a_pod_that_goes_with_its_release_is_counted_and_observed() -> None:
    """Our finalizer the last on a pod being deleted: the apiserver deletes it and
    answers with the pod as it was (its old resourceVersion), and no MODIFIED event
    follows. The pod counts as released, and its release as seen."""
    w = ReconcilerWorld(make_tfjob("t").chief().worker(1).obj())
    job = w.jobs.get("ns", "t")
    assert job is not None
    w.pods.upsert(make_pod(job, "Chief", 0).running().tracked().obj())
    pod = make_pod(job, "Worker", 0).succeeded().terminating().tracked().obj()
    pod = {**pod, "metadata": {**pod["metadata"], "resourceVersion": "41"}}
    w.pods.upsert(pod)
    await reconcile(w)
    w.store_status()

    async def deleted_with_it(namespace: str, name: str, body: Any, **_: Any) -> JSON:
        w.writer.patched.append((name, body))
        return {"metadata": {"name": name, "resourceVersion": "41"}}

    w.writer.patch = deleted_with_it  # type: ignore[method-assign]
    structlog.contextvars.clear_contextvars()
    await w.reconciler.reconcile("ns/t")
    assert [name for name, _ in w.writer.patched] == ["t-worker-0"]
    assert structlog.contextvars.get_contextvars()["released"] == 1
    structlog.contextvars.clear_contextvars()
    assert w.expectations.satisfied(releases_key("ns/t")), "no event will come to lower it"


async def test_a_recreated_job_first_lets_go_of_the_old_jobs_pods() -> None:
    w = ReconcilerWorld(make_tfjob("t").worker(1).obj())
    old = make_tfjob("t", uid="old").worker(1).obj()
    pod = make_pod(old, "Worker", 0).failed(code=137).terminating().tracked().obj()
    w.pods.upsert(pod)
    assert await reconcile(w) == ("releasing-strays", None)
    assert [name for name, _ in w.writer.patched] == ["t-worker-0"]
    assert w.writer.created == []  # its name is still taken
    w.pods.delete("ns/t-worker-0")
    on_delete = pod_handler(w.expectations, w.queue).on_delete
    assert on_delete is not None
    on_delete(pod)
    await reconcile(w)
    assert "t-worker-0" in w.writer.created
