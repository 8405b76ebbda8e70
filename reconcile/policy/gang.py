"""Gang scheduling: the PodGroup of a job, the pods' decorations, and when pods may be
created (pure).

``--gang-scheduler-name`` picks the mode as upstream does: empty is off; ``volcano`` (any
case) makes Volcano PodGroups (scheduling.volcano.sh/v1beta1) and pods with
schedulerName ``volcano``; any other value makes scheduler-plugins PodGroups
(scheduling.x-k8s.io/v1alpha1, the coscheduling plugin) and pods with that value as
their schedulerName.

One PodGroup per job, named after it and owned by it. What upstream gets wrong and this
module does not (docs/semantics.md#gang-scheduling):
- no pod is created before the PodGroup exists, and with Volcano none while its phase is
  "" or Pending (the scheduler admits the whole gang, Inqueue, or nothing): a half-created
  gang holds resources and can deadlock another;
- waiting costs nothing: the PodGroup's own watch events bring the job back, nothing is
  written to trigger a pass, and the one status change is the ``GangAdmitted`` condition;
- the spec is compared by value with what is stored, so scale, minAvailable and resource
  changes do reach the PodGroup (upstream's diff compares an object with itself);
- minResources orders replica types by their PriorityClass's real value (upstream's
  PriorityClass lister is never started, so every priority reads 0).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any

from controller.types import JSON, controller_ref
from reconcile.api.models import SchedulingPolicy, TFJob
from reconcile.api.names import STATUS_ORDER
from reconcile.api.quantity import format_quantity, same_resources, sum_resources
from reconcile.api.status_types import JobCondition
from reconcile.objects.pods import JobRef, owner_reference
from reconcile.policy import conditions as cond
from reconcile.policy.conditions import EventIntent

#: scheduler-plugins' pod label naming the group (apis/scheduling/v1alpha1 PodGroupLabel)
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
#: Volcano's pod annotations: the group, and the task (replica type) within it
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_ANNOTATION = "volcano.sh/task-spec"
VOLCANO_DEFAULT_QUEUE = "default"
#: Volcano phases in which the gang is not admitted yet: no pod may be created
VOLCANO_WAITING_PHASES = ("", "Pending")

#: The condition that says why an active job has no pods yet (Volcano mode).
GANG_ADMITTED = "GangAdmitted"


class GangKind(StrEnum):
    VOLCANO = "volcano"
    SCHEDULER_PLUGINS = "scheduler-plugins"


@dataclass(frozen=True)
class Gang:
    kind: GangKind
    #: the schedulerName pods get (for Volcano, "volcano")
    scheduler_name: str

    @property
    def group(self) -> str:
        if self.kind is GangKind.VOLCANO:
            return "scheduling.volcano.sh"
        return "scheduling.x-k8s.io"

    @property
    def version(self) -> str:
        return "v1beta1" if self.kind is GangKind.VOLCANO else "v1alpha1"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def crd_name(self) -> str:
        return f"podgroups.{self.group}"


PLURAL = "podgroups"
KIND = "PodGroup"


def gang_from_flag(value: str | None) -> Gang | None:
    name = (value or "").strip()
    if not name:
        return None
    if name.lower() == GangKind.VOLCANO:
        return Gang(GangKind.VOLCANO, GangKind.VOLCANO.value)
    return Gang(GangKind.SCHEDULER_PLUGINS, name)


# --- pods -------------------------------------------------------------------------------


def decorated_pod(pod: JSON, gang: Gang, group_name: str, rtype: str) -> JSON:
    """``pod`` with what each scheduler reads to put it in its group: a new body, the
    given one left as it was. A template's own schedulerName is kept (upstream), with
    the Warning of ``scheduler_overrides``."""
    metadata = dict(pod["metadata"])
    spec = dict(pod["spec"])
    if not spec.get("schedulerName"):
        spec["schedulerName"] = gang.scheduler_name
    if gang.kind is GangKind.VOLCANO:
        metadata["annotations"] = {
            **(metadata.get("annotations") or {}),
            VOLCANO_GROUP_ANNOTATION: group_name,
            VOLCANO_TASK_ANNOTATION: rtype.lower(),
        }
    else:
        metadata["labels"] = {**(metadata.get("labels") or {}), POD_GROUP_LABEL: group_name}
    return {**pod, "metadata": metadata, "spec": spec}


def scheduler_overrides(
    job: TFJob, gang: Gang, creates: Mapping[str, Sequence[int]]
) -> list[EventIntent]:
    """Upstream's Warning when a pod about to be created names another scheduler."""
    for rtype, indexes in creates.items():
        spec = job.replica_specs[rtype].template.get("spec")
        name = spec.get("schedulerName") if isinstance(spec, Mapping) else None
        if indexes and name and name != gang.scheduler_name:
            return [
                EventIntent(
                    cond.WARNING,
                    cond.REASON_TEMPLATE_SCHEDULER_NAME,
                    cond.MSG_TEMPLATE_SCHEDULER_NAME,
                )
            ]
    return []


# --- the PodGroup -----------------------------------------------------------------------


def scheduling_policy(job: TFJob) -> SchedulingPolicy | None:
    run_policy = job.spec.run_policy
    return run_policy.scheduling_policy if run_policy is not None else None


def min_member(job: TFJob) -> int:
    policy = scheduling_policy(job)
    if policy is not None and policy.min_available is not None:
        return policy.min_available
    return sum(s.count for s in job.replica_specs.values())


def pod_resources(template: Mapping[str, Any]) -> list[Mapping[str, object]]:
    """Each container's requests, or its limits where it has no requests."""
    spec = template.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    out: list[Mapping[str, object]] = []
    for c in containers if isinstance(containers, list) else []:
        res = c.get("resources") if isinstance(c, Mapping) else None
        if not isinstance(res, Mapping):
            continue
        chosen = res.get("requests") or res.get("limits")
        if isinstance(chosen, Mapping):
            out.append(chosen)
    return out


