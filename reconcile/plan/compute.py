"""compute_plan: the branch order of a pass (reconcile.plan)."""

from __future__ import annotations

from dataclasses import replace

from reconcile.api.names import CleanPodPolicy
from reconcile.api.status_types import stored_now
from reconcile.objects.observed import raws
from reconcile.plan.active import active_plan
from reconcile.plan.model import (
    Plan,
    PlanConfig,
    Snapshot,
    cleanup_plan,
    invalid_plan,
    status_plan,
    with_children,
)
from reconcile.plan.podgroup import podgroup_delete
from reconcile.plan.training import with_training
from reconcile.policy import conditions as cond
from reconcile.policy.clean_pod_policy import cleanup_deletions
from reconcile.policy.cleanup import finished_cleanup
from reconcile.policy.conditions import EventIntent
from reconcile.policy.status import (
    suspended_status,
)
from reconcile.policy.tracking import settled_releases, tracked


def compute_plan(snap: Snapshot, config: PlanConfig, *, status_only: bool = False) -> Plan:
    """What a pass does to the job and its children, from a snapshot. ``status_only``:
    a running job's status and its events alone, no children's writes (a pass still
    waiting on its own creates, which reports progress only, needs no more)."""
    view = snap.job
    if view.managed_by_other:
        return Plan(skip_reason="managed-by-other")
    if view.deleting:
        # The garbage collector owns it; only let its pods go, so it can remove them.
        return Plan(release_pods=raws(tracked(snap.pods)), skip_reason="deleting")
    if view.status_error is not None:
        # Fail closed: the unreadable status may record a finished job, or restarts
        # counted against backoffLimit; acting on "no status" would re-run the job.
        message = cond.msg_status_unreadable(view.status_error)
        event = EventIntent(cond.WARNING, cond.REASON_STATUS_UNREADABLE, message)
        return Plan(events=[event], skip_reason="status-unreadable")
    if cond.is_finished(view.status.conditions):
        # The status is frozen at the moment the job finished: nothing is written here.
        done = finished_cleanup(view.run_policy, view.status, snap.pods, snap.services, snap.now)
        releases = settled_releases(snap.pods, done.delete_pods)
        gone = podgroup_delete(snap, config)
        idle = done.idle and not releases and gone is None
        plan = cleanup_plan(done, releases, skip_reason="finished" if idle else None)
        return replace(plan, podgroup=gone)
    now = stored_now(snap.now)
    tfjob = view.tfjob
    takeover: list[EventIntent] = []
    if tfjob is None and view.spec.tolerated is not None and (snap.pods or view.status.conditions):
        # Started under a controller that accepted it (upstream): failing it now for a
        # rule of ours would strand its pods. Reconciled as upstream would, with a
        # Warning naming the rules whenever the spec is new to us.
        tfjob = view.spec.tolerated
        if view.status.observed_generation != view.generation:
            message = cond.msg_takeover(view.invalid_message or "")
            takeover.append(EventIntent(cond.WARNING, cond.REASON_TAKEOVER, message))
    if tfjob is None:
        return invalid_plan(view, view.invalid_message or "", now)
    if view.run_policy.suspend:
        pods, services = cleanup_deletions(CleanPodPolicy.ALL, snap.pods, snap.services)
        plan = status_plan(view.status, suspended_status(view.status, tfjob, now))
        return with_children(
            plan,
            delete_pods=pods,
            delete_services=services,
            release_pods=settled_releases(snap.pods, pods),
            podgroup=podgroup_delete(snap, config),
        )
    try:
        plan = active_plan(snap, tfjob, now, config, status_only=status_only)
        plan = with_training(plan, snap, view.status)
        return replace(plan, events=[*takeover, *plan.events]) if takeover else plan
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        # Validation checks every shape the planner reads; should an odd template get
        # past it all the same, the job fails with the reason rather than the worker
        # retrying a traceback forever.
        message = f"{view.name} cannot be planned: {type(e).__name__}: {e}"
        return replace(invalid_plan(view, message, now), skip_reason="unplannable")
