"""Event-handler policy: which informer events concern which TFJob, and how urgently.

The machinery calls these handlers for every event of the three informers. They do the
only things a handler may do: resolve the owning job (a controller ownerReference of our
kind and API version), lower the expectations the reconciler raised (reconcile.sync.keys), and
put the job's key on the queue. Never I/O, never a mutation of the cached objects.

Urgency (reconcile.sync.pacing): a change that can decide something (a pod ending, a
deletion, a restart in place, a change of the job's spec or metadata) enqueues the job at
once; a child appearing or a pod progressing enqueues it ``PROGRESS_BATCH_SECONDS``
later, and a job update that changed only its status (usually our own write) one
``STATUS_PACE_SECONDS`` later, unless it is the write a gated pass was waiting to see.

At start-up (the informers' first list), a job whose own object says it runs, is
suspended or has finished goes to the queue's low lane, and so does every child found:
a new leader's first passes go to the jobs that wait for it (never started, restarting,
being deleted, a suspend or resume not yet acted on), not to the thousands that run.

Not at all, while the job's own writes are not all observed: a child appearing that
leaves it still waiting, or a pod that stays unstarted (scheduled, say). The job's next
pass could then only report progress (reconcile.sync.tfjob ``_while_creating``), and an
unstarted pod is no progress; the event that observes the last of its writes enqueues
it. At 20 QPS a job's creates are spread over the whole burst, so each of its children
would otherwise cost a pass.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.types import JSON, EventHandler, Expectations, KeyQueue, object_key
from reconcile.objects.pods import (
    LIVE_PHASES,
    PodPhase,
    has_condition,
    is_terminating,
    is_tracked,
    phase_of,
    restart_count,
    tfjob_owner,
)
from reconcile.policy.conditions import FAILED, RUNNING, SUCCEEDED, SUSPENDED
from reconcile.sync.keys import (
    own_writes_observed,
    podgroups_key,
    pods_key,
    releases_key,
    services_key,
)
from reconcile.sync.metrics import JobMetrics
from reconcile.sync.pacing import PROGRESS_BATCH_SECONDS, STATUS_PACE_SECONDS


def owner_job_key(obj: JSON) -> str | None:
    """The TFJob key of a pod or service whose controller is a TFJob."""
    ref = tfjob_owner(obj)
    return object_key(obj["metadata"].get("namespace"), ref["name"]) if ref else None


def is_progress_only(old: JSON, new: JSON) -> bool:
    """A pod change that can only move replica counts and the Running condition."""
    return (
        not is_terminating(new)
        and phase_of(new) in LIVE_PHASES
        and restart_count(new) == restart_count(old)
    )


def is_status_only(old: JSON, new: JSON) -> bool:
    """A job update that changed nothing but its status (and the bookkeeping that comes
    with any write)."""

    def rest(obj: JSON) -> JSON:
        meta = {
            k: v
            for k, v in (obj.get("metadata") or {}).items()
            if k not in ("resourceVersion", "managedFields")
        }
        return {**{k: v for k, v in obj.items() if k != "status"}, "metadata": meta}

    return rest(old) == rest(new)


def looks_settled(job: JSON) -> bool:
    """What a job's own object says of it at start-up: running, suspended or finished,
    with nothing asked of it since (no deletion, no suspend or resume pending). Only a
    ranking: such a job still gets its pass, after the others."""
    if job["metadata"].get("deletionTimestamp"):
        return False
    if has_condition(job, SUCCEEDED) or has_condition(job, FAILED):
        return True
    suspend = ((job.get("spec") or {}).get("runPolicy") or {}).get("suspend") is True
    if suspend or has_condition(job, SUSPENDED):
        return suspend and has_condition(job, SUSPENDED)
    # Running and Restarting replace each other (reconcile.policy.conditions)
    return has_condition(job, RUNNING)


def is_unstarted(pod: JSON) -> bool:
    """A pod nothing has happened to yet that a job's status counts: no phase past
    Pending, not being deleted, no container restarted."""
    return phase_of(pod) == PodPhase.PENDING and not is_terminating(pod) and not restart_count(pod)


def _child_handler(
    exp_key: Callable[[str], str], expectations: Expectations, queue: KeyQueue, *, pods: bool
) -> EventHandler:
    def on_add(obj: JSON) -> None:
        key = owner_job_key(obj)
        if key:
            expectations.creation_observed(exp_key(key))
            if (not pods or is_unstarted(obj)) and not own_writes_observed(expectations, key):
                return
            queue.add_after(key, PROGRESS_BATCH_SECONDS)

    def on_update(old: JSON, new: JSON) -> None:
        key = owner_job_key(new)
        if not key:
            return
        if is_terminating(new) and not is_terminating(old):
            # A deletion in progress counts as observed once; the final delete, keyed by
            # UID, then finds nothing left to lower.
            expectations.deletion_observed(exp_key(key), new["metadata"]["uid"])
        if pods and is_tracked(old) and not is_tracked(new):
            expectations.deletion_observed(releases_key(key), new["metadata"]["uid"])
        unstarted = pods and is_unstarted(old) and is_unstarted(new)
        if unstarted and not own_writes_observed(expectations, key):
            return
        if pods and is_progress_only(old, new):
            queue.add_after(key, PROGRESS_BATCH_SECONDS)
        else:
            queue.add(key)

    def on_delete(obj: JSON) -> None:
        key = owner_job_key(obj)
        if key:
            expectations.deletion_observed(exp_key(key), obj["metadata"]["uid"])
            if pods:
                expectations.deletion_observed(releases_key(key), obj["metadata"]["uid"])
            queue.add(key)

    def on_initial_add(obj: JSON) -> None:
        # a child found at start-up: its job gets a pass anyway, ranked by the job's own
        # object (job_handler); only the expectations need the child
        key = owner_job_key(obj)
        if key:
            expectations.creation_observed(exp_key(key))
            queue.add_low(key)

    return EventHandler(
        on_add=on_add, on_initial_add=on_initial_add, on_update=on_update, on_delete=on_delete
    )


def pod_handler(expectations: Expectations, queue: KeyQueue) -> EventHandler:
    return _child_handler(pods_key, expectations, queue, pods=True)


def service_handler(expectations: Expectations, queue: KeyQueue) -> EventHandler:
    return _child_handler(services_key, expectations, queue, pods=False)


def podgroup_handler(expectations: Expectations, queue: KeyQueue) -> EventHandler:
    """A PodGroup's events bring its job back: its creation, a phase the scheduler set
    (Volcano admits a waiting gang), its deletion."""
    return _child_handler(podgroups_key, expectations, queue, pods=False)


def job_handler(
    expectations: Expectations,
    queue: KeyQueue,
    metrics: JobMetrics,
    *,
    pace: float = STATUS_PACE_SECONDS,
) -> EventHandler:
    def seen(obj: JSON) -> str:
        key = object_key(obj["metadata"].get("namespace"), obj["metadata"]["name"])
        expectations.observe_resource_version(key, obj["metadata"].get("resourceVersion", ""))
        metrics.job_seen(obj)
        return key

    def on_add(obj: JSON) -> None:
        queue.add(seen(obj))

    def on_initial_add(obj: JSON) -> None:
        key = seen(obj)
        if looks_settled(obj):
            queue.add_low(key)
        else:
            queue.add(key)

    def on_update(old: JSON, new: JSON) -> None:
        key = object_key(new["metadata"].get("namespace"), new["metadata"]["name"])
        awaited = not expectations.satisfied(key)
        expectations.observe_resource_version(key, new["metadata"].get("resourceVersion", ""))
        if is_status_only(old, new) and not (awaited and expectations.satisfied(key)):
            # Most likely our own status write: the pass that wrote it is done, and an
            # immediate pass would only write the progress since, one write per pod.
            queue.add_after(key, pace)
        else:
            # A change of the job itself, or the write a gated pass was waiting to see.
            queue.add(key)

    def on_delete(obj: JSON) -> None:
        queue.add(object_key(obj["metadata"].get("namespace"), obj["metadata"]["name"]))

    return EventHandler(
        on_add=on_add, on_initial_add=on_initial_add, on_update=on_update, on_delete=on_delete
    )
