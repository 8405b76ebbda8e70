"""Whole-gang restart, opt in per job (pure).

When one worker of a synchronous job (MultiWorkerMirroredStrategy, a parameter-server
job) dies, the others hang in their collective ops: replacing the one pod does not
help. A job annotated ``training.kubeflow.org/gang-restart: "true"`` restarts every pod
instead, the way Volcano's RestartJob and JobSet's RestartJobSet do:

1. a pod's end that its restart policy retries (a failure, a restart in place) or a
   disruption is accounted as usual, then the job's ``gangEpoch`` is raised in the same
   status write, and the write counts it as one restart (against backoffLimit) however
   many pods ended together; nothing else is done in that pass (account, then act);
2. once that status is stored, every pod of an earlier epoch (the label
   ``training.kubeflow.org/gang-epoch``) is deleted and its tracking finalizer removed:
   its end, whatever it is, is the restart's doing and is not counted;
3. when none is left, all pods are created together, with the new epoch, after the
   failed index's usual backoff (and, with gang scheduling, behind the PodGroup).

Without the annotation nothing here applies: each pod is replaced on its own. The stall
action ``restart`` (reconcile.api.watch) turns it on as well: restarting one pod of a
stalled synchronous job would not unstick the others, so a job that asks a stall to
restart it runs under these rules (docs/stalls.md). That restart is ``counted_restart``:
no pod ended, and it counts once against backoffLimit all the same.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from controller.types import JSON
from reconcile.api.models import TFJob
from reconcile.api.names import (
    GANG_EPOCH_LABEL,
    GANG_RESTART_ANNOTATION,
    STALL_ACTION_ANNOTATION,
    STATUS_ORDER,
)
from reconcile.api.status_types import JobStatus, ReplicaStatus
from reconcile.api.watch import StallAction
from reconcile.objects.observed import ObservedPod
from reconcile.policy.restart import ReplicaAccount


def enabled(job: TFJob) -> bool:
    annotations = job.metadata.get("annotations")
    if not isinstance(annotations, Mapping):
        return False
    if str(annotations.get(GANG_RESTART_ANNOTATION, "")).strip().lower() == "true":
        return True
    action = str(annotations.get(STALL_ACTION_ANNOTATION, "")).strip().lower()
    return action == StallAction.RESTART.value


def split_by_epoch(
    pods: Iterable[ObservedPod], epoch: int
) -> tuple[list[ObservedPod], list[ObservedPod]]:
    """(pods of the current epoch, pods of an earlier one). A pod without the label
    (created before the job opted in) is of epoch 0; one with an unreadable label is of
    none, so it goes."""
    current: list[ObservedPod] = []
    stale: list[ObservedPod] = []
    for pod in pods:
        (current if pod.epoch == epoch else stale).append(pod)
    return current, stale


def labelled(pod: JSON, epoch: int) -> JSON:
    """``pod`` as a member of ``epoch``: a new body, the given one left as it was."""
    metadata = pod["metadata"]
    labels = {**(metadata.get("labels") or {}), GANG_EPOCH_LABEL: str(epoch)}
    return {**pod, "metadata": {**metadata, "labels": labels}}


def trigger(old: JobStatus, outcomes: Mapping[str, ReplicaAccount]) -> str | None:
    """The first replica type (status order) with a restart or disruption newly
    accounted in this pass: the gang restarts."""
    for rtype in _in_order(outcomes):
        new = outcomes[rtype].status
        was = old.replica_statuses.get(rtype, ReplicaStatus())
        if new.restarts > was.restarts or new.disruptions > was.disruptions:
            return rtype
    return None


def as_one_restart(
    old: JobStatus, outcomes: Mapping[str, ReplicaAccount]
) -> dict[str, ReplicaAccount]:
    """Pods that ended together make one gang restart: the first type's first new
    restart counts, the others' are taken back (before the verdict reads them). New
    outcomes; the given ones are left as they were."""
    counted = False
    out = dict(outcomes)
    for rtype in _in_order(outcomes):
        o = outcomes[rtype]
        was = old.replica_statuses.get(rtype, ReplicaStatus()).restarts
        if o.status.restarts <= was:
            continue
        keep = was if counted else was + 1
        counted = True
        out[rtype] = replace(o, status=o.status.model_copy(update={"restarts": keep}))
    return out


def counted_restart(outcomes: Mapping[str, ReplicaAccount]) -> dict[str, ReplicaAccount]:
    """One restart more on the first replica type (status order): a restart no pod's end
    asked for (a stall's). New outcomes; the given ones are left as they were."""
    out = dict(outcomes)
    order = _in_order(outcomes)
    if order:
        o = outcomes[order[0]]
        out[order[0]] = replace(
            o, status=o.status.model_copy(update={"restarts": o.status.restarts + 1})
        )
    return out


def restart_gang(new: JobStatus, old: JobStatus) -> JobStatus:
    """The status that starts a gang restart: the next epoch, and no index active any
    more (every pod is about to go, and a pod that goes must not read as a disruption)."""
    statuses = {
        rt: rs.model_copy(update={"active": 0, "active_indexes": ""})
        for rt, rs in new.replica_statuses.items()
    }
    return new.model_copy(update={"gang_epoch": old.gang_epoch + 1, "replica_statuses": statuses})


def stale_deletions(stale: Sequence[ObservedPod]) -> list[ObservedPod]:
    return [p for p in stale if not p.terminating]


def _in_order(outcomes: Mapping[str, object]) -> list[str]:
    known = [rt for rt in STATUS_ORDER if rt in outcomes]
    return known + sorted(rt for rt in outcomes if rt not in known)
