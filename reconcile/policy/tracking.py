"""Outcome tracking: when a pod's tracking finalizer may come off.

Every pod the controller creates carries ``TRACKING_FINALIZER`` (reconcile.objects.pods), so
the API keeps the pod, ended and readable, until the controller has recorded what the
pod's end means: without it, a pod that succeeds while the controller is down and is
then deleted (pod GC, a node drain, a cleanup cron), or one deleted before it ever ran,
leaves nothing to read, and the index is re-run or its end never counted. The
Kubernetes Job controller tracks its pods the same way (KEP-2307).

The finalizer comes off a pod only when both hold:
- the pod is on its way out: terminating, or deleted by this very pass. A pod nobody
  deletes keeps it at no cost; releasing only what goes makes one write per pod that
  is ever deleted, and none for the rest;
- its end is in the *stored* status, or no longer matters: its index is in
  ``succeededIndexes``/``failedIndexes``, or ``indexRetries[i].lastPodUID`` is its UID
  (reconcile.policy.restart records every accounted end so); or the job is finished, suspended
  or being deleted; or the pod is outside the spec (a removed replica type, an index at
  or above ``replicas``) or was deleted by a suspend. The stored status, not this
  pass's plan: a status write that fails must not have let the pod go.

A job being deleted, and a job gone from the cache (deleted while the controller was
down, or recreated under the same name), let every tracked pod go at once, ended or
not: nothing will ever read them again, and the garbage collector must be able to
remove them. Pods without the finalizer (created before tracking, or stripped by hand)
are accounted as before: one that vanishes while it was running counts as a disruption
(``activeIndexes``, reconcile.policy.restart).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime

from controller.types import JSON
from reconcile.api.models import TFJob
from reconcile.api.names import RETIRED_ANNOTATION
from reconcile.api.status_types import JobStatus, ReplicaStatus, parse_indexes
from reconcile.objects.observed import ObservedPod
from reconcile.objects.pods import is_tracked, tfjob_owner
from reconcile.policy.pod_outcome import deleted_by_suspend

#: A strategic-merge patch removes one value from a list of strings; ``uid`` makes it a
#: precondition (the UID is immutable: a same-named successor answers 422, never loses
#: its own finalizer).
PATCH_TYPE = "application/strategic-merge-patch+json"


def release_patch(finalizer: str, uid: str, *, retired: bool = False) -> JSON:
    """``retired``: the pod is let go because its index left the spec, and says so
    (RETIRED_ANNOTATION) in the same write."""
    meta: JSON = {"$deleteFromPrimitiveList/finalizers": [finalizer], "uid": uid}
    if retired:
        meta["annotations"] = {RETIRED_ANNOTATION: "true"}
    return {"metadata": meta}


def retired(releases: Iterable[ObservedPod], job: TFJob) -> frozenset[str]:
    """The UIDs of ``releases`` that go because their index is outside the spec."""
    counts = {rt.lower(): spec.count for rt, spec in job.replica_specs.items()}
    return frozenset(p.uid for p in releases if _outside(p, counts))


def _outside(pod: ObservedPod, counts: Mapping[str, int]) -> bool:
    return pod.rtype is None or pod.index is None or pod.index >= counts.get(pod.rtype, 0)


def tracked(pods: Iterable[ObservedPod]) -> list[ObservedPod]:
    """Every pod that still carries the finalizer (a job being deleted, or gone)."""
    return [p for p in pods if p.tracked]


def strays(pods: Iterable[JSON], uid: str | None) -> list[JSON]:
    """Tracked pods a TFJob of this name controlled that is not the job with ``uid``
    (None: there is no such job now): left by a job deleted while the controller was
    down, or before the job was recreated under the same name. Cached objects, not
    views: every pass checks this before it reads its own pods, and two fields decide."""
    return [p for p in pods if is_tracked(p) and (ref := tfjob_owner(p)) and ref.get("uid") != uid]


def settled_releases(
    pods: Iterable[ObservedPod], doomed: Sequence[ObservedPod] = ()
) -> list[ObservedPod]:
    """Tracked pods on their way out, when no pod's end matters any more (a finished or
    suspended job)."""
    gone = {p.uid for p in doomed}
    return [p for p in pods if p.tracked and (p.terminating or p.uid in gone)]


def active_releases(
    pods: Iterable[ObservedPod],
    doomed: Sequence[ObservedPod],
    stored: JobStatus,
    job: TFJob,
    *,
    resumed_at: datetime | None,
) -> list[ObservedPod]:
    """Tracked pods on their way out whose end the stored status records, or whose end
    does not count for a running job."""
    counts = {rt.lower(): spec.count for rt, spec in job.replica_specs.items()}
    records = {rt.lower(): rs for rt, rs in stored.replica_statuses.items()}
    out = []
    for pod in settled_releases(pods, doomed):
        if _outside(pod, counts):
            out.append(pod)  # scale-down, a removed type
        elif deleted_by_suspend(pod, resumed_at) or _recorded(pod, records.get(pod.rtype or "")):
            out.append(pod)
    return out


def _recorded(pod: ObservedPod, record: ReplicaStatus | None) -> bool:
    index = pod.index
    if record is None or index is None:
        return False
    if index in parse_indexes(record.succeeded_indexes) or index in parse_indexes(
        record.failed_indexes
    ):
        return True
    retry = record.index_retries.get(str(index))
    # its end accounted, or a straggler being moved (its end never counts)
    return retry is not None and pod.uid in (retry.last_pod_uid, retry.moving_pod_uid)


__all__ = [
    "PATCH_TYPE",
    "active_releases",
    "release_patch",
    "retired",
    "settled_releases",
    "strays",
    "tracked",
]
