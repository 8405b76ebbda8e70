"""The child diffs of an active job: which pods and services to create and delete.

Pods are decided per index by the restart accounting (reconcile.policy.restart); this module
turns its decisions into pod bodies, adds the pods of replica types the spec no longer
has, and keeps exactly one headless service per index below ``replicas``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from controller.types import JSON
from reconcile.api.labels import is_master_role, replica_name
from reconcile.api.models import TFJob
from reconcile.api.names import CHIEF_TYPES
from reconcile.objects.cluster_spec import ClusterMember, cluster_layout, tf_port
from reconcile.objects.observed import ObservedPod
from reconcile.objects.pods import LIVE_PHASES, JobRef, build_pod, is_terminating, name_of
from reconcile.objects.reporting import Reporting, opted_out
from reconcile.objects.services import build_service
from reconcile.policy import conditions as cond
from reconcile.policy.conditions import EventIntent
from reconcile.policy.gang import Gang, decorated_pod


def job_ref(job: TFJob) -> JobRef:
    return JobRef(name=job.name, namespace=job.namespace, uid=job.uid)


def new_pods(
    job: TFJob,
    creates: Mapping[str, Sequence[int]],
    *,
    cluster_domain: str | None,
    operator_name: str,
    gang: Gang | None = None,
    reporting: Reporting | None = None,
) -> list[JSON]:
    """The pod bodies for the indexes to create, per replica type. TF_CONFIG is rendered
    now, from the spec as it is: a pod keeps the cluster layout it started with."""
    if not any(creates.values()):
        return []  # the usual pass: nothing to create, so no layout to render
    specs = job.replica_specs
    members = {
        rt: ClusterMember(replicas=s.count, port=tf_port(s.template)) for rt, s in specs.items()
    }
    ref = job_ref(job)
    if reporting is not None and opted_out(job.metadata):
        reporting = None
    layout = cluster_layout(
        ref.name,
        ref.namespace,
        members,
        cluster_domain=cluster_domain,
        dynamic_worker=bool(job.spec.enable_dynamic_worker),
    )
    pods = []
    for rtype, indexes in creates.items():
        for index in indexes:
            pod = build_pod(
                ref,
                rtype,
                index,
                specs[rtype].template,
                restart_policy=specs[rtype].policy,
                tf_config=layout.tf_config(rtype, index),
                master_role=is_master_role(rtype, index, specs),
                operator_name=operator_name,
                reporting=reporting,
            )
            if gang is not None:
                pod = decorated_pod(pod, gang, ref.name, rtype)
            pods.append(pod)
    return pods


def template_overrides(job: TFJob, creates: Mapping[str, Sequence[int]]) -> list[EventIntent]:
    """Upstream's Warning when a pod about to be created has a template restartPolicy,
    which the replica's replaces: one per pass (the recorder folds repeats)."""
    for rtype, indexes in creates.items():
        spec = job.replica_specs[rtype].template.get("spec")
        if indexes and isinstance(spec, Mapping) and spec.get("restartPolicy"):
            reason, message = cond.REASON_TEMPLATE_RESTART_POLICY, cond.MSG_TEMPLATE_RESTART_POLICY
            return [EventIntent(cond.WARNING, reason, message)]
    return []


def foreign_pods(job: TFJob, pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    """Owned pods of a replica type no longer in the spec (the spec was edited)."""
    known = {rt.lower() for rt in job.replica_specs}
    return [p for p in pods if p.rtype is not None and p.rtype not in known and not p.terminating]


def old_coordinator_alive(job: TFJob, pods: Iterable[ObservedPod]) -> bool:
    """A pod of a coordinator type the spec no longer has (Master renamed to Chief, or
    back) is still pending, running or terminating: the new coordinator must wait for
    it to be gone, or two would run at once."""
    known = {rt.lower() for rt in job.replica_specs}
    coordinators = {rt.lower() for rt in CHIEF_TYPES}
    return any(
        p.rtype in coordinators
        and p.rtype not in known
        and (p.phase in LIVE_PHASES or p.terminating)
        for p in pods
    )


def service_diff(
    job: TFJob, services: Iterable[JSON], *, operator_name: str
) -> tuple[list[JSON], list[JSON]]:
    """Exactly one headless service per index below replicas: create the missing ones,
    delete the rest (scale-down, removed types, duplicates under another name)."""
    specs = job.replica_specs
    wanted = _service_names(job.name, tuple((rt, s.count) for rt, s in specs.items()))
    existing: set[str] = set()
    delete: list[JSON] = []
    for svc in services:
        svc_name = name_of(svc)
        if svc_name in wanted and svc_name not in existing:
            existing.add(svc_name)
        elif not is_terminating(svc):
            delete.append(svc)
    ref = job_ref(job)
    create = [
        build_service(ref, rt, i, specs[rt].template, operator_name=operator_name)
        for svc_name, (rt, i) in wanted.items()
        if svc_name not in existing
    ]
    return create, delete


@lru_cache(maxsize=256)
def _service_names(job: str, counts: tuple[tuple[str, int], ...]) -> Mapping[str, tuple[str, int]]:
    """{service name: (replica type, index)} of a job's replicas: the same every pass
    until the spec changes, so made once (callers only read it). About 1.4 KB a job of 8
    replicas: a few hundred jobs' worth is kept, not one for each of thousands."""
    return {replica_name(job, rt, i): (rt, i) for rt, n in counts for i in range(n)}


def unique(pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    """Each pod once (by UID, else name), first occurrence kept."""
    seen: set[str] = set()
    out: list[ObservedPod] = []
    for obj in pods:
        key = obj.uid or obj.name
        if key not in seen:
            seen.add(key)
            out.append(obj)
    return out
