"""Event-handler policy: owner resolution, expectations lowered, and how urgently a job
is enqueued (progress-only pod changes are batched through the queue's delays)."""

from __future__ import annotations

from typing import Any

import pytest

from controller.clock import FakeClock
from controller.observability.prometheus import Registry
from controller.runtime.expectations import ControllerExpectations
from reconcile.sync.handlers import (
    is_progress_only,
    job_handler,
    looks_settled,
    owner_job_key,
    pod_handler,
    service_handler,
)
from reconcile.sync.keys import pods_key, services_key
from reconcile.sync.metrics import JobMetrics
from reconcile.sync.pacing import PROGRESS_BATCH_SECONDS, STATUS_PACE_SECONDS
from tests.builders import make_pod, make_service, make_tfjob

JOB = make_tfjob("t").worker(2).obj()
KEY = "ns/t"


class Queue:
    def __init__(self) -> None:
        self.now: list[str] = []
        self.later: list[tuple[str, float]] = []
        self.low: list[str] = []

    def add(self, key: str) -> None:
        self.now.append(key)

    def add_low(self, key: str) -> None:
        self.low.append(key)

    def add_after(self, key: str, delay: float) -> None:
        self.later.append((key, delay))


def with_owner(obj: dict[str, Any], **ref: Any) -> dict[str, Any]:
    owner = {**obj["metadata"]["ownerReferences"][0], **ref}
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [owner]}}


POD = make_pod(JOB, "Worker", 0).obj()


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        pytest.param(POD, KEY, id="tfjob-controller"),
        pytest.param(with_owner(POD, kind="PyTorchJob"), None, id="other-kind"),
        pytest.param(with_owner(POD, apiVersion="kubeflow.org/v2"), None, id="other-version"),
        pytest.param(with_owner(POD, controller=False), None, id="not-controller"),
        pytest.param({**POD, "metadata": {**POD["metadata"], "ownerReferences": []}}, None,
                     id="orphan"),
    ],
)  # fmt: skip
def test_owner_job_key(obj: dict[str, Any], key: str | None) -> None:
    assert owner_job_key(obj) == key


@pytest.mark.parametrize(
    ("old", "new", "progress"),
    [
        pytest.param(make_pod(JOB, "Worker", 0).pending(), make_pod(JOB, "Worker", 0).running(),
                     True, id="starts-running"),
        pytest.param(make_pod(JOB, "Worker", 0).running(), make_pod(JOB, "Worker", 0).succeeded(),
                     False, id="succeeds"),
        pytest.param(make_pod(JOB, "Worker", 0).running(), make_pod(JOB, "Worker", 0).failed(1),
                     False, id="fails"),
        pytest.param(make_pod(JOB, "Worker", 0).running(),
                     make_pod(JOB, "Worker", 0).running().restarts(1), False,
                     id="restarts-in-place"),
        pytest.param(make_pod(JOB, "Worker", 0).running(),
                     make_pod(JOB, "Worker", 0).running().terminating(), False,
                     id="deletion-starts"),
    ],
)  # fmt: skip
def test_is_progress_only(old: Any, new: Any, progress: bool) -> None:
    assert is_progress_only(old.obj(), new.obj()) is progress


def world() -> tuple[ControllerExpectations, Queue]:
    return ControllerExpectations(FakeClock()), Queue()


def test_pod_events_lower_expectations_and_enqueue() -> None:
    exp, queue = world()
    handler = pod_handler(exp, queue)
    assert handler.on_add and handler.on_update and handler.on_delete
    exp.expect_creations(pods_key(KEY), 1)
    handler.on_add(POD)
    assert exp.satisfied(pods_key(KEY)) and queue.later == [(KEY, PROGRESS_BATCH_SECONDS)]

    running = make_pod(JOB, "Worker", 0).running().obj()
    handler.on_update(POD, running)
    assert queue.later == 2 * [(KEY, PROGRESS_BATCH_SECONDS)] and queue.now == []

    exp.expect_deletions(pods_key(KEY), [running["metadata"]["uid"]])
    terminating = make_pod(JOB, "Worker", 0).running().terminating().obj()
    handler.on_update(running, terminating)
    assert exp.satisfied(pods_key(KEY)) and queue.now == [KEY]
    handler.on_delete(terminating)  # the same UID: nothing left to lower, still enqueued
    assert queue.now == [KEY, KEY]


