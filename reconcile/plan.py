"""compute_plan: everything one reconcile pass decides, as a pure function of a snapshot.

No I/O and no clock reads: the orchestrator (reconcile.sync.tfjob) passes the job as read by
reconcile.api.spec, its owned pods and services and ``now``, and applies the returned Plan
(children first, then the status once, then the events). Running the same snapshot twice
gives the same plan, and a world that has not changed gives ``status=None``: no write.

Order of decisions (each step returns early); the policy itself lives in its own room:
1. managed by another controller → skip; being deleted → skip (the garbage collector owns it);
2. finished (Succeeded/Failed) → only cleanPodPolicy and TTL (reconcile.policy.cleanup); never new
   pods: a finished job is not re-run, whatever happens to its pods;
3. invalid spec → Failed (TFJobFailedValidation) with the field errors, no pods;
4. suspended → delete every pod and service, Suspended=True;
5. otherwise: account every pod into the durable per-index record (policy.restart),
   reach a verdict (policy.verdict), compute the status (policy.status), then either
   finish (cleanup and TTL) or diff the children (policy.children).

Every branch also says which pods' tracking finalizers come off (reconcile.policy.tracking),
judged against the status as stored, never the one this pass computes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from controller.types import JSON
from reconcile.api.labels import DEFAULT_OPERATOR_NAME
from reconcile.api.models import TFJob
from reconcile.api.names import CHIEF_TYPES, CleanPodPolicy, ReplicaType
from reconcile.api.spec import JobView
from reconcile.api.status_types import JobStatus, ReplicaStatus, stored_now
from reconcile.objects.pods import group_by_replica
from reconcile.policy import conditions as cond
from reconcile.policy import gang_restart
from reconcile.policy.children import (
    foreign_pods,
    new_pods,
    old_coordinator_alive,
    service_diff,
    template_overrides,
    unique,
)
from reconcile.policy.cleanup import Cleanup, cleanup_deletions, finished_cleanup, finishing_cleanup
from reconcile.policy.conditions import ConditionEvent
from reconcile.policy.failures import PersistentFailure
from reconcile.policy.gang import (
    Gang,
    admission_conditions,
    admitted,
    desired_podgroup,
    owned_by,
    phase_of,
    scheduler_overrides,
    spec_patch,
)
from reconcile.policy.restart import BackoffPolicy, ReplicaInput, ReplicaOutcome, account_replica
from reconcile.policy.status import (
    active_clock,
    calculate_status,
    changed,
    invalid_status,
    is_progress_only,
    suspended_status,
)
from reconcile.policy.tracking import active_releases, retired, settled_releases, tracked
from reconcile.policy.verdict import Verdict, decide

#: What the plan asks the orchestrator to record, once the status is stored.
EventIntent = ConditionEvent


@dataclass(frozen=True)
class PlanConfig:
    cluster_domain: str | None = None  # CUSTOM_CLUSTER_DOMAIN
    backoff_base_seconds: float = 10.0  # replacement backoff 10s * 2^n
    backoff_max_seconds: float = 360.0
    backoff_reset_after_seconds: float = 600.0  # a pod that ran this long resets the backoff
    operator_name: str = DEFAULT_OPERATOR_NAME
    #: gang scheduling (reconcile.policy.gang): --gang-scheduler-name, None when off
    gang: Gang | None = None

    @property
    def backoff(self) -> BackoffPolicy:
        return BackoffPolicy(
            base_seconds=self.backoff_base_seconds,
            max_seconds=self.backoff_max_seconds,
            reset_after_seconds=self.backoff_reset_after_seconds,
        )


@dataclass(frozen=True)
class Snapshot:
    job: JobView  # the TFJob read once (reconcile.api.spec), its cached object untouched
    pods: list[JSON]  # pods whose controller ownerReference UID is the job's
    services: list[JSON]  # services likewise
    now: datetime  # tz-aware UTC
    #: creates the apiserver has refused for longer than the grace (reconcile.policy.failures)
    failure: PersistentFailure | None = None
    #: the PodGroup named after the job, as cached (gang scheduling only)
    podgroup: JSON | None = None
    #: PriorityClass values by name, for the PriorityClasses the job's templates name
    priorities: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PodGroupWrite:
    """The one write to the job's PodGroup a pass may make."""

    verb: str  # "create" (body: the object), "patch" (body: the merge patch), "delete"
    body: JSON  # for "delete": the stored object (its UID is the precondition)


