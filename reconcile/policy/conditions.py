"""Job conditions: upstream's types, reasons, messages and transition rules
(docs/semantics.md#conditions).

``set_condition`` reproduces upstream's ``setCondition`` exactly, because clients (the
kubeflow-training SDK, Kueue, dashboards, ``kubectl get`` printing the last condition) read
the condition list, not just the latest entry:

1. once ``Failed=True`` exists nothing changes any more (Failed is absorbing);
2. same type, status and reason → no change (message and timestamps are not refreshed);
3. same type and status, new reason → the old ``lastTransitionTime`` is kept;
4. the old entry of that type is removed, ``Running`` and ``Restarting`` remove each other,
   and adding ``Succeeded``/``Failed`` forces an existing ``Running`` to ``False``; the new
   condition is appended at the end.

Events are derived from the difference between the old and the new condition list, so a
transition is announced exactly once however many reconciles observe the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from reconcile.api.status_types import JobCondition

# Condition types.
CREATED = "Created"
RUNNING = "Running"
RESTARTING = "Restarting"
SUCCEEDED = "Succeeded"
SUSPENDED = "Suspended"
FAILED = "Failed"
#: ours: a reporting job whose training stopped advancing (docs/stalls.md)
STALLED = "Stalled"

TRUE = "True"
FALSE = "False"

# Reasons: "TFJob" + base (upstream NewReason).
REASON_CREATED = "TFJobCreated"
REASON_RUNNING = "TFJobRunning"
REASON_RESTARTING = "TFJobRestarting"
REASON_SUCCEEDED = "TFJobSucceeded"
REASON_FAILED = "TFJobFailed"
REASON_SUSPENDED = "TFJobSuspended"
REASON_RESUMED = "TFJobResumed"
REASON_FAILED_VALIDATION = "TFJobFailedValidation"
#: The event (not a condition) of a job deleted after its ttlSecondsAfterFinished.
REASON_DELETED_JOB = "SuccessfulDeleteJob"
#: The events of each child written (upstream's reasons, ``Successful<Verb><Kind>``):
#: one per pod and service, so the events a full buffer drops first
#: (controller.runtime.events), before any transition or Warning.
ROUTINE_REASONS = frozenset(
    f"Successful{verb}{kind}" for verb in ("Create", "Delete") for kind in ("Pod", "Service")
)
#: Upstream's (misspelt) reason, kept: users' alerts match it.
REASON_TEMPLATE_RESTART_POLICY = "SettedPodTemplateRestartPolicy"
MSG_TEMPLATE_RESTART_POLICY = (
    "Restart policy in pod template will be overwritten by restart policy in replica spec"
)

NORMAL = "Normal"
WARNING = "Warning"


# --- upstream messages, verbatim (Go format strings in the comments) -----------------------


def msg_created(name: str) -> str:  # "TFJob %s is created."
    return f"TFJob {name} is created."


def msg_running(namespace: str, name: str) -> str:  # "TFJob %s/%s is running."
    return f"TFJob {namespace}/{name} is running."


def msg_succeeded(namespace: str, name: str) -> str:  # "TFJob %s/%s successfully completed."
    return f"TFJob {namespace}/{name} successfully completed."


def msg_replicas_failed(namespace: str, name: str, count: int, rtype: str) -> str:
    # "TFJob %s/%s has failed because %d %s replica(s) failed."
    return f"TFJob {namespace}/{name} has failed because {count} {rtype} replica(s) failed."


def msg_exit_code_failed(name: str, rtype: str) -> str:
    # `job %q is failing because %q replica(s) failed.`
    return f"job {go_quote(name)} is failing because {go_quote(rtype)} replica(s) failed."


def msg_restarting(name: str, rtype: str) -> str:
    # "job %s is restarting because %s replica(s) failed."
    return f"job {name} is restarting because {rtype} replica(s) failed."


def msg_backoff_limit(name: str) -> str:
    # "Job %s has failed because it has reached the specified backoff limit"
    return f"Job {name} has failed because it has reached the specified backoff limit"


def msg_deadline(name: str) -> str:
    # "Job %s has failed because it was active longer than specified deadline"
    return f"Job {name} has failed because it was active longer than specified deadline"


def msg_create_failed(namespace: str, name: str, detail: str) -> str:  # ours, not upstream's
    return f"TFJob {namespace}/{name} has failed because {detail}"


REASON_STATUS_UNREADABLE = "TFJobStatusUnreadable"
REASON_TAKEOVER = "TFJobValidationTolerated"


def msg_takeover(errors: str) -> str:  # ours, not upstream's
    return (
        "Started before this controller took it over, so it is reconciled as the upstream"
        f" operator would, though new jobs like it are rejected at admission: {errors}"
    )


def msg_status_unreadable(error: str) -> str:  # ours, not upstream's
    return (
        "The status cannot be read, so the job is left as it is (no pod or service is"
        f" created or deleted, nothing is written) until the status is repaired: {error}"
    )


def msg_suspended(name: str) -> str:  # "TFJob %s is suspended."
    return f"TFJob {name} is suspended."


def msg_resumed(name: str) -> str:  # "TFJob %s is resumed."
    return f"TFJob {name} is resumed."


def go_quote(value: str) -> str:
    """Go's %q for the plain names that appear here (DNS labels, replica types)."""
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return f'"{escaped}"'


