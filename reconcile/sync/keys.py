"""The expectation keys of a job: one for its own status write, one per child kind, one
for the tracking finalizers it removed.

The reconciler raises expectations under these keys and the event handlers lower them,
so both sides must derive them the same way: here, and nowhere else.
"""

from __future__ import annotations

from controller.types import Expectations


def pods_key(job_key: str) -> str:
    return f"{job_key}/pods"


def services_key(job_key: str) -> str:
    return f"{job_key}/services"


def releases_key(job_key: str) -> str:
    """Tracking finalizers removed (reconcile.policy.tracking), by pod UID."""
    return f"{job_key}/releases"


def podgroups_key(job_key: str) -> str:
    """The job's PodGroup (gang scheduling), created or deleted."""
    return f"{job_key}/podgroups"


def expectation_keys(job_key: str) -> tuple[str, ...]:
    """Every expectation key of a job: the job's (read-your-writes), pods', services',
    its pods' released tracking finalizers, and its PodGroup's."""
    return (
        job_key,
        pods_key(job_key),
        services_key(job_key),
        releases_key(job_key),
        podgroups_key(job_key),
    )


def own_writes_observed(expectations: Expectations, job_key: str) -> bool:
    """Every write of the job's own (creates, deletes, releases, its status) is seen in
    the caches: its next pass may plan."""
    return all(expectations.satisfied(k) for k in expectation_keys(job_key))