@dataclass(frozen=True)
class Plan:
    create_pods: list[JSON] = field(default_factory=list)
    delete_pods: list[JSON] = field(default_factory=list)
    create_services: list[JSON] = field(default_factory=list)
    delete_services: list[JSON] = field(default_factory=list)
    #: pods whose tracking finalizer comes off (reconcile.policy.tracking)
    release_pods: list[JSON] = field(default_factory=list)
    #: UIDs among ``release_pods`` let go because their index left the spec: the
    #: release marks them (reconcile.api.names.RETIRED_ANNOTATION)
    retired: frozenset[str] = frozenset()
    status: JSON | None = None  # the complete new .status if it differs, else None
    #: the status change moves only replica counts and Running (it may wait for company)
    progress_only: bool = False
    #: the same, with or without the Running transition's event: progress alone, which a
    #: pass still waiting on its own creates may report (reconcile.sync.tfjob)
    reports_progress: bool = False
    events: list[EventIntent] = field(default_factory=list)
    requeue_after: float | None = None  # earliest due timer
    delete_job: bool = False  # ttlSecondsAfterFinished expired
    skip_reason: str | None = None  # why nothing was done, for the log line
    podgroup: PodGroupWrite | None = None  # gang scheduling (reconcile.policy.gang)
    #: pod ends newly accounted, "Type-index:how:uid", for the reconcile's log line
    ends: list[str] = field(default_factory=list)


def compute_plan(snap: Snapshot, config: PlanConfig, *, status_only: bool = False) -> Plan:
    """What a pass does to the job and its children, from a snapshot. ``status_only``:
    a running job's status and its events alone, no children's writes (a pass still
    waiting on its own creates, which reports progress only, needs no more)."""
    view = snap.job
    if view.managed_by_other:
        return Plan(skip_reason="managed-by-other")
    if view.deleting:
        # The garbage collector owns it; only let its pods go, so it can remove them.
        return Plan(release_pods=tracked(snap.pods), skip_reason="deleting")
    if view.status_error is not None:
        # Fail closed: the unreadable status may record a finished job, or restarts
        # counted against backoffLimit; acting on "no status" would re-run the job.
        message = cond.msg_status_unreadable(view.status_error)
        event = ConditionEvent(cond.WARNING, cond.REASON_STATUS_UNREADABLE, message)
        return Plan(events=[event], skip_reason="status-unreadable")
    if cond.is_finished(view.status.conditions):
        # The status is frozen at the moment the job finished: nothing is written here.
        done = finished_cleanup(view.run_policy, view.status, snap.pods, snap.services, snap.now)
        releases = settled_releases(snap.pods, done.delete_pods)
        gone = _podgroup_delete(snap, config)
        idle = done.idle and not releases and gone is None
        plan = _cleanup_plan(done, releases, skip_reason="finished" if idle else None)
        return replace(plan, podgroup=gone)
    now = stored_now(snap.now)
    tfjob = view.tfjob
    takeover: list[ConditionEvent] = []
    if tfjob is None and view.spec.tolerated is not None and (snap.pods or view.status.conditions):
        # Started under a controller that accepted it (upstream): failing it now for a
        # rule of ours would strand its pods. Reconciled as upstream would, with a
        # Warning naming the rules whenever the spec is new to us.
        tfjob = view.spec.tolerated
        if view.status.observed_generation != view.generation:
            message = cond.msg_takeover(view.invalid_message or "")
            takeover.append(ConditionEvent(cond.WARNING, cond.REASON_TAKEOVER, message))
    if tfjob is None:
        return _invalid_plan(view, view.invalid_message or "", now)
    if view.run_policy.suspend:
        pods, services = cleanup_deletions(CleanPodPolicy.ALL, snap.pods, snap.services)
        plan = _status_plan(view.status, suspended_status(view.status, tfjob, now))
        return _with_children(
            plan,
            delete_pods=pods,
            delete_services=services,
            release_pods=settled_releases(snap.pods, pods),
            podgroup=_podgroup_delete(snap, config),
        )
    try:
        plan = _active_plan(snap, tfjob, now, config, status_only=status_only)
        return replace(plan, events=[*takeover, *plan.events]) if takeover else plan
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        # Validation checks every shape the planner reads; should an odd template get
        # past it all the same, the job fails with the reason rather than the worker
        # retrying a traceback forever.
        message = f"{view.name} cannot be planned: {type(e).__name__}: {e}"
        return replace(_invalid_plan(view, message, now), skip_reason="unplannable")


