"""compute_plan: everything one reconcile pass decides, as a pure function of a snapshot.

No I/O and no clock reads: the orchestrator (reconcile.tfjob) passes the cached TFJob, its
owned pods and services and ``now``, and applies the returned Plan (children first, then the
status once, then the events). Running the same snapshot twice gives the same plan, and a
world that has not changed gives ``status=None`` — no write.

Order of decisions (each step returns early):
1. managed by another controller → skip; being deleted → skip (the garbage collector owns it);
2. finished (Succeeded/Failed) → only cleanPodPolicy and TTL; never new pods (durable
   terminal record: a finished job is not re-run, whatever happens to its pods);
3. invalid spec → Failed (TFJobFailedValidation) with the field errors, no pods;
4. suspended → delete every pod and service, Suspended=True;
5. otherwise: account every pod into the durable per-index record (restart.py), decide
   success / failure / backoffLimit / activeDeadlineSeconds, then create and delete.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from controller.types import JSON
from reconcile import status as st
from reconcile.cluster_spec import ClusterMember, tf_config, tf_port
from reconcile.defaults import apply_defaults
from reconcile.labels import (
    CHIEF_TYPES,
    DEFAULT_OPERATOR_NAME,
    WORKER_TYPE,
    is_master_role,
    replica_name,
    replica_type_of,
)
from reconcile.models import MANAGED_BY_TRAINING_OPERATOR, TFJob
from reconcile.pods import (
    JobRef,
    build_pod,
    group_by_replica,
    is_terminating,
    name_of,
    phase_of,
)
from reconcile.restart import (
    BackoffPolicy,
    PodOutcome,
    ReplicaInput,
    ReplicaOutcome,
    account_replica,
)
from reconcile.services import build_service
from reconcile.status_types import JobCondition, JobStatus, ReplicaStatus, parse_indexes
from reconcile.validation import FieldError, check, format_errors

#: Replica types in the order upstream's UpdateJobStatus walks them (status decisions and the
#: "which replica failed" message depend on it).
STATUS_ORDER = ("Chief", "Evaluator", "Master", "PS", "Worker")

CLEAN_ALL = "All"
CLEAN_RUNNING = "Running"
CLEAN_NONE = "None"
SUCCESS_ALL_WORKERS = "AllWorkers"


@dataclass(frozen=True)
class PlanConfig:
    cluster_domain: str | None = None  # CUSTOM_CLUSTER_DOMAIN
    backoff_base_seconds: float = 10.0  # replacement backoff 10s * 2^n
    backoff_max_seconds: float = 360.0
    backoff_reset_after_seconds: float = 600.0  # a pod that ran this long resets the backoff
    operator_name: str = DEFAULT_OPERATOR_NAME

    @property
    def backoff(self) -> BackoffPolicy:
        return BackoffPolicy(
            base_seconds=self.backoff_base_seconds,
            max_seconds=self.backoff_max_seconds,
            reset_after_seconds=self.backoff_reset_after_seconds,
        )


@dataclass(frozen=True)
class Snapshot:
    job: JSON  # the TFJob exactly as in the cache (never mutated)
    pods: list[JSON]  # pods whose controller ownerReference UID is the job's
    services: list[JSON]  # services likewise
    now: datetime  # tz-aware UTC


@dataclass(frozen=True)
class EventIntent:
    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    create_pods: list[JSON] = field(default_factory=list)
    delete_pods: list[JSON] = field(default_factory=list)
    create_services: list[JSON] = field(default_factory=list)
    delete_services: list[JSON] = field(default_factory=list)
    status: JSON | None = None  # the complete new .status if it differs, else None
    events: list[EventIntent] = field(default_factory=list)
    requeue_after: float | None = None  # earliest due timer
    delete_job: bool = False  # ttlSecondsAfterFinished expired
    skip_reason: str | None = None  # why nothing was done, for the log line


def compute_plan(snap: Snapshot, config: PlanConfig) -> Plan:
    job = snap.job
    meta = job.get("metadata") or {}
    run_policy = _raw_run_policy(job)
    managed_by = run_policy.get("managedBy")
    if managed_by is not None and managed_by != MANAGED_BY_TRAINING_OPERATOR:
        return Plan(skip_reason="managed-by-other")
    if meta.get("deletionTimestamp"):
        return Plan(skip_reason="deleting")
    old = JobStatus.from_json(job.get("status"))
    if st.is_finished(old.conditions):
        return _finished_plan(snap, old, run_policy)
    defaulted, errors = checked_spec(job)
    if defaulted is None:
        return _invalid_plan(snap, old, format_errors(errors))
    ctx = _Context.build(snap, defaulted, old, config)
    if ctx.tfjob.spec.run_policy is not None and ctx.tfjob.spec.run_policy.suspend:
        return _suspend_plan(ctx)
    return _active_plan(ctx)


#: The spec parsed, validated and defaulted, keyed by everything check() reads: the
#: object's identity and its spec, byte for byte. A hit is exactly the value check() and
#: apply_defaults() would compute again, so the plan stays a pure function of its
#: snapshot while status-only passes skip the pydantic work (a fifth of a busy
#: controller's planning time before).
_SpecKey = tuple[str, str, str, bytes]
_SPEC_CACHE: OrderedDict[_SpecKey, tuple[TFJob | None, list[FieldError]]] = OrderedDict()
_SPEC_CACHE_SIZE = 1024


def checked_spec(job: Mapping[str, Any]) -> tuple[TFJob | None, list[FieldError]]:
    """The job parsed, validated and defaulted, or None and the field errors."""
    meta = job.get("metadata") or {}
    key: _SpecKey | None
    try:
        key = (
            str(meta.get("uid", "")),
            str(meta.get("namespace", "")),
            str(meta.get("name", "")),
            orjson.dumps(job.get("spec"), option=orjson.OPT_SORT_KEYS),
        )
    except TypeError:
        key = None  # not plain JSON: no caching, check() will say what is wrong
    if key is not None and key in _SPEC_CACHE:
        _SPEC_CACHE.move_to_end(key)
        return _SPEC_CACHE[key]
    # Validate the spec only: the status is ours and is read leniently by the caller, so
    # a status this version cannot parse must not turn the job into a validation failure.
    parsed, errors = check({k: v for k, v in job.items() if k != "status"})
    result: tuple[TFJob | None, list[FieldError]] = (
        (None, errors) if parsed is None or errors else (apply_defaults(parsed), [])
    )
    if key is not None:
        _SPEC_CACHE[key] = result
        if len(_SPEC_CACHE) > _SPEC_CACHE_SIZE:
            _SPEC_CACHE.popitem(last=False)
    return result


# --- context --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    snap: Snapshot
    tfjob: TFJob
    old: JobStatus
    config: PlanConfig
    ref: JobRef
    now: datetime  # second precision, as stored timestamps are

    @classmethod
    def build(cls, snap: Snapshot, tfjob: TFJob, old: JobStatus, config: PlanConfig) -> _Context:
        ref = JobRef(name=tfjob.name, namespace=tfjob.namespace, uid=tfjob.uid)
        now = snap.now.astimezone(UTC).replace(microsecond=0)
        return cls(snap=snap, tfjob=tfjob, old=old, config=config, ref=ref, now=now)

    @property
    def specs(self) -> Mapping[str, Any]:
        return self.tfjob.replica_specs

    def replicas(self, rtype: str) -> int:
        value = self.specs[rtype].replicas
        return value if isinstance(value, int) and value > 0 else 0


# --- finished, invalid, suspended --------------------------------------------------------------


def _finished_plan(snap: Snapshot, old: JobStatus, run_policy: Mapping[str, Any]) -> Plan:
    """Cleanup per cleanPodPolicy and TTL only. The status is frozen at the moment the job
    finished (upstream does the same bookkeeping once), so nothing is written here."""
    policy = run_policy.get("cleanPodPolicy")
    del_pods, del_svcs = cleanup_deletions(
        policy if isinstance(policy, str) else CLEAN_NONE, snap.pods, snap.services
    )
    requeue: float | None = None
    delete_job = False
    ttl = run_policy.get("ttlSecondsAfterFinished")
    completed = old.completion_time or _finished_at(old.conditions)
    if isinstance(ttl, int) and not isinstance(ttl, bool) and completed is not None:
        remaining = (elapsed_due(completed, ttl) - snap.now).total_seconds()
        if remaining <= 0:
            delete_job = True
        else:
            requeue = remaining
    idle = not (del_pods or del_svcs or delete_job)
    return Plan(
        delete_pods=del_pods,
        delete_services=del_svcs,
        requeue_after=requeue,
        delete_job=delete_job,
        skip_reason="finished" if idle else None,
    )


def _invalid_plan(snap: Snapshot, old: JobStatus, message: str) -> Plan:
    meta = snap.job.get("metadata") or {}
    name = str(meta.get("name", ""))
    now = snap.now.astimezone(UTC).replace(microsecond=0)
    conds = _with_created(old.conditions, name, now)
    conds = st.set_condition(conds, st.FAILED, st.TRUE, st.REASON_FAILED_VALIDATION, message, now)
    new = old.model_copy(
        update={
            "conditions": conds,
            "completion_time": old.completion_time or now,
            "observed_generation": _generation(snap.job),
        }
    )
    return Plan(
        status=_changed(old, new),
        events=_events(old.conditions, conds, failed_event_type=st.WARNING),
    )


def _suspend_plan(ctx: _Context) -> Plan:
    """Suspended: no pods or services at all, active counts zeroed, Running=False.
    The durable records (succeeded/failed indexes, restarts) are kept for the resume."""
    name = ctx.ref.name
    conds = _with_created(ctx.old.conditions, name, ctx.now)
    if st.is_true(conds, st.RUNNING):
        conds = st.set_condition(
            conds, st.RUNNING, st.FALSE, st.REASON_SUSPENDED, st.msg_suspended(name), ctx.now
        )
    conds = st.set_condition(
        conds, st.SUSPENDED, st.TRUE, st.REASON_SUSPENDED, st.msg_suspended(name), ctx.now
    )
    replica_statuses = {
        rt: ctx.old.replica_statuses.get(rt, ReplicaStatus()).model_copy(
            update={"active": 0, "active_indexes": ""}
        )
        for rt in ctx.specs
    }
    new = ctx.old.model_copy(
        update={
            "conditions": conds,
            "replica_statuses": replica_statuses,
            "observed_generation": _generation(ctx.snap.job),
        }
    )
    del_pods, del_svcs = cleanup_deletions(CLEAN_ALL, ctx.snap.pods, ctx.snap.services)
    return Plan(
        delete_pods=del_pods,
        delete_services=del_svcs,
        status=_changed(ctx.old, new),
        events=_events(ctx.old.conditions, conds),
    )


# --- the active path ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Verdict:
    """How this pass ends the job, if it does."""

    cond_type: str  # SUCCEEDED or FAILED
    message: str
    event_type: str = st.NORMAL


def _active_plan(ctx: _Context) -> Plan:
    name, namespace, now = ctx.ref.name, ctx.ref.namespace, ctx.now
    conds = _with_created(ctx.old.conditions, name, now)
    start_time = ctx.old.start_time
    resumed_at: datetime | None = None
    if st.is_true(conds, st.SUSPENDED):
        # Resume: the activeDeadlineSeconds clock restarts, as in the k8s Job controller.
        conds = st.set_condition(
            conds, st.SUSPENDED, st.FALSE, st.REASON_RESUMED, st.msg_resumed(name), now
        )
        start_time = resumed_at = now
    else:
        suspended = st.find(conds, st.SUSPENDED)
        if suspended is not None and suspended.reason == st.REASON_RESUMED:
            resumed_at = suspended.last_transition_time
    if start_time is None:
        start_time = now

    pods_by_type = group_by_replica(ctx.snap.pods)
    outcomes: dict[str, ReplicaOutcome] = {}
    for rtype in ctx.specs:
        rspec = ctx.specs[rtype]
        outcomes[rtype] = account_replica(
            ReplicaInput(
                rtype=rtype,
                replicas=ctx.replicas(rtype),
                restart_policy=rspec.restart_policy or "Never",
                failures_tolerated=bool(ctx.tfjob.spec.enable_dynamic_worker)
                and rtype == WORKER_TYPE,
            ),
            pods_by_type.get(rtype.lower(), {}),
            ctx.old.replica_statuses.get(rtype, ReplicaStatus()),
            ctx.snap.now,
            ctx.config.backoff,
            resumed_at=resumed_at,
        )
    replica_statuses = {rt: o.status for rt, o in outcomes.items()}

    verdict, deadline_in = _verdict(ctx, outcomes, start_time)
    if verdict is not None:
        return _finishing_plan(ctx, conds, replica_statuses, start_time, verdict)

    restarting = next((rt for rt in _status_order(outcomes) if outcomes[rt].restarting), None)
    decider = _deciding_type(ctx.specs)
    if restarting is not None:
        message = st.msg_restarting(name, restarting)
        conds = st.set_condition(conds, st.RESTARTING, st.TRUE, st.REASON_RESTARTING, message, now)
    elif decider is not None and outcomes[decider].status.active > 0:
        conds = st.set_condition(
            conds, st.RUNNING, st.TRUE, st.REASON_RUNNING, st.msg_running(namespace, name), now
        )

    new = ctx.old.model_copy(
        update={
            "conditions": conds,
            "replica_statuses": replica_statuses,
            "start_time": start_time,
            "observed_generation": _generation(ctx.snap.job),
        }
    )
    del_pods = [p for o in outcomes.values() for p in o.delete]
    del_pods += _foreign_pods(ctx)
    create_svcs, del_svcs = _service_plan(ctx)
    waits = [o.wait for o in outcomes.values() if o.wait is not None]
    if deadline_in is not None:
        waits.append(deadline_in)
    return Plan(
        create_pods=_new_pods(ctx, outcomes),
        delete_pods=_dedup(del_pods),
        create_services=create_svcs,
        delete_services=del_svcs,
        status=_changed(ctx.old, new),
        events=_events(ctx.old.conditions, conds),
        requeue_after=min(waits) if waits else None,
    )


def _verdict(
    ctx: _Context, outcomes: Mapping[str, ReplicaOutcome], start_time: datetime
) -> tuple[_Verdict | None, float | None]:
    """Success, then replica failure, then backoffLimit, then activeDeadlineSeconds.

    Success first: when the deciding replica finished in the same pass as, say, a PS died,
    the training outcome is what the chief (or worker 0) reported. Returns the verdict and,
    when none, the seconds left until the active deadline.
    """
    name, namespace = ctx.ref.name, ctx.ref.namespace
    if _succeeded(ctx, outcomes):
        return _Verdict(st.SUCCEEDED, st.msg_succeeded(namespace, name)), None
    for rtype in _status_order(outcomes):
        o = outcomes[rtype]
        if o.permanent_failure is PodOutcome.FAIL_EXIT_CODE:
            return _Verdict(st.FAILED, st.msg_exit_code_failed(name, rtype), st.WARNING), None
        if o.permanent_failure is PodOutcome.FAIL_NEVER:
            msg = st.msg_replicas_failed(namespace, name, o.status.failed, rtype)
            return _Verdict(st.FAILED, msg), None
    run_policy = ctx.tfjob.spec.run_policy
    limit = run_policy.backoff_limit if run_policy is not None else None
    if limit is not None and sum(o.status.restarts for o in outcomes.values()) > limit:
        return _Verdict(st.FAILED, st.msg_backoff_limit(name)), None
    ads = run_policy.active_deadline_seconds if run_policy is not None else None
    if ads is not None:
        remaining = (elapsed_due(start_time, ads) - ctx.snap.now).total_seconds()
        if remaining <= 0:
            return _Verdict(st.FAILED, st.msg_deadline(name)), None
        return None, remaining
    return None, None


def _succeeded(ctx: _Context, outcomes: Mapping[str, ReplicaOutcome]) -> bool:
    """Chief/Master decides when present; otherwise worker 0 (or all workers with
    successPolicy AllWorkers). Other types never decide (semantics §3.3)."""
    decider = _deciding_type(ctx.specs)
    if decider is None:
        return False
    status = outcomes[decider].status
    if status.succeeded >= ctx.replicas(decider):
        return True
    if decider == WORKER_TYPE and ctx.tfjob.spec.success_policy != SUCCESS_ALL_WORKERS:
        return 0 in parse_indexes(status.succeeded_indexes)
    return False


def _deciding_type(specs: Mapping[str, Any]) -> str | None:
    for rtype in CHIEF_TYPES:
        if rtype in specs:
            return rtype
    return WORKER_TYPE if WORKER_TYPE in specs else None


def _finishing_plan(
    ctx: _Context,
    conds: list[JobCondition],
    replica_statuses: dict[str, ReplicaStatus],
    start_time: datetime,
    verdict: _Verdict,
) -> Plan:
    reason = st.REASON_SUCCEEDED if verdict.cond_type == st.SUCCEEDED else st.REASON_FAILED
    conds = st.set_condition(conds, verdict.cond_type, st.TRUE, reason, verdict.message, ctx.now)
    if verdict.cond_type == st.SUCCEEDED:
        # Upstream's finished-job bookkeeping: whatever is still active counts as succeeded.
        replica_statuses = {
            rt: rs.model_copy(
                update={"succeeded": rs.succeeded + rs.active, "active": 0, "active_indexes": ""}
            )
            for rt, rs in replica_statuses.items()
        }
    new = ctx.old.model_copy(
        update={
            "conditions": conds,
            "replica_statuses": replica_statuses,
            "start_time": start_time,
            "completion_time": ctx.now,
            "observed_generation": _generation(ctx.snap.job),
        }
    )
    run_policy = ctx.tfjob.spec.run_policy
    policy = (run_policy.clean_pod_policy if run_policy is not None else None) or CLEAN_NONE
    del_pods, del_svcs = cleanup_deletions(policy, ctx.snap.pods, ctx.snap.services)
    ttl = run_policy.ttl_seconds_after_finished if run_policy is not None else None
    return Plan(
        delete_pods=del_pods,
        delete_services=del_svcs,
        status=_changed(ctx.old, new),
        events=_events(ctx.old.conditions, conds, failed_event_type=verdict.event_type),
        # The TTL clock starts now; the job is deleted by a later pass, after this status
        # (and its events) are stored.
        requeue_after=(
            (elapsed_due(ctx.now, max(ttl, 0)) - ctx.snap.now).total_seconds()
            if ttl is not None
            else None
        ),
    )


# --- children ----------------------------------------------------------------------------------


def _new_pods(ctx: _Context, outcomes: Mapping[str, ReplicaOutcome]) -> list[JSON]:
    members = {
        rt: ClusterMember(replicas=ctx.replicas(rt), port=tf_port(ctx.specs[rt].template))
        for rt in ctx.specs
    }
    dynamic = bool(ctx.tfjob.spec.enable_dynamic_worker)
    pods: list[JSON] = []
    for rtype, outcome in outcomes.items():
        rspec = ctx.specs[rtype]
        for index in outcome.create:
            pods.append(
                build_pod(
                    ctx.ref,
                    rtype,
                    index,
                    rspec.template,
                    restart_policy=rspec.restart_policy or "Never",
                    tf_config=tf_config(
                        ctx.ref.name,
                        ctx.ref.namespace,
                        members,
                        rtype,
                        index,
                        cluster_domain=ctx.config.cluster_domain,
                        dynamic_worker=dynamic,
                    ),
                    master_role=is_master_role(rtype, index, ctx.specs),
                    operator_name=ctx.config.operator_name,
                )
            )
    return pods


def _foreign_pods(ctx: _Context) -> list[JSON]:
    """Owned pods of a replica type no longer in the spec (the spec was edited)."""
    known = {rt.lower() for rt in ctx.specs}
    return [
        p
        for p in ctx.snap.pods
        if (rt := replica_type_of(p)) is not None and rt not in known and not is_terminating(p)
    ]


def _service_plan(ctx: _Context) -> tuple[list[JSON], list[JSON]]:
    """Exactly one headless service per index below replicas: create the missing ones,
    delete the rest (scale-down, removed types, duplicates under another name)."""
    wanted: dict[str, tuple[str, int]] = {
        replica_name(ctx.ref.name, rt, i): (rt, i)
        for rt in ctx.specs
        for i in range(ctx.replicas(rt))
    }
    existing: set[str] = set()
    delete: list[JSON] = []
    for svc in ctx.snap.services:
        svc_name = name_of(svc)
        if svc_name in wanted and svc_name not in existing:
            existing.add(svc_name)
        elif not is_terminating(svc):
            delete.append(svc)
    create = [
        build_service(
            ctx.ref, rt, i, ctx.specs[rt].template, operator_name=ctx.config.operator_name
        )
        for svc_name, (rt, i) in wanted.items()
        if svc_name not in existing
    ]
    return create, delete


def cleanup_deletions(
    policy: str, pods: Sequence[JSON], services: Sequence[JSON]
) -> tuple[list[JSON], list[JSON]]:
    """What cleanPodPolicy removes, pods and their services together (semantics §4.11).

    Unlike upstream, services are matched to what is *kept*, not to what is deleted in this
    pass: a service whose pod is already gone (or on its way out) is removed too, so a
    failed service delete or a pod removed by someone else leaves nothing behind (#1191).
    """
    if policy == CLEAN_ALL:
        return (
            [p for p in pods if not is_terminating(p)],
            [s for s in services if not is_terminating(s)],
        )
    if policy != CLEAN_RUNNING:
        return [], []
    del_pods = [p for p in pods if not is_terminating(p) and phase_of(p) in ("Running", "Pending")]
    kept = {
        name_of(p)
        for p in pods
        if not is_terminating(p) and phase_of(p) not in ("Running", "Pending")
    }
    del_svcs = [s for s in services if not is_terminating(s) and name_of(s) not in kept]
    return del_pods, del_svcs


# --- helpers ---------------------------------------------------------------------------------


def _raw_run_policy(job: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = job.get("spec")
    policy = spec.get("runPolicy") if isinstance(spec, Mapping) else None
    return policy if isinstance(policy, Mapping) else {}


def _generation(job: Mapping[str, Any]) -> int | None:
    gen = (job.get("metadata") or {}).get("generation")
    return gen if isinstance(gen, int) and not isinstance(gen, bool) else None


def _with_created(
    conditions: Sequence[JobCondition], name: str, now: datetime
) -> list[JobCondition]:
    # Created is recorded with the first status write (upstream sets it in the create
    # predicate and persists it with the first write, §3.2).
    if st.find(conditions, st.CREATED) is not None:
        return list(conditions)
    return st.set_condition(
        conditions, st.CREATED, st.TRUE, st.REASON_CREATED, st.msg_created(name), now
    )


def elapsed_due(stamp: datetime, seconds: int) -> datetime:
    """When ``seconds`` have certainly elapsed since the instant a stored timestamp records.

    Stored timestamps are truncated to the second, so the real instant lies in
    [stamp, stamp + 1 s): measured from the stamp alone, a deadline would fire up to a
    second early (activeDeadlineSeconds 5 failing a job after 4.1 s, a TTL of 3 deleting
    the job 2.1 s after it finished). Adding the one-second tick makes the duration a
    lower bound, overshooting by less than a second.
    """
    return stamp + timedelta(seconds=seconds + 1)


def _finished_at(conditions: Sequence[JobCondition]) -> datetime | None:
    for cond_type in (st.SUCCEEDED, st.FAILED):
        cond = st.find(conditions, cond_type)
        if cond is not None and cond.status == st.TRUE:
            return cond.last_transition_time
    return None


def _status_order(outcomes: Mapping[str, ReplicaOutcome]) -> list[str]:
    return [rt for rt in STATUS_ORDER if rt in outcomes]


def _changed(old: JobStatus, new: JobStatus) -> JSON | None:
    new_json = new.to_json()
    return None if new_json == old.to_json() else new_json


def _events(
    old: Sequence[JobCondition],
    new: Sequence[JobCondition],
    *,
    failed_event_type: str = st.NORMAL,
) -> list[EventIntent]:
    return [
        EventIntent(e.type, e.reason, e.message)
        for e in st.transition_events(old, new, failed_event_type=failed_event_type)
    ]


def _dedup(objs: list[JSON]) -> list[JSON]:
    seen: set[str] = set()
    out: list[JSON] = []
    for obj in objs:
        key = str((obj.get("metadata") or {}).get("uid") or name_of(obj))
        if key not in seen:
            seen.add(key)
            out.append(obj)
    return out


__all__ = [
    "EventIntent",
    "Plan",
    "PlanConfig",
    "Snapshot",
    "cleanup_deletions",
    "compute_plan",
    "elapsed_due",
]
