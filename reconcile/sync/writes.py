"""The one thin layer that writes: a plan's child creates and deletes, the status, the job.

Rules every write here keeps:
- expectations are raised *before* a write is issued (an informer event may arrive before
  the write's response does) and lowered for every write that fails or finds its object
  already there or gone, because no event will arrive for it;
- deletes carry the object's UID as a precondition, so a same-named successor is safe;
- the status PUT carries the cached resourceVersion, so a stale write fails with Conflict
  and the pass is retried from a fresh cache read;
- each failed child write is reported once: a Warning event (upstream's FailedCreate* /
  FailedDelete*) and a log line; a create refused permanently is also counted towards
  failing the job (reconcile.policy.failures);
- a create refused because the namespace is being deleted is dropped quietly: the job
  goes with the namespace, and for ``TERMINATING_NAMESPACE_SECONDS`` no other create
  is sent there (a large job would otherwise spend a token on each of its pods);
- a create answered AlreadyExists reads the object: this job's own (a create whose
  event is on its way) is no news; anyone else's is a failed create (``NameHeld``)
  naming the holder, counted towards failing the job like a permanent refusal, since a
  name the job's TF_CONFIG points at must not quietly be somebody else's pod or Service;
  a holder already being deleted is waited for (``NameReleasing``), not counted.
Deletes and tracking-finalizer releases run in the pass, concurrently up to a bound (a
release is one UID-preconditioned patch, with no event: it is bookkeeping, not news);
creates are spawned (Spawner) so the pass does not wait on them, and a failed create
raises inside its spawned work.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import anyio
import anyio.lowlevel
import structlog

from controller import errors
from controller.types import (
    JSON,
    Clock,
    EventSink,
    Expectations,
    ObjectWriter,
    Spawner,
    controller_ref,
)
from reconcile.api.names import TRACKING_FINALIZER
from reconcile.api.spec import JobView
from reconcile.plan import Plan, PodGroupWrite
from reconcile.policy import conditions as cond
from reconcile.policy.failures import CreateFailures
from reconcile.policy.gang import REASON_DELETED_POD_GROUP, msg_deleted
from reconcile.policy.tracking import PATCH_TYPE, release_patch
from reconcile.sync.keys import podgroups_key, pods_key, releases_key, services_key

log = structlog.get_logger("tfjob")

#: Creates waiting in the background at most, for one job and for all: beyond them a
#: pass hands off nothing more, and the rest waits for a later pass. Creates queue on the
#: client's rate limit (20/s by default), so this bounds memory and how stale a queued
#: create can be, whatever is submitted at once.
MAX_JOB_BACKLOG = 500
MAX_BACKLOG = 5000
#: Creates handed to the background between two turns of the event loop.
SPAWN_BATCH = 100
#: How long creates into a namespace that refused one as terminating are not sent.
TERMINATING_NAMESPACE_SECONDS = 30.0
#: How much of an API error goes into an event message.
MAX_ERROR_MESSAGE = 300


@dataclass
class Outcome:
    """Counters for the one summary log line of a pass."""

    created: int = 0
    #: creates given to the background (their results arrive after the pass)
    handed_off: int = 0
    #: planned creates left for a later pass (the backlog was full)
    deferred: int = 0
    deleted: int = 0
    #: tracking finalizers removed
    released: int = 0
    failed_writes: int = 0
    status_written: bool = False
    #: the status write was handed to the background with the creates
    status_handed_off: bool = False
    errors: list[BaseException] = field(default_factory=list)


class _Ours(Exception):
    """The create was answered AlreadyExists and the object is the job's own."""


class NameHeld(errors.Conflict):
    """The name a child of the job must have is taken by an object the job does not
    control. Nothing changes that until its holder deletes it: the job fails once this
    has gone on for the create grace (reconcile.policy.failures)."""

    def __init__(self, kind: str, name: str, holder: str) -> None:
        super().__init__(
            409, "AlreadyExists", f"{kind.lower()} {name} already exists and is {holder}"
        )


class NameReleasing(errors.Conflict):
    """The name is taken by an object being deleted (an earlier job's child on its way
    out): retried with the queue's backoff, never counted towards failing the job."""

    def __init__(self, kind: str, name: str, holder: str) -> None:
        super().__init__(
            409, "AlreadyExists", f"{kind.lower()} {name} is {holder}, which is being deleted"
        )


def _controlled_by(obj: JSON, owner: str) -> bool:
    return (controller_ref(obj) or {}).get("uid") == owner


