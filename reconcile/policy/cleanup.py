"""What a finished job leaves behind: cleanPodPolicy (reconcile.policy.clean_pod_policy)
and ttlSecondsAfterFinished (reconcile.policy.ttl_after_finished), applied together
(docs/semantics.md#run-policies).

Both apply from the pass that finishes the job on, and they are all that ever happens to
a finished job: its status is frozen at the moment it finished and no pod is created for
it again (the durable terminal record), whatever happens to its pods afterwards. A
failed job's active pods, which it stops even under cleanPodPolicy None, are stopped by
the pass after the one that fails the job, once the Failed status is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from controller.types import JSON
from reconcile.api.models import RunPolicy
from reconcile.api.status_types import JobStatus
from reconcile.objects.observed import ObservedPod
from reconcile.policy import conditions as cond
from reconcile.policy.clean_pod_policy import cleanup_deletions, effective_policy
from reconcile.policy.ttl_after_finished import finished_at, ttl_remaining


@dataclass(frozen=True)
class Cleanup:
    delete_pods: list[ObservedPod] = field(default_factory=list)
    delete_services: list[JSON] = field(default_factory=list)
    requeue_after: float | None = None  # the TTL's timer
    delete_job: bool = False  # the TTL has expired

    @property
    def idle(self) -> bool:
        return not (self.delete_pods or self.delete_services or self.delete_job)


def finished_cleanup(
    policy: RunPolicy,
    status: JobStatus,
    pods: Sequence[ObservedPod],
    services: Sequence[JSON],
    now: datetime,
) -> Cleanup:
    """A job already finished: delete per cleanPodPolicy; delete the job once its TTL is up."""
    failed = cond.is_true(status.conditions, cond.FAILED)
    clean = effective_policy(policy.clean_pod_policy, failed)
    del_pods, del_svcs = cleanup_deletions(clean, pods, services)
    remaining = ttl_remaining(policy, finished_at(status), now)
    expired = remaining is not None and remaining <= 0
    return Cleanup(
        delete_pods=del_pods,
        delete_services=del_svcs,
        requeue_after=None if expired else remaining,
        delete_job=expired,
    )


def finishing_cleanup(
    policy: RunPolicy,
    pods: Sequence[ObservedPod],
    services: Sequence[JSON],
    finished: datetime,
    now: datetime,
) -> Cleanup:
    """The pass that finishes the job: delete per cleanPodPolicy and start the TTL clock.
    A failed job's active pods under None wait for the next pass (finished_cleanup): its
    Failed status must be stored before any pod of it goes."""
    del_pods, del_svcs = cleanup_deletions(policy.clean_pod_policy, pods, services)
    return Cleanup(
        delete_pods=del_pods,
        delete_services=del_svcs,
        requeue_after=ttl_remaining(policy, finished, now),
    )
