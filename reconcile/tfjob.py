"""The TFJob reconciler: one pass over one job, in a fixed order.

    read from the cache → return early (gone, being deleted) → check expectations →
    list owned pods and services from the cache indexes → compute the plan (pure) →
    apply it → write status once, only if it changed → emit events → requeue when a
    timer is due.

Everything that decides lives in reconcile.plan and the modules it calls; this module
only sequences reads and writes. The writes of one pass run concurrently, bounded by a
semaphore (and by the API client's own rate limit).

Creates do not hold a worker. When the reconciler's own ``run()`` is running (a Manager
service), a pass raises the creation expectations, hands its creates to that background
task group and goes on to the status write: the workers stay free for the jobs whose
pods already run, instead of waiting on the creates of jobs behind them. The
expectations keep the job's next pass from acting until every create is observed (or
has failed), so nothing is created twice. A background create that fails lowers its
expectation, records FailedCreate and requeues the job through ``Requeue`` with a
per-job exponential backoff (the pass that planned it has already returned, so the
workqueue's own backoff was reset). Deletes stay in the pass (restart accounting
relies on "record the end, then delete": see reconcile.restart). Without ``run()``
(unit tests) creates are awaited inline and a failure fails the pass, as before.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from controller import errors
from controller.types import (
    JSON,
    CacheReader,
    Clock,
    EventSink,
    Expectations,
    ObjectWriter,
    Requeue,
    Result,
    object_key,
    split_key,
)
from reconcile.metrics import JobMetrics
from reconcile.plan import Plan, PlanConfig, Snapshot, compute_plan

log = structlog.get_logger("tfjob")

#: Cache index of pods and services by the UID of their controller ownerReference.
OWNER_INDEX = "controller-uid"

#: How long to wait before looking again at a job whose writes are not yet observed.
#: The observing informer event re-enqueues the key sooner; this is the safety net.
UNSATISFIED_RECHECK_SECONDS = 5.0

#: A progress-only status change (replica counts, the Running condition) of a job whose
#: status was already written waits this long, so the pods of one job that start
#: within the window cost one status write instead of one each. Everything else (the
#: first write, a finished job, any change that emits an event) is written at once.
STATUS_COALESCE_SECONDS = 0.1

#: Backoff of a job whose background creates keep failing: base · 2^(failures-1), capped
#: (the workqueue's per-item defaults).
CREATE_RETRY_BASE_SECONDS = 0.005
CREATE_RETRY_MAX_SECONDS = 1000.0


def pods_key(job_key: str) -> str:
    return f"{job_key}/pods"


def services_key(job_key: str) -> str:
    return f"{job_key}/services"


@dataclass
class Outcome:
    """Counters for the one summary log line of a pass."""

    created: int = 0
    #: creates given to the background writer (their results arrive after the pass)
    handed_off: int = 0
    deleted: int = 0
    failed_writes: int = 0
    status_written: bool = False
    errors: list[BaseException] = field(default_factory=list)


@dataclass
class Writers:
    jobs: ObjectWriter
    pods: ObjectWriter
    services: ObjectWriter


@dataclass
class Caches:
    jobs: CacheReader
    pods: CacheReader
    services: CacheReader


class TFJobReconciler:
    def __init__(
        self,
        *,
        caches: Caches,
        writers: Writers,
        expectations: Expectations,
        events: EventSink,
        clock: Clock,
        config: PlanConfig | None = None,
        metrics: JobMetrics | None = None,
        max_concurrent_writes: int = 64,
        status_coalesce_seconds: float = STATUS_COALESCE_SECONDS,
        requeue: Requeue | None = None,
    ) -> None:
        self.metrics = metrics
        self.caches = caches
        self.writers = writers
        self.expectations = expectations
        self.events = events
        self.clock = clock
        self.config = config or PlanConfig()
        self.max_concurrent_writes = max_concurrent_writes
        self.status_coalesce_seconds = status_coalesce_seconds
        #: job key -> monotonic time its held progress-only status change was first seen
        self._status_held_since: dict[str, float] = {}
        self.requeue = requeue
        #: the background writer's task group and its bound on creates in flight, set
        #: while run() runs
        self._background: TaskGroup | None = None
        self._background_limiter: anyio.Semaphore | None = None
        #: job key -> consecutive background create failures (reset once a pass of the
        #: job has nothing left to create)
        self._create_failures: dict[str, int] = {}

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The background writer (a Manager service): runs handed-off creates until
        cancelled; creates still in flight then are cancelled with it."""
        self._background_limiter = anyio.Semaphore(self.max_concurrent_writes)
        try:
            async with anyio.create_task_group() as tg:
                self._background = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._background = None

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        # 1. Read from the cache; a job that is gone takes its expectations with it.
        job = self.caches.jobs.get(namespace, name)
        if job is None:
            for k in (key, pods_key(key), services_key(key)):
                self.expectations.delete(k)
            self._status_held_since.pop(key, None)
            self._create_failures.pop(key, None)
            structlog.contextvars.bind_contextvars(outcome="gone")
            return Result()
        # 2. A job being deleted is left to the garbage collector.
        if job.get("metadata", {}).get("deletionTimestamp"):
            structlog.contextvars.bind_contextvars(outcome="deleting")
            return Result()
        # 3. Don't act on a stale view of our own writes: every create/delete we issued
        #    and the job's last status write must be visible in the caches first, or the
        #    plan would create a pod that already exists or undo a status just written.
        if not all(self.expectations.satisfied(k) for k in (key, pods_key(key), services_key(key))):
            structlog.contextvars.bind_contextvars(outcome="awaiting-expectations")
            return Result(requeue_after=UNSATISFIED_RECHECK_SECONDS)
        # 4. Owned children, from the cache indexes.
        uid = job["metadata"]["uid"]
        pods = self.caches.pods.by_index(OWNER_INDEX, uid)
        services = self.caches.services.by_index(OWNER_INDEX, uid)
        # 5. The plan: pure.
        plan = compute_plan(
            Snapshot(job=job, pods=pods, services=services, now=self.clock.now()), self.config
        )
        if plan.skip_reason:
            structlog.contextvars.bind_contextvars(outcome=plan.skip_reason)
        # 6. Apply it.
        outcome = Outcome()
        await self._apply_children(key, job, plan, outcome)
        if plan.delete_job:
            await self._delete_job(job, outcome)
            structlog.contextvars.bind_contextvars(outcome="ttl-deleted")
            return Result()
        # 7. Write status once, only if it changed (progress-only changes coalesced).
        requeue_after = plan.requeue_after
        hold = self._status_hold(key, job, plan)
        if hold is not None:
            requeue_after = hold if requeue_after is None else min(hold, requeue_after)
            structlog.contextvars.bind_contextvars(status_held=round(hold, 3))
        elif plan.status is not None:
            await self._write_status(key, job, plan.status)
            outcome.status_written = True
        # 8. Events of this pass's transitions, only once the status that records them
        #    is stored (a failed write retries the pass, which would repeat them).
        for ev in plan.events:
            self.events.event(job, ev.type, ev.reason, ev.message)
            if self.metrics is not None:
                self.metrics.transition(job, ev.reason)
        structlog.contextvars.bind_contextvars(
            created=outcome.created,
            creates_handed_off=outcome.handed_off,
            deleted=outcome.deleted,
            status_written=outcome.status_written,
        )
        if outcome.errors:
            # The first write error decides the retry; the rest were logged.
            raise outcome.errors[0]
        return Result(requeue_after=requeue_after)

    def _status_hold(self, key: str, job: JSON, plan: Plan) -> float | None:
        """Seconds to hold this pass's status change back, or None to write it now."""
        if (
            plan.status is None
            or plan.events
            or self.status_coalesce_seconds <= 0
            or not _progress_only(job.get("status") or {}, plan.status)
        ):
            self._status_held_since.pop(key, None)
            return None
        now = self.clock.monotonic()
        since = self._status_held_since.setdefault(key, now)
        remaining = since + self.status_coalesce_seconds - now
        if remaining > 0:
            return remaining
        self._status_held_since.pop(key, None)
        return None

    # --- writes -------------------------------------------------------------------

    async def _apply_children(self, key: str, job: JSON, plan: Plan, outcome: Outcome) -> None:
        limiter = anyio.Semaphore(self.max_concurrent_writes)
        jobs: list[Callable[[], Awaitable[None]]] = []
        pk, sk = pods_key(key), services_key(key)
        # Raise expectations before any write is issued: an informer event may arrive
        # before the write's response does.
        if plan.delete_pods:
            self.expectations.expect_deletions(pk, [p["metadata"]["uid"] for p in plan.delete_pods])
        if plan.delete_services:
            self.expectations.expect_deletions(
                sk, [s["metadata"]["uid"] for s in plan.delete_services]
            )
        if plan.create_pods:
            self.expectations.expect_creations(pk, len(plan.create_pods))
        if plan.create_services:
            self.expectations.expect_creations(sk, len(plan.create_services))

        for pod in plan.delete_pods:
            jobs.append(self._deleter(job, self.writers.pods, pk, pod, "Pod", outcome))
        for svc in plan.delete_services:
            jobs.append(self._deleter(job, self.writers.services, sk, svc, "Service", outcome))
        # Services first, pods last: the job's next pass waits for all of them, and the
        # pods are what start running, so they should be the last to wait.
        creates: list[Callable[[], Awaitable[None]]] = []
        for svc in plan.create_services:
            creates.append(
                self._creator(key, job, self.writers.services, sk, svc, "Service", outcome)
            )
        for pod in plan.create_pods:
            creates.append(self._creator(key, job, self.writers.pods, pk, pod, "Pod", outcome))
        if not creates:
            self._create_failures.pop(key, None)
        background, bg_limiter = self._background, self._background_limiter
        if background is not None and bg_limiter is not None:
            # Hand them off: the expectations raised above gate the job's next pass
            # until they are observed, so this pass need not wait for them.
            outcome.handed_off = len(creates)

            async def run_bg(fn: Callable[[], Awaitable[None]]) -> None:
                async with bg_limiter:
                    await fn()

            for fn in creates:
                background.start_soon(run_bg, fn)
        else:
            jobs.extend(creates)
        if not jobs:
            return

        async def run(fn: Callable[[], Awaitable[None]]) -> None:
            async with limiter:
                await fn()

        async with anyio.create_task_group() as tg:
            for fn in jobs:
                tg.start_soon(run, fn)

    def _creator(
        self,
        key: str,
        job: JSON,
        writer: ObjectWriter,
        exp_key: str,
        body: JSON,
        kind: str,
        outcome: Outcome,
    ) -> Callable[[], Awaitable[None]]:
        async def create() -> None:
            name = body["metadata"]["name"]
            try:
                await writer.create(body["metadata"].get("namespace") or _ns(job), body)
            except errors.AlreadyExists:
                # Deterministic names: it is there already, and no create event of ours
                # will arrive for this attempt.
                self.expectations.creation_observed(exp_key)
                return
            except Exception as e:
                self.expectations.creation_observed(exp_key)
                self._failed_write(job, outcome, "Create", kind, name, e)
                if outcome.handed_off:
                    self._retry_after_failed_create(key)
                else:
                    outcome.errors.append(e)
                return
            outcome.created += 1
            self.events.event(
                job, "Normal", f"SuccessfulCreate{kind}", f"Created {kind.lower()}: {name}"
            )

        return create

    def _failed_write(
        self, job: JSON, outcome: Outcome, verb: str, kind: str, name: str, e: Exception
    ) -> None:
        """Count, report (a Warning event, upstream's FailedCreate*/FailedDelete*) and log
        a create or delete that failed; the caller decides about retrying."""
        outcome.failed_writes += 1
        gerund = {"Create": "creating", "Delete": "deleting"}[verb]
        self.events.event(job, "Warning", f"Failed{verb}{kind}", f"Error {gerund}: {_short(e)}")
        log.warning(
            f"{verb.lower()} failed",
            job=object_key(_ns(job), job["metadata"]["name"]),
            kind=kind,
            name=name,
            error=str(e),
        )

    def _retry_after_failed_create(self, key: str) -> None:
        """A background create failed after its pass returned: look at the job again,
        backing off while its creates keep failing."""
        failures = self._create_failures.get(key, 0)
        self._create_failures[key] = failures + 1
        if self.requeue is None:
            return  # the expectation's recheck (UNSATISFIED_RECHECK_SECONDS) is the net
        delay = CREATE_RETRY_BASE_SECONDS * 2.0 ** min(failures, 64)
        self.requeue.requeue_after(key, min(delay, CREATE_RETRY_MAX_SECONDS))

    def _deleter(
        self,
        job: JSON,
        writer: ObjectWriter,
        exp_key: str,
        obj: JSON,
        kind: str,
        outcome: Outcome,
    ) -> Callable[[], Awaitable[None]]:
        async def delete() -> None:
            meta = obj["metadata"]
            try:
                # The UID precondition keeps a same-named successor safe.
                await writer.delete(meta["namespace"], meta["name"], uid=meta["uid"])
            except (errors.NotFound, errors.Conflict):
                # Already gone (or replaced): the informer's delete event may have been
                # seen already, so count it observed here.
                self.expectations.deletion_observed(exp_key, meta["uid"])
                return
            except Exception as e:
                self.expectations.deletion_observed(exp_key, meta["uid"])
                self._failed_write(job, outcome, "Delete", kind, meta["name"], e)
                outcome.errors.append(e)
                return
            outcome.deleted += 1
            self.events.event(
                job, "Normal", f"SuccessfulDelete{kind}", f"Deleted {kind.lower()}: {meta['name']}"
            )

        return delete

    async def _write_status(self, key: str, job: JSON, status: Mapping[str, Any]) -> None:
        body = copy.copy(job)
        body["status"] = dict(status)
        # The cached object carries resourceVersion: a stale write fails with Conflict
        # and the pass is retried from a fresh cache read.
        written = await self.writers.jobs.replace_status(_ns(job), job["metadata"]["name"], body)
        rv = written.get("metadata", {}).get("resourceVersion")
        if rv:
            self.expectations.expect_resource_version(key, str(rv))

    async def _delete_job(self, job: JSON, outcome: Outcome) -> None:
        meta = job["metadata"]
        try:
            await self.writers.jobs.delete(
                meta["namespace"], meta["name"], uid=meta["uid"], propagation="Background"
            )
        except errors.NotFound:
            return
        except Exception as e:
            self.events.event(job, "Warning", "FailedDeleteJob", f"Error deleting: {_short(e)}")
            raise
        outcome.deleted += 1
        self.events.event(job, "Normal", "SuccessfulDeleteJob", f"Deleted job: {meta['name']}")
        if self.metrics is not None:
            self.metrics.transition(job, "SuccessfulDeleteJob")


def _progress_only(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """True when an already-written status changes only in replica counts and the
    Running condition: nothing a client waits on to make a decision."""
    if not old.get("conditions"):
        return False  # the first write (Created) is never held

    def rest(status: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in status.items() if k not in ("conditions", "replicaStatuses")}

    def decisive(status: Mapping[str, Any]) -> list[Any]:
        return [c for c in status.get("conditions") or [] if c.get("type") != "Running"]

    return rest(old) == rest(new) and decisive(old) == decisive(new)


def _ns(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["namespace"])


def _short(e: BaseException) -> str:
    msg = str(e)
    return msg if len(msg) <= 300 else msg[:297] + "..."
