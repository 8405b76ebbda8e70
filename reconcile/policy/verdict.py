"""The verdict: whether this pass ends the job, and how (docs/semantics.md#how-a-job-ends).

The rules of the API fields that can end a job, checked in this order, the first that
holds wins:
1. success (reconcile.policy.success_policy). Success comes first: when the chief
   finished in the same pass as, say, a PS died, the training outcome is what the chief
   reported;
2. a replica failed for good (restartPolicy Never, or ExitCode with a permanent code),
   walking the types in upstream's status order, so the message names the same type;
3. more restarts than ``runPolicy.backoffLimit`` (reconcile.policy.backoff_limit);
4. ``activeDeadlineSeconds`` elapsed (reconcile.policy.active_deadline).
No verdict also says how long until the deadline, so the pass can set its timer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from reconcile.api.models import TFJob
from reconcile.api.names import STATUS_ORDER
from reconcile.policy import active_deadline, backoff_limit, success_policy
from reconcile.policy import conditions as cond
from reconcile.policy.pod_outcome import PodOutcome
from reconcile.policy.restart import ReplicaAccount


@dataclass(frozen=True, slots=True)
class Verdict:
    """How this pass ends the job."""

    succeeded: bool
    message: str
    #: the Failed event is a Warning for an exit-code failure (upstream), Normal otherwise
    event_type: str = cond.NORMAL
    #: the Failed condition's reason when it is not upstream's TFJobFailed
    failure_reason: str | None = None

    @property
    def cond_type(self) -> str:
        return cond.SUCCEEDED if self.succeeded else cond.FAILED

    @property
    def reason(self) -> str:
        if self.succeeded:
            return cond.REASON_SUCCEEDED
        return self.failure_reason or cond.REASON_FAILED


def in_status_order(rtypes: Mapping[str, object]) -> list[str]:
    return [rt for rt in STATUS_ORDER if rt in rtypes]


def decide(
    job: TFJob,
    outcomes: Mapping[str, ReplicaAccount],
    start_time: datetime,
    now: datetime,
) -> tuple[Verdict | None, float | None]:
    """The verdict, or None and the seconds left until the active deadline (if any)."""
    if success_policy.succeeded(job, outcomes):
        return Verdict(True, cond.msg_succeeded(job.namespace, job.name)), None
    for rtype in in_status_order(outcomes):
        outcome = outcomes[rtype]
        if outcome.permanent_failure is PodOutcome.FAIL_EXIT_CODE:
            message = cond.msg_exit_code_failed(job.name, rtype)
            return Verdict(False, message, cond.WARNING), None
        if outcome.permanent_failure is PodOutcome.FAIL_NEVER:
            count = outcome.status.failed
            return Verdict(
                False, cond.msg_replicas_failed(job.namespace, job.name, count, rtype)
            ), None
    if backoff_limit.exceeded(job, outcomes):
        return Verdict(False, cond.msg_backoff_limit(job.name)), None
    left = active_deadline.remaining(job, start_time, now)
    if left is not None and left <= 0:
        return Verdict(False, cond.msg_deadline(job.name)), None
    return None, left
