"""What the controller would create for a TFJob, worked out with no cluster (pure).

``explain(job, config, now)`` runs the controller's own planner (reconcile.plan's
``compute_plan``) on a small world of its own, pass after pass, as the reconciler would:
each pass's creates are stored (with a UID, and the job's new status), and the next pass
sees them. Without gang scheduling the first pass makes every service and pod; with it,
the first makes the PodGroup (and the services), and the pods come in the second, once
the PodGroup is stored (a Volcano one as admitted: phase Inqueue). The bodies returned
are the ones the controller would POST, untouched.

A job without a namespace or a UID is given placeholders, and the explanation says so.
No I/O here: ``tfjob_controller.explain`` reads files and prints.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controller.types import JSON
from reconcile.api.defaults import canonical_replica_type
from reconcile.api.labels import replica_index_of, replica_type_of
from reconcile.api.models import dump_tfjob
from reconcile.api.spec import read_job
from reconcile.api.status_types import format_time
from reconcile.api.validation import FieldError
from reconcile.objects.cluster_spec import TF_CONFIG_ENV, tensorflow_container
from reconcile.objects.observed import observe_all
from reconcile.plan import Plan, PlanConfig, Snapshot, compute_plan
from reconcile.policy import conditions as cond
from reconcile.policy.gang import GangKind

DEFAULT_NAMESPACE = "default"
PLACEHOLDER_UID = "00000000-0000-0000-0000-000000000000"
#: The phase a stored Volcano PodGroup is given: admitted, so the pods may be created.
VOLCANO_ADMITTED = "Inqueue"
#: More than enough: the pods come in the second pass at the latest.
MAX_PASSES = 4


@dataclass(frozen=True)
class Row:
    """One object, as the table shows it ("" where a column does not apply)."""

    kind: str
    name: str
    replica_type: str = ""
    index: str = ""
    scheduler_name: str = ""
    #: the TF_CONFIG task of a pod, "worker:0"
    task: str = ""


@dataclass(frozen=True)
class Explanation:
    name: str
    namespace: str
    uid: str
    #: what was assumed (placeholders for what the job does not say)
    notes: tuple[str, ...] = ()
    #: the field errors of an invalid job
    errors: tuple[FieldError, ...] = ()
    #: the Failed condition the controller would set: its reason and message
    failed_reason: str | None = None
    failed_message: str | None = None
    #: the job after defaulting, as the controller reads it (None when invalid)
    effective: JSON | None = None
    #: each default applied, "path: value"
    defaults: tuple[str, ...] = ()
    podgroup: JSON | None = None
    services: tuple[JSON, ...] = ()
    pods: tuple[JSON, ...] = ()
    #: the events the controller would record, "Type Reason: message"
    events: tuple[str, ...] = ()
    #: why the controller would do nothing (managed by another controller, ...)
    skip_reason: str | None = None
    #: how many passes created something (gang scheduling: the PodGroup first, then pods)
    passes: int = 0

    @property
    def valid(self) -> bool:
        """Whether the spec passes validation (a valid job may still fail at once, by a
        policy of its own such as a negative backoffLimit: see ``failed_reason``)."""
        return self.failed_reason != cond.REASON_FAILED_VALIDATION

    @property
    def objects(self) -> list[JSON]:
        """Everything created, in the order the controller creates it."""
        head = [self.podgroup] if self.podgroup is not None else []
        return [*head, *self.services, *self.pods]

    def rows(self) -> list[Row]:
        types = _canonical_types(self.effective)
        return [_row(obj, types) for obj in self.objects]


@dataclass
class _World:
    """The apiserver as far as one job is concerned: what the passes have created."""

    job: JSON
    pods: list[JSON] = field(default_factory=list)
    services: list[JSON] = field(default_factory=list)
    podgroup: JSON | None = None


def explain(
    job: Mapping[str, Any],
    config: PlanConfig,
    now: datetime,
    *,
    priorities: Mapping[str, int] | None = None,
    namespace: str | None = None,
) -> Explanation:
    """Run the controller's planner on ``job`` until it has nothing more to create.

    ``priorities`` are PriorityClass values by name (the PodGroup's minResources takes
    replica types by them); ``namespace`` replaces the job's own."""
    raw, notes = _prepared(job, namespace)
    world = _World(raw)
    first = read_job(copy.deepcopy(raw))
    events: list[str] = []
    created_pods: list[JSON] = []
    created_services: list[JSON] = []
    created_podgroup: JSON | None = None
    skip_reason: str | None = None
    passes = 0
    for _ in range(MAX_PASSES):
        snap = Snapshot(
            read_job(copy.deepcopy(world.job)),
            observe_all(copy.deepcopy(world.pods)),
            copy.deepcopy(world.services),
            now,
            podgroup=copy.deepcopy(world.podgroup),
            priorities=dict(priorities or {}),
        )
        plan = compute_plan(snap, config)
        events += [f"{e.type} {e.reason}: {e.message}" for e in plan.events]
        skip_reason = plan.skip_reason
        created_pods += [as_sent(p) for p in plan.create_pods]
        created_services += [as_sent(s) for s in plan.create_services]
        if plan.podgroup is not None and plan.podgroup.verb == "create":
            created_podgroup = as_sent(plan.podgroup.body)
        if not _store(world, plan, config, now):
            break
        passes += 1
    status = world.job.get("status") or {}
    failed = cond_of(status, cond.FAILED)
    effective = dump_tfjob(first.tfjob) if first.tfjob is not None else None
    return Explanation(
        name=first.name,
        namespace=first.namespace,
        uid=first.uid,
        notes=tuple(notes),
        errors=first.spec.errors,
        failed_reason=str(failed.get("reason")) if failed else None,
        failed_message=str(failed.get("message")) if failed else None,
        effective=effective,
        defaults=tuple(defaults_applied(raw.get("spec"), effective["spec"])) if effective else (),
        podgroup=created_podgroup,
        services=tuple(created_services),
        pods=tuple(created_pods),
        events=tuple(events),
        skip_reason=skip_reason,
        passes=passes,
    )


