"""TFJob (kubeflow.org/v1) API types, parsed once at the boundary.

The models mirror the upstream Go types field for field, with the upstream
camelCase JSON names. They are frozen: objects read from the informer cache are
shared, so the reconciler derives new values instead of mutating them.

Pod templates stay plain ``dict[str, Any]``: the controller copies them into Pods,
and typing them would risk dropping or renaming a core/v1 field on the way through.

These models are also the source of the CRD (hack/gen_crd.py). The keywords in
``json_schema_extra`` (schema defaults, bounds, ``x-kubernetes-validations``) play
the role of kubebuilder markers: they say what the apiserver enforces at admission.
They never change how Python parses a value; validation.py repeats every admission
rule controller-side for objects that reached the cache some other way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, PlainValidator
from pydantic.alias_generators import to_camel

from reconcile.api.admission import (
    INT32,
    INT64,
    POD_TEMPLATE_SCHEMA,
    REPLICA_SPECS_RULES,
    ROOT_RULES,
    rule,
)
from reconcile.api.names import (
    DEFAULT_CLEAN_POD_POLICY,
    DEFAULT_REPLICAS,
    DEFAULT_RESTART_POLICY,
    DEFAULT_SUCCESS_POLICY,
    MANAGED_BY_VALUES,
    MAX_REPLICA_TYPES,
    RestartPolicy,
)
from reconcile.api.status_types import JobStatus


class _APIModel(BaseModel):
    # strict: the apiserver already typed every value, so anything needing coercion
    # ("1" for an int) comes from elsewhere and is reported, not silently fixed.
    model_config = ConfigDict(
        frozen=True,
        strict=True,
        populate_by_name=True,
        alias_generator=to_camel,
        # The field docstrings become the CRD's descriptions in hack/gen_crd.py, which
        # reads them itself: use_attribute_docstrings would parse this file at import.
        # The CRD prunes unknown spec fields, so an unknown key here can only come
        # from a newer schema; ignoring it keeps such objects readable.
        extra="ignore",
    )


def _quantity(value: object) -> int | str:
    # One check instead of an int | str union, so a bad value yields one error at
    # the key's path rather than one per union member.
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise ValueError("must be an integer or a quantity string such as '500m' or '4Gi'")


# resource.Quantity as the apiserver stores it (int-or-string); the string syntax
# is checked by the schema pattern at admission.
Quantity = Annotated[int | str, PlainValidator(_quantity)]


class SchedulingPolicy(_APIModel):
    """SchedulingPolicy encapsulates the gang-scheduling settings (PodGroup)."""

    min_available: int | None = Field(default=None, json_schema_extra=INT32)
    """Minimum number of pods that must be schedulable together."""
    queue: str | None = Field(
        default=None,
        json_schema_extra={
            "x-kubernetes-validations": [
                rule("self == oldSelf", "spec.runPolicy.schedulingPolicy.queue is immutable")
            ]
        },
    )
    """Scheduler queue (Volcano) the PodGroup is placed in. Immutable."""
    min_resources: dict[str, Quantity] | None = Field(
        default=None,
        json_schema_extra={
            "additionalProperties": {
                "anyOf": [{"type": "integer"}, {"type": "string"}],
                "pattern": (
                    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]"
                    r"|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
                ),
                "x-kubernetes-int-or-string": True,
            }
        },
    )
    """Minimum resources (resource name to quantity) the whole gang needs."""
    priority_class: str | None = None
    """PriorityClass of the PodGroup."""
    schedule_timeout_seconds: int | None = Field(default=None, json_schema_extra=INT32)
    """How long the gang may wait to be scheduled."""


class RunPolicy(_APIModel):
    """RunPolicy encapsulates runtime policies of the job: cleanup, deadlines, retries."""

    model_config = ConfigDict(
        json_schema_extra={
            # A transition rule on the parent, not on managedBy itself: a rule on the
            # field only runs when old and new both have it, which would let a
            # PATCH set or unset it. runPolicy always exists (schema default {}).
            "x-kubernetes-validations": [
                rule(
                    "has(self.managedBy) == has(oldSelf.managedBy)"
                    " && (!has(self.managedBy) || self.managedBy == oldSelf.managedBy)",
                    "spec.runPolicy.managedBy is immutable",
                    field_path=".managedBy",
                )
            ]
        }
    )

    clean_pod_policy: str | None = Field(
        default=None, json_schema_extra={"default": DEFAULT_CLEAN_POD_POLICY.value}
    )
    """Which pods to delete when the job finishes: All, Running or None. Default None."""
    ttl_seconds_after_finished: int | None = Field(default=None, json_schema_extra=INT32)
    """Seconds after completion before the TFJob is deleted. Default: never."""
    active_deadline_seconds: int | None = Field(default=None, json_schema_extra=INT64)
    """Seconds since startTime the job may be active before it is failed."""
    backoff_limit: int | None = Field(default=None, json_schema_extra=INT32)
    """Number of retries before marking this job failed."""
    scheduling_policy: SchedulingPolicy | None = None
    """Gang-scheduling settings."""
    suspend: bool | None = Field(default=None, json_schema_extra={"default": False})
    """Whether the controller should delete the job's pods and create none. Default false."""
    managed_by: str | None = Field(
        default=None, json_schema_extra={"enum": list(MANAGED_BY_VALUES)}
    )
    """The controller that reconciles this job: unset or kubeflow.org/training-operator
    for this controller, kueue.x-k8s.io/multikueue to delegate to MultiKueue. Immutable."""


