"""The verdict: whether this pass ends the job, and how (docs/semantics.md#how-a-job-ends).

Checked in this order, the first that holds wins:
1. success: the deciding replica type (Chief/Master when present, else Worker) has
   succeeded: every replica of it, or worker 0 alone unless successPolicy is AllWorkers.
   Success comes first: when the chief finished in the same pass as, say, a PS died, the
   training outcome is what the chief reported;
2. a replica failed for good (restartPolicy Never, or ExitCode with a permanent code),
   walking the types in upstream's status order, so the message names the same type;
3. more retries than ``runPolicy.backoffLimit``;
4. ``activeDeadlineSeconds`` elapsed since the job started (or was last resumed).
No verdict also says how long until the deadline, so the pass can set its timer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from reconcile.api.labels import coordinator
from reconcile.api.models import ReplicaSpec, TFJob
from reconcile.api.names import STATUS_ORDER, ReplicaType, SuccessPolicy
from reconcile.api.status_types import elapsed_due, parse_indexes
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


def deciding_type(specs: Mapping[str, ReplicaSpec]) -> str | None:
    """The replica type whose outcome is the job's: Chief/Master (with pods), else
    Worker, else none (other types never decide)."""
    chief = coordinator(specs)
    if chief is not None:
        return chief
    return ReplicaType.WORKER if ReplicaType.WORKER in specs else None


def decide(
    job: TFJob,
    outcomes: Mapping[str, ReplicaAccount],
    start_time: datetime,
    now: datetime,
) -> tuple[Verdict | None, float | None]:
    """The verdict, or None and the seconds left until the active deadline (if any)."""
    if _succeeded(job, outcomes):
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
    policy = job.spec.run_policy
    limit = policy.backoff_limit if policy is not None else None
    if limit is not None and sum(o.status.restarts for o in outcomes.values()) > limit:
        return Verdict(False, cond.msg_backoff_limit(job.name)), None
    deadline = policy.active_deadline_seconds if policy is not None else None
    if deadline is None:
        return None, None
    remaining = (elapsed_due(start_time, deadline) - now).total_seconds()
    if remaining <= 0:
        return Verdict(False, cond.msg_deadline(job.name)), None
    return None, remaining


def _succeeded(job: TFJob, outcomes: Mapping[str, ReplicaAccount]) -> bool:
    decider = deciding_type(job.replica_specs)
    if decider is None:
        return False
    status = outcomes[decider].status
    if status.succeeded >= job.replica_specs[decider].count:
        return True
    if decider == ReplicaType.WORKER and job.spec.success_policy != SuccessPolicy.ALL_WORKERS:
        return 0 in parse_indexes(status.succeeded_indexes)
    return False