# --- the condition list -------------------------------------------------------------------


def find(conditions: Sequence[JobCondition], cond_type: str) -> JobCondition | None:
    for cond in conditions:
        if cond.type == cond_type:
            return cond
    return None


def is_true(conditions: Sequence[JobCondition], cond_type: str) -> bool:
    cond = find(conditions, cond_type)
    return cond is not None and cond.status == TRUE


def is_finished(conditions: Sequence[JobCondition]) -> bool:
    return is_true(conditions, SUCCEEDED) or is_true(conditions, FAILED)


def set_message(
    conditions: Sequence[JobCondition], cond_type: str, message: str
) -> list[JobCondition]:
    """The list with the message of ``cond_type`` replaced (no transition: the same
    condition, said more precisely)."""
    return [
        c.model_copy(update={"message": message}) if c.type == cond_type else c for c in conditions
    ]


def set_condition(
    conditions: Sequence[JobCondition],
    cond_type: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
) -> list[JobCondition]:
    """Return the condition list with (type, status, reason, message) applied, upstream rules."""
    current = list(conditions)
    if is_true(current, FAILED):
        return current
    old = find(current, cond_type)
    if old is not None and old.status == status and old.reason == reason:
        return current
    transition = old.last_transition_time if old is not None and old.status == status else now
    fields = {"type": cond_type, "status": status, "reason": reason, "message": message}
    new = JobCondition(**fields, last_update_time=now, last_transition_time=transition)
    kept: list[JobCondition] = []
    for cond in current:
        if cond.type == cond_type:
            continue
        if cond_type == RESTARTING and cond.type == RUNNING:
            continue
        if cond_type == RUNNING and cond.type == RESTARTING:
            continue
        if cond_type in (SUCCEEDED, FAILED) and cond.type == RUNNING:
            cond = cond.model_copy(update={"status": FALSE})
        kept.append(cond)
    kept.append(new)
    return kept


def put_first(
    conditions: Sequence[JobCondition],
    cond_type: str,
    status: str,
    reason: str,
    message: str,
    now: datetime,
) -> list[JobCondition]:
    """The list with (type, status, reason, message) first in it, for a condition of ours
    that must never be the last one (GangAdmitted, Stalled): kubectl's State column and
    the SDK read the last. Unchanged while the status and reason are."""
    current = list(conditions)
    old = find(current, cond_type)
    if old is not None and old.status == status and old.reason == reason:
        return current
    fields = {"type": cond_type, "status": status, "reason": reason, "message": message}
    new = JobCondition(**fields, last_update_time=now, last_transition_time=now)
    return [new, *(c for c in current if c.type != cond_type)]


# --- transition events ----------------------------------------------------------------------


@dataclass(frozen=True)
class EventIntent:
    """A Kubernetes Event the pass asks to be recorded once its status is stored: a
    condition's transition, or a warning that changes no condition (a takeover, an
    unreadable status, a template override)."""

    type: str  # Normal | Warning
    reason: str
    message: str


