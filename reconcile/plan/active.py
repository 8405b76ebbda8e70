"""A running job's pass, as a fixed sequence of steps (reconcile.plan's step 5)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from reconcile.api.labels import replica_name
from reconcile.api.models import TFJob
from reconcile.api.names import CHIEF_TYPES, RESTART_GUARD_ANNOTATION, ReplicaType
from reconcile.api.status_types import JobStatus, ReplicaStatus, Straggler
from reconcile.api.watch import StallAction, StragglerAction, TrainingWatch
from reconcile.objects.observed import ObservedPod, group_pods
from reconcile.objects.pods import PodPhase
from reconcile.plan.model import Plan, PlanConfig, Snapshot, status_plan, with_children
from reconcile.plan.podgroup import GangStep, gang_step, podgroup_delete
from reconcile.policy import collateral, gang_restart
from reconcile.policy import conditions as cond
from reconcile.policy.children import (
    foreign_pods,
    new_pods,
    old_coordinator_alive,
    service_diff,
    template_overrides,
    unique,
)
from reconcile.policy.cleanup import finishing_cleanup
from reconcile.policy.gang import (
    admission_conditions,
    scheduler_overrides,
)
from reconcile.policy.restart import ReplicaAccount, ReplicaInput, account_replica
from reconcile.policy.status import ActiveClock, active_clock, calculate_status
from reconcile.policy.tracking import active_releases, retired, settled_releases
from reconcile.policy.verdict import Verdict, decide
from reconcile.progress.guard import GuardCheck, check_guard, furthest_step
from reconcile.progress.moves import avoided_nodes, keep_away, move_events, moves_due, with_moves
from reconcile.progress.placement import placeable
from reconcile.progress.records import ReplicaRecord
from reconcile.progress.stall import Stall, check_stall, stalled_conditions
from reconcile.progress.stragglers import find_stragglers

#: a replica type with no record yet (frozen, so one serves every pass)
_NO_RECORD = ReplicaStatus()


@dataclass(frozen=True)
class _Pass:
    """What the steps of a running job's pass share: read once at its start."""

    snap: Snapshot  # with whole-gang restart: the current epoch's pods only
    tfjob: TFJob
    old: JobStatus
    now: datetime
    clock: ActiveClock
    config: PlanConfig
    whole_gang: bool
    #: pods of an earlier gang epoch, going (policy.gang_restart): never accounted
    stale: list[ObservedPod]
    #: permanent ends the accounting leaves out (policy.collateral; whole gang only)
    collateral: collateral.Collateral
    #: the job's stall and restart-guard settings (reconcile.api.watch)
    watch: TrainingWatch
    #: the training-progress records of the current epoch's pods
    live: tuple[ReplicaRecord, ...]
    #: and of every pod the job has, for the furthest step (the restart guard)
    reported: tuple[ReplicaRecord, ...]
    #: any rule of reconcile.progress may apply: a deadline is set, or the job reports
    watching: bool


