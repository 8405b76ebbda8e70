"""Slim cache objects: the pod and service fields the TFJob logic reads, nothing else.

The pod and service informers keep every owned child in memory for the life of the
controller, and a full pod (managedFields, the whole container spec with its TF_CONFIG
env, volumes, tolerations, probes, IPs, termination messages...) costs 10-20 KB of Python
objects. These transforms build a new, much smaller dict holding exactly what the
controller reads:

- the informer and store (``controller/``): ``metadata.name/namespace/resourceVersion``,
  ``metadata.ownerReferences`` (controller ref: ``apiVersion/kind/name/uid/controller``),
  ``metadata.uid`` and ``metadata.deletionTimestamp`` (event handlers, expectations);
- ``reconcile/labels.py``: ``metadata.labels`` (replica type and index);
- ``reconcile/pods.py``, ``restart.py``, ``plan.py``: ``metadata.creationTimestamp``,
  ``deletionTimestamp``, ``deletionGracePeriodSeconds``, ``uid``; ``status.phase``,
  ``status.reason`` (Evicted), ``status.conditions[].type/status`` (DisruptionTarget),
  ``status.startTime``, and of ``status.containerStatuses`` and
  ``initContainerStatuses``: ``name``, ``restartCount``,
  ``state.terminated.exitCode/finishedAt``;
- services: only metadata (``_service_plan`` and ``cleanup_deletions`` read the name,
  the UID and ``deletionTimestamp``; labels are kept for ``group_by_replica``).

A few cheap fields nobody reads today are kept for logs and debugging (condition
reason and lastTransitionTime, ``lastState``, container state reasons and start times,
``spec.nodeName/restartPolicy``, the container names, pod ``status.message``).
Dropped on purpose: ``managedFields``, annotations, finalizers, the container specs
beyond their names, condition messages, container ``message``/``containerID``/``image``
(a termination message alone can be 4 KB), IPs, QoS class, a service's ``spec``.

Low-cardinality strings (namespaces, label keys and values, phases, condition types,
container names, owner names and UIDs shared by a job's pods, timestamps shared within a
pod) are interned, so a cache of thousands of pods holds one copy of each.

Both functions are pure: the input is not modified and the output shares no mutable
container with it (only immutable strings and numbers), so the (large) decoded object
can be freed at once. Anything unexpected (a non-dict where a dict belongs) is dropped
rather than copied, so a malformed object can never make the cache larger.
"""

from __future__ import annotations

import sys
from typing import Any

from controller.types import JSON

_intern = sys.intern

_OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller")
_CONDITION_KEYS = ("type", "status", "reason", "lastTransitionTime")
_TERMINATED_KEYS = ("exitCode", "signal", "reason", "startedAt", "finishedAt")

# Hot code: one call per cached object on every list and watch event. Written as straight
# loops over dicts (``type(x) is dict`` rather than Mapping ABC checks, few comprehensions,
# which are function calls before Python 3.12).

#: Identical immutable substructures, shared between cached objects: the controller
#: ownerReference of a job's pods, the container names of one template on one node, a
#: condition or a container state recorded at the same second. One table per kind,
#: keyed by the tuple of the values kept (JSON scalars of one schema, so ``==`` on them
#: is exact enough); each is cleared when full, so together they hold at most a few
#: hundred KB and never keep a gone job's values alive for long. Sound only because
#: cached objects are never mutated (the store's contract): a shared dict is part of
#: many pods.
_OWNERS: dict[tuple[Any, ...], list[JSON]] = {}
_SPECS: dict[tuple[Any, ...], JSON] = {}
_CONDITIONS: dict[tuple[Any, ...], JSON] = {}
_STATES: dict[tuple[Any, ...], JSON] = {}
_SHARED_MAX = 1024


def _share(table: dict[tuple[Any, ...], Any], key: tuple[Any, ...], value: Any) -> Any:
    if len(table) >= _SHARED_MAX:
        table.clear()
    table[key] = value
    return value


def _i(value: Any) -> Any:
    return _intern(value) if type(value) is str else value


def _pick(src: JSON, keys: tuple[str, ...]) -> JSON:
    """``{k: src[k]}`` for the keys present and not null, string values interned."""
    out: JSON = {}
    for k in keys:
        v = src.get(k)
        if v is not None:
            out[k] = _intern(v) if type(v) is str else v
    return out


def _values(src: JSON, keys: tuple[str, ...]) -> tuple[Any, ...]:
    """The values of ``keys`` (None when absent or null, both left out by ``_pick``):
    the sharing key of ``_pick(src, keys)``."""
    get = src.get
    return tuple([get(k) for k in keys])


