"""Event-handler policy: which informer events concern which TFJob, and how urgently.

The machinery calls these handlers for every event of the three informers. They do the
only things a handler may do: resolve the owning job (a controller ownerReference of our
kind and API version), lower the expectations the reconciler raised (reconcile.keys), and
put the job's key on the queue. Never I/O, never a mutation of the cached objects.

Urgency: a change that can decide something (a pod ending, a deletion, a restart in
place, any job change) enqueues the job at once. A pod that merely progresses (Pending to
Running, readiness) enqueues it after ``PROGRESS_BATCH_SECONDS``: the queue keeps the
earliest pending time, so the pods of one job that start together cost one pass and one
status write, and anything decisive meanwhile still goes first.
"""

from __future__ import annotations

from collections.abc import Callable

from controller.types import JSON, EventHandler, Expectations, KeyQueue, controller_ref, object_key
from reconcile.keys import pods_key, services_key
from reconcile.metrics import JobMetrics
from reconcile.names import API_VERSION, KIND
from reconcile.pods import LIVE_PHASES, is_terminating, phase_of, restart_count

#: How long a progress-only pod change may wait for others of the same job.
PROGRESS_BATCH_SECONDS = 0.1


def owner_job_key(obj: JSON) -> str | None:
    """The TFJob key of a pod or service whose controller is a TFJob."""
    ref = controller_ref(obj)
    if not ref or ref.get("kind") != KIND or ref.get("apiVersion") != API_VERSION:
        return None
    return object_key(obj["metadata"].get("namespace"), ref["name"])


def is_progress_only(old: JSON, new: JSON) -> bool:
    """A pod change that can only move replica counts and the Running condition."""
    return (
        not is_terminating(new)
        and phase_of(new) in LIVE_PHASES
        and restart_count(new) == restart_count(old)
    )


def _child_handler(
    exp_key: Callable[[str], str], expectations: Expectations, queue: KeyQueue, *, batch: bool
) -> EventHandler:
    def on_add(obj: JSON) -> None:
        key = owner_job_key(obj)
        if key:
            expectations.creation_observed(exp_key(key))
            queue.add(key)

    def on_update(old: JSON, new: JSON) -> None:
        key = owner_job_key(new)
        if not key:
            return
        if is_terminating(new) and not is_terminating(old):
            # A deletion in progress counts as observed once; the final delete, keyed by
            # UID, then finds nothing left to lower.
            expectations.deletion_observed(exp_key(key), new["metadata"]["uid"])
        if batch and is_progress_only(old, new):
            queue.add_after(key, PROGRESS_BATCH_SECONDS)
        else:
            queue.add(key)

    def on_delete(obj: JSON) -> None:
        key = owner_job_key(obj)
        if key:
            expectations.deletion_observed(exp_key(key), obj["metadata"]["uid"])
            queue.add(key)

    return EventHandler(on_add=on_add, on_update=on_update, on_delete=on_delete)


def pod_handler(expectations: Expectations, queue: KeyQueue) -> EventHandler:
    return _child_handler(pods_key, expectations, queue, batch=True)


def service_handler(expectations: Expectations, queue: KeyQueue) -> EventHandler:
    return _child_handler(services_key, expectations, queue, batch=False)


def job_handler(expectations: Expectations, queue: KeyQueue, metrics: JobMetrics) -> EventHandler:
    def on_add(obj: JSON) -> None:
        key = object_key(obj["metadata"].get("namespace"), obj["metadata"]["name"])
        expectations.observe_resource_version(key, obj["metadata"].get("resourceVersion", ""))
        metrics.job_seen(obj)
        queue.add(key)

    def on_update(old: JSON, new: JSON) -> None:
        key = object_key(new["metadata"].get("namespace"), new["metadata"]["name"])
        expectations.observe_resource_version(key, new["metadata"].get("resourceVersion", ""))
        queue.add(key)

    def on_delete(obj: JSON) -> None:
        queue.add(object_key(obj["metadata"].get("namespace"), obj["metadata"]["name"]))

    return EventHandler(on_add=on_add, on_update=on_update, on_delete=on_delete)
