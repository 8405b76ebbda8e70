"""Slim cache objects: the pod and service fields the TFJob logic reads, nothing else.

The pod and service informers keep every owned child in memory for the life of the
controller, and a full pod (managedFields, the whole container spec with its TF_CONFIG
env, volumes, tolerations, probes, IPs, termination messages...) costs 10-20 KB of Python
objects. These transforms build a new, much smaller dict holding exactly what the
controller reads:

- the informer and store (``controller/``): ``metadata.name/namespace/resourceVersion``,
  ``metadata.finalizers`` (reconcile/policy/tracking.py: is the pod still ours to release?),
  ``metadata.ownerReferences`` (controller ref: ``apiVersion/kind/name/uid/controller``),
  ``metadata.uid`` and ``metadata.deletionTimestamp`` (event handlers, expectations);
- ``reconcile/api/labels.py``: ``metadata.labels`` (replica type and index);
- ``reconcile/objects/observed.py`` (the pod view each pass reads):
  ``metadata.creationTimestamp``, ``deletionTimestamp``, ``deletionGracePeriodSeconds``,
  ``uid``; ``status.phase``, ``status.reason`` (Evicted),
  ``status.conditions[].type/status`` (DisruptionTarget), ``status.startTime``, and of
  ``status.containerStatuses`` and ``initContainerStatuses``: ``name``,
  ``restartCount``, ``state.terminated.exitCode/finishedAt``;
- the progress endpoint (controller.serving.reports): ``status.podIP`` and ``podIPs``,
  the addresses whose connections go before strangers';
- services: only metadata (``_service_plan`` and ``cleanup_deletions`` read the name,
  the UID and ``deletionTimestamp``; labels are kept, the replica type and index).

A few cheap fields nobody reads today are kept for logs and debugging (condition
reason and lastTransitionTime, ``lastState``, container state reasons and start times,
``spec.nodeName/restartPolicy``, the container names, pod ``status.message``).
Of the annotations only ``RETIRED_ANNOTATION`` is kept (``restart.py``: a pod the
controller deleted itself). Dropped on purpose: ``managedFields``, other annotations,
the container specs
beyond their names, condition messages, container ``message``/``containerID``/``image``
(a termination message alone can be 4 KB), host IPs, QoS class, a service's ``spec``.

Low-cardinality strings (namespaces, label keys and values, phases, condition types,
container names, owner names and UIDs shared by a job's pods, timestamps shared within a
pod) are interned, so a cache of thousands of pods holds one copy of each; and small
substructures that are equal between pods (the controller ownerReference of a job's
pods, the ``spec`` of one template on one node, a condition or container state entered
in the same second) are one shared dict, through small bounded tables (see
``_SHARED_MAX``). A cached pod is then ~3 KB instead of ~10 KB (managedFields stripped)
or ~20 KB (as decoded).

Both functions are pure as far as callers can tell: the input is not modified, the
output shares no mutable container with it (only immutable strings and numbers), so the
(large) decoded object can be freed at once, and equal inputs give equal outputs. The
output may share dicts and lists with *other* outputs: like everything in the informer
caches, it must never be mutated. Anything unexpected (a non-dict where a dict belongs)
is dropped rather than copied, so a malformed object can never make the cache larger.
"""

from __future__ import annotations

import sys
from typing import Any

from controller.types import JSON
from reconcile.api.names import RETIRED_ANNOTATION

_intern = sys.intern

_OWNER_KEYS = ("apiVersion", "kind", "name", "uid", "controller")  # the key's order too
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
#: What is kept of a pod's annotations when it has ours (one shared dict): the value is
#: never read.
_RETIRED: JSON = {RETIRED_ANNOTATION: "true"}
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


def _pick(src: JSON, keys: tuple[str, ...], out: JSON | None = None) -> JSON:
    """``{k: src[k]}`` for the keys present and not null, string values interned
    (into ``out`` if given)."""
    out = {} if out is None else out
    for k in keys:
        v = src.get(k)
        if v is not None:
            out[k] = _intern(v) if type(v) is str else v
    return out


def _copy(src: JSON, keys: tuple[str, ...], out: JSON | None = None) -> JSON:
    """Like ``_pick`` without interning: for values unique to one object (names, UIDs,
    resourceVersions, free text), which would only grow the intern table."""
    out = {} if out is None else out
    for k in keys:
        v = src.get(k)
        if v is not None:
            out[k] = v
    return out


def _owner_references(refs: list[Any]) -> list[JSON]:
    key = tuple(
        [
            (r.get("apiVersion"), r.get("kind"), r.get("name"), r.get("uid"), r.get("controller"))
            for r in refs
            if type(r) is dict
        ]
    )
    hit = _OWNERS.get(key)
    if hit is None:
        hit = _share(_OWNERS, key, [_pick(r, _OWNER_KEYS) for r in refs if type(r) is dict])
    return hit


