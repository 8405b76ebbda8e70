"""The TFJob API's vocabulary, defined once: group, version and kind, replica types, the
policy enums, the container and port the controller configures, defaults and limits.

Everything else (the models, validation, planning, the CRD generator, the composition
root) takes these names from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

GROUP = "kubeflow.org"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "TFJob"
PLURAL = "tfjobs"
SINGULAR = "tfjob"


class ReplicaType(StrEnum):
    """The replica types TensorFlow knows. Master is the legacy alias of Chief."""

    CHIEF = "Chief"
    MASTER = "Master"
    PS = "PS"
    WORKER = "Worker"
    EVALUATOR = "Evaluator"


class RestartPolicy(StrEnum):
    ALWAYS = "Always"
    ON_FAILURE = "OnFailure"
    NEVER = "Never"
    # Exit codes 1-127 are permanent failures, 128-255 retryable.
    EXIT_CODE = "ExitCode"


class CleanPodPolicy(StrEnum):
    ALL = "All"
    RUNNING = "Running"
    NONE = "None"


class SuccessPolicy(StrEnum):
    DEFAULT = ""
    ALL_WORKERS = "AllWorkers"


MANAGED_BY_TRAINING_OPERATOR = "kubeflow.org/training-operator"
MANAGED_BY_MULTIKUEUE = "kueue.x-k8s.io/multikueue"
MANAGED_BY_VALUES = (MANAGED_BY_TRAINING_OPERATOR, MANAGED_BY_MULTIKUEUE)

#: On every pod the controller creates, removed by the controller only once the pod's
#: end is recorded in the job's status (or no longer matters): a pod that finishes or
#: is deleted while the controller is down stays readable until then (KEP-2307's
#: scheme for Jobs, reconcile.policy.tracking).
TRACKING_FINALIZER = f"training.{GROUP}/tfjob-tracking"
#: Set by the controller, with the tracking finalizer's release, on a pod it deletes
#: because its index left the spec (a scale-down, a removed replica type): should the
#: index come back while the pod is still terminating, its end is the controller's own
#: doing and no disruption (reconcile.policy.pod_outcome).
RETIRED_ANNOTATION = f"training.{GROUP}/retired"
#: Whole-gang restart (reconcile.policy.gang_restart): the job's opt-in annotation, and
#: the label giving each pod the restart epoch it belongs to.
GANG_RESTART_ANNOTATION = f"training.{GROUP}/gang-restart"
GANG_EPOCH_LABEL = f"training.{GROUP}/gang-epoch"
#: Training-progress reporting (docs/progress.md): "false" on a job leaves its pods
#: without the endpoint, token and CA the controller otherwise gives them.
PROGRESS_REPORTING_ANNOTATION = f"training.{GROUP}/progress-reporting"
#: Stalls and restarts without progress (reconcile.api.watch, docs/stalls.md): the
#: seconds a reporting job may go without a step advancing; the seconds a Running job
#: may go before its first report; what a stall does (report, restart, fail); how many
#: restarts in a row without progress fail the job (0: never).
PROGRESS_DEADLINE_ANNOTATION = f"training.{GROUP}/progress-deadline-seconds"
FIRST_PROGRESS_DEADLINE_ANNOTATION = f"training.{GROUP}/first-progress-deadline-seconds"
STALL_ACTION_ANNOTATION = f"training.{GROUP}/stall-action"
RESTART_GUARD_ANNOTATION = f"training.{GROUP}/restart-guard"
#: Stragglers (reconcile.progress.stragglers): the fraction of its peers' speed below
#: which a replica is flagged (0: never), and what a flag does (report, move).
STRAGGLER_THRESHOLD_ANNOTATION = f"training.{GROUP}/straggler-threshold"
STRAGGLER_ACTION_ANNOTATION = f"training.{GROUP}/straggler-action"

DEFAULT_CONTAINER_NAME = "tensorflow"
DEFAULT_PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
DEFAULT_REPLICAS = 1
DEFAULT_RESTART_POLICY = RestartPolicy.NEVER
DEFAULT_CLEAN_POD_POLICY = CleanPodPolicy.NONE
DEFAULT_SUCCESS_POLICY = SuccessPolicy.DEFAULT

# Upper bounds that exist only so the apiserver can estimate CEL cost: five known
# replica types (any case, no duplicates) and far more containers than a pod needs.
#: Replica types in the order upstream's UpdateJobStatus walks them: status decisions and
#: the "which replica failed" message depend on it.
STATUS_ORDER: tuple[ReplicaType, ...] = tuple(sorted(ReplicaType))
#: Chief and Master are the same role under two names (Master is the legacy alias).
CHIEF_TYPES: tuple[ReplicaType, ...] = (ReplicaType.CHIEF, ReplicaType.MASTER)

MAX_REPLICA_TYPES = len(ReplicaType)
MAX_CONTAINERS = 64
MAX_PORTS = 64
MAX_ENV_VARS = 1024
# Container names are DNS-1123 labels; the Pod API rejects anything longer anyway.
MAX_CONTAINER_NAME_LENGTH = 63
DNS1035_LABEL_MAX_LENGTH = 63
#: Pods (and Services) a job may ask for, all replica types together. Every pod's
#: TF_CONFIG lists the whole cluster, about 60 bytes a member, and Linux refuses to
#: exec with one environment string over 128 KiB (MAX_ARG_STRLEN): around 2,000
#: members no TensorFlow process could start. 1,000 leaves room for long names.
MAX_TOTAL_REPLICAS = 1000
DNS1035_LABEL_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"


def tensorflow_container_index(containers: object) -> int | None:
    """Index of the first container named ``tensorflow`` in a container list, if any: the
    one container the controller configures (TF_CONFIG, the default port, the service)."""
    if not isinstance(containers, list):
        return None
    for i, container in enumerate(containers):
        if isinstance(container, Mapping) and container.get("name") == DEFAULT_CONTAINER_NAME:
            return i
    return None
