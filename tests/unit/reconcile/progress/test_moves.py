"""Moving a straggler, pure (reconcile.progress.moves): which are due, and the term
that keeps a new pod off the nodes its index straggled on."""

from __future__ import annotations

import copy
from typing import Any

from reconcile.api.status_types import IndexRetry, ReplicaStatus, Straggler
from reconcile.progress.moves import MOVES_PER_JOB, keep_away, moves_due
from tests.builders import at

#: the nodes a worker's template could run on
ROOM = {"Worker": {"n1", "n2", "n3"}}


def straggler(index: int = 2, node: str = "n1", uid: str = "u2", peers: int = 3) -> Straggler:
    return Straggler(
        replica_type="Worker", index=index, pod=f"j-worker-{index}", pod_uid=uid, node=node,
        score=0.3, basis="stepRate", since=at(0), peers=peers,
    )  # fmt: skip


def test_due_once_per_window_for_a_running_pod_on_a_known_node() -> None:
    s = straggler()
    none: dict[str, ReplicaStatus] = {}
    assert moves_due([s], none, {"u2"}, at(100), ROOM) == [s]
    assert moves_due([s], none, set(), at(100), ROOM) == []  # not running (terminating, gone)
    assert moves_due([straggler(node="")], none, {"u2"}, at(100), ROOM) == []
    # slower than its one or two peers: which is the odd one is a coin toss, or a lie
    assert moves_due([straggler(peers=1)], none, {"u2"}, at(100), ROOM) == []
    assert moves_due([straggler(peers=2)], none, {"u2"}, at(100), ROOM) == []
    moving = {"Worker": ReplicaStatus(index_retries={"2": IndexRetry(moving_pod_uid="u1")})}
    assert moves_due([s], moving, {"u2"}, at(100), ROOM) == []
    moved = {"Worker": ReplicaStatus(index_retries={"2": IndexRetry(moved_at=at(100))})}
    assert moves_due([s], moved, {"u2"}, at(699), ROOM) == []
    assert moves_due([s], moved, {"u2"}, at(700), ROOM) == [s]


def pod(index: int, spec: dict[str, Any] | None = None) -> dict[str, Any]:
    labels = {"training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": str(index)}  # fmt: skip
    return {"metadata": {"name": f"j-worker-{index}", "labels": labels}, "spec": spec or {}}


def test_the_term_is_added_to_every_required_term_and_only_for_that_index() -> None:
    zone = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    other = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    preferred = [{"weight": 1, "preference": zone}]
    spec = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [zone, other]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": preferred,
            },
            "podAntiAffinity": {"x": 1},
        }
    }
    given = [pod(1, copy.deepcopy(spec)), pod(2, copy.deepcopy(spec))]
    before = copy.deepcopy(given)
    out = keep_away(given, {("worker", 2): ["n1", "n2"]})
    assert given == before  # inputs untouched
    assert out[0] == given[0]
    affinity = out[1]["spec"]["affinity"]
    away = {"key": "metadata.name", "operator": "NotIn", "values": ["n1", "n2"]}
    terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [
        {**zone, "matchFields": [away]},
        {**other, "matchFields": [away]},
    ]
    assert affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert affinity["podAntiAffinity"] == {"x": 1}
    # no affinity in the template: one term of its own
    (bare,) = keep_away([pod(2)], {("worker", 2): ["n1"]})
    assert bare["spec"]["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchFields": [{**away, "values": ["n1"]}]}]
        }
    }


def test_moves_have_a_lifetime_budget_per_index_and_per_job() -> None:
    s = straggler()
    spent = {"Worker": ReplicaStatus(moves=2, index_retries={"2": IndexRetry(moves=2)})}
    assert moves_due([s], spent, {"u2"}, at(10_000), ROOM) == []
    once = {"Worker": ReplicaStatus(moves=1, index_retries={"2": IndexRetry(moves=1)})}
    assert moves_due([s], once, {"u2"}, at(10_000), ROOM) == [s]
    # the job's budget: the types' moves together, and those decided in this pass
    many = [straggler(index=i, uid=f"u{i}") for i in range(10)]
    uids = {f"u{i}" for i in range(10)}
    assert len(moves_due(many, {}, uids, at(100), ROOM)) == MOVES_PER_JOB
    busy = {"Worker": ReplicaStatus(moves=4), "PS": ReplicaStatus(moves=1)}
    assert len(moves_due(many, busy, uids, at(100), ROOM)) == MOVES_PER_JOB - 5


def test_a_move_always_leaves_the_replica_a_node_to_go_to() -> None:
    s = straggler(node="n1")
    # nodes not known (no node cache): nothing is moved
    assert moves_due([s], {}, {"u2"}, at(100), None) == []
    # n1 is the only node the template could run on: moving off it strands the pod
    assert moves_due([s], {}, {"u2"}, at(100), {"Worker": {"n1"}}) == []
    assert moves_due([s], {}, {"u2"}, at(100), {"PS": {"n2"}}) == []  # another type's room
    assert moves_due([s], {}, {"u2"}, at(100), {"Worker": {"n1", "n2"}}) == [s]
    # n2 avoided already: n1 and n2 would both be, and nothing else is left
    away = {"Worker": ReplicaStatus(index_retries={"2": IndexRetry(avoid_nodes=["n2"], moves=1)})}
    assert moves_due([s], away, {"u2"}, at(10_000), {"Worker": {"n1", "n2"}}) == []
    assert moves_due([s], away, {"u2"}, at(10_000), {"Worker": {"n1", "n2", "n3"}}) == [s]
