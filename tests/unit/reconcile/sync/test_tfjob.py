"""The reconciler on the production path: its gates, creates handed to the machinery's
background work (a pass never waits on them), and the retries of a failed create owned
by the workqueue's backoff."""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
import structlog

from controller import errors
from controller.runtime.controller import Controller
from controller.runtime.pacer import Pacer, SlotGate
from controller.types import Caller
from reconcile.api.names import MANAGED_BY_MULTIKUEUE
from reconcile.objects.reporting import progress_path
from reconcile.policy import conditions as cond
from reconcile.sync import tfjob as tfjob_module
from reconcile.sync.child_writes import (
    MAX_BACKLOG,
    MAX_JOB_BACKLOG,
    RELEASE_BATCH,
    TERMINATING_NAMESPACE_SECONDS,
)
from reconcile.sync.keys import pods_key, services_key
from reconcile.sync.pacing import STATUS_PACE_SECONDS
from reconcile.sync.progress import ProgressIntake
from reconcile.sync.tfjob import BACKLOG_RECHECK_SECONDS, DEFAULT_FAILED_CREATE_GRACE
from tests.builders import make_pod, make_service, make_tfjob
from tests.fakes import ReconcilerWorld, take_all

KEY = "ns/t"
FINISHED = {
    "conditions": [
        {"type": "Created", "status": "True", "reason": "TFJobCreated", "message": "m",
         "lastUpdateTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
        {"type": "Succeeded", "status": "True", "reason": "TFJobSucceeded", "message": "m",
         "lastUpdateTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"},
    ],
    "replicaStatuses": {},
}  # fmt: skip


async def reconcile(w: ReconcilerWorld) -> tuple[str | None, float | None]:
    """One pass; its outcome as the summary log line would say it, and its requeue."""
    structlog.contextvars.clear_contextvars()
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        result = await w.reconciler.reconcile(KEY)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    outcome = structlog.contextvars.get_contextvars().get("outcome")
    structlog.contextvars.clear_contextvars()
    return outcome, result.requeue_after


def pending_expectations(w: ReconcilerWorld) -> None:
    w.expectations.expect_creations(pods_key(KEY), 1)


@pytest.mark.parametrize(
    ("job", "setup", "outcome", "writes"),
    [
        pytest.param(make_tfjob("t").worker(1).status(FINISHED).obj(), None, "finished", False,
                     id="finished"),
        pytest.param(make_tfjob("t").worker(1).deleting().obj(), None, "deleting", False,
                     id="deleting"),
        pytest.param(make_tfjob("t").worker(1).managed_by(MANAGED_BY_MULTIKUEUE).obj(), None,
                     "managed-by-other", False, id="managed-by-other"),
        pytest.param(make_tfjob("t").worker(1).obj(), pending_expectations,
                     "awaiting-expectations", False, id="expectations-pending"),
        pytest.param(make_tfjob("t").worker(1).suspend().obj(), None, None, True,
                     id="suspended"),
        pytest.param(make_tfjob("t").worker(1).obj(), None, None, True, id="active"),
    ],
)  # fmt: skip
async def test_gates(job: dict[str, Any], setup: Any, outcome: str | None, writes: bool) -> None:
    w = ReconcilerWorld(job)
    if setup is not None:
        setup(w)
    got, requeue = await reconcile(w)
    assert got == outcome
    assert bool(w.writer.statuses or w.writer.created) == writes
    if outcome == "awaiting-expectations":
        assert requeue is not None  # the safety net if the observing event is lost


async def test_suspended_job_gets_no_pods_and_says_so() -> None:
    w = ReconcilerWorld(make_tfjob("t").worker(2).suspend().obj())
    w.pods.upsert(make_pod(w.jobs.get("ns", "t") or {}, "Worker", 0).running().obj())
    await reconcile(w)
    assert w.writer.created == [] and w.writer.deleted == ["t-worker-0"]
    assert any(c["type"] == "Suspended" for c in w.writer.statuses[-1]["conditions"])


@pytest.mark.parametrize("own_releases", [True, False])
async def test_pods_are_let_go_through_the_releases_writer_when_there_is_one(
    own_releases: bool,
) -> None:
    # the app gives the releases a budget of their own (tfjob_controller.app.Budgets):
    # every release goes there, and no pod or service write does
    w = ReconcilerWorld(make_tfjob("t").worker(2).obj(), own_releases=own_releases)
    await reconcile(w)
    w.jobs.delete(KEY)
    assert await reconcile(w) == ("gone", None)
    released = w.releases if own_releases else w.writer
    assert sorted(name for name, _ in released.patched) == ["t-worker-0", "t-worker-1"]
    assert released.batches == [2], "one pass's releases go out together"
    if own_releases:
        assert w.writer.patched == [] and w.releases.created == []
        assert w.releases.deleted == [] and w.releases.statuses == []


async def test_releases_go_in_batches_and_one_that_fails_fails_alone() -> None:
    w = ReconcilerWorld(make_tfjob("t").worker(RELEASE_BATCH + 3).obj())
    await reconcile(w)
    w.jobs.delete(KEY)
    w.writer.fail = {"t-worker-4"}
    with pytest.RaisesGroup(errors.ServerError):
        await reconcile(w)  # the failed release fails the pass, which is retried
    assert w.writer.batches == [RELEASE_BATCH, 3]
    let_go = sorted(name for name, _ in w.writer.patched)
    assert len(let_go) == RELEASE_BATCH + 2 and "t-worker-4" not in let_go


async def test_a_gone_job_takes_its_expectations_and_spec_with_it() -> None:
    w = ReconcilerWorld(make_tfjob("t").worker(1).obj())
    await reconcile(w)
    assert len(w.reconciler.memory.specs) == 1
    w.expectations.expect_creations(pods_key(KEY), 1)
    w.jobs.delete(KEY)
    # Its pod still carries our finalizer: it is let go first, and the job remembered
    # until the pod is seen without it.
    assert await reconcile(w) == ("gone", None)
    assert [name for name, _ in w.writer.patched] == ["t-worker-0"]
    assert len(w.reconciler.memory.specs) == 1
    w.pods.delete("ns/t-worker-0")
    assert await reconcile(w) == ("gone", None)
    assert w.expectations.satisfied(pods_key(KEY))
    assert len(w.reconciler.memory.specs) == 0


async def test_pass_returns_before_its_creates_and_gates_the_next_one() -> None:
    w = ReconcilerWorld(make_tfjob("t").chief().worker(2).obj(), hold_creates=True)
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        with anyio.fail_after(1):
            await w.reconciler.reconcile(KEY)  # would hang if it waited for the creates
        await anyio.wait_all_tasks_blocked()  # the status write went with the creates
        assert w.writer.statuses, "the status write does not wait for the creates"
        assert w.writer.created == []
        assert w.expectations.pending(pods_key(KEY))[0] == 3
        assert w.expectations.pending(services_key(KEY))[0] == 3
        # the next pass does not act on a cache that lacks its own creates, and sets no
        # timer while they are pending: the background looks at the job again once the
        # last of them is done
        result = await w.reconciler.reconcile(KEY)
        assert result.requeue_after is None and len(w.writer.statuses) == 1
        assert w.queue.waiting == 0
        w.writer.release.set()
        await anyio.wait_all_tasks_blocked()
        assert len(w.writer.created) == 6
        assert w.queue.waiting == 1
        assert w.events.reasons.count("SuccessfulCreatePod") == 3
        # what a full event buffer gives up first (controller.runtime.events)
        made = {r for r in w.events.reasons if r.startswith("SuccessfulCreate")}
        assert made == {"SuccessfulCreatePod", "SuccessfulCreateService"}
        assert made <= cond.ROUTINE_REASONS
        assert w.expectations.satisfied(pods_key(KEY))
        tg.cancel_scope.cancel()


async def test_progress_is_reported_while_the_jobs_own_creates_are_on_their_way(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """At 20 QPS a job's first pods run long before its last create is made: their
    progress is written meanwhile, and nothing is planned again."""
    plans: list[bool] = []
    real_plan_of = tfjob_module._plan_of

    def counted(*args: Any) -> Any:
        plans.append(True)
        return real_plan_of(*args)

    monkeypatch.setattr(tfjob_module, "_plan_of", counted)
    job = make_tfjob("t").chief().worker(2).obj()
    w = ReconcilerWorld(job, hold_creates=True)
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        await w.reconciler.reconcile(KEY)
        await anyio.wait_all_tasks_blocked()  # Created, handed off with the held creates
        backlog = w.background.backlog(KEY)
        assert len(w.writer.statuses) == 1 and backlog == 6
        # not before the job's own last status write is seen: the plan starts from it
        structlog.contextvars.clear_contextvars()
        await w.reconciler.reconcile(KEY)
        assert len(w.writer.statuses) == 1
        w.store_status()
        w.clock.advance(1)
        # the chief's create went through and it runs; the workers' are still queued
        w.pods.upsert(make_pod(job, "Chief", 0).uid("uid-t-chief-0").running().obj())
        structlog.contextvars.clear_contextvars()
        await w.reconciler.reconcile(KEY)
        assert structlog.contextvars.get_contextvars()["outcome"] == "awaiting-expectations"
        assert len(w.writer.statuses) == 2
        assert w.writer.statuses[-1]["replicaStatuses"]["Chief"]["active"] == 1
        assert w.background.backlog(KEY) == backlog and w.writer.created == []
        # more progress within the pace waits for it, unplanned: the pass the pace
        # brings back plans from what it finds then
        w.store_status()
        w.pods.upsert(make_pod(job, "Worker", 0).uid("uid-t-worker-0").running().obj())
        planned = len(plans)
        result = await w.reconciler.reconcile(KEY)
        assert len(w.writer.statuses) == 2
        assert result.requeue_after == pytest.approx(STATUS_PACE_SECONDS)
        assert len(plans) == planned
        # an outcome (a failed pod) is never written from a waiting pass
        w.clock.advance(1)
        w.pods.upsert(make_pod(job, "Chief", 0).uid("uid-t-chief-0").failed(1).obj())
        await w.reconciler.reconcile(KEY)
        assert len(w.writer.statuses) == 2
        w.writer.release.set()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    # each name once per kind (a pod and a service share it), nothing planned again
    assert len(w.writer.created) == 6 and max(Counter(w.writer.created).values()) == 2


def _at(pod: dict[str, Any], rv: str) -> dict[str, Any]:
    return {**pod, "metadata": {**pod["metadata"], "resourceVersion": rv}}


async def test_a_waiting_pass_plans_again_only_when_its_pods_changed() -> None:
    """Most passes of a job waiting on its creates come from its own progress write
    being seen: with the same pods as the report it made, there is nothing to report."""
    job = make_tfjob("t").chief().worker(2).obj()
    w = ReconcilerWorld(job, hold_creates=True)
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        await w.reconciler.reconcile(KEY)
        await anyio.wait_all_tasks_blocked()
        w.store_status()
        w.clock.advance(1)
        chief = make_pod(job, "Chief", 0).uid("uid-t-chief-0")
        w.pods.upsert(_at(chief.running().obj(), "10"))
        await w.reconciler.reconcile(KEY)
        assert len(w.writer.statuses) == 2
        w.store_status()  # the write seen: its pass finds the same pods
        structlog.contextvars.clear_contextvars()
        await w.reconciler.reconcile(KEY)
        assert structlog.contextvars.get_contextvars()["progress"] == "unchanged"
        w.clock.advance(1)
        worker = make_pod(job, "Worker", 0).uid("uid-t-worker-0")
        w.pods.upsert(_at(worker.running().obj(), "11"))
        structlog.contextvars.clear_contextvars()
        await w.reconciler.reconcile(KEY)
        assert "progress" not in structlog.contextvars.get_contextvars()
        assert len(w.writer.statuses) == 3
        assert w.writer.statuses[-1]["replicaStatuses"]["Worker"]["active"] == 1
        w.writer.release.set()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()


async def test_a_failing_create_backs_off_through_the_queue_until_it_succeeds() -> None:
    w = ReconcilerWorld(make_tfjob("t").chief().worker(2).obj())
    w.writer.fail = {"t-worker-1"}  # its pod and its service
    ctrl = Controller("tfjob", w.reconciler, clock=w.clock, queue=w.queue, background=w.background)
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        for attempt in (1, 2, 3):
            await ctrl.process(KEY)
            await anyio.wait_all_tasks_blocked()
            w.store_status()
            # each failure grows the key's backoff; the pass that planned the create
            # succeeded, and still did not reset it
            assert w.queue.num_requeues(KEY) == attempt
            assert w.expectations.satisfied(pods_key(KEY))
        assert w.events.reasons.count("FailedCreatePod") == 3
        assert w.events.reasons.count("FailedCreateService") == 3
        w.writer.fail = set()
        await ctrl.process(KEY)
        await anyio.wait_all_tasks_blocked()
        assert "t-worker-1" in w.writer.created
        assert w.queue.num_requeues(KEY) == 0  # forgotten once everything succeeded
        tg.cancel_scope.cancel()
    assert sorted(w.writer.created) == sorted(
        2 * ["t-chief-0", "t-worker-0", "t-worker-1"]
    )  # each pod and service once: nothing was created twice


async def test_progress_only_status_is_paced() -> None:
    job = make_tfjob("t").chief().worker(2).obj()
    w = ReconcilerWorld(job)
    ctrl = Controller("tfjob", w.reconciler, clock=w.clock, queue=w.queue, background=w.background)

    def run(rtype: str, index: int) -> None:
        w.pods.upsert(make_pod(job, rtype, index).uid(f"uid-t-{rtype.lower()}-{index}")
                      .running().obj())  # fmt: skip

    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        await ctrl.process(KEY)  # Created, and the creates
        await anyio.wait_all_tasks_blocked()
        w.store_status()
        assert len(w.writer.statuses) == 1
        w.clock.advance(1)  # long after that write
        run("Chief", 0)
        await ctrl.process(KEY)  # progress after a quiet spell: written at once
        assert len(w.writer.statuses) == 2
        w.store_status()
        run("Worker", 0)
        await ctrl.process(KEY)  # more progress within the pace waits ...
        w.clock.advance(STATUS_PACE_SECONDS / 2)
        run("Worker", 1)
        await ctrl.process(KEY)
        assert len(w.writer.statuses) == 2
        # ... for the look the queue brings back when the pace allows
        assert w.queue.waiting == 1
        w.clock.advance(STATUS_PACE_SECONDS / 2)
        await ctrl.process(KEY)
        assert len(w.writer.statuses) == 3
        written = w.writer.statuses[-1]["replicaStatuses"]
        assert written["Chief"]["active"] == 1 and written["Worker"]["active"] == 2
        w.store_status()
        # a decisive change never waits
        w.pods.upsert(make_pod(job, "Chief", 0).uid("uid-t-chief-0").succeeded().obj())
        await ctrl.process(KEY)
        assert len(w.writer.statuses) == 4
        assert any(c["type"] == "Succeeded" for c in w.writer.statuses[-1]["conditions"])
        # only the first write (Created) lets urgent ones go ahead of it on the budget
        assert w.writer.urgent == [False, True, True, True]
        tg.cancel_scope.cancel()


class Reporting:
    """A reconciler with the training-progress intake, pacer and gate that
    tfjob_controller.reporting gives it, on the world's clock, and the job's running
    worker pods reporting to it."""

    def __init__(self, workers: int) -> None:
        self.job = make_tfjob("t").worker(workers).obj()
        self.w = w = ReconcilerWorld(self.job)
        self.training = Pacer[str](w.clock, 5.0)
        self.gate = SlotGate[str](w.clock, rate=0.5)
        self.intake = ProgressIntake(
            jobs=w.jobs, pods=w.pods, queue=w.queue, pacer=self.training, now=w.clock.now
        )
        memory = w.reconciler.memory
        memory.training_pacer, memory.training_gate = self.training, self.gate
        memory.progress = self.intake
        self.ctrl = Controller(
            "tfjob", w.reconciler, clock=w.clock, queue=w.queue, background=w.background
        )
        self.pods = [
            make_pod(self.job, "Worker", i).uid(f"uid-t-worker-{i}").running().obj()
            for i in range(workers)
        ]

    def report(self, i: int, step: int, body: bytes | None = None) -> None:
        meta = self.pods[i]["metadata"]
        caller = Caller(
            "system:serviceaccount:ns:default",
            extra={
                "authentication.kubernetes.io/pod-name": (meta["name"],),
                "authentication.kubernetes.io/pod-uid": (meta["uid"],),
            },
        )
        doc = body if body is not None else b'{"step": %d}' % step
        reply = self.intake.accept(progress_path("ns", "t"), caller, doc)
        assert reply.status == 204, reply

    async def running(self) -> None:
        """Created, its pods running, Running stored."""
        w = self.w
        await self.ctrl.process(KEY)
        await anyio.wait_all_tasks_blocked()
        w.store_status()
        for p in self.pods:
            w.pods.upsert(p)
        w.clock.advance(1)
        await self.ctrl.process(KEY)
        w.store_status()


async def test_training_progress_alone_is_paced_per_job_and_gated_across_jobs() -> None:
    r = Reporting(2)
    w, ctrl, gate, report = r.w, r.ctrl, r.gate, r.report

    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        await r.running()
        w.clock.advance(10)
        writes = len(w.writer.statuses)
        report(0, 10)
        await ctrl.process(KEY)  # the first report after a quiet spell: at once
        assert len(w.writer.statuses) == writes + 1
        assert w.writer.statuses[-1]["trainingProgress"]["step"] == 10
        assert w.writer.urgent[-1] is False  # behind lifecycle writes on the budget
        w.store_status()
        report(0, 20)
        await ctrl.process(KEY)  # within the job's pace: waits
        assert len(w.writer.statuses) == writes + 1
        w.clock.advance(5)
        # the pace allows it, but the gate gave its slot away meanwhile: come back then
        gate.reserve("other/job")
        await ctrl.process(KEY)
        assert len(w.writer.statuses) == writes + 1 and len(gate) == 1
        w.clock.advance(2)
        await ctrl.process(KEY)
        assert len(w.writer.statuses) == writes + 2
        assert w.writer.statuses[-1]["trainingProgress"]["step"] == 20
        tg.cancel_scope.cancel()


def _status_condition(w: ReconcilerWorld, type_: str) -> dict[str, Any] | None:
    conds = w.writer.statuses[-1].get("conditions") or [] if w.writer.statuses else []
    return next((c for c in conds if c["type"] == type_ and c["status"] == "True"), None)


async def _fail_creates_for(w: ReconcilerWorld, seconds: float, attempts: int) -> None:
    ctrl = Controller("tfjob", w.reconciler, clock=w.clock, queue=w.queue, background=w.background)
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        for _ in range(attempts):
            await ctrl.process(KEY)
            await anyio.wait_all_tasks_blocked()
            w.store_status()
            w.clock.advance(seconds / attempts)
        await ctrl.process(KEY)  # the pass that decides
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()


QUOTA = 'pods "t-worker-1" is forbidden: exceeded quota: q, requested: pods=1, used: pods=2'


@pytest.mark.parametrize(
    ("error", "fails"),
    [
        pytest.param(lambda: errors.Forbidden(403, "Forbidden", QUOTA), True, id="403-quota"),
        pytest.param(lambda: errors.Invalid(422, "Invalid", "spec: Invalid"), True, id="422"),
        pytest.param(lambda: errors.ServerError(500, "InternalError", "x"), False, id="500"),
        pytest.param(lambda: errors.TooManyRequests(429, "TooManyRequests", "x"), False, id="429"),
        pytest.param(lambda: errors.ConnectionFailed("timeout"), False, id="timeout"),
    ],
)
async def test_creates_refused_permanently_past_the_grace_fail_the_job(
    error: Any, fails: bool
) -> None:
    w = ReconcilerWorld(make_tfjob("t").chief().worker(2).clean_pod_policy("All").obj())
    w.writer.fail, w.writer.error = {"t-worker-1"}, error
    await _fail_creates_for(w, DEFAULT_FAILED_CREATE_GRACE + 1, attempts=4)
    failed = _status_condition(w, "Failed")
    if not fails:
        assert failed is None, "a transient error never fails a job"
        return
    assert failed is not None
    assert failed["reason"] == "FailedCreatePod"
    assert failed["message"].startswith(
        "TFJob ns/t has failed because pod t-worker-1 could not be created: "
    )
    assert str(error()) in failed["message"]
    # one Warning per refused attempt, then the job's Failed transition, by the same reason
    assert w.events.reasons.count("FailedCreatePod") == 4 + 1
    assert "TFJobFailed" not in w.events.reasons
    assert sorted(w.writer.deleted) == sorted(2 * ["t-chief-0", "t-worker-0"]), "cleanPodPolicy"


def _holder(job: dict[str, Any], *, owner_uid: str | None, deleting: bool = False) -> Any:
    """The pod a create of t-worker-1 finds under its name after a 409."""
    pod = make_pod(job, "Worker", 1).uid("squatter-uid").running().obj()
    if owner_uid is None:
        pod["metadata"].pop("ownerReferences")
    else:
        pod["metadata"]["ownerReferences"][0].update(uid=owner_uid, name="other")
    if deleting:
        pod["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    return pod


@pytest.mark.parametrize(
    ("holder", "fails", "held_by"),
    [
        pytest.param({"owner_uid": None}, True, "no controller; uid squatter-uid", id="no-owner"),
        pytest.param({"owner_uid": "u-other"}, True, "TFJob other (uid u-other)", id="other-job"),
        pytest.param({"owner_uid": "u-other", "deleting": True}, False, None, id="on-its-way-out"),
    ],
)  # fmt: skip
async def test_a_name_somebody_else_holds_is_reported_and_fails_the_job_past_the_grace(
    holder: dict[str, Any], fails: bool, held_by: str | None
) -> None:
    """A create answered 409 whose object the job does not control: a Warning each
    time and, past the grace, Failed naming the holder. The job's TF_CONFIG points at
    that name, so running on somebody else's pod or Service is never quietly accepted."""
    w = ReconcilerWorld(make_tfjob("t").chief().worker(2).obj())
    job = w.jobs.get("ns", "t")
    assert job is not None
    w.writer.fail = {"t-worker-1"}
    w.writer.error = lambda: errors.AlreadyExists(409, "AlreadyExists", "exists")
    w.writer.stored = {"t-worker-1": _holder(job, **holder)}
    await _fail_creates_for(w, DEFAULT_FAILED_CREATE_GRACE + 1, attempts=4)
    # every refused attempt is reported (the pod's and the service's), and retried
    assert w.events.reasons.count("FailedCreatePod") >= 4
    assert w.events.reasons.count("FailedCreateService") >= 4
    failed = _status_condition(w, "Failed")
    if not fails:
        assert failed is None, "a holder being deleted is waited for, not counted"
        return
    assert failed is not None and failed["reason"] in ("FailedCreatePod", "FailedCreateService")
    assert "t-worker-1 already exists and is" in failed["message"]
    assert held_by is not None and held_by in failed["message"]


async def test_a_409_for_an_object_the_job_controls_is_no_news() -> None:
    w = ReconcilerWorld(make_tfjob("t").worker(1).obj())
    job = w.jobs.get("ns", "t")
    assert job is not None
    w.writer.fail = {"t-worker-0"}
    w.writer.error = lambda: errors.AlreadyExists(409, "AlreadyExists", "exists")
    w.writer.stored = {"t-worker-0": make_pod(job, "Worker", 0).obj()}
    await _fail_creates_for(w, 1, attempts=1)
    assert not [r for r in w.events.reasons if r.startswith("FailedCreate")]
    assert w.queue.num_requeues(KEY) == 0


async def test_a_create_that_succeeds_resets_the_grace() -> None:
    w = ReconcilerWorld(make_tfjob("t").chief().worker(2).obj())
    w.writer.fail, w.writer.error = {"t-worker-1"}, lambda: errors.Invalid(422, "Invalid", "x")
    await _fail_creates_for(w, DEFAULT_FAILED_CREATE_GRACE - 10, attempts=3)
    assert _status_condition(w, "Failed") is None, "within the grace"
    w.writer.fail = set()
    await _fail_creates_for(w, 20, attempts=1)
    assert _status_condition(w, "Failed") is None
    assert "t-worker-1" in w.writer.created


async def test_a_create_refused_by_a_terminating_namespace_is_dropped_quietly() -> None:
    w = ReconcilerWorld(make_tfjob("t").chief().obj())
    w.writer.fail = {"t-chief-0"}
    w.writer.error = lambda: errors.Forbidden(
        403,
        "Forbidden",
        "unable to create new content in namespace ns because it is being terminated",
        {"causes": [{"reason": "NamespaceTerminating", "field": "metadata.namespace"}]},
    )
    await _fail_creates_for(w, DEFAULT_FAILED_CREATE_GRACE + 1, attempts=3)
    assert "FailedCreatePod" not in w.events.reasons
    assert w.queue.num_requeues(KEY) == 0, "nothing to retry: the job goes with its namespace"
    assert _status_condition(w, "Failed") is None


async def test_no_create_is_sent_to_a_namespace_that_refused_one_as_terminating() -> None:
    w = ReconcilerWorld(make_tfjob("t").worker(3).obj())
    w.writer.fail = {"t-worker-0", "t-worker-1", "t-worker-2"}
    w.writer.error = lambda: errors.Forbidden(
        403, "Forbidden", "being terminated", {"causes": [{"reason": "NamespaceTerminating"}]}
    )  # fmt: skip
    await reconcile(w)
    w.store_status()
    sent = w.writer.create_attempts  # those already on their way when the first was refused
    # A later pass sends none for a while (each would spend a token of the client's rate
    # limit for nothing: a job of 1,000 pods would hold the bucket for 50 s) ...
    assert await reconcile(w) == (None, None)
    assert w.writer.create_attempts == sent
    # ... then looks again.
    w.clock.advance(TERMINATING_NAMESPACE_SECONDS + 1)
    await reconcile(w)
    assert w.writer.create_attempts > sent


async def test_the_create_backlog_is_bounded_and_queued_creates_never_expire() -> None:
    """A job asking for more creates than the backlog holds hands off 500, waits for
    them (however long they queue: the expectations' TTL does not let the next pass
    plan them again), then hands off the next 500."""
    w = ReconcilerWorld(make_tfjob("t").worker(600).obj(), hold_creates=True)
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        structlog.contextvars.clear_contextvars()
        await w.reconciler.reconcile(KEY)
        assert structlog.contextvars.get_contextvars()["creates_deferred"] == 1200 - 500
        await anyio.wait_all_tasks_blocked()  # the status write, handed off with them
        assert w.background.backlog(KEY) == MAX_JOB_BACKLOG == w.background.backlog()
        assert w.expectations.pending(services_key(KEY))[0] == 500
        w.clock.advance(3600)  # far past the expectations' TTL, creates still queued
        structlog.contextvars.clear_contextvars()
        await w.reconciler.reconcile(KEY)
        assert structlog.contextvars.get_contextvars()["outcome"] == "awaiting-expectations"
        assert w.background.backlog(KEY) == 500, "nothing planned twice"
        w.writer.release.set()
        await anyio.wait_all_tasks_blocked()
        assert w.background.backlog() == 0 and len(w.writer.created) == 500
        w.store_status()
        await w.reconciler.reconcile(KEY)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    # services first: 600 services and the first 400 pods, each name once per kind
    assert len(w.writer.created) == 1000
    counts = Counter(w.writer.created)
    assert max(counts.values()) <= 2 and sum(1 for n in counts.values() if n == 2) == 400


async def test_a_job_that_finds_the_backlog_full_is_put_back_as_it_drains() -> None:
    """Other jobs' creates fill the whole backlog: the job hands off nothing, and instead
    of polling it waits for room; once as many of those creates have ended as it needs
    (or the backlog empties), it is on the queue again."""
    w = ReconcilerWorld(make_tfjob("t").worker(2).obj())
    gates = [anyio.Event() for _ in range(MAX_BACKLOG)]

    def held(gate: anyio.Event) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            await gate.wait()

        return work

    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        for gate in gates:
            w.background.spawn("ns/other", held(gate))
        structlog.contextvars.clear_contextvars()
        result = await w.reconciler.reconcile(KEY)
        logged = structlog.contextvars.get_contextvars()
        assert logged["creates_deferred"] == 4
        assert logged["status_deferred"] is True and not w.writer.statuses, (
            "its first status goes with its first creates"
        )
        assert result.requeue_after == BACKLOG_RECHECK_SECONDS, "only a safety net"
        assert w.background.waiting_for_room == 1 and KEY not in take_all(w.queue)
        for gate in gates[:3]:
            gate.set()
        await anyio.wait_all_tasks_blocked()
        assert KEY not in take_all(w.queue), "three ended, it needs four"
        gates[3].set()
        await anyio.wait_all_tasks_blocked()
        assert KEY in take_all(w.queue)
        await w.reconciler.reconcile(KEY)  # the pass the backlog put it back for
        for gate in gates[4:]:
            gate.set()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert sorted(w.writer.created) == ["t-worker-0", "t-worker-0", "t-worker-1", "t-worker-1"]
    assert len(w.writer.statuses) == 1
    conditions = w.writer.statuses[0]["conditions"]
    assert [c["type"] for c in conditions] == ["Created"]


async def test_a_create_whose_answer_was_lost_but_landed_is_not_sent_again() -> None:
    """The connection is reset after the apiserver made the pod: the write layer looks,
    finds it (ours), and the expectation waits for its informer event, so the next pass
    does not create it again (a 409)."""
    w = ReconcilerWorld(make_tfjob("t").worker(1).obj())
    job = w.jobs.get("ns", "t")
    assert job is not None
    landed = make_pod(job, "Worker", 0).obj()
    w.writer.fail = {"t-worker-0"}
    w.writer.error = lambda: errors.ConnectionFailed("connection reset")
    w.writer.stored = {"t-worker-0": landed}
    await reconcile(w)
    assert w.queue.num_requeues(KEY) == 0, "not a failure"
    # (the fake fails the service of that name too, and finds it the same way) the
    # create is still expected: its event has not come
    assert w.expectations.pending(pods_key(KEY))[0] == 1
    assert await reconcile(w) == ("awaiting-expectations", 5.0)
    # a create that did not land fails as before
    w2 = ReconcilerWorld(make_tfjob("t").worker(1).obj())
    w2.writer.fail = {"t-worker-0"}
    w2.writer.error = lambda: errors.ConnectionFailed("connection reset")
    await reconcile(w2)
    assert w2.queue.num_requeues(KEY) == 1


async def test_children_in_another_namespace_never_count_for_the_job() -> None:
    """An ownerReference names no namespace: a tenant who can create pods only in its
    own namespace can still write the victim job's UID into one. Such pods (succeeded,
    here) must not decide the job's outcome; the job's own running pods do."""
    job = make_tfjob("t").worker(2).obj()
    w = ReconcilerWorld(job)
    for i in range(2):
        w.pods.upsert(make_pod(job, "Worker", i).tracked().running().obj())
        w.services.upsert(make_service(job, "Worker", i))
    forged = make_tfjob("t", namespace="attacker", uid=job["metadata"]["uid"]).worker(3).obj()
    for i in range(3):
        w.pods.upsert(make_pod(forged, "Worker", i).uid(f"forged-{i}").succeeded().obj())
    await reconcile(w)
    assert w.writer.created == [] and w.writer.deleted == []
    status = w.writer.statuses[-1]
    assert status["replicaStatuses"]["Worker"].get("succeeded", 0) == 0
    assert status["replicaStatuses"]["Worker"]["active"] == 2
    assert not [c for c in status["conditions"] if c["type"] == "Succeeded"]


def _changed(w: ReconcilerWorld, **meta: Any) -> None:
    job = w.jobs.get("ns", "t")
    assert job is not None
    w.jobs.upsert({**job, "metadata": {**job["metadata"], **meta}})


async def _second_pass_with_creates_queued(
    change: Any,
) -> tuple[ReconcilerWorld, dict[str, Any]]:
    """A 3-worker job's first pass queues its 6 creates (held); ``change`` is made to the
    world, a second pass runs, then the creates may go. Returns the world and what the
    second pass said on its summary line."""
    job = make_tfjob("t").worker(3).obj()
    job["metadata"]["generation"] = 1
    w = ReconcilerWorld(job, hold_creates=True)
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        await w.reconciler.reconcile(KEY)
        await anyio.wait_all_tasks_blocked()
        assert w.background.backlog(KEY) == 6
        change(w)
        structlog.contextvars.clear_contextvars()
        await w.reconciler.reconcile(KEY)
        seen = dict(structlog.contextvars.get_contextvars())
        w.writer.release.set()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    return w, seen


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda w: w.jobs.delete(KEY), id="deleted"),
        pytest.param(lambda w: _changed(w, uid="t-new-uid"), id="replaced"),
        pytest.param(lambda w: _changed(w, deletionTimestamp="2024-01-01T00:00:09Z"),
                     id="being-deleted"),
        pytest.param(lambda w: _changed(w, generation=2), id="spec-changed"),
    ],
)  # fmt: skip
async def test_queued_creates_of_a_job_that_changed_are_dropped_unsent(change: Any) -> None:
    """The job is deleted, replaced, or its spec changed (a suspend is one) while its
    creates wait on the rate limit: none of them goes out, their expectations are let
    go, and the next plan starts afresh."""
    w, seen = await _second_pass_with_creates_queued(change)
    assert seen["creates_dropped"] == 6  # 3 services, 3 pods
    assert w.writer.created == [], "nothing planned for the old job went out"
    assert w.expectations.pending(pods_key(KEY))[0] == 0
    assert w.expectations.pending(services_key(KEY))[0] == 0