def holder_of(found: JSON) -> str:
    """Who holds an object, said for an event or a condition message."""
    ref = controller_ref(found)
    uid = (found.get("metadata") or {}).get("uid", "")
    if ref is None:
        return f"not controlled by this TFJob (no controller; uid {uid})"
    return (
        f"controlled by {ref.get('kind', '?')} {ref.get('name', '?')} "
        f"(uid {ref.get('uid', '?')}), not by this TFJob"
    )


async def _claim(
    child: _Child, namespace: str, name: str, owner: str, e: errors.AlreadyExists
) -> JSON:
    """A create answered AlreadyExists: whose is the object?"""
    try:
        found = await child.writer.get(namespace, name)
    except Exception:
        raise e from None  # can't tell: a conflict, retried like any
    if found is None:
        raise e  # gone again since: the retry creates it
    if _controlled_by(found, owner):
        raise _Ours() from e
    holder = holder_of(found)
    if (found.get("metadata") or {}).get("deletionTimestamp"):
        raise NameReleasing(child.kind, name, holder) from e
    raise NameHeld(child.kind, name, holder) from e


@dataclass(frozen=True)
class _Child:
    kind: str  # "Pod" or "Service", as in upstream's event reasons
    writer: ObjectWriter
    exp_key: str


class ChildWrites:
    def __init__(
        self,
        *,
        pods: ObjectWriter,
        services: ObjectWriter,
        expectations: Expectations,
        events: EventSink,
        spawner: Spawner,
        failures: CreateFailures,
        clock: Clock,
        max_concurrent: int = 64,
    ) -> None:
        self._pods = pods
        self._services = services
        self._expectations = expectations
        self._events = events
        self._spawner = spawner
        self._failures = failures
        self._max_concurrent = max_concurrent
        self._clock = clock
        #: namespaces being deleted, and until when no create is sent there
        self._terminating: dict[str, float] = {}

    async def apply(self, key: str, job: JobView, plan: Plan, outcome: Outcome) -> None:
        pods = _Child("Pod", self._pods, pods_key(key))
        services = _Child("Service", self._services, services_key(key))
        exp = self._expectations
        for child, doomed in ((pods, plan.delete_pods), (services, plan.delete_services)):
            if doomed:
                exp.expect_deletions(child.exp_key, [o["metadata"]["uid"] for o in doomed])
        # Services first, pods last: the job's next pass waits for all of them, and the
        # pods are what start running, so they should be the last to wait.
        room = max(
            0,
            min(
                MAX_JOB_BACKLOG - self._spawner.backlog(key),
                MAX_BACKLOG - self._spawner.backlog(),
            ),
        )
        batches = []
        for child, bodies in ((services, plan.create_services), (pods, plan.create_pods)):
            taken = list(bodies[:room])
            room -= len(taken)
            outcome.deferred += len(bodies) - len(taken)
            if taken:
                exp.expect_creations(child.exp_key, len(taken))
                batches.append((child, taken))
        for child, bodies in batches:
            # A create dropped unsent (its job gone or changed) is never observed.
            on_drop = partial(self._expectations.creation_observed, child.exp_key)
            for body in bodies:
                self._spawner.spawn(
                    key, self._creator(key, job, child, body, outcome), on_drop=on_drop
                )
                outcome.handed_off += 1
                if outcome.handed_off % SPAWN_BATCH == 0:
                    # A new task costs tens of microseconds: a large job's 2,000 would
                    # hold the event loop for 100 ms without a turn for anyone else.
                    await anyio.lowlevel.checkpoint()
        writes = [self._deleter(job, pods, p, outcome) for p in plan.delete_pods]
        writes += [self._deleter(job, services, s, outcome) for s in plan.delete_services]
        writes += self._releasers(key, plan.release_pods, outcome, plan.retired)
        await self._bounded(writes)

    async def release(self, key: str, pods: list[JSON], outcome: Outcome) -> None:
        """Remove the tracking finalizer from ``pods`` (the pods of a job that is gone)."""
        await self._bounded(self._releasers(key, pods, outcome))

    async def _bounded(self, writes: list[Callable[[], Awaitable[None]]]) -> None:
        if not writes:
            return
        # fast_acquire: a free slot is taken without a trip through the event loop
        limiter = anyio.Semaphore(self._max_concurrent, fast_acquire=True)

        async def bounded(fn: Callable[[], Awaitable[None]]) -> None:
            async with limiter:
                await fn()

        async with anyio.create_task_group() as tg:
            for fn in writes:
                tg.start_soon(bounded, fn)

    def _releasers(
        self,
        key: str,
        pods: list[JSON],
        outcome: Outcome,
        retired: frozenset[str] = frozenset(),
    ) -> list[Callable[[], Awaitable[None]]]:
        if not pods:
            return []
        exp_key = releases_key(key)
        self._expectations.expect_deletions(exp_key, [p["metadata"]["uid"] for p in pods])
        return [
            self._releaser(exp_key, p, outcome, p["metadata"]["uid"] in retired) for p in pods
        ]

    def _releaser(
        self, exp_key: str, pod: JSON, outcome: Outcome, retired: bool
    ) -> Callable[[], Awaitable[None]]:
        meta = pod["metadata"]

        async def release() -> None:
            uid = meta["uid"]
            patch = release_patch(TRACKING_FINALIZER, uid, retired=retired)
            try:
                written = await self._pods.patch(
                    meta["namespace"], meta["name"], patch, content_type=PATCH_TYPE
                )
            except (errors.NotFound, errors.Conflict, errors.Invalid):
                # Gone, or a same-named successor (the UID precondition): nothing of
                # ours is left on it, and no event of this pod will come.
                self._expectations.deletion_observed(exp_key, uid)
                return
            except Exception as e:
                self._expectations.deletion_observed(exp_key, uid)
                outcome.failed_writes += 1
                pod_key = f"{meta['namespace']}/{meta['name']}"
                log.warning("release failed", pod=pod_key, error=str(e))
                outcome.errors.append(e)  # the pass is retried
                return
            if (written.get("metadata") or {}).get("resourceVersion") == meta.get(
                "resourceVersion"
            ):
                # Unchanged (already released): no watch event will lower it.
                self._expectations.deletion_observed(exp_key, uid)
                return
            outcome.released += 1

        return release

    def _creator(
        self, key: str, job: JobView, child: _Child, body: JSON, outcome: Outcome
    ) -> Callable[[], Awaitable[None]]:
        meta = body["metadata"]

        async def create() -> None:
            namespace = meta.get("namespace") or job.namespace
            if self._terminating.get(namespace, 0.0) > self._clock.monotonic():
                self._expectations.creation_observed(child.exp_key)
                return
            # _Ours: deterministic names, so it is there already, and no create event
            # of ours will arrive for this attempt.
            try:
                created = await self._write(
                    job, child, "Create", meta["name"], outcome,
                    lambda: self._create_or_find(child, namespace, body, job.uid),
                    lambda: self._expectations.creation_observed(child.exp_key),
                    harmless=(_Ours,),
                )  # fmt: skip
            except Exception as e:
                if errors.is_permanent(e) or isinstance(e, NameHeld):
                    self._failures.failed(key, job.uid, child.kind, meta["name"], short_error(e))
                raise
            if created:
                self._failures.created(key, job.uid)
                outcome.created += 1

        return create

    @staticmethod
    async def _create_or_find(child: _Child, namespace: str, body: JSON, owner: str) -> JSON:
        """Create; when the answer is lost (a reset connection, a timeout, a 5xx) look
        whether the object was made all the same. Made and ours: that is the create,
        and its informer event will lower the expectation; creating it again on the
        next pass, before that event, would only be answered 409."""
        try:
            return await child.writer.create(namespace, body)
        except errors.AlreadyExists as e:
            return await _claim(child, namespace, body["metadata"]["name"], owner, e)
        except errors.Retryable as e:
            if isinstance(e, errors.TooManyRequests):
                raise  # refused before anything was done
            try:
                found = await child.writer.get(namespace, body["metadata"]["name"])
            except Exception:
                raise e from None
            if found is None or not _controlled_by(found, owner):
                raise
            return found

    def _deleter(
        self, job: JobView, child: _Child, obj: JSON, outcome: Outcome
    ) -> Callable[[], Awaitable[None]]:
        meta = obj["metadata"]

        async def delete() -> None:
            # NotFound or Conflict: already gone (or replaced), and the informer's delete
            # event may have been seen already, so it counts as observed here.
            try:
                deleted = await self._write(
                    job, child, "Delete", meta["name"], outcome,
                    lambda: child.writer.delete(meta["namespace"], meta["name"], uid=meta["uid"]),
                    lambda: self._expectations.deletion_observed(child.exp_key, meta["uid"]),
                    harmless=(errors.NotFound, errors.Conflict),
                )  # fmt: skip
            except Exception as e:
                outcome.errors.append(e)  # deletes fail the pass, which is retried
                return
            if deleted:
                outcome.deleted += 1

        return delete

    async def _write(
        self,
        job: JobView,
        child: _Child,
        verb: str,
        name: str,
        outcome: Outcome,
        call: Callable[[], Awaitable[object]],
        observed: Callable[[], None],
        *,
        harmless: tuple[type[Exception], ...],
    ) -> bool:
        """Issue one child write; True when it was made. ``observed`` lowers its
        expectation when no informer event will arrive for it."""
        try:
            await call()
        except harmless:
            observed()
            return False
        except Exception as e:
            observed()
            if errors.is_namespace_terminating(e):
                log.debug("namespace terminating", kind=child.kind, name=name)
                now = self._clock.monotonic()
                self._terminating = {ns: t for ns, t in self._terminating.items() if t > now}
                self._terminating[job.namespace] = now + TERMINATING_NAMESPACE_SECONDS
                return False
            self._failed(job, outcome, verb, child.kind, name, e)
            raise
        done = {"Create": "Created", "Delete": "Deleted"}[verb]
        self._events.event(
            job.raw,
            cond.NORMAL,
            f"Successful{verb}{child.kind}",
            f"{done} {child.kind.lower()}: {name}",
        )
        return True

    def _failed(
        self, job: JobView, outcome: Outcome, verb: str, kind: str, name: str, e: Exception
    ) -> None:
        outcome.failed_writes += 1
        gerund = {"Create": "creating", "Delete": "deleting"}[verb]
        self._events.event(
            job.raw, cond.WARNING, f"Failed{verb}{kind}", f"Error {gerund}: {short_error(e)}"
        )
        log.warning(
            f"{verb.lower()} failed",
            job=f"{job.namespace}/{job.name}",
            kind=kind,
            name=name,
            error=str(e),
        )


