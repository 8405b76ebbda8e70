"""Controller-side validation of TFJobs.

The CRD enforces the same rules at admission (see the schema keywords in
models.py). They are repeated here because a TFJob can reach the cache without our
schema: stored under the upstream CRD, created before ours was installed, or
read from a file. The controller marks a job that fails here Failed (reason
TFJobFailedValidation) with a message naming the field, and never crashes on it:
check() turns even a malformed object into field errors.

Rules: upstream's validating webhook (DNS-1035 name, managedBy values, containers
with images, a tensorflow container, one Chief/Master at most) plus the gaps it
left open: known replica types only (any case, no case-duplicates), Chief/Master
replicas <= 1, replicas >= 0, restartPolicy values, and (on update) managedBy and
schedulingPolicy.queue immutability.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from reconcile.api.labels import replica_name
from reconcile.api.models import ReplicaSpec, TFJob, parse_tfjob
from reconcile.api.names import (
    CHIEF_TYPES,
    DEFAULT_CONTAINER_NAME,
    DNS1035_LABEL_MAX_LENGTH,
    DNS1035_LABEL_PATTERN,
    MANAGED_BY_VALUES,
    MAX_CONTAINER_NAME_LENGTH,
    MAX_CONTAINERS,
    MAX_TOTAL_REPLICAS,
    ReplicaType,
    RestartPolicy,
)
from reconcile.api.watch import read_watch

_DNS1035 = re.compile(DNS1035_LABEL_PATTERN)
_KNOWN_TYPES = {t.value.lower() for t in ReplicaType}
_CHIEF_TYPES = {t.value.lower() for t in CHIEF_TYPES}
# "" is how upstream spells unset; defaulting turns it into Never.
_RESTART_POLICIES = frozenset({*(p.value for p in RestartPolicy), ""})
# Fields whose children are map keys, printed as [key] like Kubernetes field paths.
_MAP_FIELDS = frozenset({"tfReplicaSpecs", "replicaStatuses", "minResources"})


@dataclass(frozen=True, slots=True)
class FieldError:
    """One invalid field, as a Kubernetes-style path and a message."""

    path: str
    message: str
    #: a rule of ours that upstream did not enforce: a job it started is taken over
    #: with a Warning, not failed (reconcile.plan)
    upstream_accepted: bool = False

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def format_errors(errors: Sequence[FieldError]) -> str:
    """One line for a condition message: 'TFJob is invalid: a: x; b: y'."""
    return "TFJob is invalid: " + "; ".join(str(e) for e in errors)


def check(obj: Mapping[str, Any]) -> tuple[TFJob | None, list[FieldError]]:
    """Parse and validate a decoded TFJob. Never raises on bad input: returns
    (job, []) when valid, (job, errors) when parsed but invalid, (None, errors)
    when it does not parse at all."""
    if not isinstance(obj, Mapping):
        return None, [FieldError("", "a TFJob must be a JSON object")]
    try:
        job = parse_tfjob(obj)
    except ValidationError as exc:
        return None, parse_errors(exc)
    return job, validate(job)


def parse_errors(exc: ValidationError) -> list[FieldError]:
    """Field errors for a pydantic parse failure, with upstream JSON paths."""
    out = []
    for err in exc.errors(include_url=False):
        message = "Required value" if err["type"] == "missing" else err["msg"]
        out.append(FieldError(_format_loc(err["loc"]), message))
    return out


def _format_loc(loc: Sequence[int | str]) -> str:
    path = ""
    parent: int | str | None = None
    for part in loc:
        if isinstance(part, int) or parent in _MAP_FIELDS:
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
        parent = part
    return path


def validate(job: TFJob) -> list[FieldError]:
    """Every rule that needs only the object itself. Works before and after
    defaulting (replica-type keys are compared case-insensitively)."""
    errors = _validate_name(job.metadata)
    if not errors:
        errors += _validate_child_names(job.name, job.spec.tf_replica_specs)
    errors += _validate_managed_by(job)
    errors += _validate_watch(job.metadata)
    errors += _validate_replica_types(job.spec.tf_replica_specs)
    errors += _validate_total_replicas(job.spec.tf_replica_specs)
    for rtype, rspec in job.spec.tf_replica_specs.items():
        errors += _validate_replica(f"spec.tfReplicaSpecs[{rtype}]", rtype, rspec)
    return errors


def validate_update(new: TFJob, old: TFJob) -> list[FieldError]:
    """validate(new) plus the immutability rules of an update."""
    errors = validate(new)
    new_rp, old_rp = new.spec.run_policy, old.spec.run_policy
    new_managed = new_rp.managed_by if new_rp else None
    old_managed = old_rp.managed_by if old_rp else None
    if new_managed != old_managed:
        errors.append(FieldError("spec.runPolicy.managedBy", "field is immutable"))
    new_sp = new_rp.scheduling_policy if new_rp else None
    old_sp = old_rp.scheduling_policy if old_rp else None
    # Same semantics as upstream's rule on the field: only a change from one value
    # to another is refused, setting or clearing it is not.
    if new_sp and old_sp and new_sp.queue is not None and old_sp.queue is not None:
        if new_sp.queue != old_sp.queue:
            errors.append(FieldError("spec.runPolicy.schedulingPolicy.queue", "field is immutable"))
    return errors


def _validate_name(metadata: Mapping[str, Any]) -> list[FieldError]:
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        # A generateName'd object always has a name by the time it is stored.
        return [FieldError("metadata.name", "Required value")]
    if len(name) > DNS1035_LABEL_MAX_LENGTH or not _DNS1035.match(name):
        return [
            FieldError(
                "metadata.name",
                f"{name!r} must be a DNS-1035 label: lower case alphanumerics or '-',"
                " starting with a letter, ending with an alphanumeric, at most"
                f" {DNS1035_LABEL_MAX_LENGTH} characters",
            )
        ]
    return []


def _validate_child_names(name: str, specs: Mapping[str, ReplicaSpec]) -> list[FieldError]:
    longest = max(
        (replica_name(name, rtype, max((s.replicas or 0) - 1, 0)) for rtype, s in specs.items()),
        key=len,
        default="",
    )
    if len(longest) <= DNS1035_LABEL_MAX_LENGTH:
        return []
    return [
        FieldError(
            "metadata.name",
            f"is too long for its replicas: pod and service {longest!r} would have"
            f" {len(longest)} characters, more than the {DNS1035_LABEL_MAX_LENGTH}"
            " of a DNS-1035 label",
            upstream_accepted=True,
        )
    ]


def _validate_total_replicas(specs: Mapping[str, ReplicaSpec]) -> list[FieldError]:
    total = sum(s.count if s.replicas is not None else 1 for s in specs.values())
    if total <= MAX_TOTAL_REPLICAS:
        return []
    return [
        FieldError(
            "spec.tfReplicaSpecs",
            f"asks for {total} replicas: must not ask for more than {MAX_TOTAL_REPLICAS} in all",
            upstream_accepted=True,
        )
    ]


def _validate_managed_by(job: TFJob) -> list[FieldError]:
    policy = job.spec.run_policy
    if policy is None or policy.managed_by is None or policy.managed_by in MANAGED_BY_VALUES:
        return []
    allowed = ", ".join(MANAGED_BY_VALUES)
    return [
        FieldError(
            "spec.runPolicy.managedBy",
            f"Unsupported value {policy.managed_by!r}: supported values: {allowed}",
        )
    ]


def _validate_watch(metadata: Mapping[str, Any]) -> list[FieldError]:
    """Our annotations (reconcile.api.watch): upstream ignores them, so a job it started
    with a bad one is taken over, not failed."""
    _, errors = read_watch(metadata)
    return [
        FieldError(f"metadata.annotations[{key}]", message, upstream_accepted=True)
        for key, message in errors
    ]


def _validate_replica_types(specs: Mapping[str, ReplicaSpec]) -> list[FieldError]:
    errors = []
    seen: dict[str, str] = {}
    for rtype in specs:
        lower = rtype.lower()
        if lower not in _KNOWN_TYPES:
            errors.append(
                FieldError(
                    f"spec.tfReplicaSpecs[{rtype}]",
                    "unknown replica type: must be one of Chief, Master, PS, Worker,"
                    " Evaluator (any case)",
                    upstream_accepted=True,
                )
            )
        elif lower in seen:
            errors.append(
                FieldError(
                    f"spec.tfReplicaSpecs[{rtype}]",
                    f"duplicates replica type {seen[lower]!r} (keys are case-insensitive)",
                    upstream_accepted=True,
                )
            )
        seen.setdefault(lower, rtype)
    if sum(1 for rtype in specs if rtype.lower() in _CHIEF_TYPES) > 1:
        errors.append(
            FieldError("spec.tfReplicaSpecs", "must not have more than 1 Chief or Master role")
        )
    return errors


def _validate_replica(path: str, rtype: str, rspec: ReplicaSpec) -> list[FieldError]:
    errors = []
    if rspec.replicas is not None:
        if rspec.replicas < 0:
            errors.append(
                FieldError(
                    f"{path}.replicas", "must be greater than or equal to 0", upstream_accepted=True
                )
            )
        elif rtype.lower() in _CHIEF_TYPES and rspec.replicas > 1:
            errors.append(
                FieldError(
                    f"{path}.replicas", f"{rtype} replicas must be 0 or 1", upstream_accepted=True
                )
            )
    if rspec.restart_policy is not None and rspec.restart_policy not in _RESTART_POLICIES:
        allowed = ", ".join(p.value for p in RestartPolicy)
        errors.append(
            FieldError(
                f"{path}.restartPolicy",
                f"Unsupported value {rspec.restart_policy!r}: supported values: {allowed}",
            )
        )
    return errors + _validate_template(f"{path}.template", rspec.template)


def _validate_items(
    path: str, container: Mapping[str, Any], field: str, key: str, kind: type
) -> list[FieldError]:
    """A list of objects each with a ``key`` of type ``kind`` (ports, env), if present."""
    items = container.get(field)
    if items is None:
        return []
    if not isinstance(items, list):
        return [FieldError(path, f"must be a list, not {type(items).__name__}")]
    for n, item in enumerate(items):
        if not isinstance(item, dict):
            return [FieldError(f"{path}[{n}]", f"must be an object, not {type(item).__name__}")]
        value = item.get(key)
        if not isinstance(value, kind) or isinstance(value, bool):
            return [FieldError(f"{path}[{n}].{key}", f"must be {kind.__name__}")]
    return []


def _validate_template(path: str, template: Mapping[str, Any]) -> list[FieldError]:
    # The template is untyped JSON: check every shape before using it.
    pod_spec = template.get("spec")
    if not isinstance(pod_spec, dict):
        return [FieldError(f"{path}.spec", "Required value")]
    containers = pod_spec.get("containers")
    cpath = f"{path}.spec.containers"
    if not isinstance(containers, list) or not containers:
        return [FieldError(cpath, "must be specified")]
    errors = []
    if len(containers) > MAX_CONTAINERS:
        errors.append(FieldError(cpath, f"must have at most {MAX_CONTAINERS} items"))
    names = []
    for i, container in enumerate(containers):
        if not isinstance(container, dict):
            errors.append(FieldError(f"{cpath}[{i}]", "must be an object"))
            continue
        name = container.get("name")
        if not isinstance(name, str) or not name:
            errors.append(FieldError(f"{cpath}[{i}].name", "Required value"))
        elif len(name) > MAX_CONTAINER_NAME_LENGTH:
            errors.append(
                FieldError(
                    f"{cpath}[{i}].name", f"must be at most {MAX_CONTAINER_NAME_LENGTH} characters"
                )
            )
        elif name in names:
            errors.append(FieldError(f"{cpath}[{i}].name", f"Duplicate value: {name!r}"))
        else:
            names.append(name)
        image = container.get("image")
        if not isinstance(image, str) or not image:
            errors.append(FieldError(f"{cpath}[{i}].image", "must be required"))
        errors += _validate_items(f"{cpath}[{i}].ports", container, "ports", "containerPort", int)
        errors += _validate_items(f"{cpath}[{i}].env", container, "env", "name", str)
    if DEFAULT_CONTAINER_NAME not in names:
        errors.append(
            FieldError(
                cpath,
                f"must have at least one container with name {DEFAULT_CONTAINER_NAME}",
                # enforced only since upstream v1.8's webhook: older jobs may lack it
                upstream_accepted=True,
            )
        )
    return errors