def as_sent(body: JSON) -> JSON:
    """The body as the apiserver receives it: JSON (a StrEnum value is a plain string)."""
    sent: JSON = json.loads(json.dumps(body))
    return sent


def _prepared(job: Mapping[str, Any], namespace: str | None) -> tuple[JSON, list[str]]:
    """A copy of the job with a namespace and a UID, and notes on what was assumed."""
    raw: JSON = copy.deepcopy(dict(job))
    raw.pop("status", None)  # a job as written: the controller has not seen it yet
    notes: list[str] = []
    meta = raw.get("metadata")
    if not isinstance(meta, dict):
        return raw, notes  # validation names the field
    given = meta.get("namespace")
    if namespace:
        if given and given != namespace:
            notes.append(f"metadata.namespace {given!r} replaced by {namespace!r}")
        meta["namespace"] = namespace
    elif not given:
        meta["namespace"] = DEFAULT_NAMESPACE
        notes.append(f"metadata.namespace is not set: explained in {DEFAULT_NAMESPACE!r}")
    if not meta.get("uid"):
        meta["uid"] = PLACEHOLDER_UID
        notes.append(f"metadata.uid is not set: ownerReferences carry {PLACEHOLDER_UID}")
    return raw, notes


def _store(world: _World, plan: Plan, config: PlanConfig, now: datetime) -> bool:
    """Apply the plan's writes as the apiserver would; whether anything was created."""
    stamp = format_time(now)
    if plan.status is not None:
        world.job["status"] = copy.deepcopy(plan.status)
    for body in plan.create_services:
        world.services.append(_stored(body, "service", stamp))
    for body in plan.create_pods:
        pod = _stored(body, "pod", stamp)
        pod["status"] = {"phase": "Pending"}
        world.pods.append(pod)
    made = bool(plan.create_pods or plan.create_services)
    if plan.podgroup is not None and plan.podgroup.verb == "create":
        pg = _stored(plan.podgroup.body, "podgroup", stamp)
        if config.gang is not None and config.gang.kind is GangKind.VOLCANO:
            pg["status"] = {"phase": VOLCANO_ADMITTED}
        world.podgroup = pg
        made = True
    return made