def _metadata(meta: Any) -> JSON:
    if type(meta) is not dict:
        return {}
    get = meta.get
    out = _copy(
        meta, ("name", "uid", "resourceVersion", "generation", "deletionGracePeriodSeconds")
    )
    _pick(meta, ("namespace", "creationTimestamp", "deletionTimestamp"), out)
    v = get("labels")
    if type(v) is dict:
        labels: JSON = {}
        for key, value in v.items():
            labels[_intern(key) if type(key) is str else key] = (
                _intern(value) if type(value) is str else value
            )
        out["labels"] = labels
    v = get("ownerReferences")
    if type(v) is list:
        out["ownerReferences"] = _owner_references(v)
    v = get("finalizers")
    if type(v) is list and v:
        out["finalizers"] = [_intern(f) for f in v if type(f) is str]
    v = get("annotations")
    if type(v) is dict and RETIRED_ANNOTATION in v:
        out["annotations"] = _RETIRED  # the one annotation read (reconcile.objects.pods.is_retired)
    return out


def _conditions(conditions: list[Any]) -> list[JSON]:
    out: list[JSON] = []
    for c in conditions:
        if type(c) is not dict:
            continue
        get = c.get
        key = (get("type"), get("status"), get("reason"), get("lastTransitionTime"))
        hit = _CONDITIONS.get(key)
        if hit is None:
            hit = {}
            for k, v in zip(_CONDITION_KEYS, key, strict=True):
                if v is not None:
                    hit[k] = _intern(v) if type(v) is str else v
            if len(_CONDITIONS) >= _SHARED_MAX:
                _CONDITIONS.clear()
            _CONDITIONS[key] = hit
        out.append(hit)
    return out


def _state(state: Any) -> JSON | None:
    """A container state (waiting/running/terminated) without messages or container IDs."""
    if type(state) is not dict:
        return None
    get = state.get
    running, terminated, waiting = get("running"), get("terminated"), get("waiting")
    if type(running) is dict:
        started = running.get("startedAt")
        key: tuple[Any, ...] = ("running", started)
    else:
        started = None
        key = ()
    if type(terminated) is dict:
        t = terminated.get
        key += ("terminated", t("exitCode"), t("signal"), t("reason"), t("startedAt"))
        key += (t("finishedAt"),)
    if type(waiting) is dict:
        key += ("waiting", waiting.get("reason"))
    hit = _STATES.get(key)
    if hit is not None:
        return hit
    out: JSON = {}
    if type(terminated) is dict:
        out["terminated"] = _pick(terminated, _TERMINATED_KEYS)
    if type(running) is dict:
        out["running"] = {} if started is None else {"startedAt": _i(started)}
    if type(waiting) is dict:
        out["waiting"] = _pick(waiting, ("reason",))
    return _share(_STATES, key, out)  # type: ignore[no-any-return]


def _container_statuses(statuses: list[Any]) -> list[JSON]:
    out: list[JSON] = []
    for cs in statuses:
        if type(cs) is not dict:
            continue
        get = cs.get
        slim = _pick(cs, ("name",))
        _copy(cs, ("restartCount",), slim)
        v = _state(get("state"))
        if v is not None:
            slim["state"] = v
        v = get("lastState")
        if v:  # usually {}: not worth a key per container
            v = _state(v)
            if v:
                slim["lastState"] = v
        out.append(slim)
    return out


def _pod_status(status: JSON) -> JSON:
    get = status.get
    out = _pick(status, ("phase", "reason", "startTime", "podIP"))
    v = get("podIPs")
    if type(v) is list and v:
        out["podIPs"] = [_pick(e, ("ip",)) for e in v if type(e) is dict]
    _copy(status, ("message",), out)
    v = get("conditions")
    if type(v) is list:
        out["conditions"] = _conditions(v)
    v = get("initContainerStatuses")
    if type(v) is list:
        out["initContainerStatuses"] = _container_statuses(v)
    v = get("containerStatuses")
    if type(v) is list:
        out["containerStatuses"] = _container_statuses(v)
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
    if hit is None:
        hit = _pick(spec, ("nodeName", "restartPolicy"))
        if names is not None:
            hit["containers"] = [{"name": _i(name)} for name in names]
        _share(_SPECS, key, hit)
    return hit


def _head(obj: JSON) -> JSON:
    out: JSON = {}
    v = obj.get("apiVersion")
    if v is not None:
        out["apiVersion"] = _intern(v) if type(v) is str else v
    v = obj.get("kind")
    if v is not None:
        out["kind"] = _intern(v) if type(v) is str else v
    out["metadata"] = _metadata(obj.get("metadata"))
    return out


def slim_pod(obj: JSON) -> JSON:
    """The pod with only the fields the controller reads (see the module docstring)."""
    out = _head(obj)
    v = obj.get("spec")
    if type(v) is dict:
        out["spec"] = _pod_spec(v)
    v = obj.get("status")
    if type(v) is dict:
        out["status"] = _pod_status(v)
    return out


def slim_service(obj: JSON) -> JSON:
    """The service's identity and labels: nothing of its spec or status is read."""
    return _head(obj)


def slim_node(obj: JSON) -> JSON:
    """A node's identity, labels, cordon and taints: what says whether a replica's pod
    could be placed there (reconcile.progress.placement). Its status (images, volumes,
    conditions: most of a node's bytes) is not read."""
    out = _head(obj)
    v = obj.get("spec")
    if type(v) is dict:
        spec: JSON = {}
        if v.get("unschedulable") is True:
            spec["unschedulable"] = True
        taints = v.get("taints")
        if type(taints) is list and taints:
            spec["taints"] = [
                _pick(t, ("key", "value", "effect")) for t in taints if type(t) is dict
            ]
        out["spec"] = spec
    return out


__all__ = ["slim_node", "slim_pod", "slim_service"]