class ReplicaSpec(_APIModel):
    """ReplicaSpec is a description of one replica type."""

    replicas: int | None = Field(
        default=None,
        json_schema_extra={**INT32, "minimum": 0, "default": DEFAULT_REPLICAS},
    )
    """Desired number of replicas of the given template. Default 1."""
    template: dict[str, Any] = Field(json_schema_extra={"schema": POD_TEMPLATE_SCHEMA})
    """Pod template (core/v1 PodTemplateSpec) of this replica type. Its restartPolicy
    is overridden by the replica's restartPolicy."""
    restart_policy: str | None = Field(
        default=None,
        json_schema_extra={
            # "" is accepted because upstream treats it as unset (defaulted to Never).
            "enum": [*(p.value for p in RestartPolicy), ""],
            "default": DEFAULT_RESTART_POLICY.value,
        },
    )
    """Restart policy for all replicas: Always, OnFailure, Never or ExitCode. Default Never."""

    @property
    def count(self) -> int:
        """How many pods this replica type wants (an unset or negative count wants none)."""
        value = self.replicas
        return value if isinstance(value, int) and value > 0 else 0

    @property
    def policy(self) -> str:
        """The restart policy in force ("" and unset mean Never, as upstream)."""
        return self.restart_policy or DEFAULT_RESTART_POLICY


class TFJobSpec(_APIModel):
    """TFJobSpec is the desired state of a TFJob."""

    run_policy: RunPolicy | None = Field(default=None, json_schema_extra={"default": {}})
    """Runtime policies. Always present once stored (schema default {}): the
    kubeflow-training SDK cannot read a TFJob without it."""
    success_policy: str | None = Field(
        default=None, json_schema_extra={"default": DEFAULT_SUCCESS_POLICY.value}
    )
    """When the job succeeds: "" (chief, else worker 0) or AllWorkers."""
    tf_replica_specs: dict[str, ReplicaSpec] = Field(
        json_schema_extra={
            "maxProperties": MAX_REPLICA_TYPES,
            "x-kubernetes-validations": REPLICA_SPECS_RULES,
        }
    )
    """Map of replica type (Chief, Master, PS, Worker, Evaluator) to ReplicaSpec."""
    enable_dynamic_worker: bool | None = Field(default=None, json_schema_extra={"default": False})
    """Sparse TF_CONFIG and tolerated worker failures (dynamic workers)."""


class TFJob(_APIModel):
    """TFJob represents a TFJob resource."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": ROOT_RULES,
        }
    )

    api_version: str | None = None
    kind: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: TFJobSpec
    """Desired state of the TFJob."""
    status: JobStatus | None = None
    """Most recently observed status of the TFJob. Populated by the controller."""

    @property
    def name(self) -> str:
        return str(self.metadata.get("name", ""))

    @property
    def namespace(self) -> str:
        return str(self.metadata.get("namespace", ""))

    @property
    def uid(self) -> str:
        return str(self.metadata.get("uid", ""))

    @property
    def generation(self) -> int | None:
        gen = self.metadata.get("generation")
        return gen if isinstance(gen, int) else None

    @property
    def replica_specs(self) -> Mapping[str, ReplicaSpec]:
        return self.spec.tf_replica_specs


def parse_tfjob(obj: Mapping[str, Any]) -> TFJob:
    """Parse a decoded TFJob. Raises pydantic.ValidationError on a malformed object;
    validation.check() turns that into field errors instead."""
    return TFJob.model_validate(obj)


def dump_tfjob(job: TFJob) -> dict[str, Any]:
    """The JSON-ready dict of a TFJob with upstream field names.

    Only fields that were given (parsed, passed or defaulted) are written, and no
    nulls (no API field means anything when null), so parse -> dump round-trips an
    object as written, status included.
    """
    return job.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)
