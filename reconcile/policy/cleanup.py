"""What a finished job leaves behind: cleanPodPolicy and ttlSecondsAfterFinished
(docs/semantics.md#run-policies).

Both apply from the pass that finishes the job on, and they are all that ever happens to
a finished job: its status is frozen at the moment it finished and no pod is created for
it again (the durable terminal record), whatever happens to its pods afterwards. The TTL
never deletes the job in the pass that finishes it: that pass's status and events are
stored first, and a later pass (a timer) deletes it.

A *failed* job stops its pods that are still active (Pending or Running) even under
cleanPodPolicy None, as the Kubernetes Job controller does for a failed Job. Upstream
keeps them: an OnFailure pod whose container keeps failing is then restarted by its
kubelet forever, holding its node's GPUs for a job that will never use them. Pods that
have finished are kept, with their services, so their logs stay readable; a succeeded
job keeps upstream's None (its parameter servers are left as they are). The stopping is
done by the pass after the one that fails the job, once the Failed status is stored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from controller.types import JSON
from reconcile.api.models import RunPolicy
from reconcile.api.names import CleanPodPolicy
from reconcile.api.status_types import JobStatus, elapsed_due
from reconcile.objects.observed import ObservedPod
from reconcile.objects.pods import LIVE_PHASES, is_terminating, name_of
from reconcile.policy import conditions as cond


@dataclass(frozen=True)
class Cleanup:
    delete_pods: list[ObservedPod] = field(default_factory=list)
    delete_services: list[JSON] = field(default_factory=list)
    requeue_after: float | None = None  # the TTL's timer
    delete_job: bool = False  # the TTL has expired

    @property
    def idle(self) -> bool:
        return not (self.delete_pods or self.delete_services or self.delete_job)


def effective_policy(policy: str | None, failed: bool) -> str | None:
    """cleanPodPolicy as applied: None on a failed job stops its active pods (Running)."""
    if failed and policy not in (CleanPodPolicy.ALL, CleanPodPolicy.RUNNING):
        return CleanPodPolicy.RUNNING
    return policy


def cleanup_deletions(
    policy: str | None, pods: Sequence[ObservedPod], services: Sequence[JSON]
) -> tuple[list[ObservedPod], list[JSON]]:
    """What cleanPodPolicy removes, pods and their services together.

    Unlike upstream, services are matched to what is *kept*, not to what is deleted in this
    pass: a service whose pod is already gone (or on its way out) is removed too, so a
    failed service delete or a pod removed by someone else leaves nothing behind (#1191).
    """
    if policy == CleanPodPolicy.ALL:
        return (
            [p for p in pods if not p.terminating],
            [s for s in services if not is_terminating(s)],
        )
    if policy != CleanPodPolicy.RUNNING:
        return [], []
    live = [p for p in pods if not p.terminating]
    kept = {p.name for p in live if p.phase not in LIVE_PHASES}
    del_pods = [p for p in live if p.phase in LIVE_PHASES]
    del_svcs = [s for s in services if not is_terminating(s) and name_of(s) not in kept]
    return del_pods, del_svcs


def ttl_remaining(policy: RunPolicy, finished: datetime | None, now: datetime) -> float | None:
    """Seconds until the TTL deletes a job that finished at ``finished`` (≤ 0: now), or None
    when it has no TTL."""
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
