"""What one observed pod means for its index: its ``PodOutcome`` under the replica's
restart policy (pending, running, succeeded, a retried failure, a disruption, a
permanent failure, a leftover of our own delete, or terminating with its end to come).

How an end is told apart (policy.restart accounts what this decides):
- a Failed pod is a disruption when the kubelet evicted it or marked it for disruption
  (``DisruptionTarget``), or when a deletion by someone else killed it: the container's
  finish time against the DELETE's time says which came first (the kubelet's final
  grace-0 delete moves ``deletionTimestamp``: ``FINAL_DELETE_WINDOW``);
- a pod the controller deleted itself (a suspend: created before the job last resumed;
  a scale-down: marked retired) ends as a leftover, not a disruption;
- under ExitCode, exit codes 1-127 are the program's own verdict (permanent), 128 and
  up a signal (retried).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import Enum

from reconcile.api.names import RestartPolicy
from reconcile.objects.observed import ObservedPod
from reconcile.objects.pods import PodPhase


class PodOutcome(Enum):
    PENDING = "pending"  # not running yet: occupies its index
    RUNNING = "running"  # active
    SUCCEEDED = "succeeded"
    RETRY = "retry"  # failed; replace it, counting against backoffLimit
    DISRUPTED = "disrupted"  # ended by something outside the job; replace, not counted
    FAIL_NEVER = "fail-never"  # failed under restartPolicy Never: the index failed for good
    FAIL_EXIT_CODE = "fail-exit-code"  # ExitCode policy, permanent exit code
    #: terminating pod we deleted ourselves (suspend, scale-down): just wait
    LEFTOVER = "leftover"
    #: deleted by someone else but not ended yet: its end decides (a graceful delete
    #: the program survives to exit 0 is a success; a kill, or vanishing, a disruption)
    TERMINATING = "terminating"


def is_permanent_exit_code(code: int) -> bool:
    """ExitCode policy: 1-127 is the program's own verdict; 128+ means killed by a signal
    (OOM, preemption, SIGTERM), worth retrying. 0 in a Failed pod means another container
    failed, and a missing exit code means the container never ran: both retryable."""
    return 1 <= code <= 127


#: After a graceful delete, the kubelet deletes the ended pod again with grace 0, and the
#: apiserver moves deletionTimestamp to that moment: a pod killed by the deletion then
#: looks as if it ended just before it was deleted. An end this close to a grace-0
#: deletion was the deletion's doing.
FINAL_DELETE_WINDOW = timedelta(seconds=10)


def failed_before_deletion(pod: ObservedPod) -> bool:
    """A Failed pod that also carries a deletionTimestamp either failed first and was then
    deleted (by us, replacing it) or was killed by the deletion. The container finish time
    against the DELETE time tells the two apart."""
    requested, finished = pod.deletion_requested, pod.finished
    if requested is None or finished is None:
        return False
    if pod.grace_zero:
        # A force delete, or the kubelet's final one (see FINAL_DELETE_WINDOW): a pod that
        # failed on its own long before is still told apart.
        return requested - finished > FINAL_DELETE_WINDOW
    return finished < requested


def end_began(pod: ObservedPod, now: datetime) -> datetime:
    """When a pod's end began: the DELETE's request if it was deleted (a disruption starts
    there: the program hears of it then), else the container's end, else ``now``."""
    times = [t for t in (pod.deletion_requested, pod.finished) if t is not None]
    return min(times) if times else now


def deleted_by_suspend(pod: ObservedPod, resumed_at: datetime | None) -> bool:
    """A terminating pod created before the job last resumed: the suspend deleted it, and
    its end does not count. Strictly before: both times have one-second precision, and
    the controller creates pods in the very second it resumes a job, so a pod created
    in that second is one of the resumed job's (a suspend, resume and creation all in
    one second would count a suspended pod's end as a disruption: the safe side)."""
    created = pod.created
    return resumed_at is not None and created is not None and created < resumed_at


def deleted_by_us(pod: ObservedPod, resumed_at: datetime | None) -> bool:
    """A terminating pod the controller itself deleted, for a suspend or because its
    index had left the spec (a scale-down undone before the pod was gone)."""
    return pod.retired or deleted_by_suspend(pod, resumed_at)


def pod_outcome(
    pod: ObservedPod, restart_policy: str, *, resumed_at: datetime | None = None
) -> PodOutcome:
    """What one pod means for its index under the replica's restart policy."""
    phase, terminating = pod.phase, pod.terminating
    if phase == PodPhase.SUCCEEDED:
        return PodOutcome.SUCCEEDED
    if phase == PodPhase.FAILED:
        if terminating and not failed_before_deletion(pod):
            if deleted_by_us(pod, resumed_at):
                # Killed by our own delete and seen only once its index was back in the
                # spec (a resume, a scale-up, or a cache that caught up late): its end is
                # ours, not a disruption.
                return PodOutcome.LEFTOVER
            return PodOutcome.DISRUPTED
        if pod.disruption_marked:
            # Evicted by the kubelet, or marked for disruption (preemption, taint
            # eviction, node shutdown, PodGC) with the DisruptionTarget condition.
            return PodOutcome.DISRUPTED
        if restart_policy == RestartPolicy.NEVER:
            return PodOutcome.FAIL_NEVER
        if restart_policy == RestartPolicy.EXIT_CODE and is_permanent_exit_code(pod.exit_code):
            return PodOutcome.FAIL_EXIT_CODE
        return PodOutcome.RETRY
    if terminating:
        if deleted_by_us(pod, resumed_at):
            return PodOutcome.LEFTOVER
        if phase == PodPhase.PENDING and not pod.scheduled:
            # Deleted before any node took it: it never ran and no kubelet will end it
            # (kept only by our tracking finalizer), so its deletion is its end.
            return PodOutcome.DISRUPTED
        return PodOutcome.TERMINATING
    return PodOutcome.RUNNING if phase == PodPhase.RUNNING else PodOutcome.PENDING
