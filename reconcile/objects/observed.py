"""Observed pods: each pod a pass is given, read once into a typed view.

The policies of a pass (restart accounting, outcome tracking, whole-gang restart,
cleanPodPolicy, the child diffs) all ask the same questions of the same pods: which
replica and index, which phase, terminating or not, the exit code, when it started,
ended and was deleted. ``observe`` answers them once per pod per pass, at the door
(the snapshot), and the policies read fields, not dicts. ``raw`` is the pod as cached:
what a write addresses (name, UID precondition, resourceVersion) and nothing a policy
reads. A pass hands the views of the job's last pass back in (``known``): a pod whose
cached object has not changed since keeps its view.

Why once per pass and not once per watch event, in the slim cache transform: the cache
holds plain dicts for generic machinery, and a view attached to its own dict while it
refers back to it is a reference cycle, which only the cyclic collector frees: every
replaced pod of a busy controller would then wait for a full collection. A pass reads
each of its pods once here instead of a dozen times across the policies.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from controller.types import JSON
from reconcile.api.labels import replica_index_of, replica_type_of
from reconcile.api.names import GANG_EPOCH_LABEL
from reconcile.objects.pods import (
    created_at,
    deletion_requested_at,
    exit_code,
    finished_at,
    has_condition,
    is_retired,
    is_scheduled,
    is_terminating,
    is_tracked,
    name_of,
    phase_of,
    restart_count,
    started_at,
    uid_of,
)


@dataclass(frozen=True, slots=True)
class ObservedPod:
    """What the policies read of one pod. Times are tz-aware UTC, None when absent or
    unreadable."""

    raw: JSON = field(repr=False, compare=False)
    name: str
    uid: str
    #: the lower-case replica type and the index, from the pod's labels
    rtype: str | None
    index: int | None
    phase: str  # a pod without one counts as Pending
    #: a deletionTimestamp is set
    terminating: bool
    #: deleted with grace 0 (a force delete, or the kubelet's final delete)
    grace_zero: bool
    #: still carries our tracking finalizer (reconcile.policy.tracking)
    tracked: bool
    #: deleted by the controller because its index left the spec (RETIRED_ANNOTATION)
    retired: bool
    scheduled: bool  # a node took it
    #: evicted by the kubelet, or marked DisruptionTarget
    disruption_marked: bool
    #: of the terminated tensorflow container (pods.NO_EXIT_CODE when it has none)
    exit_code: int
    #: container and init-container restarts done by the kubelet in place
    restarts: int
    #: the whole-gang restart epoch label; 0 without it, -1 when unreadable
    epoch: int
    created: datetime | None
    started: datetime | None
    finished: datetime | None
    #: when the DELETE was issued: deletionTimestamp minus the grace period
    deletion_requested: datetime | None


def observe(pod: Mapping[str, Any]) -> ObservedPod:
    """The view of ``pod``, which is only read."""
    status = pod.get("status") or {}
    return ObservedPod(
        raw=pod,  # type: ignore[arg-type]  # a cached pod: held, never written
        name=name_of(pod),
        uid=uid_of(pod),
        rtype=replica_type_of(pod),
        index=replica_index_of(pod),
        phase=phase_of(pod),
        terminating=is_terminating(pod),
        grace_zero=pod.get("metadata", {}).get("deletionGracePeriodSeconds") == 0,
        tracked=is_tracked(pod),
        retired=is_retired(pod),
        scheduled=is_scheduled(pod),
        disruption_marked=status.get("reason") == "Evicted"
        or has_condition(pod, "DisruptionTarget"),
        exit_code=exit_code(pod),
        restarts=restart_count(pod),
        epoch=_epoch(pod),
        created=created_at(pod),
        started=started_at(pod),
        finished=finished_at(pod),
        deletion_requested=deletion_requested_at(pod),
    )


def observe_all(
    pods: Iterable[Mapping[str, Any]], known: Mapping[str, ObservedPod] | None = None
) -> tuple[ObservedPod, ...]:
    """The views of ``pods``. ``known``: views an earlier pass read, by UID. A pod that
    is still the very object its known view was read from is not read again: the cache
    hands out a new dict for each version of a pod and never changes one, so the same
    object means the same view. Most pods of a pass are unchanged since the job's last
    one, and reading them was a third of a pass."""
    if not known:
        return tuple(observe(p) for p in pods)
    out = []
    for pod in pods:
        seen = known.get(uid_of(pod))
        out.append(seen if seen is not None and seen.raw is pod else observe(pod))
    return tuple(out)


def by_uid(pods: Iterable[ObservedPod]) -> dict[str, ObservedPod]:
    """``pods`` by UID: what ``observe_all`` takes as ``known`` on the next pass."""
    return {p.uid: p for p in pods}


def raws(pods: Iterable[ObservedPod]) -> list[JSON]:
    """The cached objects behind ``pods``: what the write layer addresses."""
    return [p.raw for p in pods]


def group_pods(pods: Iterable[ObservedPod]) -> dict[str, dict[int, list[ObservedPod]]]:
    """{rtype: {index: [pods]}} for pods carrying both replica labels."""
    out: dict[str, dict[int, list[ObservedPod]]] = {}
    for pod in pods:
        if pod.rtype is None or pod.index is None:
            continue
        out.setdefault(pod.rtype, {}).setdefault(pod.index, []).append(pod)
    return out


def _epoch(pod: Mapping[str, Any]) -> int:
    metadata = pod.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    value = labels.get(GANG_EPOCH_LABEL) if isinstance(labels, Mapping) else None
    try:
        return int(value) if value is not None else 0
    except (TypeError, ValueError):
        return -1  # unreadable: never current, so it goes