def active_plan(
    snap: Snapshot, tfjob: TFJob, now: datetime, config: PlanConfig, *, status_only: bool = False
) -> Plan:
    """A running job's pass, in order: account every pod (policy.restart), fold pods that
    ended together into one gang restart, reach the verdict (policy.verdict), compute
    the status (policy.status); then, unless the pass reports status only, either finish
    (the verdict's cleanup) or run (creates, deletes, releases, the PodGroup). Each step
    is a function of what the steps before it returned."""
    p = _begin(snap, tfjob, now, config)
    outcomes = account(
        p.snap,
        tfjob,
        p.old,
        config,
        resumed_at=p.clock.resumed_at,
        deferred=p.collateral.deferred,
    )
    ends = [f"{rt}-{end}" for rt, o in outcomes.items() for end in o.ends]
    restart_type = _gang_restart_trigger(p, outcomes)
    if restart_type is not None:
        outcomes = gang_restart.as_one_restart(p.old, outcomes)
    outcomes, stall, stall_restart, moves, guard = _training_rules(
        p, outcomes, restart_type, status_only=status_only
    )
    verdict, deadline_in = _verdict(p, outcomes, stall, guard)
    move_restart = bool(moves) and p.whole_gang
    restarting = (restart_type is not None or stall_restart or move_restart) and verdict is None
    clock = p.clock
    if stall is not None:
        conds = stalled_conditions(
            clock.conditions, stall, tfjob.name, now, restarted=stall_restart and restarting
        )
        clock = replace(clock, conditions=conds)
    new = calculate_status(p.old, outcomes, verdict, now, job=tfjob, clock=clock)
    if guard.guard != p.old.restart_guard:
        new = new.model_copy(update={"restart_guard": guard.guard})
    if restarting:
        # Account, then act: the next epoch is stored before any pod is deleted.
        if restart_type is not None:
            message = cond.msg_gang_restart(tfjob.name, restart_type)
        elif stall_restart:
            message = cond.msg_stall_restart(tfjob.name, stall.summary if stall else "")
        else:
            message = cond.msg_move_restart(tfjob.name)
        plan = status_plan(p.old, _restarting(p, new, message))
        if stall_restart and stall is not None:
            # Stalled never turns True for it: the event says what the restart is for
            stalled = cond.EventIntent(cond.WARNING, stall.reason, stall.message)
            plan = replace(plan, events=[stalled, *plan.events])
        moved = move_events(tfjob.name, moves, whole_gang=True)
        return replace(plan, ends=ends, events=[*moved, *plan.events])
    gang = gang_step(p.snap, tfjob, config) if verdict is None else None
    new = _admission(p, new, gang)
    failed_event_type = verdict.event_type if verdict is not None else cond.NORMAL
    plan = replace(status_plan(p.old, new, failed_event_type=failed_event_type), ends=ends)
    if moves and verdict is None:
        moved = move_events(tfjob.name, moves, whole_gang=False)
        plan = replace(plan, events=[*plan.events, *moved])
    if verdict is not None and not verdict.succeeded and not p.whole_gang:
        plan = _failed_after_peer(p, plan, outcomes)
    if status_only:
        return plan
    if verdict is not None:
        return _finishing(p, plan)
    if stall is None and p.watching:
        # the pass that sets Running starts the clock: time it now, not a pass later
        stored = p.old.training_progress
        stall = check_stall(
            p.watch, tfjob.name, new.conditions, stored, p.live, p.snap.now, p.snap.unheard
        )
    stall_in = stall.due_in if stall is not None else None
    return _running(p, plan, outcomes, gang, deadline_in, stall_in)


def _begin(snap: Snapshot, tfjob: TFJob, now: datetime, config: PlanConfig) -> _Pass:
    old = snap.job.status
    whole = gang_restart.enabled(tfjob)
    stale: list[ObservedPod] = []
    if whole:
        current, stale = gang_restart.split_by_epoch(snap.pods, old.gang_epoch)
        snap = replace(snap, pods=current)
    clock = active_clock(old, tfjob.name, now)
    held = collateral.NONE
    if whole:
        ends = collateral.read_ends(
            snap.pods, _policies(tfjob), snap.now, resumed_at=clock.resumed_at
        )
        held = collateral.collateral(ends, snap.now, _window(config), whole_gang=True)
    live: tuple[ReplicaRecord, ...] = ()
    reported: tuple[ReplicaRecord, ...] = ()
    if snap.training:  # most jobs report nothing: a pass costs them nothing here
        uids = {pod.uid for pod in snap.pods}
        every = uids | {pod.uid for pod in stale}
        live = tuple(r for r in snap.training if r.who.pod_uid in uids)
        reported = tuple(r for r in snap.training if r.who.pod_uid in every)
    watch = snap.job.watch
    watching = watch.watches_stalls or bool(snap.training) or old.training_progress is not None
    return _Pass(
        snap, tfjob, old, now, clock, config, whole, stale, held, watch, live, reported, watching
    )


def _policies(tfjob: TFJob) -> dict[str, str]:
    return {rt.lower(): rspec.policy for rt, rspec in tfjob.replica_specs.items()}


