"""Moving a straggler off its node (``straggler-action: move``; pure).

When one node's bottleneck slows a synchronous job, the fix users ask for is to give that
replica's work another node. A flagged replica (reconcile.progress.stragglers) is moved:

1. the pass that decides records it in the index's retry state (``movingPodUID``, the
   node added to ``avoidNodes``, ``movedAt``) and counts it in the type's ``moves``:
   account, then act, as for every end;
2. once that is stored, the pod is deleted (policy.restart deletes a ``movingPodUID``
   pod and counts no end of it: neither a failure against backoffLimit nor a disruption);
3. its replacement is created at once (no backoff) with a node-affinity term that keeps
   it off every node in ``avoidNodes``: that pod only, not the template. On a cluster
   with no other node it waits, Pending, which is the truth of it.

Under whole-gang restart the move is a gang restart instead (every pod of a synchronous
job goes together), again not counted against backoffLimit, and the moved index's new
pod keeps away from the node as above. A replica is moved at most once per
MOVE_WINDOW, so a job on uniformly slow nodes does not chase its tail; only one compared
with at least MIN_PEERS peers; and only while every pod of the job runs (the caller's
``movable`` is empty otherwise): while one is away, the others' rates shift, and the
first real run moved a second worker that was only slower than the one left.

Moves have a lifetime budget: MOVES_PER_INDEX for an index (its ``moves`` in the retry
state) and MOVES_PER_JOB for the job (the types' ``moves`` together). A replica that
misreports can thus cost its peers a bounded number of moves, never one every window
for ever, and an index's ``avoidNodes`` never grows past its budget. And a move is made
only while a node the replica's template could run on is left outside the nodes its
pod would avoid (reconcile.progress.placement; ``room``): never one that leaves the
replica nowhere to go. Where the nodes are not known, nothing is moved.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from controller.types import JSON
from reconcile.api.labels import REPLICA_INDEX_LABEL, REPLICA_TYPE_LABEL
from reconcile.api.status_types import IndexRetry, ReplicaStatus, Straggler
from reconcile.policy import conditions as cond
from reconcile.policy.restart import ReplicaAccount

MOVE_WINDOW = timedelta(minutes=10)
#: a replica is moved only when it was compared with at least this many peers: against
#: one, which of two is the odd one is a coin toss
MIN_PEERS = 3
MOVES_PER_INDEX = 2
MOVES_PER_JOB = 6
MAX_AVOIDED = 8
#: the node a pod is bound to, as node affinity's matchFields names it
NODE_NAME_FIELD = "metadata.name"


def moves_due(
    flagged: Sequence[Straggler],
    statuses: Mapping[str, ReplicaStatus],
    movable: Collection[str],
    now: datetime,
    room: Mapping[str, Collection[str]] | None,
) -> list[Straggler]:
    """The flagged replicas to move now: on a known node, their pod still running
    (``movable``: UIDs), not being moved already, not moved within the window, within
    their index's and the job's budgets, and with a node to go to: ``room`` names, by
    replica type, the nodes its template could run on (None: not known, no move)."""
    out: list[Straggler] = []
    if room is None:
        return out
    spent = sum(rs.moves for rs in statuses.values())
    for s in flagged:
        if spent + len(out) >= MOVES_PER_JOB:
            break
        if not s.node or s.pod_uid not in movable or s.peers < MIN_PEERS:
            continue
        rec = statuses.get(s.replica_type, ReplicaStatus()).index_retries.get(str(s.index))
        if rec is not None and (rec.moving_pod_uid or rec.moves >= MOVES_PER_INDEX):
            continue
        if rec is not None and rec.moved_at is not None and now - rec.moved_at < MOVE_WINDOW:
            continue
        avoided = set(_avoided_after(rec.avoid_nodes if rec else [], s.node))
        if not any(n not in avoided for n in room.get(s.replica_type, ())):
            continue
        out.append(s)
    return out


def with_moves(
    outcomes: Mapping[str, ReplicaAccount],
    moves: Sequence[Straggler],
    now: datetime,
) -> dict[str, ReplicaAccount]:
    """The outcomes with each move recorded; new ones, the given left as they were.
    (Under whole-gang restart the restart takes every pod, the marked one with them;
    the mark clears, as it does otherwise, once the index has no pod.)"""
    out = dict(outcomes)
    for s in moves:
        o = out.get(s.replica_type)
        if o is None:
            continue
        rs = o.status
        rec = rs.index_retries.get(str(s.index), IndexRetry())
        rec = rec.model_copy(
            update={
                "moving_pod_uid": s.pod_uid,
                "avoid_nodes": _avoided_after(rec.avoid_nodes, s.node),
                "moved_at": now,
                "moves": rec.moves + 1,
            }
        )
        retries = {**rs.index_retries, str(s.index): rec}
        rs = rs.model_copy(update={"moves": rs.moves + 1, "index_retries": retries})
        out[s.replica_type] = replace(o, status=rs)
    return out


def _avoided_after(avoid: Sequence[str], node: str) -> list[str]:
    """An index's ``avoidNodes`` once it is moved off ``node``: the newest MAX_AVOIDED."""
    return [*[n for n in avoid if n != node][-(MAX_AVOIDED - 1) :], node]


