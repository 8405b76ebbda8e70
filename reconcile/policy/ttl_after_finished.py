"""runPolicy.ttlSecondsAfterFinished: when a finished job is deleted.

The clock starts when the job finished (completionTime, else the finishing condition's
transition), in whole seconds as those are stored. The TTL never deletes the job in the
pass that finishes it: that pass's status and events are stored first, and a later pass
(a timer) deletes it.
"""

from __future__ import annotations

from datetime import datetime

from reconcile.api.models import RunPolicy
from reconcile.api.status_types import JobStatus, elapsed_due
from reconcile.policy import conditions as cond


def ttl_remaining(policy: RunPolicy, finished: datetime | None, now: datetime) -> float | None:
    """Seconds until the TTL deletes a job that finished at ``finished`` (<= 0: now), or
    None when it has no TTL."""
    ttl = policy.ttl_seconds_after_finished
    if ttl is None or finished is None:
        return None
    return (elapsed_due(finished, max(ttl, 0)) - now).total_seconds()


def finished_at(status: JobStatus) -> datetime | None:
    """When the job finished: completionTime, else the finishing condition's transition."""
    if status.completion_time is not None:
        return status.completion_time
    for cond_type in (cond.SUCCEEDED, cond.FAILED):
        found = cond.find(status.conditions, cond_type)
        if found is not None and found.status == cond.TRUE:
            return found.last_transition_time
    return None
