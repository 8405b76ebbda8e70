"""Where a replica's pod could be placed (reconcile.progress.placement), as the
scheduler's node filters decide it from the node and the template alone."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reconcile.progress.placement import placeable
from reconcile.sync.slim import slim_node


def node(name: str, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def template(**spec: Any) -> dict[str, Any]:
    return {"spec": {"containers": [{"name": "tensorflow"}], **spec}}


def required(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


NODES = [
    node("a", {"pool": "gpu", "zone": "1", "cores": "8"}),
    node("b", {"pool": "gpu", "zone": "2", "cores": "64"}),
    node("c", {"pool": "cpu"}),
    node("cordoned", {"pool": "gpu"}, unschedulable=True),
    node(
        "tainted", {"pool": "gpu"}, taints=[{"key": "gpu", "value": "a100", "effect": "NoSchedule"}]
    ),
    node("soft", {"pool": "gpu"}, taints=[{"key": "x", "effect": "PreferNoSchedule"}]),
]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ({}, {"a", "b", "c", "soft"}),
        ({"nodeSelector": {"pool": "gpu"}}, {"a", "b", "soft"}),
        ({"nodeSelector": {"pool": "gpu", "zone": "2"}}, {"b"}),
        # terms are ORed, a term's requirements ANDed
        (
            {"affinity": required(
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["1"]}]},
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["cpu"]}]},
            )},
            {"a", "c"},
        ),
        (
            {"affinity": required({"matchExpressions": [
                {"key": "pool", "operator": "Exists"},
                {"key": "zone", "operator": "DoesNotExist"},
            ]})},
            {"c", "soft"},
        ),
        (
            {"affinity": required(
                {"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["16"]}]}
            )},
            {"b"},
        ),
        (
            {"affinity": required({"matchFields": [
                {"key": "metadata.name", "operator": "NotIn", "values": ["a", "b"]}
            ]})},
            {"c", "soft"},
        ),
        ({"affinity": required({})}, set()),  # an empty term matches no node
        # tolerations: of the exact taint, of its key, of everything
        (
            {"tolerations": [{"key": "gpu", "operator": "Equal", "value": "a100"}]},
            {"a", "b", "c", "soft", "tainted"},
        ),
        ({"tolerations": [{"key": "gpu", "value": "h100"}]}, {"a", "b", "c", "soft"}),
        (
            {"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
            {"a", "b", "c", "soft", "tainted"},
        ),
        ({"tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}]},
         {"a", "b", "c", "soft"}),
        ({"tolerations": [{"operator": "Exists"}]}, {"a", "b", "c", "soft", "tainted", "cordoned"}),
    ],
    ids=[
        "anything", "selector", "selector-two", "terms-ored", "exists", "gt", "fields",
        "empty-term", "toleration-equal", "toleration-other-value", "toleration-key",
        "toleration-other-effect", "toleration-all",
    ],
)  # fmt: skip
def test_the_nodes_a_template_could_run_on(spec: dict[str, Any], want: set[str]) -> None:
    t = template(**spec)
    before = copy.deepcopy(t)
    assert placeable(t, NODES) == want
    assert t == before


def test_malformed_nodes_and_templates_place_nothing_and_raise_nothing() -> None:
    assert placeable({}, [node("a")]) == {"a"}
    assert placeable({"spec": "x"}, [node("a")]) == {"a"}
    assert placeable(template(), [{"metadata": {}}, {}, node("")]) == frozenset()
    odd = required({"matchExpressions": [{"key": "cores", "operator": "Gt", "values": ["x"]}]})
    assert placeable(template(affinity=odd), NODES) == frozenset()


def test_the_node_cache_keeps_what_placement_reads() -> None:
    full = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "b", "uid": "u", "resourceVersion": "7", "labels": {"pool": "gpu"},
                     "annotations": {"big": "x" * 1000}},
        "spec": {"podCIDR": "10.0.0.0/24", "unschedulable": True,
                 "taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule",
                             "timeAdded": "2026-01-01T00:00:00Z"}]},
        "status": {"images": [{"names": ["x"], "sizeBytes": 1}] * 50},
    }  # fmt: skip
    slim = slim_node(full)
    assert "status" not in slim and "annotations" not in slim["metadata"]
    assert slim["spec"] == {
        "unschedulable": True,
        "taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}],
    }
    tol = template(tolerations=[{"operator": "Exists"}])
    assert placeable(tol, [slim]) == placeable(tol, [full]) == {"b"}
    assert placeable(template(), [slim]) == placeable(template(), [full]) == frozenset()