def avoided_nodes(statuses: Mapping[str, ReplicaStatus]) -> dict[tuple[str, int], list[str]]:
    """(replica type in lower case, index): the nodes its pods keep away from."""
    return {
        (rt.lower(), int(i)): rec.avoid_nodes
        for rt, rs in statuses.items()
        for i, rec in rs.index_retries.items()
        if rec.avoid_nodes and i.isdigit()
    }


def keep_away(pods: Sequence[JSON], avoided: Mapping[tuple[str, int], Sequence[str]]) -> list[JSON]:
    """Each pod of an index with nodes to avoid, with a node-affinity term that keeps it
    off them; new bodies, the given ones left as they were."""
    if not avoided:
        return list(pods)
    out = []
    for pod in pods:
        labels = pod["metadata"].get("labels") or {}
        rtype = str(labels.get(REPLICA_TYPE_LABEL, ""))
        index = str(labels.get(REPLICA_INDEX_LABEL, ""))
        nodes = avoided.get((rtype, int(index))) if index.isdigit() else None
        out.append(_away(pod, nodes) if nodes else pod)
    return out


def _away(pod: JSON, nodes: Sequence[str]) -> JSON:
    """Required node affinity ANDs the expression into every term the template has (the
    terms are ORed: a term without it would let the pod back onto the node)."""
    spec: dict[str, Any] = dict(pod["spec"])
    affinity: dict[str, Any] = dict(spec.get("affinity") or {})
    node_affinity: dict[str, Any] = dict(affinity.get("nodeAffinity") or {})
    required: dict[str, Any] = dict(
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    )
    expression = {"key": NODE_NAME_FIELD, "operator": "NotIn", "values": list(nodes)}
    terms = [t for t in required.get("nodeSelectorTerms") or [] if isinstance(t, dict)]
    if not terms:
        terms = [{}]
    required["nodeSelectorTerms"] = [
        {**t, "matchFields": [*(t.get("matchFields") or []), expression]} for t in terms
    ]
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    affinity["nodeAffinity"] = node_affinity
    spec["affinity"] = affinity
    return {**pod, "spec": spec}


def move_events(
    name: str, moves: Sequence[Straggler], *, whole_gang: bool
) -> list[cond.EventIntent]:
    how = (
        "the whole gang restarts (not counted against backoffLimit)"
        if whole_gang
        else "its pod is replaced (not counted against backoffLimit)"
    )
    return [
        cond.EventIntent(
            cond.WARNING,
            cond.REASON_STRAGGLER_MOVED,
            f"TFJob {name}: moving {s.replica_type.lower()}-{s.index} (pod {s.pod}) off node"
            f" {s.node}, where it ran at {s.score:.2f} of its peers' speed: {how}, and its"
            f" new pod keeps away from {s.node}.",
        )
        for s in moves
    ]
