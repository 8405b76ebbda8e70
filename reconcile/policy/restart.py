"""Restart policies and replica accounting: what each observed pod means for its index.

Upstream decides from the pods that happen to exist and restarts by deleting a failed pod
and creating the next one on a later pass, with no delay, no durable count and no memory of
finished indexes (docs/semantics.md#run-policies). Here every decision is a pure function of the
pods and the durable per-index record in status (``ReplicaStatus``):

- an index whose pod succeeded is recorded in ``succeededIndexes`` and never re-run, even if
  its pod is garbage-collected later (upstream #1186);
- an index that failed for good (restartPolicy Never, or ExitCode with a permanent code)
  is recorded in ``failedIndexes``;
- a pod that ended and will be replaced is accounted once, keyed by its UID
  (``indexRetries[i].lastPodUID``): a *failure* adds one to ``restarts`` (bounded by
  backoffLimit) and to the index's backoff exponent; a *disruption* (eviction,
  preemption, deletion by someone else) adds one to ``disruptions`` only; so does a pod
  that was running at the last status write (``activeIndexes``) and is now gone without
  ever having been seen ending (force-deleted, or deleted while the controller was down);
  a pod the controller deleted itself (a suspend; an index that left the spec, marked
  ``RETIRED_ANNOTATION``) ends as no disruption when its index is back before it is gone;
  a straggler being moved (``indexRetries[i].movingPodUID``, reconcile.progress.moves)
  is deleted and replaced with no end counted at all, and no backoff;
- container restarts done by kubelet in place are folded into ``restarts`` by increase
  over the last observed count of the same pod UID, so no reconcile counts one twice;
- account, then delete: a pod whose end is newly accounted is *not* deleted in the same
  pass; it is deleted by a later pass, once the status recording it (restarts,
  disruptions, lastPodUID) has been stored — the status write's own watch event brings
  that pass at once. Deleting first lost the record whenever the status write that
  followed failed (a Conflict with a concurrent edit of the job, the controller killed
  in between): the retried pass then found the pod gone, or terminating and so
  indistinguishable from a disruption, and the failure escaped backoffLimit and the
  replacement backoff;
- a replacement is created only once the old pod is gone from the API (a terminating pod
  still occupies its index: two TensorFlow tasks with one identity must never overlap,
  k8s#115844) and its backoff has elapsed: base * 2^(failures-1), capped, where a pod that
  ran for ``reset_after`` seconds starts the count afresh.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from reconcile.api.status_types import IndexRetry, ReplicaStatus, format_indexes, parse_indexes
from reconcile.objects.observed import ObservedPod
from reconcile.objects.pods import PodPhase
from reconcile.policy.pod_outcome import PodOutcome, end_began, pod_outcome


@dataclass(frozen=True)
class BackoffPolicy:
    """The wait before a failed pod's replacement: ``base_seconds`` * 2^(failures-1),
    capped at ``max_seconds``; a pod that ran ``reset_after_seconds`` starts the count
    afresh. The defaults are upstream's restart backoff, and the controller's flags'."""

    base_seconds: float = 10.0
    max_seconds: float = 360.0
    reset_after_seconds: float = 600.0

    def delay(self, failures: int) -> float:
        """Wait before replacing a pod after its ``failures``-th consecutive failure."""
        if failures <= 0:
            return 0.0
        # Cap the exponent first: 2**failures would grow without bound for a long history.
        return float(min(self.base_seconds * 2 ** min(failures - 1, 62), self.max_seconds))


@dataclass(frozen=True)
class ReplicaInput:
    rtype: str
    replicas: int
    restart_policy: str
    #: enableDynamicWorker and this is the Worker type: failures never fail the job.
    failures_tolerated: bool = False


@dataclass(frozen=True)
class ReplicaAccount:
    status: ReplicaStatus
    create: list[int] = field(default_factory=list)
    delete: list[ObservedPod] = field(default_factory=list)
    #: Seconds until the earliest pending replacement is due, if any is waiting.
    wait: float | None = None
    #: Some index is between the end of a pod and its replacement running.
    restarting: bool = False
    #: How the replica failed for good, if it did (and failures are not tolerated).
    permanent_failure: PodOutcome | None = None
    #: Indexes whose ending was newly accounted in this pass (for tests and logs).
    accounted: list[int] = field(default_factory=list)
    #: The same, said for the reconcile's log line: "index:how:pod UID prefix".
    ends: list[str] = field(default_factory=list)


#: An index with no retry state (models are frozen: one instance serves every pass).
_NO_RETRY = IndexRetry()