def _active_plan(
    snap: Snapshot, tfjob: TFJob, now: datetime, config: PlanConfig, *, status_only: bool = False
) -> Plan:
    old = snap.job.status
    clock = active_clock(old, tfjob.name, now)
    whole = gang_restart.enabled(tfjob)
    stale: list[JSON] = []
    if whole:
        # Pods of an earlier epoch are going (reconcile.policy.gang_restart): not accounted.
        current, stale = gang_restart.split_by_epoch(snap.pods, old.gang_epoch)
        snap = replace(snap, pods=current)
    outcomes = _account(snap, tfjob, old, config, resumed_at=clock.resumed_at)
    ends = [f"{rt}-{end}" for rt, o in outcomes.items() for end in o.ends]
    restart_type = gang_restart.trigger(old, outcomes) if whole and not stale else None
    if restart_type is not None:
        outcomes = gang_restart.as_one_restart(old, outcomes)
    verdict, deadline_in = decide(tfjob, outcomes, clock.start_time, snap.now)
    if verdict is None and snap.failure is not None:
        message = cond.msg_create_failed(tfjob.namespace, tfjob.name, snap.failure.message)
        verdict = Verdict(False, message, cond.WARNING, failure_reason=snap.failure.reason)
    new = calculate_status(old, outcomes, verdict, now, job=tfjob, clock=clock)
    if restart_type is not None and verdict is None:
        # Account, then act: the next epoch is stored before any pod is deleted.
        message = gang_restart.msg_gang_restart(tfjob.name, restart_type)
        conds = cond.set_condition(
            new.conditions, cond.RESTARTING, cond.TRUE, cond.REASON_RESTARTING, message, now
        )
        conds = cond.set_message(conds, cond.RESTARTING, message)
        new = gang_restart.restart_gang(new, old).model_copy(update={"conditions": conds})
        return replace(_status_plan(old, new), ends=ends)
    gang = _gang_step(snap, tfjob, config) if verdict is None else None
    if gang is not None:
        conds = admission_conditions(new.conditions, gang.waiting, tfjob.name, now)
        new = new.model_copy(update={"conditions": conds})
    failed_event_type = verdict.event_type if verdict is not None else cond.NORMAL
    plan = replace(_status_plan(old, new, failed_event_type=failed_event_type), ends=ends)
    if status_only:
        return plan
    if verdict is not None:
        pods = [*snap.pods, *stale]
        done = finishing_cleanup(snap.job.run_policy, pods, snap.services, now, snap.now)
        return _with_children(
            plan,
            delete_pods=done.delete_pods,
            delete_services=done.delete_services,
            release_pods=active_releases(
                pods, done.delete_pods, old, tfjob, resumed_at=clock.resumed_at
            ),
            requeue_after=done.requeue_after,
            podgroup=_podgroup_delete(snap, config),
        )
    create_svcs, delete_svcs = service_diff(
        tfjob, snap.services, operator_name=config.operator_name
    )
    creates = {rt: o.create for rt, o in outcomes.items() if o.create}
    if gang is not None and not gang.pods_allowed:
        creates = {}  # the whole gang, or nothing: the PodGroup's events bring it back
    if old_coordinator_alive(tfjob, snap.pods):
        # delete first (foreign_pods below), create once the old one is gone: its
        # deletion event brings the job back
        creates = {rt: c for rt, c in creates.items() if rt not in CHIEF_TYPES}
    waits = [o.wait for o in outcomes.values() if o.wait is not None]
    if whole and (stale or waits):
        creates = {}  # all together: once the old epoch is gone and the backoff is over
    if deadline_in is not None:
        waits.append(deadline_in)
    overrides = template_overrides(tfjob, creates)
    if config.gang is not None:
        overrides += scheduler_overrides(tfjob, config.gang, creates)
    plan = replace(plan, events=[*plan.events, *overrides])
    doomed = unique(
        [p for o in outcomes.values() for p in o.delete] + foreign_pods(tfjob, snap.pods)
    )
    stale_doomed = gang_restart.stale_deletions(stale)
    pods = new_pods(
        tfjob,
        creates,
        cluster_domain=config.cluster_domain,
        operator_name=config.operator_name,
        gang=config.gang,
    )
    if whole:
        pods = [gang_restart.labelled(pod, old.gang_epoch) for pod in pods]
    releases = active_releases(snap.pods, doomed, old, tfjob, resumed_at=clock.resumed_at)
    return _with_children(
        plan,
        create_pods=pods,
        delete_pods=[*doomed, *stale_doomed],
        create_services=create_svcs,
        delete_services=delete_svcs,
        release_pods=[*releases, *settled_releases(stale, stale_doomed)],
        retired=retired(releases, tfjob),
        requeue_after=min(waits) if waits else None,
        podgroup=gang.write if gang is not None else None,
    )


@dataclass(frozen=True)
class _GangStep:
    write: PodGroupWrite | None
    pods_allowed: bool
    #: the PodGroup's phase while the gang waits to be admitted (Volcano), else None
    waiting: str | None = None