async def test_an_unchanged_job_keeps_its_queued_creates() -> None:
    # a status write seen is no change of the job
    w, seen = await _second_pass_with_creates_queued(lambda w: w.store_status())
    assert "creates_dropped" not in seen
    assert len(w.writer.created) == 6


async def test_a_stragglers_event_goes_out_once_with_the_write_that_flags_it() -> None:
    r = Reporting(3)
    w = r.w
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        await r.running()
        w.clock.advance(10)

        def steps(n: int) -> None:  # worker 2 takes three times as long per step
            for i in range(3):
                t = 0.3 if i == 2 else 0.1
                r.report(i, n, b'{"step": %d, "sections": {"compute": %.1f}}' % (n, t))

        for n in range(2):
            steps(n)
            await r.ctrl.process(KEY)
            w.store_status()
            w.clock.advance(5 if n == 0 else 1)
        assert "StragglerDetected" not in w.events.reasons  # three reports first
        steps(2)  # the third: flagged, in a write the job's pace holds back a while
        await r.ctrl.process(KEY)
        w.clock.advance(1)
        steps(3)
        await r.ctrl.process(KEY)
        assert w.writer.statuses[-1]["trainingProgress"]["step"] == 1
        assert "StragglerDetected" not in w.events.reasons  # not written, not announced
        w.clock.advance(5)
        await r.ctrl.process(KEY)
        w.store_status()
        assert w.events.reasons.count("StragglerDetected") == 1
        flagged = w.writer.statuses[-1]["trainingProgress"]["stragglers"]
        assert [(s["index"], s["score"], s["basis"]) for s in flagged] == [
            (2, 0.33, "section:compute")
        ]
        # more of the same: the episode goes on, no event again
        steps(4)
        w.clock.advance(5)
        await r.ctrl.process(KEY)
        assert len(w.writer.statuses[-1]["trainingProgress"]["stragglers"]) == 1
        assert w.events.reasons.count("StragglerDetected") == 1
        tg.cancel_scope.cancel()


async def test_a_pass_reads_only_the_pods_that_changed_since_the_last() -> None:
    """Each pass keeps the views it read of the job's pods (JobMemory's ``observed``);
    the next one reuses those whose cached object is the same, and reads the others."""
    job = make_tfjob("t").worker(2).obj()
    w = ReconcilerWorld(job)
    await reconcile(w)
    w.store_status()
    for i in range(2):
        w.pods.upsert(_at(make_pod(job, "Worker", i).uid(f"uid-{i}").running().obj(), "5"))
    await reconcile(w)
    record = w.reconciler.memory.peek(KEY)
    assert record is not None and record.observed is not None
    first = dict(record.observed)
    assert set(first) == {"uid-0", "uid-1"}
    w.pods.upsert(_at(make_pod(job, "Worker", 1).uid("uid-1").succeeded().obj(), "6"))
    await reconcile(w)
    assert record.observed is not None
    assert record.observed["uid-0"] is first["uid-0"]
    assert record.observed["uid-1"] is not first["uid-1"]
    assert record.observed["uid-1"].phase == "Succeeded"