async def write_podgroup(
    writer: ObjectWriter,
    expectations: Expectations,
    events: EventSink,
    key: str,
    job: JobView,
    write: PodGroupWrite,
    outcome: Outcome,
) -> None:
    """The pass's one PodGroup write. A create or delete is expected (reconcile.sync.keys)
    until the PodGroup informer sees it, so the next pass neither creates it again nor
    lets pods in before it exists."""
    exp_key = podgroups_key(key)
    if write.verb == "create":
        expectations.expect_creations(exp_key, 1)
        try:
            await writer.create(job.namespace, write.body)
        except errors.AlreadyExists:
            expectations.creation_observed(exp_key)  # its informer event comes, or came
        except Exception:
            expectations.creation_observed(exp_key)
            outcome.failed_writes += 1
            raise
        else:
            outcome.created += 1
    elif write.verb == "patch":
        try:
            await writer.patch(job.namespace, job.name, write.body)
        except errors.NotFound:
            return  # deleted meanwhile: its deletion event brings the job back
    else:
        uid = write.body["metadata"]["uid"]
        expectations.expect_deletions(exp_key, [uid])
        try:
            await writer.delete(job.namespace, job.name, uid=uid)
        except (errors.NotFound, errors.Conflict):
            expectations.deletion_observed(exp_key, uid)
            return
        except Exception:
            expectations.deletion_observed(exp_key, uid)
            outcome.failed_writes += 1
            raise
        outcome.deleted += 1
        events.event(job.raw, cond.NORMAL, REASON_DELETED_POD_GROUP, msg_deleted(job.name))