def _window(config: PlanConfig) -> timedelta:
    return timedelta(seconds=config.collateral_window_seconds)


def _failed_after_peer(p: _Pass, plan: Plan, outcomes: Mapping[str, ReplicaAccount]) -> Plan:
    """Without whole-gang restart: a permanent end that failed the job soon after a
    peer's retryable one is named in a Warning event, once (the pass that fails the job)."""
    if not any(o.permanent_failure is not None for o in outcomes.values()):
        return plan
    ends = collateral.read_ends(
        p.snap.pods, _policies(p.tfjob), p.snap.now, resumed_at=p.clock.resumed_at
    )
    earlier = [
        collateral.Trouble(replica_name(p.tfjob.name, rt, int(i)), began)
        for rt, rs in p.old.replica_statuses.items()
        for i, rec in rs.index_retries.items()
        if (began := rec.last_end_time or rec.last_failure_time) is not None and i.isdigit()
    ]
    found = collateral.collateral(
        ends, p.snap.now, _window(p.config), whole_gang=False, earlier=earlier
    )
    if not found.followed:
        return plan
    first = found.followed[0]
    message = cond.msg_failed_after_peer(p.tfjob.name, first.pod, first.peer, first.seconds)
    event = cond.EventIntent(cond.WARNING, cond.REASON_FAILED_AFTER_PEER, message)
    return replace(plan, events=[*plan.events, event])


def _gang_restart_trigger(p: _Pass, outcomes: Mapping[str, ReplicaAccount]) -> str | None:
    """The replica type whose end restarts the whole gang, if one does: never while an
    earlier epoch's pods are still going."""
    if not p.whole_gang or p.stale:
        return None
    return gang_restart.trigger(p.old, outcomes)


def _verdict(
    p: _Pass, outcomes: Mapping[str, ReplicaAccount], stall: Stall | None, guard: GuardCheck
) -> tuple[Verdict | None, float | None]:
    """The verdict and the seconds to the deadline. A job no rule of the API ends is
    failed by creates refused for longer than the grace (policy.failures), by the restart
    guard, or by a stall whose action is to fail (reconcile.progress)."""
    verdict, deadline_in = decide(p.tfjob, outcomes, p.clock.start_time, p.snap.now)
    if verdict is not None:
        return verdict, deadline_in
    name = p.tfjob.name
    failure = p.snap.failure
    if failure is not None:
        message = cond.msg_create_failed(p.tfjob.namespace, name, failure.message)
        verdict = Verdict(False, message, cond.WARNING, failure_reason=failure.reason)
    elif guard.tripped and guard.guard is not None:
        message = cond.msg_no_progress(
            name,
            guard.without_progress,
            guard.guard.since_step,
            RESTART_GUARD_ANNOTATION,
            p.watch.restart_guard,
        )
        verdict = Verdict(False, message, cond.WARNING, failure_reason=cond.REASON_NO_PROGRESS)
    elif stall is not None and stall.stalled and p.watch.stall_action is StallAction.FAIL:
        message = cond.msg_stall_failed(name, stall.summary)
        verdict = Verdict(False, message, cond.WARNING, failure_reason=cond.REASON_STALLED)
    return verdict, deadline_in


def _training_rules(
    p: _Pass,
    outcomes: dict[str, ReplicaAccount],
    restart_type: str | None,
    *,
    status_only: bool,
) -> tuple[dict[str, ReplicaAccount], Stall | None, bool, list[Straggler], GuardCheck]:
    """What the job's training progress decides (reconcile.progress): the stall and
    whether it restarts the gang, the stragglers to move, the restart guard; the
    outcomes with the restarts and moves they count. Nothing for a job that neither
    watches for stalls nor has ever reported: most jobs, and every pass of theirs."""
    if not p.watching:
        return outcomes, None, False, [], GuardCheck(p.old.restart_guard)
    stall = None if status_only else _stall(p)
    stall_restart = _stall_restarts(p, stall, restart_type)
    if stall_restart:
        outcomes = gang_restart.counted_restart(outcomes)
    moves = [] if status_only or restart_type or stall_restart else _moves(p)
    if moves:
        outcomes = with_moves(outcomes, moves, p.now)
    return outcomes, stall, stall_restart, moves, _guard(p, outcomes)