def transition_events(
    old: Sequence[JobCondition],
    new: Sequence[JobCondition],
    *,
    failed_event_type: str = NORMAL,
) -> list[EventIntent]:
    """Events for conditions that changed (status or reason) between ``old`` and ``new``.

    Upstream emits Succeeded/Failed/Suspended/Resumed as Normal and Restarting as Warning;
    a Failed event is Warning for an exit-code or validation failure (``failed_event_type``).
    """
    out: list[EventIntent] = []
    for cond in new:
        before = find(old, cond.type)
        if before is not None and before.status == cond.status and before.reason == cond.reason:
            continue
        event_type: str | None = None
        if cond.status == TRUE:
            event_type = {
                SUCCEEDED: NORMAL,
                FAILED: failed_event_type,
                RESTARTING: WARNING,
                SUSPENDED: NORMAL,
                STALLED: WARNING,
            }.get(cond.type)
        elif cond.type == SUSPENDED and cond.reason == REASON_RESUMED:
            event_type = NORMAL
        elif cond.type == STALLED and cond.reason == REASON_PROGRESS_RESUMED:
            event_type = NORMAL
        elif cond.type == STALLED and cond.reason == REASON_PROGRESS_UNHEARD:
            event_type = WARNING
        if event_type is not None:
            out.append(EventIntent(event_type, cond.reason, cond.message))
    return out


# --- gang scheduling and whole-gang restart ----------------------------------------------

REASON_POD_GROUP_PENDING = "PodGroupPending"
REASON_POD_GROUP_ADMITTED = "PodGroupAdmitted"
REASON_TEMPLATE_SCHEDULER_NAME = "SetPodTemplateSchedulerName"
MSG_TEMPLATE_SCHEDULER_NAME = (
    "Another scheduler is specified when gang-scheduling is enabled and it will not be overwritten"
)
REASON_DELETED_POD_GROUP = "SuccessfulDeletePodGroup"


def msg_deleted_pod_group(name: str) -> str:
    return f"Deleted PodGroup: {name}"


REASON_FAILED_AFTER_PEER = "FailedAfterPeerEnd"


def msg_failed_after_peer(name: str, pod: str, peer: str, seconds: int) -> str:
    return (
        f"TFJob {name}: pod {pod} failed {seconds}s after its peer {peer} ended in a way"
        " the job retries (a kill, a retried failure, a deletion). When one task of a"
        " synchronous job (MultiWorkerMirroredStrategy) dies, the others' collective ops"
        " fail within seconds, and that failure failed the job. The annotation"
        ' training.kubeflow.org/gang-restart: "true" restarts every pod together instead,'
        " and such failures no longer fail the job."
    )


def msg_gang_restart(name: str, rtype: str) -> str:
    return (
        f"TFJob {name} is restarting its whole gang: a {rtype} pod ended, so every pod is"
        " deleted and all are created again together."
    )


# --- stalls and restarts without progress (reconcile.progress, docs/stalls.md) -------

REASON_PROGRESS_DEADLINE = "ProgressDeadlineExceeded"
REASON_FIRST_PROGRESS_DEADLINE = "FirstProgressDeadlineExceeded"
REASON_PROGRESS_RESUMED = "ProgressResumed"
REASON_STALL_RESTARTED = "GangRestarted"
#: Stalled False: the deadline ran out, but the controller's own endpoint may not have
#: heard the job's reports in that time, so the deadline counts again from then
REASON_PROGRESS_UNHEARD = "ProgressUnheard"
#: the Failed condition's reasons of the stall action "fail" and of the restart guard
REASON_STALLED = "TFJobStalled"
REASON_NO_PROGRESS = "TFJobRestartsWithoutProgress"
#: a replica flagged as slower than its peers, and cleared (reconcile.progress.stragglers)
REASON_STRAGGLER = "StragglerDetected"
REASON_STRAGGLER_RECOVERED = "StragglerRecovered"
REASON_STRAGGLER_MOVED = "StragglerMoved"


def msg_move_restart(name: str) -> str:
    return (
        f"TFJob {name} is restarting its whole gang to move a straggler to another node"
        " (straggler action move): every pod is deleted and all are created again together."
    )


def msg_stall_restart(name: str, stalled: str) -> str:
    return (
        f"TFJob {name} is restarting its whole gang: {stalled} (stall action restart);"
        " every pod is deleted and all are created again together."
    )


def msg_stall_failed(name: str, stalled: str) -> str:
    return f"TFJob {name} has failed: {stalled} (stall action fail)."


def msg_no_progress(name: str, count: int, step: int, key: str, limit: int) -> str:
    return (
        f"TFJob {name} has failed: it restarted {count} times in a row and no replica's"
        f" step got past {step}, the furthest before the first of those restarts"
        f" ({key}: {limit})."
    )