def _owner_references(refs: list[Any]) -> list[JSON]:
    key = tuple([_values(r, _OWNER_KEYS) for r in refs if type(r) is dict])
    hit = _OWNERS.get(key)
    if hit is not None:
        return hit
    return _share(_OWNERS, key, [_pick(r, _OWNER_KEYS) for r in refs if type(r) is dict])  # type: ignore[no-any-return]


def _metadata(meta: Any) -> JSON:
    if type(meta) is not dict:
        return {}
    out: JSON = {}
    if "name" in meta:
        out["name"] = meta["name"]  # unique per object: not interned
    value = meta.get("namespace")
    if value is not None:
        out["namespace"] = _i(value)
    for key in ("uid", "resourceVersion", "generation", "deletionGracePeriodSeconds"):
        if key in meta:
            out[key] = meta[key]
    for key in ("creationTimestamp", "deletionTimestamp"):
        value = meta.get(key)
        if value is not None:
            out[key] = _i(value)
    value = meta.get("labels")
    if type(value) is dict:
        labels: JSON = {}
        for k, v in value.items():
            labels[_i(k)] = _i(v)
        out["labels"] = labels
    value = meta.get("ownerReferences")
    if type(value) is list:
        out["ownerReferences"] = _owner_references(value)
    return out


def _condition(cond: JSON) -> JSON:
    key = _values(cond, _CONDITION_KEYS)
    hit = _CONDITIONS.get(key)
    if hit is not None:
        return hit
    return _share(_CONDITIONS, key, _pick(cond, _CONDITION_KEYS))  # type: ignore[no-any-return]


def _state(state: Any) -> JSON | None:
    """A container state (waiting/running/terminated) without messages or container IDs."""
    if type(state) is not dict:
        return None
    terminated, running, waiting = (
        state.get("terminated"),
        state.get("running"),
        state.get("waiting"),
    )
    key = (
        _values(terminated, _TERMINATED_KEYS) if type(terminated) is dict else None,
        running.get("startedAt") if type(running) is dict else False,
        waiting.get("reason") if type(waiting) is dict else False,
    )
    hit = _STATES.get(key)
    if hit is not None:
        return hit
    out: JSON = {}
    if type(terminated) is dict:
        out["terminated"] = _pick(terminated, _TERMINATED_KEYS)
    if type(running) is dict:
        out["running"] = _pick(running, ("startedAt",))
    if type(waiting) is dict:
        out["waiting"] = _pick(waiting, ("reason",))
    return _share(_STATES, key, out)  # type: ignore[no-any-return]


def _container_statuses(statuses: list[Any]) -> list[JSON]:
    out: list[JSON] = []
    for cs in statuses:
        if type(cs) is not dict:
            continue
        slim = _pick(cs, ("name", "restartCount"))
        state = _state(cs.get("state"))
        if state is not None:
            slim["state"] = state
        last = _state(cs.get("lastState"))
        if last:  # usually {}: not worth a key per container
            slim["lastState"] = last
        out.append(slim)
    return out


def _pod_status(status: JSON) -> JSON:
    out = _pick(status, ("phase", "reason", "startTime"))
    if "message" in status:
        out["message"] = status["message"]  # free text: not interned
    value = status.get("conditions")
    if type(value) is list:
        out["conditions"] = [_condition(c) for c in value if type(c) is dict]
    value = status.get("initContainerStatuses")
    if type(value) is list:
        out["initContainerStatuses"] = _container_statuses(value)
    value = status.get("containerStatuses")
    if type(value) is list:
        out["containerStatuses"] = _container_statuses(value)
    return out


def _pod_spec(spec: JSON) -> JSON:
    containers = spec.get("containers")
    names = (
        tuple([c.get("name") for c in containers if type(c) is dict])
        if type(containers) is list
        else None
    )
    key = (spec.get("nodeName"), spec.get("restartPolicy"), names)
    hit = _SPECS.get(key)
    if hit is not None:
        return hit
    out = _pick(spec, ("nodeName", "restartPolicy"))
    if names is not None:
        out["containers"] = [{"name": _i(name)} for name in names]
    return _share(_SPECS, key, out)  # type: ignore[no-any-return]


def _head(obj: JSON) -> JSON:
    out = _pick(obj, ("apiVersion", "kind"))
    out["metadata"] = _metadata(obj.get("metadata"))
    return out


def slim_pod(obj: JSON) -> JSON:
    """The pod with only the fields the controller reads (see the module docstring)."""
    out = _head(obj)
    value = obj.get("spec")
    if type(value) is dict:
        out["spec"] = _pod_spec(value)
    value = obj.get("status")
    if type(value) is dict:
        out["status"] = _pod_status(value)
    return out


def slim_service(obj: JSON) -> JSON:
    """The service's identity and labels: nothing of its spec or status is read."""
    return _head(obj)


__all__ = ["slim_pod", "slim_service"]