def _stall(p: _Pass) -> Stall | None:
    return check_stall(
        p.watch,
        p.tfjob.name,
        p.clock.conditions,
        p.old.training_progress,
        p.live,
        p.snap.now,
        p.snap.unheard,
    )


def _stall_restarts(p: _Pass, stall: Stall | None, restart_type: str | None) -> bool:
    """Whether this pass restarts the gang for a stall: one that asks for it, found
    with no other restart under way (a pod's end restarting the gang already, an
    earlier epoch's pods still going)."""
    return (
        stall is not None
        and stall.stalled
        and p.watch.stall_action is StallAction.RESTART
        and p.whole_gang
        and restart_type is None
        and not p.stale
    )


def _moves(p: _Pass) -> list[Straggler]:
    """The stragglers to move off their nodes in this pass (reconcile.progress.moves)."""
    watch = p.watch
    if watch.straggler_action is not StragglerAction.MOVE or watch.straggler_threshold <= 0:
        return []
    if p.stale:
        return []  # an earlier epoch's pods still going: the gang is restarting
    running = [pod for pod in p.snap.pods if pod.phase == PodPhase.RUNNING and not pod.terminating]
    if len(running) < len(p.snap.pods) or len(running) < _replicas_of(p.tfjob):
        return []  # one move at a time: while any pod is away the comparisons shift
    stored = p.old.training_progress.stragglers if p.old.training_progress else []
    flagged = find_stragglers(p.live, stored, watch.straggler_threshold, p.snap.now)
    room = None
    if flagged and p.snap.nodes is not None:
        nodes = p.snap.nodes
        room = {rt: placeable(spec.template, nodes) for rt, spec in p.tfjob.replica_specs.items()}
    uids = {pod.uid for pod in running}
    return moves_due(flagged, p.old.replica_statuses, uids, p.now, room)


def _replicas_of(job: TFJob) -> int:
    return sum(spec.count for spec in job.replica_specs.values())


def _guard(p: _Pass, outcomes: Mapping[str, ReplicaAccount]) -> GuardCheck:
    if not p.reported and p.old.training_progress is None:
        return GuardCheck(p.old.restart_guard)  # never reported: nothing to guard
    before = sum(rs.restarts for rs in p.old.replica_statuses.values())
    now = sum(o.status.restarts for o in outcomes.values())
    furthest = furthest_step(p.old.training_progress, p.reported)
    return check_guard(p.watch.restart_guard, p.old.restart_guard, before, now, furthest)


def _restarting(p: _Pass, new: JobStatus, message: str) -> JobStatus:
    """The status that starts a whole-gang restart: the next epoch, Restarting."""
    conds = cond.set_condition(
        new.conditions, cond.RESTARTING, cond.TRUE, cond.REASON_RESTARTING, message, p.now
    )
    conds = cond.set_message(conds, cond.RESTARTING, message)
    return gang_restart.restart_gang(new, p.old).model_copy(update={"conditions": conds})


def _admission(p: _Pass, new: JobStatus, gang: GangStep | None) -> JobStatus:
    """With gang scheduling, the conditions that say the gang waits to be admitted."""
    if gang is None:
        return new
    conds = admission_conditions(new.conditions, gang.waiting, p.tfjob.name, p.now)
    return new.model_copy(update={"conditions": conds})


def _finishing(p: _Pass, plan: Plan) -> Plan:
    """The pass that ends the job: cleanPodPolicy's deletions (every epoch's pods), the
    releases, the TTL's timer, the PodGroup gone."""
    pods = [*p.snap.pods, *p.stale]
    done = finishing_cleanup(p.snap.job.run_policy, pods, p.snap.services, p.now, p.snap.now)
    releases = active_releases(
        pods, done.delete_pods, p.old, p.tfjob, resumed_at=p.clock.resumed_at
    )
    return with_children(
        plan,
        delete_pods=done.delete_pods,
        delete_services=done.delete_services,
        release_pods=releases,
        requeue_after=done.requeue_after,
        podgroup=podgroup_delete(p.snap, p.config),
    )