def test_foreign_pods_are_ignored() -> None:
    exp, queue = world()
    handler = pod_handler(exp, queue)
    assert handler.on_add
    handler.on_add(with_owner(POD, kind="Job"))
    assert queue.now == [] and queue.later == []


def test_service_updates_are_never_held() -> None:
    exp, queue = world()
    handler = service_handler(exp, queue)
    assert handler.on_add and handler.on_update
    svc = make_service(JOB, "Worker", 0)
    exp.expect_creations(services_key(KEY), 1)
    handler.on_add(svc)
    handler.on_update(svc, svc)
    assert exp.satisfied(services_key(KEY))
    assert queue.later == [(KEY, PROGRESS_BATCH_SECONDS)] and queue.now == [KEY]


def test_job_events_record_what_the_cache_has_seen() -> None:
    exp, queue = world()
    metrics = JobMetrics(Registry())
    handler = job_handler(exp, queue, metrics)
    assert handler.on_add and handler.on_update and handler.on_delete
    exp.expect_resource_version(KEY, "7")
    assert not exp.satisfied(KEY)
    handler.on_add({**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "6"}})
    assert not exp.satisfied(KEY)
    newer = {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "7"}}
    handler.on_update(JOB, newer)
    assert exp.satisfied(KEY)
    handler.on_delete(newer)
    assert queue.now == [KEY, KEY, KEY]
    created = metrics.created.labels("ns", "tensorflow").value
    assert created == 1  # a job without status is new


def test_a_status_only_job_update_is_held_unless_a_pass_awaits_it() -> None:
    exp, queue = world()
    handler = job_handler(exp, queue, JobMetrics(Registry()))
    assert handler.on_update
    written = {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "8"}, "status": {}}
    handler.on_update(JOB, written)  # our own status write, nobody waiting on it
    assert queue.now == [] and queue.later == [(KEY, STATUS_PACE_SECONDS)]
    exp.expect_resource_version(KEY, "9")  # a pass wrote it and the next one is gated
    awaited = {**written, "metadata": {**written["metadata"], "resourceVersion": "9"}}
    handler.on_update(written, awaited)
    assert queue.now == [KEY]
    relabelled = {**awaited, "metadata": {**awaited["metadata"], "labels": {"a": "b"}}}
    handler.on_update(awaited, relabelled)  # the job itself changed
    assert queue.now == [KEY, KEY]


def test_unstarted_children_of_a_job_awaiting_its_creates_do_not_enqueue_it() -> None:
    """While a job's own creates are not all seen, its pass could only report progress:
    a child appearing or a pod scheduled is none. The child that completes the creates
    enqueues it, and so does a pod that starts."""
    exp, queue = world()
    pods, services = pod_handler(exp, queue), service_handler(exp, queue)
    assert pods.on_add and pods.on_update and services.on_add
    exp.expect_creations(pods_key(KEY), 2)
    exp.expect_creations(services_key(KEY), 1)
    first = make_pod(JOB, "Worker", 0).pending().unscheduled().obj()
    pods.on_add(first)
    services.on_add(make_service(JOB, "Worker", 0))
    scheduled = make_pod(JOB, "Worker", 0).pending().obj()
    pods.on_update(first, scheduled)
    assert queue.now == [] and queue.later == []

    running = make_pod(JOB, "Worker", 0).running().obj()
    pods.on_update(scheduled, running)  # progress: counted at once by a waiting pass
    assert queue.later == [(KEY, PROGRESS_BATCH_SECONDS)]
    pods.on_add(make_pod(JOB, "Worker", 1).pending().obj())  # the last create seen
    assert exp.satisfied(pods_key(KEY))
    assert queue.later == 2 * [(KEY, PROGRESS_BATCH_SECONDS)]