def _gang_step(snap: Snapshot, tfjob: TFJob, config: PlanConfig) -> _GangStep | None:
    """The PodGroup first, then the pods: none before it exists, and with Volcano none
    before the scheduler admits it (reconcile.policy.gang)."""
    gang = config.gang
    if gang is None:
        return None
    desired = desired_podgroup(tfjob, gang, snap.priorities)
    existing = snap.podgroup
    if existing is None:
        return _GangStep(PodGroupWrite("create", desired), pods_allowed=False)
    if not owned_by(existing, tfjob.uid) or existing.get("metadata", {}).get("deletionTimestamp"):
        # An earlier job's of this name, which the garbage collector is removing, or
        # ours going away (a suspend just undone): its deletion event brings the job
        # back, to make it anew.
        return _GangStep(None, pods_allowed=False)
    patch = spec_patch(existing, desired, gang)
    write = PodGroupWrite("patch", patch) if patch is not None else None
    if admitted(gang, existing):
        return _GangStep(write, pods_allowed=True)
    return _GangStep(write, pods_allowed=False, waiting=phase_of(existing))


def _podgroup_delete(snap: Snapshot, config: PlanConfig) -> PodGroupWrite | None:
    """Finished, failed or suspended: the PodGroup goes (upstream), once."""
    pg = snap.podgroup
    if config.gang is None or pg is None or not owned_by(pg, snap.job.uid):
        return None
    if pg.get("metadata", {}).get("deletionTimestamp"):
        return None
    return PodGroupWrite("delete", pg)


def _account(
    snap: Snapshot,
    tfjob: TFJob,
    old: JobStatus,
    config: PlanConfig,
    *,
    resumed_at: datetime | None,
) -> dict[str, ReplicaOutcome]:
    """Fold every replica type's observed pods into its durable record (policy.restart)."""
    pods_by_type = group_by_replica(snap.pods)
    dynamic = bool(tfjob.spec.enable_dynamic_worker)
    return {
        rtype: account_replica(
            ReplicaInput(
                rtype=rtype,
                replicas=rspec.count,
                restart_policy=rspec.policy,
                failures_tolerated=dynamic and rtype == ReplicaType.WORKER,
            ),
            pods_by_type.get(rtype.lower(), {}),
            old.replica_statuses.get(rtype, ReplicaStatus()),
            snap.now,
            config.backoff,
            resumed_at=resumed_at,
        )
        for rtype, rspec in tfjob.replica_specs.items()
    }


def _status_plan(old: JobStatus, new: JobStatus, *, failed_event_type: str = cond.NORMAL) -> Plan:
    events = cond.transition_events(
        old.conditions, new.conditions, failed_event_type=failed_event_type
    )
    status = changed(old, new)
    progress = status is not None and is_progress_only(old, new)
    return Plan(
        status=status,
        progress_only=progress and not events,
        reports_progress=progress,
        events=list(events),
    )


def _invalid_plan(view: JobView, message: str, now: datetime) -> Plan:
    """Failed with TFJobFailedValidation and ``message``."""
    new = invalid_status(view.status, view.name, message, view.generation, now)
    return _status_plan(view.status, new, failed_event_type=cond.WARNING)


def _cleanup_plan(done: Cleanup, releases: list[JSON], *, skip_reason: str | None) -> Plan:
    return Plan(
        delete_pods=done.delete_pods,
        delete_services=done.delete_services,
        release_pods=releases,
        requeue_after=done.requeue_after,
        delete_job=done.delete_job,
        skip_reason=skip_reason,
    )


def _with_children(
    plan: Plan,
    *,
    create_pods: Sequence[JSON] = (),
    delete_pods: Sequence[JSON] = (),
    create_services: Sequence[JSON] = (),
    delete_services: Sequence[JSON] = (),
    release_pods: Sequence[JSON] = (),
    retired: frozenset[str] = frozenset(),
    requeue_after: float | None = None,
    podgroup: PodGroupWrite | None = None,
) -> Plan:
    return Plan(
        create_pods=list(create_pods),
        delete_pods=list(delete_pods),
        create_services=list(create_services),
        delete_services=list(delete_services),
        release_pods=list(release_pods),
        retired=retired,
        status=plan.status,
        progress_only=plan.progress_only,
        reports_progress=plan.reports_progress,
        events=plan.events,
        requeue_after=requeue_after,
        podgroup=podgroup,
        ends=plan.ends,
    )


__all__ = ["EventIntent", "Plan", "PlanConfig", "PodGroupWrite", "Snapshot", "compute_plan"]
