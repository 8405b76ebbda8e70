"""What a pass is given and what it decides: Snapshot, PlanConfig, Plan, and the
constructors every branch builds its Plan with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from controller.types import JSON
from reconcile.api.labels import DEFAULT_OPERATOR_NAME
from reconcile.api.spec import JobView
from reconcile.api.status_types import JobStatus
from reconcile.objects.observed import ObservedPod, raws
from reconcile.objects.reporting import Reporting
from reconcile.policy import conditions as cond
from reconcile.policy.cleanup import Cleanup
from reconcile.policy.collateral import DEFAULT_WINDOW
from reconcile.policy.conditions import EventIntent
from reconcile.policy.failures import PersistentFailure
from reconcile.policy.gang import (
    Gang,
)
from reconcile.policy.restart import BackoffPolicy
from reconcile.policy.status import (
    changed,
    invalid_status,
    is_progress_only,
)
from reconcile.progress.records import ReplicaRecord


@dataclass(frozen=True)
class PlanConfig:
    cluster_domain: str | None = None  # CUSTOM_CLUSTER_DOMAIN
    #: the replacement backoff (policy.restart.BackoffPolicy, whose defaults these are)
    backoff_base_seconds: float = BackoffPolicy.base_seconds
    backoff_max_seconds: float = BackoffPolicy.max_seconds
    backoff_reset_after_seconds: float = BackoffPolicy.reset_after_seconds
    operator_name: str = DEFAULT_OPERATOR_NAME
    #: gang scheduling (reconcile.policy.gang): --gang-scheduler-name, None when off
    gang: Gang | None = None
    #: how long a permanent end after a peer's is collateral (reconcile.policy.collateral)
    collateral_window_seconds: float = DEFAULT_WINDOW.total_seconds()
    #: the training-progress endpoint pods report to (reconcile.objects.reporting), None
    #: when it is off
    reporting: Reporting | None = None

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
    #: pods whose controller ownerReference UID is the job's, each read once
    pods: Sequence[ObservedPod]
    services: list[JSON]  # services likewise
    now: datetime  # tz-aware UTC
    #: creates the apiserver has refused for longer than the grace (reconcile.policy.failures)
    failure: PersistentFailure | None = None
    #: the PodGroup named after the job, as cached (gang scheduling only)
    podgroup: JSON | None = None
    #: PriorityClass values by name, for the PriorityClasses the job's templates name
    priorities: Mapping[str, int] = field(default_factory=dict)
    #: the replicas' last training-progress reports (reconcile.progress)
    training: Sequence[ReplicaRecord] = ()
    #: the last time the progress endpoint may have failed to hear reporters for its own
    #: sake, and why (reconcile.sync.progress): the stall deadline does not count it
    unheard: tuple[datetime, str] | None = None
    #: the cluster's nodes (slim: name, labels, cordon, taints) for a job whose
    #: stragglers may be moved; None when not known (reconcile.progress.moves: no move)
    nodes: Sequence[JSON] | None = None


@dataclass(frozen=True)
class PodGroupWrite:
    """The one write to the job's PodGroup a pass may make."""

    verb: str  # "create" (body: the object), "patch" (body: the merge patch), "delete"
    body: JSON  # for "delete": the stored object (its UID is the precondition)


@dataclass(frozen=True)
class Plan:
    """What a pass writes. Pods to delete or release are the objects as cached (what a
    write addresses: name, UID precondition, resourceVersion)."""

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
    #: the status change is progress: it moves only replica counts and the Running
    #: condition (which has no event). A pass still waiting on its own creates may
    #: report it (reconcile.sync.tfjob), and its write may wait for company (the pacer,
    #: reconcile.sync.pacing)
    progress: bool = False
    #: the status change is trainingProgress alone: written at the training-progress
    #: pace (reconcile.sync.status_writes)
    training_only: bool = False
    events: list[EventIntent] = field(default_factory=list)
    requeue_after: float | None = None  # earliest due timer
    delete_job: bool = False  # ttlSecondsAfterFinished expired
    skip_reason: str | None = None  # why nothing was done, for the log line
    podgroup: PodGroupWrite | None = None  # gang scheduling (reconcile.policy.gang)
    #: pod ends newly accounted, "Type-index:how:uid", for the reconcile's log line
    ends: list[str] = field(default_factory=list)


def status_plan(old: JobStatus, new: JobStatus, *, failed_event_type: str = cond.NORMAL) -> Plan:
    events = cond.transition_events(
        old.conditions, new.conditions, failed_event_type=failed_event_type
    )
    status = changed(old, new)
    return Plan(
        status=status,
        progress=status is not None and is_progress_only(old, new),
        events=list(events),
    )


def invalid_plan(view: JobView, message: str, now: datetime) -> Plan:
    """Failed with TFJobFailedValidation and ``message``."""
    new = invalid_status(view.status, view.name, message, view.generation, now)
    return status_plan(view.status, new, failed_event_type=cond.WARNING)


def cleanup_plan(
    done: Cleanup, releases: Sequence[ObservedPod], *, skip_reason: str | None
) -> Plan:
    return Plan(
        delete_pods=raws(done.delete_pods),
        delete_services=done.delete_services,
        release_pods=raws(releases),
        requeue_after=done.requeue_after,
        delete_job=done.delete_job,
        skip_reason=skip_reason,
    )


def with_children(
    plan: Plan,
    *,
    create_pods: Sequence[JSON] = (),
    delete_pods: Sequence[ObservedPod] = (),
    create_services: Sequence[JSON] = (),
    delete_services: Sequence[JSON] = (),
    release_pods: Sequence[ObservedPod] = (),
    retired: frozenset[str] = frozenset(),
    requeue_after: float | None = None,
    podgroup: PodGroupWrite | None = None,
) -> Plan:
    return Plan(
        create_pods=list(create_pods),
        delete_pods=raws(delete_pods),
        create_services=list(create_services),
        delete_services=list(delete_services),
        release_pods=raws(release_pods),
        retired=retired,
        status=plan.status,
        progress=plan.progress,
        events=plan.events,
        requeue_after=requeue_after,
        podgroup=podgroup,
        ends=plan.ends,
    )
