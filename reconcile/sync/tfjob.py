"""The TFJob reconciler: one pass over one job, in a fixed order.

1. Read the job from the cache. Gone: let its pods go, then forget it
   (reconcile.sync.memory holds everything remembered of a job between passes).
2. Creates handed off for a job that has changed since (replaced, spec edited, being
   deleted) are dropped: they must not go out.
3. Its own writes not all observed yet (expectations, creates still in the background,
   a status write in flight): the pass stops here and reports progress only
   (``_while_creating``: replica counts and Running, paced; no child writes). Acting on
   a view that lacks our own writes would create a pod twice or undo a status.
4. Pods an earlier job of this name left tracked are let go first.
5. Owned pods and services from the cache indexes; the job read once
   (reconcile.api.spec); the plan, pure (reconcile.plan).
6. Apply it: the PodGroup, deletes and releases in the pass, creates handed to the
   background (reconcile.sync.child_writes); the job deleted if its TTL ran out.
7. The status written once, only if it changed; progress alone is paced
   (reconcile.sync.status_writes, reconcile.sync.pacing).
8. The events of this pass's transitions, once the status recording them is stored;
   requeue when a timer is due.

Creates do not hold a worker: a pass raises the creation expectations and hands its
creates to the ``Spawner`` (the machinery's background work), then goes on to the status
write. The expectations keep the job's next pass at step 3 until every create is
observed (or has failed), so nothing is created twice; a create that fails lowers its
expectation, records FailedCreate and raises, and the machinery requeues the job with
the workqueue's backoff. Deletes stay in the pass: restart accounting relies on "record
the end, then delete" (see reconcile.policy.restart).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial

import anyio.to_thread
import structlog

from controller.types import (
    CONTROLLER_NAME_INDEX,
    CONTROLLER_UID_INDEX,
    JSON,
    NAMESPACE_INDEX,
    Clock,
    EventSink,
    Expectations,
    Pacer,
    Result,
    SlotGate,
    Spawner,
    owned_by,
    split_key,
)
from reconcile.api.spec import JobView, SpecCache
from reconcile.api.watch import StragglerAction
from reconcile.objects.observed import ObservedPod, by_uid, observe_all
from reconcile.plan import Plan, PlanConfig, Snapshot, compute_plan
from reconcile.policy import conditions as cond
from reconcile.policy.failures import CreateFailures
from reconcile.policy.gang import priority_class_of
from reconcile.policy.tracking import strays
from reconcile.sync.child_writes import MAX_JOB_BACKLOG, ChildWrites
from reconcile.sync.keys import (
    expectation_keys,
    own_writes_observed,
    podgroups_key,
    pods_key,
    releases_key,
    services_key,
)
from reconcile.sync.memory import JobMemory
from reconcile.sync.metrics import JobMetrics
from reconcile.sync.ports import Caches, Writers
from reconcile.sync.progress import ProgressIntake
from reconcile.sync.status_writes import StatusWrites
from reconcile.sync.writes import WriteTally, delete_job, write_podgroup, write_status

#: How long to wait before looking again at a job whose writes are not yet observed.
#: The observing informer event re-enqueues the key sooner; this is the safety net. A job
#: whose creates still wait in the background sets none: the spawner looks at it again
#: this long after the last of them ends (controller.types.Spawner), and before that its
#: passes could only find it still waiting. At 20 QPS the last job of a burst of 200
#: waits there for minutes, and a timer every 5 s was a third of all passes.
UNSATISFIED_RECHECK_SECONDS = 5.0
#: A job with more pods, services and replicas than this is planned on a worker thread:
#: planning is pure Python at ~50-100 us an object, and on the event loop a 1,000-replica
#: job would hold every other job, the probes and the lease renewal for 100+ ms a pass.
#: Off the loop it takes the GIL in turns (every 5 ms), so the loop keeps running.
PLAN_OFF_LOOP_OBJECTS = 200
#: How soon a job whose creates found the background backlog full looks again if the
#: spawner has not put it back (``Spawner.wait_for_room`` does, as the backlog drains):
#: only a safety net.
BACKLOG_RECHECK_SECONDS = 300.0
#: How long a job's creates may keep failing permanently before the job fails.
DEFAULT_FAILED_CREATE_GRACE = 120.0


class TFJobReconciler:
    def __init__(
        self,
        *,
        caches: Caches,
        writers: Writers,
        expectations: Expectations,
        events: EventSink,
        clock: Clock,
        spawner: Spawner,
        pacer: Pacer,
        training_pacer: Pacer | None = None,
        training_gate: SlotGate | None = None,
        progress: ProgressIntake | None = None,
        config: PlanConfig | None = None,
        metrics: JobMetrics | None = None,
        max_concurrent_writes: int = 64,
        failed_create_grace: float = DEFAULT_FAILED_CREATE_GRACE,
    ) -> None:
        self.caches = caches
        self.writers = writers
        self.expectations = expectations
        self.events = events
        self.clock = clock
        self.config = config or PlanConfig()
        self.metrics = metrics
        self.spawner = spawner
        #: everything remembered of a job between passes (reconcile.sync.memory); the
        #: pacer paces progress-only status writes (reconcile.sync.pacing)
        self.memory = JobMemory(
            specs=SpecCache(),
            failures=CreateFailures(clock, grace_seconds=failed_create_grace),
            pacer=pacer,
            training_pacer=training_pacer,
            training_gate=training_gate,
            progress=progress,
        )
        self.statuses = StatusWrites(
            jobs=writers.jobs,
            expectations=expectations,
            events=events,
            spawner=spawner,
            memory=self.memory,
            metrics=metrics,
        )
        self._children = ChildWrites(
            pods=writers.pods,
            services=writers.services,
            expectations=expectations,
            events=events,
            spawner=spawner,
            failures=self.memory.failures,
            clock=clock,
            max_concurrent=max_concurrent_writes,
            releases=writers.releases,
        )

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        # 1. Read from the cache; a job that is gone takes its expectations with it.
        raw = self.caches.jobs.get(namespace, name)
        if raw is None:
            return await self._gone(key)
        rec = self.memory.peek(key)
        planned_for = rec.planned_for if rec is not None else None
        if self.spawner.backlog(key) and planned_for != _planned(raw):
            # Creates planned for a job that is no longer this one (replaced, its spec
            # changed, being deleted: a suspend is a spec change) must not go out:
            # a suspended job would get pods again, and a deleted one's would hold
            # everyone else's back. The plan below is made afresh.
            structlog.contextvars.bind_contextvars(creates_dropped=self.spawner.drop(key))
        # 2. Don't act on a stale view of our own writes: every create/delete we issued
        #    and the job's last status write must be visible in the caches first, or the
        #    plan would create a pod that already exists or undo a status just written.
        #    Creates still queued in the background count as not yet observed however
        #    long they wait, whatever the expectations' TTL says. Progress alone may
        #    still be reported meanwhile.
        if self.spawner.backlog(key) or not own_writes_observed(self.expectations, key):
            return await self._while_creating(key, raw)
        if rec is not None:
            rec.reported = None
        # 3. Pods an earlier job of this name left tracked go first: their names are the
        #    ones this job's pods will take.
        uid = raw["metadata"]["uid"]
        stray = self._strays(key, uid)
        if stray:
            return await self._release_strays(key, stray)
        # 4. Owned children, from the cache indexes.
        owner = owned_by(namespace, uid)
        pods = self.caches.pods.by_index(CONTROLLER_UID_INDEX, owner)
        services = self.caches.services.by_index(CONTROLLER_UID_INDEX, owner)
        # 5. The job read once, and the plan: pure. A job being deleted is the garbage
        #    collector's: the plan only lets its pods go.
        view, plan = await self._plan(key, raw, pods, services)
        if plan.skip_reason:
            structlog.contextvars.bind_contextvars(outcome=plan.skip_reason)
        if plan.ends:
            structlog.contextvars.bind_contextvars(ends=plan.ends)
        # 6. Apply it: deletes and releases in the pass, creates handed to the background.
        outcome = WriteTally()
        if plan.podgroup is not None and self.writers.podgroups is not None:
            structlog.contextvars.bind_contextvars(podgroup=plan.podgroup.verb)
            await write_podgroup(
                self.writers.podgroups,
                self.expectations,
                self.events,
                key,
                view,
                plan.podgroup,
                outcome,
            )
        await self._children.apply(key, view, plan, outcome)
        if outcome.handed_off:
            self.memory.record(key).planned_for = _planned(raw)
        if plan.delete_job:
            deleted = await delete_job(self.writers.jobs, self.events, view, outcome)
            if deleted and self.metrics is not None:
                self.metrics.transition(raw, cond.REASON_DELETED_JOB)
            return _done("ttl-deleted")
        # 7. Write status once, only if it changed (progress alone is paced).
        requeue_after = await self.statuses.write(key, view, plan, outcome)
        # 8. Events of this pass's transitions, only once the status that records them
        #    is stored (a failed write retries the pass, which would repeat them, and a
        #    paced one is made by a later pass); a write handed to the background
        #    announces them itself.
        if not outcome.status_handed_off and (plan.status is None or outcome.status_written):
            # a status paced for later announces nothing now: its pass comes again
            self.statuses.announce(view, plan)
        structlog.contextvars.bind_contextvars(
            created=outcome.created,
            creates_handed_off=outcome.handed_off,
            deleted=outcome.deleted,
            released=outcome.released,
            status_written=outcome.status_written,
        )
        if outcome.errors:
            # The first write error decides the retry; the rest were logged.
            raise outcome.errors[0]
        if outcome.status_handed_off:
            structlog.contextvars.bind_contextvars(status_handed_off=True)
        if outcome.deferred:
            structlog.contextvars.bind_contextvars(creates_deferred=outcome.deferred)
        if outcome.deferred and not outcome.handed_off:
            # The backlog is full of other jobs' creates: look again once it has room.
            self.spawner.wait_for_room(key, min(outcome.deferred, MAX_JOB_BACKLOG))
            requeue_after = min(requeue_after or BACKLOG_RECHECK_SECONDS, BACKLOG_RECHECK_SECONDS)
        return Result(requeue_after=requeue_after)

    async def _plan(
        self, key: str, raw: JSON, pods: list[JSON], services: list[JSON], status_only: bool = False
    ) -> tuple[JobView, Plan]:
        namespace, name = split_key(key)
        view = self.memory.specs.read(key, raw)
        snap = Snapshot(
            view,
            (),  # read into views by _plan_of, in the thread when the job is large
            services,
            self.clock.now(),
            failure=self.memory.failures.persistent(key, raw["metadata"]["uid"]),
            podgroup=self.caches.podgroups.get(namespace, name) if self.caches.podgroups else None,
            priorities=self._priorities(view),
            training=self.memory.progress.records(key) if self.memory.progress else (),
            unheard=self.memory.progress.unheard_at if self.memory.progress else None,
            nodes=self._nodes(view),
        )
        rec = self.memory.record(key)
        plan = partial(_plan_of, snap, pods, self.config, status_only, rec.observed)
        if len(pods) + len(services) + _replicas(view) > PLAN_OFF_LOOP_OBJECTS:
            # the snapshot is the thread's alone: fresh lists, cached dicts never mutated
            planned, observed = await anyio.to_thread.run_sync(plan)
        else:
            planned, observed = plan()
        rec.observed = by_uid(observed)
        return view, planned

    async def _while_creating(self, key: str, raw: JSON) -> Result:
        """A job whose own creates (or deletes) are not all seen yet may not plan: it
        would make again what is on its way. It may still report progress: pods of it
        that are running now are counted as they are, and nothing but replica counts and
        the Running condition is written (any other change waits for the full pass). At
        20 QPS a job's 16 creates take most of a second, and its first pods run well
        before the last is made. Only once its own last status write is seen (the plan
        starts from it) and none is in flight, which a conflict would lose."""
        recheck = None if self.spawner.backlog(key) else UNSATISFIED_RECHECK_SECONDS
        waiting = Result(requeue_after=recheck)
        rec = self.memory.record(key)
        if rec.status_in_flight or not all(
            self.expectations.satisfied(k) for k in (key, releases_key(key), podgroups_key(key))
        ):
            return _done("awaiting-expectations", recheck)
        structlog.contextvars.bind_contextvars(outcome="awaiting-expectations")
        owner = owned_by(split_key(key)[0], raw["metadata"]["uid"])
        pods = self.caches.pods.by_index(CONTROLLER_UID_INDEX, owner)
        # Progress is a function of the pods and the spec: the same ones as at the last
        # report (its write now seen, or nothing to report then) give the same report.
        # Most passes here come from our own status write being seen.
        inputs = (raw["metadata"].get("generation"), *sorted(_versions(pods)))
        if rec.reported == inputs:
            structlog.contextvars.bind_contextvars(progress="unchanged")
            return waiting
        # Paced before it is planned: all this pass could do is write, and the pass the
        # pace brings back plans from what it finds then.
        wait = self.memory.pacer.delay(key)
        if wait > 0:
            structlog.contextvars.bind_contextvars(status_paced=round(wait, 3))
            return Result(requeue_after=wait)
        services = self.caches.services.by_index(CONTROLLER_UID_INDEX, owner)
        view, plan = await self._plan(key, raw, pods, services, status_only=True)
        if plan.status is None or not plan.progress or plan.skip_reason:
            rec.reported = inputs
            return waiting
        await write_status(self.writers.jobs, self.expectations, key, view, plan.status)
        rec.reported = inputs
        self.memory.pacer.mark(key)
        self.statuses.announce(view, plan)
        structlog.contextvars.bind_contextvars(status_written=True)
        return waiting

    def _nodes(self, view: JobView) -> list[JSON] | None:
        """The cluster's nodes, for a job whose stragglers may be moved (a move needs
        somewhere to go: reconcile.progress.moves); None for any other job, or when no
        node cache runs."""
        cache = self.caches.nodes
        if cache is None or view.watch.straggler_action is not StragglerAction.MOVE:
            return None
        return cache.by_index(NAMESPACE_INDEX, "")  # cluster-scoped: all under ""

    def _priorities(self, view: JobView) -> dict[str, int]:
        """The values of the PriorityClasses the job's templates name (gang scheduling
        orders replica types by them); a missing one counts as 0."""
        cache = self.caches.priorityclasses
        job = view.tfjob
        if cache is None or job is None:
            return {}
        out: dict[str, int] = {}
        for spec in job.replica_specs.values():
            name = priority_class_of(spec.template)
            pc = cache.get("", name) if name else None  # cluster-scoped: no namespace
            if pc is not None and isinstance(pc.get("value"), int):
                out[name] = pc["value"]
        return out

    async def _gone(self, key: str) -> Result:
        """The job is gone: forget it, once no pod of it still carries our finalizer
        (deleted while the controller was down, or just now: the garbage collector is
        deleting its pods, and they cannot go until they are let go)."""
        dropped = self.spawner.drop(key)  # its creates would only be garbage-collected
        if dropped:
            structlog.contextvars.bind_contextvars(creates_dropped=dropped)
        stray = self._strays(key, None)
        if stray:
            return await self._release_strays(key, stray, outcome="gone")
        for k in expectation_keys(key):
            self.expectations.delete(k)
        self.memory.forget(key)
        return _done("gone")

    def _strays(self, key: str, uid: str | None) -> list[JSON]:
        """Tracked pods of this name whose TFJob is not the one with ``uid``."""
        named = self.caches.pods.by_index(CONTROLLER_NAME_INDEX, key)
        return strays(named, uid)

    async def _release_strays(
        self, key: str, stray: list[JSON], *, outcome: str = "releasing-strays"
    ) -> Result:
        if not self.expectations.satisfied(releases_key(key)):
            return _done("awaiting-expectations", UNSATISFIED_RECHECK_SECONDS)
        done = WriteTally()
        await self._children.release(key, stray, done)
        structlog.contextvars.bind_contextvars(outcome=outcome, released=done.released)
        if done.errors:
            raise done.errors[0]
        return Result()


def _planned(raw: JSON) -> tuple[object, ...]:
    """What a job's creates are planned for: this job (UID), this spec (generation),
    and a job not being deleted."""
    meta = raw["metadata"]
    return meta.get("uid"), meta.get("generation"), bool(meta.get("deletionTimestamp"))


def _versions(pods: list[JSON]) -> list[str]:
    return [p["metadata"].get("resourceVersion", "") for p in pods]


def _plan_of(
    snap: Snapshot,
    pods: list[JSON],
    config: PlanConfig,
    status_only: bool,
    known: Mapping[str, ObservedPod] | None,
) -> tuple[Plan, tuple[ObservedPod, ...]]:
    """The plan of ``snap`` with ``pods`` in it, each read once, or not at all if its view
    in ``known`` is still current (reconcile.objects.observed); and the pods as read."""
    observed = observe_all(pods, known)
    plan = compute_plan(replace(snap, pods=observed), config, status_only=status_only)
    return plan, observed


def _replicas(view: JobView) -> int:
    job = view.tfjob or view.spec.tolerated
    return sum(s.count for s in job.replica_specs.values()) if job is not None else 0


def _done(outcome: str, requeue_after: float | None = None) -> Result:
    structlog.contextvars.bind_contextvars(outcome=outcome)
    return Result(requeue_after=requeue_after)


__all__ = ["Caches", "TFJobReconciler", "Writers", "pods_key", "services_key"]