def _stored(body: JSON, kind: str, stamp: str) -> JSON:
    obj = copy.deepcopy(body)
    meta = obj["metadata"]
    meta.update(uid=f"explain-{kind}-{meta['name']}", creationTimestamp=stamp)
    return obj


def cond_of(status: Mapping[str, Any], cond_type: str) -> Mapping[str, Any] | None:
    """The condition of ``cond_type`` in a status JSON, when it is True."""
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == cond_type and c.get("status") == cond.TRUE:
            return c
    return None


# --- defaults -----------------------------------------------------------------------------

#: Fields whose children are map keys, written [key] as in the validation messages.
_MAP_FIELDS = frozenset({"tfReplicaSpecs", "minResources"})


def defaults_applied(given: object, effective: object, path: str = "spec") -> list[str]:
    """What defaulting added or changed, one "path: value" per field (values as JSON)."""
    if isinstance(given, Mapping) and isinstance(effective, Mapping):
        out: list[str] = []
        if path.endswith("tfReplicaSpecs"):
            for key in given:
                if canonical_replica_type(str(key)) != key:
                    out.append(f"{path}[{key}]: read as {canonical_replica_type(str(key))}")
            given = {canonical_replica_type(str(k)): v for k, v in given.items()}
        for key, value in effective.items():
            sub = _child_path(path, key)
            if key in given:
                out += defaults_applied(given[key], value, sub)
            else:
                out.append(f"{sub}: {_compact(value)}")
        return out
    if isinstance(given, list) and isinstance(effective, list):
        out = []
        for i, value in enumerate(effective):
            sub = f"{path}[{i}]"
            if i < len(given):
                out += defaults_applied(given[i], value, sub)
            else:
                out.append(f"{sub}: {_compact(value)}")
        return out
    if given != effective:
        return [f"{path}: {_compact(effective)} (was {_compact(given)})"]
    return []


def _child_path(path: str, key: object) -> str:
    last = path.rsplit(".", 1)[-1]
    return f"{path}[{key}]" if last in _MAP_FIELDS else f"{path}.{key}"


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


# --- rows ---------------------------------------------------------------------------------


def _canonical_types(effective: Mapping[str, Any] | None) -> dict[str, str]:
    specs = ((effective or {}).get("spec") or {}).get("tfReplicaSpecs") or {}
    return {str(rt).lower(): str(rt) for rt in specs}


def _row(obj: Mapping[str, Any], types: Mapping[str, str]) -> Row:
    meta = obj.get("metadata") or {}
    kind, name = str(obj.get("kind", "")), str(meta.get("name", ""))
    if kind not in ("Pod", "Service"):
        return Row(kind, name)
    rtype = replica_type_of(obj) or ""
    index = replica_index_of(obj)
    row = Row(kind, name, types.get(rtype, rtype), "" if index is None else str(index))
    if kind == "Service":
        return row
    scheduler = str((obj.get("spec") or {}).get("schedulerName") or "")
    return Row(row.kind, row.name, row.replica_type, row.index, scheduler, tf_task(obj))


def tf_config(pod: Mapping[str, Any]) -> JSON | None:
    """The TF_CONFIG of a pod body, parsed; None when it has none."""
    container = tensorflow_container(pod)
    for env in (container or {}).get("env") or []:
        if isinstance(env, Mapping) and env.get("name") == TF_CONFIG_ENV:
            value = json.loads(str(env.get("value")))
            return value if isinstance(value, dict) else None
    return None


def tf_task(pod: Mapping[str, Any]) -> str:
    """ "type:index" of the pod's TF_CONFIG task; "" when it has no TF_CONFIG."""
    config = tf_config(pod)
    task = (config or {}).get("task")
    if not isinstance(task, Mapping):
        return ""
    return f"{task.get('type')}:{task.get('index')}"


__all__ = [
    "DEFAULT_NAMESPACE",
    "PLACEHOLDER_UID",
    "Explanation",
    "Row",
    "defaults_applied",
    "explain",
    "tf_config",
    "tf_task",
]
