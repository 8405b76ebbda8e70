"""Names and labels of the pods and services a TFJob owns
(docs/semantics.md#names-labels-and-owner-references).

The label keys and values are the upstream contract: dashboards, the kubeflow-training SDK
(``get_job_pods``) and users' selectors rely on them, so they are reproduced exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reconcile.api.names import CHIEF_TYPES, ReplicaType

LABEL_PREFIX = "training.kubeflow.org/"
OPERATOR_NAME_LABEL = LABEL_PREFIX + "operator-name"
JOB_NAME_LABEL = LABEL_PREFIX + "job-name"
REPLICA_TYPE_LABEL = LABEL_PREFIX + "replica-type"
REPLICA_INDEX_LABEL = LABEL_PREFIX + "replica-index"
JOB_ROLE_LABEL = LABEL_PREFIX + "job-role"
JOB_ROLE_MASTER = "master"

DEFAULT_OPERATOR_NAME = "tfjob-controller"


def _dashed(value: str) -> str:
    # Upstream replaces "/" so a name can never smuggle a path separator into a label value.
    return value.replace("/", "-")


def replica_name(job_name: str, rtype: str, index: int) -> str:
    """The name shared by the pod and the service of one replica: <job>-<rtype>-<index>."""
    return _dashed(f"{job_name}-{rtype.lower()}-{index}")


def job_labels(job_name: str, operator_name: str = DEFAULT_OPERATOR_NAME) -> dict[str, str]:
    """Labels common to everything a job owns (and the selector for listing it)."""
    return {OPERATOR_NAME_LABEL: operator_name, JOB_NAME_LABEL: _dashed(job_name)}


def replica_labels(
    job_name: str, rtype: str, index: int, operator_name: str = DEFAULT_OPERATOR_NAME
) -> dict[str, str]:
    """The labels identifying one replica: the service selector (no job-role on purpose,
    so the selector is stable whatever role the pod gets)."""
    labels = job_labels(job_name, operator_name)
    labels[REPLICA_TYPE_LABEL] = rtype.lower()
    labels[REPLICA_INDEX_LABEL] = str(index)
    return labels


def coordinator(specs: Mapping[str, Any]) -> str | None:
    """The job's Chief or Master, if it has one with pods. Upstream let a 0-replica
    Chief decide success at once (0 of 0 succeeded) while no pod ran; here it counts
    as absent, so worker 0 coordinates and decides."""
    return next((rt for rt in CHIEF_TYPES if rt in specs and specs[rt].count > 0), None)


def is_master_role(rtype: str, index: int, specs: Mapping[str, Any]) -> bool:
    """Chief/Master pods carry job-role=master; without one, worker 0 does."""
    if rtype in CHIEF_TYPES:
        return True
    return rtype == ReplicaType.WORKER and index == 0 and coordinator(specs) is None


def pod_labels(
    job_name: str,
    rtype: str,
    index: int,
    *,
    master_role: bool,
    template_labels: Mapping[str, str] | None = None,
    operator_name: str = DEFAULT_OPERATOR_NAME,
) -> dict[str, str]:
    """Template labels overlaid with the controller's (the controller's win: a template
    must not be able to detach a pod from its job's selector)."""
    labels = dict(template_labels or {})
    labels.update(replica_labels(job_name, rtype, index, operator_name))
    if master_role:
        labels[JOB_ROLE_LABEL] = JOB_ROLE_MASTER
    return labels


def _labels_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = obj.get("metadata", {}).get("labels")
    return labels if isinstance(labels, Mapping) else {}


def replica_type_of(obj: Mapping[str, Any]) -> str | None:
    """The lower-case replica type label of a pod or service, if any."""
    value = _labels_of(obj).get(REPLICA_TYPE_LABEL)
    return value if isinstance(value, str) else None


def replica_index_of(obj: Mapping[str, Any]) -> int | None:
    """The replica index label as a non-negative int; None when absent or malformed."""
    value = _labels_of(obj).get(REPLICA_INDEX_LABEL)
    if not isinstance(value, str) or not (value.isascii() and value.isdigit()):
        return None
    return int(value)
