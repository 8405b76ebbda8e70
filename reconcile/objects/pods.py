"""Pods: building a replica's pod from its template, and reading facts off observed pods.

Pods are plain dicts end to end. A template is deep-copied and only the fields the
controller owns are overwritten (name, namespace, controller labels, ownerReferences,
restartPolicy, TF_CONFIG; the tracking finalizer is added), so any core/v1 field a user
sets — including ones newer than this code — reaches the API server untouched
(docs/semantics.md#pods).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from controller.types import JSON, controller_ref
from reconcile.api.labels import pod_labels, replica_name
from reconcile.api.names import (
    API_VERSION,
    DEFAULT_CONTAINER_NAME,
    KIND,
    RETIRED_ANNOTATION,
    TRACKING_FINALIZER,
    RestartPolicy,
    tensorflow_container_index,
)
from reconcile.objects.cluster_spec import TF_CONFIG_ENV
from reconcile.objects.reporting import Reporting, add_reporting

#: Exit code upstream reports when the tensorflow container has no terminated state
#: (0xbeef); kept as the sentinel so "no exit code" is never mistaken for a real one.
NO_EXIT_CODE = 0xBEEF


@dataclass(frozen=True)
class JobRef:
    """The identity of the owning TFJob, as children need it."""

    name: str
    namespace: str
    uid: str


def tfjob_owner(obj: Mapping[str, Any]) -> JSON | None:
    """The controller ownerReference of a pod or service, if it is a TFJob of ours."""
    ref = controller_ref(obj)
    if not ref or ref.get("kind") != KIND or ref.get("apiVersion") != API_VERSION:
        return None
    return ref


def owner_reference(job: JobRef) -> JSON:
    """The controller ownerReference upstream puts on every child
    (docs/semantics.md#names-labels-and-owner-references)."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def pod_restart_policy(replica_policy: str) -> str:
    """ExitCode is the controller's policy, not kubelet's: kubelet must not restart in place
    so the controller can read the exit code and decide."""
    return RestartPolicy.NEVER if replica_policy == RestartPolicy.EXIT_CODE else replica_policy


def build_pod(
    job: JobRef,
    rtype: str,
    index: int,
    template: Mapping[str, Any],
    *,
    restart_policy: str,
    tf_config: str | None,
    master_role: bool,
    operator_name: str,
    reporting: Reporting | None = None,
) -> JSON:
    """The full Pod body for replica (rtype, index)."""
    tpl: dict[str, Any] = copy.deepcopy(dict(template))
    metadata: dict[str, Any] = dict(tpl.get("metadata") or {})
    spec: dict[str, Any] = dict(tpl.get("spec") or {})
    template_labels = metadata.get("labels") if isinstance(metadata.get("labels"), dict) else {}
    name = replica_name(job.name, rtype, index)
    metadata.update(
        name=name,
        namespace=job.namespace,
        labels=pod_labels(
            job.name,
            rtype,
            index,
            master_role=master_role,
            template_labels=template_labels,
            operator_name=operator_name,
        ),
        ownerReferences=[owner_reference(job)],
        finalizers=_with_tracking(metadata.get("finalizers")),
    )
    spec["restartPolicy"] = pod_restart_policy(restart_policy)
    if tf_config is not None:
        _append_tf_config(spec, tf_config)
    if reporting is not None:
        add_reporting(spec, reporting, job.namespace, job.name)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def _with_tracking(finalizers: object) -> list[Any]:
    # A template's own finalizers are kept: they are the user's business.
    kept = finalizers if isinstance(finalizers, list) else []
    return [*(f for f in kept if f != TRACKING_FINALIZER), TRACKING_FINALIZER]


def _append_tf_config(spec: dict[str, Any], tf_config: str) -> None:
    # Appended, not replaced, and only in the first "tensorflow" container (upstream).
    containers = spec.get("containers")
    index = tensorflow_container_index(containers)
    if containers is None or index is None:
        return
    container = containers[index]
    container["env"] = [*(container.get("env") or []), {"name": TF_CONFIG_ENV, "value": tf_config}]


# --- facts about observed pods ----------------------------------------------------------


def name_of(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name", ""))


def uid_of(obj: Mapping[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("uid", ""))


class PodPhase(StrEnum):
    """core/v1 pod phases (a pod without one counts as Pending)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: Phases of a pod that still runs, or is about to.
LIVE_PHASES = (PodPhase.PENDING, PodPhase.RUNNING)


def phase_of(pod: Mapping[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase") or PodPhase.PENDING)


def is_terminating(obj: Mapping[str, Any]) -> bool:
    return bool(obj.get("metadata", {}).get("deletionTimestamp"))


def is_tracked(pod: Mapping[str, Any]) -> bool:
    """The pod still carries our tracking finalizer (reconcile.policy.tracking)."""
    return TRACKING_FINALIZER in (pod.get("metadata", {}).get("finalizers") or ())


def is_retired(pod: Mapping[str, Any]) -> bool:
    """The controller deleted the pod because its index had left the spec."""
    return RETIRED_ANNOTATION in ((pod.get("metadata") or {}).get("annotations") or {})


def is_scheduled(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


def parse_time(value: object) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def created_at(obj: Mapping[str, Any]) -> datetime | None:
    return parse_time(obj.get("metadata", {}).get("creationTimestamp"))


def _container_statuses(pod: Mapping[str, Any], *, init: bool = True) -> list[Mapping[str, Any]]:
    status = pod.get("status") or {}
    keys = ("initContainerStatuses", "containerStatuses") if init else ("containerStatuses",)
    return [c for key in keys for c in status.get(key) or [] if isinstance(c, Mapping)]


def exit_code(pod: Mapping[str, Any]) -> int:
    """Exit code of the terminated tensorflow container, NO_EXIT_CODE if it has none."""
    for status in _container_statuses(pod, init=False):
        if status.get("name") == DEFAULT_CONTAINER_NAME:
            terminated = (status.get("state") or {}).get("terminated") or {}
            code = terminated.get("exitCode")
            if isinstance(code, int):
                return code
    return NO_EXIT_CODE


def restart_count(pod: Mapping[str, Any]) -> int:
    """Sum of restartCount over all containers and init containers: in-place retries."""
    total = 0
    for status in _container_statuses(pod):
        count = status.get("restartCount")
        if isinstance(count, int) and count > 0:
            total += count
    return total


def started_at(pod: Mapping[str, Any]) -> datetime | None:
    return parse_time((pod.get("status") or {}).get("startTime"))


def finished_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the pod stopped: the latest container finishedAt (as the Job controller does)."""
    latest: datetime | None = None
    for status in _container_statuses(pod):
        terminated = (status.get("state") or {}).get("terminated") or {}
        at = parse_time(terminated.get("finishedAt"))
        if at is not None and (latest is None or at > latest):
            latest = at
    return latest


def deletion_requested_at(pod: Mapping[str, Any]) -> datetime | None:
    """When the DELETE was issued: deletionTimestamp minus the grace period."""
    meta = pod.get("metadata", {})
    at = parse_time(meta.get("deletionTimestamp"))
    if at is None:
        return None
    grace = meta.get("deletionGracePeriodSeconds")
    return at - timedelta(seconds=grace if isinstance(grace, int) else 0)


def has_condition(pod: Mapping[str, Any], cond_type: str) -> bool:
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(cond, Mapping) and cond.get("type") == cond_type:
            return cond.get("status") == "True"
    return False