def _allowed_creates(
    p: _Pass, outcomes: Mapping[str, ReplicaAccount], gang: GangStep | None
) -> dict[str, list[int]]:
    """The indexes to create pods for now: what accounting asks for, less what must wait.
    Each rule only takes away."""
    creates = {rt: o.create for rt, o in outcomes.items() if o.create}
    if gang is not None and not gang.pods_allowed:
        return {}  # the whole gang, or nothing: the PodGroup's events bring it back
    if p.whole_gang and (p.stale or any(o.wait is not None for o in outcomes.values())):
        return {}  # all together: once the old epoch is gone and the backoff is over
    if old_coordinator_alive(p.tfjob, p.snap.pods):
        # delete first (foreign_pods), create once the old one is gone: its deletion
        # event brings the job back
        return {rt: c for rt, c in creates.items() if rt not in CHIEF_TYPES}
    return creates


def _running(
    p: _Pass,
    plan: Plan,
    outcomes: Mapping[str, ReplicaAccount],
    gang: GangStep | None,
    deadline_in: float | None,
    stall_in: float | None,
) -> Plan:
    """A job that goes on: its pods and services made and removed, tracking finalizers
    released, the PodGroup written, and the earliest timer (a backoff, the deadline)."""
    tfjob, config = p.tfjob, p.config
    creates = _allowed_creates(p, outcomes, gang)
    overrides = template_overrides(tfjob, creates)
    if config.gang is not None:
        overrides += scheduler_overrides(tfjob, config.gang, creates)
    pods = new_pods(
        tfjob,
        creates,
        cluster_domain=config.cluster_domain,
        operator_name=config.operator_name,
        gang=config.gang,
        reporting=config.reporting,
    )
    if p.whole_gang:
        pods = [gang_restart.labelled(pod, p.old.gang_epoch) for pod in pods]
    if pods:  # moved stragglers' indexes keep away from their nodes
        pods = keep_away(pods, avoided_nodes({rt: o.status for rt, o in outcomes.items()}))
    doomed = unique(
        [pod for o in outcomes.values() for pod in o.delete] + foreign_pods(tfjob, p.snap.pods)
    )
    stale_doomed = gang_restart.stale_deletions(p.stale)
    releases = active_releases(p.snap.pods, doomed, p.old, tfjob, resumed_at=p.clock.resumed_at)
    create_svcs, delete_svcs = service_diff(
        tfjob, p.snap.services, operator_name=config.operator_name
    )
    waits = [o.wait for o in outcomes.values() if o.wait is not None]
    if p.collateral.wait is not None:
        waits.append(p.collateral.wait)
    if deadline_in is not None:
        waits.append(deadline_in)
    if stall_in is not None:
        waits.append(stall_in)
    return with_children(
        replace(plan, events=[*plan.events, *overrides]),
        create_pods=pods,
        delete_pods=[*doomed, *stale_doomed],
        create_services=create_svcs,
        delete_services=delete_svcs,
        release_pods=[*releases, *settled_releases(p.stale, stale_doomed)],
        retired=retired(releases, tfjob),
        requeue_after=min(waits) if waits else None,
        podgroup=gang.write if gang is not None else None,
    )


def account(
    snap: Snapshot,
    tfjob: TFJob,
    old: JobStatus,
    config: PlanConfig,
    *,
    resumed_at: datetime | None,
    deferred: frozenset[str] = frozenset(),
) -> dict[str, ReplicaAccount]:
    """Fold every replica type's observed pods into its durable record (policy.restart)."""
    pods_by_type = group_pods(snap.pods)
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
            old.replica_statuses.get(rtype, _NO_RECORD),
            snap.now,
            config.backoff,
            resumed_at=resumed_at,
            deferred=deferred,
        )
        for rtype, rspec in tfjob.replica_specs.items()
    }