def account_replica(
    inp: ReplicaInput,
    pods_by_index: Mapping[int, Sequence[ObservedPod]],
    old: ReplicaStatus,
    now: datetime,
    backoff: BackoffPolicy,
    *,
    resumed_at: datetime | None = None,
    deferred: frozenset[str] = frozenset(),
) -> ReplicaAccount:
    """Fold the observed pods of one replica type into its durable record and decide which
    indexes need a pod now, which pods go, and when to look again. Pods whose UID is in
    ``deferred`` (policy.collateral) occupy their index and are not judged yet."""
    succeeded = set(i for i in parse_indexes(old.succeeded_indexes) if i < inp.replicas)
    failed = set(i for i in parse_indexes(old.failed_indexes) if i < inp.replicas)
    retries: dict[int, IndexRetry] = {
        int(k): v for k, v in old.index_retries.items() if k.isdigit() and int(k) < inp.replicas
    }
    was_active = parse_indexes(old.active_indexes)
    create: list[int] = []
    delete: list[ObservedPod] = []
    wait: float | None = None
    restarting = False
    permanent_failure: PodOutcome | None = None
    accounted: list[int] = []
    ends: list[str] = []
    restarts, disruptions, active = old.restarts, old.disruptions, 0
    active_indexes: set[int] = set()

    for index, pods in sorted(pods_by_index.items()):
        if index >= inp.replicas:
            # Scale-down: highest indexes go; they are not accounted any more.
            delete.extend(p for p in pods if not p.terminating)

    for index in range(inp.replicas):
        if index in succeeded or index in failed:
            continue  # the durable terminal record: never re-run, never re-judged
        rec = retries.get(index, _NO_RETRY)
        occupied = False
        replacement_running = False
        for pod in pods_by_index.get(index, ()):
            occupied = True
            uid = pod.uid
            if uid and uid in (rec.last_pod_uid, rec.moving_pod_uid):
                # Ended and accounted on an earlier pass, or moved (the move stored):
                # make sure it is on its way out.
                if not pod.terminating:
                    delete.append(pod)
                continue
            restarts, rec = _fold_container_restarts(pod, uid, rec, restarts)
            if uid in deferred:
                continue
            outcome = pod_outcome(pod, inp.restart_policy, resumed_at=resumed_at)
            if outcome is PodOutcome.RUNNING:
                replacement_running = not pod.terminating
                active += 1
                active_indexes.add(index)
            elif outcome is PodOutcome.SUCCEEDED:
                succeeded.add(index)
            elif outcome in (PodOutcome.FAIL_NEVER, PodOutcome.FAIL_EXIT_CODE):
                failed.add(index)
                accounted.append(index)
                ends.append(_end(index, outcome, uid))
                if not inp.failures_tolerated and permanent_failure is None:
                    permanent_failure = outcome
            elif outcome is PodOutcome.DISRUPTED:
                # Recorded now, deleted (if still there) by the pass after the status
                # holding the record is stored: see "account, then delete" above.
                disruptions += 1
                rec = rec.model_copy(
                    update={"last_pod_uid": uid, "last_end_time": end_began(pod, now)}
                )
                accounted.append(index)
                ends.append(_end(index, outcome, uid))
            elif outcome is PodOutcome.RETRY:
                restarts += 1
                ended = pod.finished or now
                started = pod.started
                ran = (ended - started).total_seconds() if started is not None else 0.0
                failures = 1 if ran >= backoff.reset_after_seconds else rec.failures + 1
                rec = rec.model_copy(
                    update={
                        "failures": failures,
                        "last_failure_time": ended,
                        "last_pod_uid": uid,
                        "last_end_time": ended,
                    }
                )
                accounted.append(index)
                ends.append(_end(index, outcome, uid))
            elif outcome is PodOutcome.TERMINATING and pod.phase == PodPhase.RUNNING:
                # Still running: should it vanish without an end we saw, that is a
                # disruption (activeIndexes), counted then.
                active_indexes.add(index)
            # PENDING, LEFTOVER and TERMINATING just occupy the index.

        if index in succeeded or index in failed:
            retries.pop(index, None)  # terminal: the retry state has served its purpose
            continue
        if rec.last_pod_uid is not None:
            if replacement_running:
                # Recovered: the ended pod is gone (its replacement exists), forget its UID.
                rec = rec.model_copy(update={"last_pod_uid": None})
            else:
                restarting = True
        if not occupied and rec.moving_pod_uid is not None:
            rec = rec.model_copy(update={"moving_pod_uid": None})  # moved: it is gone
            vanished = False
        else:
            vanished = not occupied and index in was_active
        if vanished:
            # Running at the last write, gone now, and its end never seen: it was removed
            # from under us. A disruption; like every end, recorded before anything else is
            # done about it, so the replacement comes with the next pass (the status
            # write's own event), no backoff.
            disruptions += 1
            accounted.append(index)
            ends.append(f"{index}:vanished")
            restarting = True
        elif not occupied:
            due = _backoff_due(rec, backoff)
            if due is not None and due > now:
                remaining = (due - now).total_seconds()
                wait = remaining if wait is None else min(wait, remaining)
            else:
                create.append(index)
        retries[index] = rec

    status = old.model_copy(
        update={
            "active": active,
            "succeeded": len(succeeded),
            "failed": len(failed),
            "restarts": restarts,
            "disruptions": disruptions,
            "succeeded_indexes": format_indexes(succeeded),
            "failed_indexes": format_indexes(failed),
            "active_indexes": format_indexes(active_indexes),
            # identity first: an index nothing happened to holds _NO_RETRY itself, and a
            # model's == is the slow part of a pass over a healthy job
            "index_retries": {
                str(i): r
                for i, r in sorted(retries.items())
                if r is not _NO_RETRY and r != _NO_RETRY
            },
        }
    )
    return ReplicaAccount(
        status=status,
        create=create,
        delete=delete,
        wait=wait,
        restarting=restarting,
        permanent_failure=permanent_failure,
        accounted=accounted,
        ends=ends,
    )


def _end(index: int, outcome: PodOutcome, uid: str | None) -> str:
    return f"{index}:{outcome.value}:{(uid or '')[:8]}"


def _fold_container_restarts(
    pod: ObservedPod, uid: str, rec: IndexRetry, restarts: int
) -> tuple[int, IndexRetry]:
    count = pod.restarts
    if count <= 0:
        return restarts, rec
    seen = rec.container_restarts if rec.pod_uid == uid else 0
    if count > seen:
        restarts += count - seen
        rec = rec.model_copy(update={"pod_uid": uid, "container_restarts": count})
    return restarts, rec


def _backoff_due(rec: IndexRetry, backoff: BackoffPolicy) -> datetime | None:
    if rec.failures <= 0 or rec.last_failure_time is None:
        return None
    return rec.last_failure_time + timedelta(seconds=backoff.delay(rec.failures))
