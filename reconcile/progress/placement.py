"""Which nodes a replica's pod could be placed on (pure): the scheduler's filters that
need nothing but the node object and the pod template — cordons, ``nodeSelector``,
required node affinity, taints against tolerations. Resources are not weighed: a node
that is full now may not be later, and Pending says so.

A move (reconcile.progress.moves) keeps a pod off the nodes in its ``avoidNodes``; it is
made only while some node the template could run on is left outside them, so a move
never leaves a replica nowhere to go.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from controller.types import JSON

#: the taint a cordoned node carries (NodeUnschedulable honours a toleration of it)
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
#: effects that keep a pod off a node; PreferNoSchedule only steers it
_BLOCKING = frozenset({"NoSchedule", "NoExecute"})


def placeable(template: Mapping[str, Any], nodes: Iterable[JSON]) -> frozenset[str]:
    """Names of the ``nodes`` a pod of ``template`` (a PodTemplateSpec) could run on."""
    spec = template.get("spec") if isinstance(template, Mapping) else None
    if not isinstance(spec, Mapping):
        spec = {}
    tolerations = [t for t in spec.get("tolerations") or [] if isinstance(t, Mapping)]
    selector = spec.get("nodeSelector")
    if not isinstance(selector, Mapping):
        selector = {}
    terms = _required_terms(spec)
    out = set()
    for node in nodes:
        meta = node.get("metadata") or {}
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            continue
        labels = meta.get("labels") or {}
        node_spec = node.get("spec") or {}
        if node_spec.get("unschedulable") is True and not _tolerated(
            {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}, tolerations
        ):
            continue
        if any(labels.get(k) != v for k, v in selector.items()):
            continue
        if terms is not None and not any(_term_matches(t, name, labels) for t in terms):
            continue
        taints = [t for t in node_spec.get("taints") or [] if isinstance(t, Mapping)]
        if any(t.get("effect") in _BLOCKING and not _tolerated(t, tolerations) for t in taints):
            continue
        out.add(name)
    return frozenset(out)


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The required node-affinity terms (ORed), or None when there are none."""
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, Mapping) else None
    if not isinstance(node_affinity, Mapping):
        return None
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, Mapping):
        return None
    return [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, Mapping)]


def _term_matches(term: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    """All of a term's requirements (an empty term matches no node)."""
    expressions = [e for e in term.get("matchExpressions") or [] if isinstance(e, Mapping)]
    fields = [e for e in term.get("matchFields") or [] if isinstance(e, Mapping)]
    if not expressions and not fields:
        return False
    if not all(_requirement(e, labels.get(str(e.get("key")))) for e in expressions):
        return False
    return all(e.get("key") == "metadata.name" and _requirement(e, name) for e in fields)


def _requirement(expr: Mapping[str, Any], value: str | None) -> bool:
    op = expr.get("operator")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return value is not None and value in values
    if op == "NotIn":
        return value is None or value not in values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if op == "Gt" else have < bound
    return False


def _tolerated(taint: Mapping[str, Any], tolerations: Sequence[Mapping[str, Any]]) -> bool:
    return any(_tolerates(t, taint) for t in tolerations)


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect"):
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if operator == "Exists":
        return not key or key == taint.get("key")
    if key != taint.get("key"):
        return False
    return (toleration.get("value") or "") == (taint.get("value") or "")
