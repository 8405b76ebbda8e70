"""runPolicy.activeDeadlineSeconds: how long the job may be active.

The clock runs from the job's start (or its last resume: a suspended job's time does
not count), in whole seconds as startTime is stored, so the deadline is never early.
"""

from __future__ import annotations

from datetime import datetime

from reconcile.api.models import TFJob
from reconcile.api.status_types import elapsed_due


def remaining(job: TFJob, start_time: datetime, now: datetime) -> float | None:
    """Seconds until the deadline (<= 0: it has passed), or None when there is none."""
    policy = job.spec.run_policy
    deadline = policy.active_deadline_seconds if policy is not None else None
    if deadline is None:
        return None
    return (elapsed_due(start_time, deadline) - now).total_seconds()