def test_a_child_nobody_awaited_always_enqueues_its_job() -> None:
    exp, queue = world()
    pods = pod_handler(exp, queue)
    assert pods.on_add
    pods.on_add(make_pod(JOB, "Worker", 0).pending().obj())  # adopted, or seen on a relist
    assert queue.later == [(KEY, PROGRESS_BATCH_SECONDS)]


def test_stalls_and_their_failures_are_counted() -> None:
    metrics = JobMetrics(Registry())
    for reason in (
        "ProgressDeadlineExceeded",
        "FirstProgressDeadlineExceeded",
        "TFJobStalled",
        "TFJobRestartsWithoutProgress",
        "ProgressResumed",  # not a stall
    ):
        metrics.transition(JOB, reason)
    assert metrics.stalled.labels("ns", "tensorflow").value == 2
    assert metrics.failed.labels("ns", "tensorflow").value == 2


def cond(kind: str, status: str = "True") -> dict[str, str]:
    return {"type": kind, "status": status}


@pytest.mark.parametrize(
    ("job", "settled"),
    [
        pytest.param(make_tfjob("t").worker(2).obj(), False, id="never-started"),
        pytest.param(make_tfjob("t").status({"conditions": [cond("Created")]}).obj(), False,
                     id="created"),
        pytest.param(make_tfjob("t").status({"conditions": [cond("Created"), cond("Running")]})
                     .obj(), True, id="running"),
        pytest.param(make_tfjob("t").status({"conditions": [cond("Running", "False"),
                     cond("Restarting")]}).obj(), False, id="restarting"),
        pytest.param(make_tfjob("t").status({"conditions": [cond("Succeeded")]}).obj(), True,
                     id="succeeded"),
        pytest.param(make_tfjob("t").status({"conditions": [cond("Failed")]}).obj(), True,
                     id="failed"),
        pytest.param(make_tfjob("t").suspend().status({"conditions": [cond("Suspended")]}).obj(),
                     True, id="suspended"),
        pytest.param(make_tfjob("t").suspend().status({"conditions": [cond("Running")]}).obj(),
                     False, id="suspend-not-acted-on"),
        pytest.param(make_tfjob("t").suspend(False).status({"conditions": [cond("Running"),
                     cond("Suspended")]}).obj(), False, id="resume-not-acted-on"),
        pytest.param(make_tfjob("t").deleting().status({"conditions": [cond("Running")]}).obj(),
                     False, id="being-deleted"),
        pytest.param(make_tfjob("t").deleting().status({"conditions": [cond("Succeeded")]}).obj(),
                     False, id="finished-being-deleted"),
    ],
)  # fmt: skip
def test_looks_settled(job: dict[str, Any], settled: bool) -> None:
    before = repr(job)
    assert looks_settled(job) is settled
    assert repr(job) == before


def test_start_up_ranks_jobs_by_their_own_object_and_children_low() -> None:
    exp, queue = world()
    jobs = job_handler(exp, queue, JobMetrics(Registry()))
    pods = pod_handler(exp, queue)
    assert jobs.on_initial_add and jobs.on_add and pods.on_initial_add
    running = make_tfjob("run").status({"conditions": [cond("Running")]}).obj()
    pods.on_initial_add(make_pod(running, "Worker", 0).running().obj())
    jobs.on_initial_add(running)
    jobs.on_initial_add(make_tfjob("new").obj())
    assert queue.low == ["ns/run", "ns/run"] and queue.now == ["ns/new"]
    jobs.on_add(running)  # after start-up: every add is a plain one
    assert queue.now == ["ns/new", "ns/run"]


def test_a_child_found_at_start_up_still_lowers_expectations() -> None:
    exp, queue = world()
    handler = service_handler(exp, queue)
    assert handler.on_initial_add
    exp.expect_creations(services_key(KEY), 1)
    handler.on_initial_add(make_service(JOB, "Worker", 0))
    assert exp.satisfied(services_key(KEY)) and queue.low == [KEY] and queue.now == []