async def write_status(
    jobs: ObjectWriter,
    expectations: Expectations,
    key: str,
    job: JobView,
    status: Mapping[str, Any],
) -> None:
    body = copy.copy(job.raw)
    body["status"] = dict(status)
    # A job's first status (it says Created) is not urgent: in a burst of new jobs those
    # queue on the status budget for seconds, and the writes that report pods running
    # or a job finished go ahead of them.
    urgent = bool(job.status.conditions)
    written = await jobs.replace_status(job.namespace, job.name, body, urgent=urgent)
    rv = (written.get("metadata") or {}).get("resourceVersion")
    if rv:
        expectations.expect_resource_version(key, str(rv))


async def delete_job(jobs: ObjectWriter, events: EventSink, job: JobView, outcome: Outcome) -> bool:
    """Delete the job (ttlSecondsAfterFinished); the garbage collector takes its children.
    True when this call deleted it."""
    try:
        await jobs.delete(job.namespace, job.name, uid=job.uid, propagation="Background")
    except errors.NotFound:
        return False
    except Exception as e:
        events.event(job.raw, cond.WARNING, "FailedDeleteJob", f"Error deleting: {short_error(e)}")
        raise
    outcome.deleted += 1
    events.event(job.raw, cond.NORMAL, cond.REASON_DELETED_JOB, f"Deleted job: {job.name}")
    return True


def short_error(e: BaseException) -> str:
    msg = str(e)
    return msg if len(msg) <= MAX_ERROR_MESSAGE else msg[: MAX_ERROR_MESSAGE - 3] + "..."