def priority_class_of(template: Mapping[str, Any]) -> str:
    spec = template.get("spec")
    name = spec.get("priorityClassName") if isinstance(spec, Mapping) else None
    return name if isinstance(name, str) else ""


def min_resources(job: TFJob, member: int, priorities: Mapping[str, int]) -> dict[str, str]:
    """What the first ``member`` pods need together, replica types taken by their
    PriorityClass value, highest first (ties in status order, so the result is stable)."""
    specs = job.replica_specs
    order = sorted(
        specs,
        key=lambda rt: (
            -priorities.get(priority_class_of(specs[rt].template), 0),
            STATUS_ORDER.index(rt) if rt in STATUS_ORDER else len(STATUS_ORDER),
            rt,
        ),
    )
    lists: list[Mapping[str, object]] = []
    left = member
    for rtype in order:
        take = min(left, specs[rtype].count)
        if take <= 0:
            break
        lists.extend(pod_resources(specs[rtype].template) * take)
        left -= take
    total = sum_resources(lists)
    return {
        name: format_quantity(amount)
        for name, amount in sorted(total.items())
        if amount != Decimal(0)
    }


def desired_spec(job: TFJob, gang: Gang, priorities: Mapping[str, int]) -> JSON:
    policy = scheduling_policy(job)
    member = min_member(job)
    resources: Mapping[str, object] | None
    if policy is not None and policy.min_resources is not None:
        resources = dict(policy.min_resources)
    else:
        resources = min_resources(job, member, priorities)
    spec: JSON = {"minMember": member}
    if resources:
        spec["minResources"] = dict(resources)
    if gang.kind is GangKind.VOLCANO:
        spec["queue"] = (policy.queue if policy is not None else None) or VOLCANO_DEFAULT_QUEUE
        if policy is not None and policy.priority_class:
            spec["priorityClassName"] = policy.priority_class
    elif policy is not None and policy.schedule_timeout_seconds is not None:
        spec["scheduleTimeoutSeconds"] = policy.schedule_timeout_seconds
    return spec


def desired_podgroup(job: TFJob, gang: Gang, priorities: Mapping[str, int]) -> JSON:
    metadata: JSON = {
        "name": job.name,
        "namespace": job.namespace,
        "ownerReferences": [owner_reference(JobRef(job.name, job.namespace, job.uid))],
    }
    annotations = job.metadata.get("annotations")
    if isinstance(annotations, Mapping) and annotations:
        metadata["annotations"] = dict(annotations)  # upstream copies the job's
    return {
        "apiVersion": gang.api_version,
        "kind": KIND,
        "metadata": metadata,
        "spec": desired_spec(job, gang, priorities),
    }


def owned_by(podgroup: Mapping[str, Any], uid: str) -> bool:
    ref = controller_ref(podgroup)
    return ref is not None and ref.get("uid") == uid


#: The spec fields the controller sets, per kind: a stored one it no longer asks for is
#: removed; any other (set by the scheduler or a user) is left alone.
_MANAGED = {
    GangKind.VOLCANO: {"minMember", "minResources", "queue", "priorityClassName"},
    GangKind.SCHEDULER_PLUGINS: {"minMember", "minResources", "scheduleTimeoutSeconds"},
}


def spec_patch(existing: Mapping[str, Any], desired: Mapping[str, Any], gang: Gang) -> JSON | None:
    """The merge patch that brings the stored spec to the desired one, compared by
    value; None when they agree. Volcano's queue is never changed once set (it is
    immutable in the TFJob too, and Volcano may have placed the group already)."""
    have: Mapping[str, Any] = existing.get("spec") or {}
    want = dict(desired["spec"])
    if gang.kind is GangKind.VOLCANO and have.get("queue"):
        want["queue"] = have["queue"]
    patch: JSON = {}
    for key in sorted(set(want) | set(have) & _MANAGED[gang.kind]):
        old, new = have.get(key), want.get(key)
        same = same_resources(old, new) if key == "minResources" else old == new
        if not same:
            patch[key] = new
    return {"spec": patch} if patch else None


def phase_of(podgroup: Mapping[str, Any]) -> str:
    return str((podgroup.get("status") or {}).get("phase") or "")


def admitted(gang: Gang, podgroup: Mapping[str, Any]) -> bool:
    """Whether the job's pods may be created now that its PodGroup exists."""
    return gang.kind is not GangKind.VOLCANO or phase_of(podgroup) not in VOLCANO_WAITING_PHASES


def admission_conditions(
    conditions: Sequence[JobCondition], waiting: str | None, name: str, now: datetime
) -> list[JobCondition]:
    """``GangAdmitted`` False while the gang waits (``waiting`` names the PodGroup's
    phase), True once it was admitted after a wait; absent when it never waited. Kept
    first in the list: kubectl's State column and the SDK read the last condition."""
    current = list(conditions)
    old = cond.find(current, GANG_ADMITTED)
    if waiting is not None:
        status, reason = cond.FALSE, cond.REASON_POD_GROUP_PENDING
        message = (
            f"TFJob {name} waits for its PodGroup to be admitted (phase {waiting or 'unset'}):"
            " no pod is created before the scheduler admits the whole gang."
        )
    elif old is not None and old.status == cond.FALSE:
        status, reason = cond.TRUE, cond.REASON_POD_GROUP_ADMITTED
        message = f"TFJob {name}'s PodGroup was admitted: its pods are created."
    else:
        return current
    return cond.put_first(current, GANG_ADMITTED, status, reason, message, now)
