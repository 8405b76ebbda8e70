"""A plan's child writes: pod and service creates (handed to the background at the
client's rate limit), deletes and tracking-finalizer releases (in the pass, concurrently
up to a bound), under the rules in reconcile.sync.writes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

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
)
from reconcile.api.names import TRACKING_FINALIZER
from reconcile.api.spec import JobView
from reconcile.plan import Plan
from reconcile.policy import conditions as cond
from reconcile.policy.failures import CreateFailures
from reconcile.policy.tracking import PATCH_TYPE, release_patch
from reconcile.sync.claims import NameHeld, Ours, claim, controlled_by
from reconcile.sync.keys import pods_key, releases_key, services_key
from reconcile.sync.writes import WriteTally, short_error

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
#: Tracking-finalizer removals sent together (pipelined on one connection), at most.
#: Each waits for its token before the batch goes, so a batch is at most a second's
#: worth at 20 QPS.
RELEASE_BATCH = 20


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
        releases: ObjectWriter | None = None,
    ) -> None:
        self._pods = pods
        self._releases = releases or pods
        self._services = services
        self._expectations = expectations
        self._events = events
        self._spawner = spawner
        self._failures = failures
        self._max_concurrent = max_concurrent
        self._clock = clock
        #: namespaces being deleted, and until when no create is sent there
        self._terminating: dict[str, float] = {}

    async def apply(self, key: str, job: JobView, plan: Plan, outcome: WriteTally) -> None:
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

    async def release(self, key: str, pods: list[JSON], outcome: WriteTally) -> None:
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
        outcome: WriteTally,
        retired: frozenset[str] = frozenset(),
    ) -> list[Callable[[], Awaitable[None]]]:
        if not pods:
            return []
        exp_key = releases_key(key)
        self._expectations.expect_deletions(exp_key, [p["metadata"]["uid"] for p in pods])
        return [
            self._releaser(exp_key, pods[i : i + RELEASE_BATCH], outcome, retired)
            for i in range(0, len(pods), RELEASE_BATCH)
        ]

    def _releaser(
        self, exp_key: str, pods: list[JSON], outcome: WriteTally, retired: frozenset[str]
    ) -> Callable[[], Awaitable[None]]:
        """Up to RELEASE_BATCH pods let go together: their patches pipelined on one
        connection (ObjectWriter.patch_many). A patch whose answer does not come fails
        the pass like any failed release, and the next pass sends it again."""

        async def release() -> None:
            items = []
            for pod in pods:
                meta = pod["metadata"]
                patch = release_patch(
                    TRACKING_FINALIZER, meta["uid"], retired=meta["uid"] in retired
                )
                items.append((meta["namespace"], meta["name"], patch))
            try:
                answers = await self._releases.patch_many(items, content_type=PATCH_TYPE)
            except Exception as e:  # none of them went out
                answers = [e] * len(pods)
            for pod, answer in zip(pods, answers, strict=True):
                self._released(exp_key, pod, answer, outcome)

        return release

    def _released(
        self, exp_key: str, pod: JSON, answer: JSON | Exception, outcome: WriteTally
    ) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        if isinstance(answer, errors.NotFound | errors.Conflict | errors.Invalid):
            # Gone, or a same-named successor (the UID precondition): nothing of ours is
            # left on it, and no event of this pod will come.
            self._expectations.deletion_observed(exp_key, uid)
            return
        if isinstance(answer, Exception):
            self._expectations.deletion_observed(exp_key, uid)
            outcome.failed_writes += 1
            pod_key = f"{meta['namespace']}/{meta['name']}"
            log.warning("release failed", pod=pod_key, error=str(answer))
            outcome.errors.append(answer)  # the pass is retried
            return
        outcome.released += 1
        if (answer.get("metadata") or {}).get("resourceVersion") == meta.get("resourceVersion"):
            # The answer is the pod as it was: ours was the last finalizer of a pod being
            # deleted, which went with it, or it had been let go already. Either way no
            # MODIFIED event will come to lower the expectation.
            self._expectations.deletion_observed(exp_key, uid)

    def _creator(
        self, key: str, job: JobView, child: _Child, body: JSON, outcome: WriteTally
    ) -> Callable[[], Awaitable[None]]:
        meta = body["metadata"]

        async def create() -> None:
            namespace = meta.get("namespace") or job.namespace
            if self._terminating.get(namespace, 0.0) > self._clock.monotonic():
                self._expectations.creation_observed(child.exp_key)
                return
            # Ours: deterministic names, so it is there already, and no create event
            # of ours will arrive for this attempt.
            try:
                created = await self._write(
                    job, child, "Create", meta["name"], outcome,
                    lambda: self._create_or_find(child, namespace, body, job.uid),
                    lambda: self._expectations.creation_observed(child.exp_key),
                    harmless=(Ours,),
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
            return await claim(
                child.writer, child.kind, namespace, body["metadata"]["name"], owner, e
            )
        except errors.Retryable as e:
            if isinstance(e, errors.TooManyRequests):
                raise  # refused before anything was done
            try:
                found = await child.writer.get(namespace, body["metadata"]["name"])
            except Exception:
                raise e from None
            if found is None or not controlled_by(found, owner):
                raise
            return found

    def _deleter(
        self, job: JobView, child: _Child, obj: JSON, outcome: WriteTally
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
        outcome: WriteTally,
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
        self, job: JobView, outcome: WriteTally, verb: str, kind: str, name: str, e: Exception
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
