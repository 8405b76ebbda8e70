"""Defaulting of a TFJob: upstream SetDefaults_TFJob plus the CRD schema defaults.

The CRD persists every default a schema can express (runPolicy {}, cleanPodPolicy
None, suspend false, successPolicy "", enableDynamicWorker false, replicas 1,
restartPolicy Never). apply_defaults() applies those too, so the controller sees the
same effective spec for objects that never went through our schema (stored under
the upstream CRD, or built in tests). What a schema cannot express is only done
here, in memory, never written back: re-casing replica-type keys and adding the
default port to the tensorflow container.
"""

from __future__ import annotations

import copy
from typing import Any

from reconcile.api.models import ReplicaSpec, RunPolicy, TFJob
from reconcile.api.names import (
    DEFAULT_CLEAN_POD_POLICY,
    DEFAULT_PORT,
    DEFAULT_PORT_NAME,
    DEFAULT_REPLICAS,
    DEFAULT_RESTART_POLICY,
    DEFAULT_SUCCESS_POLICY,
    ReplicaType,
    tensorflow_container_index,
)

_CANONICAL_TYPES = {t.value.lower(): t.value for t in ReplicaType}


def canonical_replica_type(rtype: str) -> str:
    """The canonical spelling of a known replica type (any case); others unchanged."""
    return _CANONICAL_TYPES.get(rtype.lower(), rtype)


def apply_defaults(job: TFJob) -> TFJob:
    """Return `job` with every default applied. Pure: `job` and the dicts it shares
    with the informer cache are never mutated."""
    spec = job.spec
    specs = _recase_replica_types(spec.tf_replica_specs)
    new_spec = spec.model_copy(
        update={
            "run_policy": _default_run_policy(spec.run_policy),
            "success_policy": (
                DEFAULT_SUCCESS_POLICY.value if spec.success_policy is None else spec.success_policy
            ),
            "enable_dynamic_worker": bool(spec.enable_dynamic_worker),
            "tf_replica_specs": {rt: _default_replica(rs) for rt, rs in specs.items()},
        }
    )
    return job.model_copy(update={"spec": new_spec})


def _default_run_policy(policy: RunPolicy | None) -> RunPolicy:
    policy = policy or RunPolicy()
    update: dict[str, Any] = {}
    if policy.clean_pod_policy is None:
        update["clean_pod_policy"] = DEFAULT_CLEAN_POD_POLICY.value
    if policy.suspend is None:
        update["suspend"] = False
    return policy.model_copy(update=update) if update else policy


def _recase_replica_types(specs: dict[str, ReplicaSpec]) -> dict[str, ReplicaSpec]:
    """Re-case known replica-type keys ("worker" -> "Worker").

    Upstream renames the first case-insensitive match it meets in Go's random map
    order, overwriting an exact-case key. Here an exact-case key wins and otherwise
    the first in document order, so the result is deterministic; validation rejects
    such duplicates anyway.
    """
    out: dict[str, ReplicaSpec] = {}
    for rtype, rspec in specs.items():
        canon = canonical_replica_type(rtype)
        if canon not in out or rtype == canon:
            out[canon] = rspec
    return out


def _default_replica(rspec: ReplicaSpec) -> ReplicaSpec:
    update: dict[str, Any] = {}
    if rspec.replicas is None:
        update["replicas"] = DEFAULT_REPLICAS
    # "" is how upstream spells unset (RestartPolicy is a plain string type).
    if not rspec.restart_policy:
        update["restart_policy"] = DEFAULT_RESTART_POLICY.value
    template = _with_default_port(rspec.template)
    if template is not rspec.template:
        update["template"] = template
    return rspec.model_copy(update=update) if update else rspec


def default_container_index(containers: list[Any]) -> int:
    """The tensorflow container, else container 0 (upstream getDefaultContainerIndex)."""
    index = tensorflow_container_index(containers)
    return 0 if index is None else index


def _with_default_port(template: dict[str, Any]) -> dict[str, Any]:
    """The template with port tfjob-port:2222 on the default container, unless that
    container already has a port named tfjob-port. Returns the same object when
    nothing changes, a deep copy otherwise (the input is shared with the cache)."""
    pod_spec = template.get("spec")
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if not isinstance(containers, list) or not containers:
        return template
    index = default_container_index(containers)
    container = containers[index]
    if not isinstance(container, dict):
        return template
    ports = container.get("ports")
    if ports is not None and not isinstance(ports, list):
        return template  # malformed; validation reports the container, not us
    if any(isinstance(p, dict) and p.get("name") == DEFAULT_PORT_NAME for p in ports or []):
        return template
    new = copy.deepcopy(template)
    new_container = new["spec"]["containers"][index]
    new_container["ports"] = [
        *(new_container.get("ports") or []),
        {"name": DEFAULT_PORT_NAME, "containerPort": DEFAULT_PORT},
    ]
    return new
