"""The job's new status, as pure functions of the old one and this pass's findings.

``calculate_status(old, outcomes, verdict, now, ...)`` is the active path: the
replica statuses the restart accounting produced, the conditions upstream would set
(Created with the first write; Resumed after a suspension; Restarting or Running; the
verdict's Succeeded or Failed, with completionTime), and observedGeneration. The
suspended and invalid paths have their own small functions. None of them reads a clock
or writes anything: the caller compares the result with the old status and writes it
only if it changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from controller.types import JSON
from reconcile.api.models import TFJob
from reconcile.api.status_types import JobCondition, JobStatus, ReplicaStatus
from reconcile.policy import conditions as cond
from reconcile.policy.restart import ReplicaAccount
from reconcile.policy.success_policy import deciding_type
from reconcile.policy.verdict import Verdict, in_status_order


@dataclass(frozen=True, slots=True)
class ActiveClock:
    """Where an active job's clocks stand: its conditions once Created and any resume are
    recorded, when it (re)started, and when it was last resumed."""

    conditions: list[JobCondition]
    start_time: datetime
    resumed_at: datetime | None


def active_clock(old: JobStatus, name: str, now: datetime) -> ActiveClock:
    conds = with_created(old.conditions, name, now)
    start_time = old.start_time
    resumed_at: datetime | None = None
    if cond.is_true(conds, cond.SUSPENDED):
        # Resume: the activeDeadlineSeconds clock restarts, as in the k8s Job controller.
        conds = cond.set_condition(
            conds, cond.SUSPENDED, cond.FALSE, cond.REASON_RESUMED, cond.msg_resumed(name), now
        )
        start_time = resumed_at = now
    else:
        suspended = cond.find(conds, cond.SUSPENDED)
        if suspended is not None and suspended.reason == cond.REASON_RESUMED:
            resumed_at = suspended.last_transition_time
    return ActiveClock(conds, start_time or now, resumed_at)


def calculate_status(
    old: JobStatus,
    outcomes: Mapping[str, ReplicaAccount],
    verdict: Verdict | None,
    now: datetime,
    *,
    job: TFJob,
    clock: ActiveClock,
) -> JobStatus:
    """The active job's new status (``now`` at stored, whole-second precision; ``clock``
    is ``active_clock(old, job.name, now)``, which the accounting needed first)."""
    conds = clock.conditions
    replica_statuses = {rt: o.status for rt, o in outcomes.items()}
    update: dict[str, object] = {"start_time": clock.start_time}
    if verdict is not None:
        conds = cond.set_condition(
            conds, verdict.cond_type, cond.TRUE, verdict.reason, verdict.message, now
        )
        update["completion_time"] = now
        if verdict.succeeded:
            # Upstream's finished-job bookkeeping: whatever is still active counts as succeeded.
            replica_statuses = {
                rt: rs.model_copy(
                    update={
                        "succeeded": rs.succeeded + rs.active,
                        "active": 0,
                        "active_indexes": "",
                    }
                )
                for rt, rs in replica_statuses.items()
            }
    else:
        restarting = next((rt for rt in in_status_order(outcomes) if outcomes[rt].restarting), None)
        decider = deciding_type(job.replica_specs)
        if restarting is not None:
            message = cond.msg_restarting(job.name, restarting)
            conds = cond.set_condition(
                conds, cond.RESTARTING, cond.TRUE, cond.REASON_RESTARTING, message, now
            )
        elif decider is not None and outcomes[decider].status.active > 0:
            message = cond.msg_running(job.namespace, job.name)
            conds = cond.set_condition(
                conds, cond.RUNNING, cond.TRUE, cond.REASON_RUNNING, message, now
            )
    return old.model_copy(
        update={
            **update,
            "conditions": conds,
            "replica_statuses": replica_statuses,
            "observed_generation": job.generation,
        }
    )


def suspended_status(old: JobStatus, job: TFJob, now: datetime) -> JobStatus:
    """Suspended: active counts zeroed, Running=False, Suspended=True. The durable records
    (succeeded/failed indexes, restarts) are kept for the resume."""
    message = cond.msg_suspended(job.name)
    conds = with_created(old.conditions, job.name, now)
    if cond.is_true(conds, cond.RUNNING):
        conds = cond.set_condition(
            conds, cond.RUNNING, cond.FALSE, cond.REASON_SUSPENDED, message, now
        )
    conds = cond.set_condition(
        conds, cond.SUSPENDED, cond.TRUE, cond.REASON_SUSPENDED, message, now
    )
    replica_statuses = {
        rt: old.replica_statuses.get(rt, ReplicaStatus()).model_copy(
            update={"active": 0, "active_indexes": ""}
        )
        for rt in job.replica_specs
    }
    return old.model_copy(
        update={
            "conditions": conds,
            "replica_statuses": replica_statuses,
            "observed_generation": job.generation,
        }
    )


def invalid_status(
    old: JobStatus, name: str, message: str, generation: int | None, now: datetime
) -> JobStatus:
    """Failed with reason TFJobFailedValidation and the field errors as its message."""
    conds = with_created(old.conditions, name, now)
    conds = cond.set_condition(
        conds, cond.FAILED, cond.TRUE, cond.REASON_FAILED_VALIDATION, message, now
    )
    return old.model_copy(
        update={
            "conditions": conds,
            "completion_time": old.completion_time or now,
            "observed_generation": generation,
        }
    )


def with_created(
    conditions: Sequence[JobCondition], name: str, now: datetime
) -> list[JobCondition]:
    # Created is recorded with the first status write (upstream sets it in the create
    # predicate and persists it with the first write, docs/semantics.md#conditions).
    if cond.find(conditions, cond.CREATED) is not None:
        return list(conditions)
    return cond.set_condition(
        conditions, cond.CREATED, cond.TRUE, cond.REASON_CREATED, cond.msg_created(name), now
    )


#: What a progress-only write may change in a replica status: the counts, and which
#: indexes run. Outcomes (succeeded/failed indexes, restarts, disruptions, retry state)
#: are never held back: they are the durable record a lost write would lose.
_PROGRESS_FIELDS = {"active", "succeeded", "failed", "active_indexes", "label_selector", "selector"}


def is_progress_only(old: JobStatus, new: JobStatus) -> bool:
    """True when an already-written status changes only in replica counts, the running
    indexes and the Running condition: nothing a client waits on to make a decision,
    and no outcome."""
    if not old.conditions:
        return False  # the first write (Created) is never held

    def decisive(status: JobStatus) -> list[JobCondition]:
        return [c for c in status.conditions if c.type != cond.RUNNING]

    def outcomes(status: JobStatus) -> dict[str, Any]:
        return {
            rt: rs.model_dump(exclude=_PROGRESS_FIELDS)
            for rt, rs in status.replica_statuses.items()
        }

    rest = {"conditions", "replica_statuses"}
    return (
        decisive(old) == decisive(new)
        and outcomes(old) == outcomes(new)
        and old.model_dump(exclude=rest) == new.model_dump(exclude=rest)
    )


def changed(old: JobStatus, new: JobStatus) -> JSON | None:
    """The new status as the JSON to write, or None when writing it would change nothing."""
    if new == old:
        # equal fields render equal JSON; most passes change nothing, and rendering
        # both is a tenth of a pass
        return None
    new_json = new.to_json()
    return None if new_json == old.to_json() else new_json
