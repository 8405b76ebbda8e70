"""Collateral ends: a synchronous job's survivors failing because a peer died (pure).

When one task of a MultiWorkerMirroredStrategy job dies, its peers' collective ops are
aborted within seconds and their programs exit 1 (``Collective ops is aborted``), which
restartPolicy ExitCode reads as the program's own, permanent verdict: one killed pod
fails the whole job (docs/semantics.md#collateral-failures).

With whole-gang restart (policy.gang_restart) such an end is part of the restart and
never the job's failure, whichever end the controller happens to see first. The kubelet
reports each pod on its own, so a survivor's exit 1 can reach the cache before, or in
the same pass as, the killed peer's 137: the pods' termination times decide, not the
order of observation.

- A permanent end (ExitCode 1-127, Never) at or after a peer's retryable trouble of the
  same epoch (a failure its restart policy retries, a disruption, a deletion by
  someone else) and within ``window`` of it is *collateral*: it is not accounted, and
  the gang restart replaces its pod with the rest.
- A permanent end with no peer trouble in sight is *held* while a peer still runs,
  until ``window`` after it ended: the peer's end may be on its way. Then it is the
  job's failure, as before. One with a peer trouble after it (or long before it) is
  the program's own and fails the job at once.

Without whole-gang restart nothing here changes the outcome; a permanent end that
followed a peer's retryable end within ``window`` is named in a Warning event when it
fails the job, pointing at whole-gang restart.

Times have one-second precision; a tie counts as following (a survivor cannot fail
before its peer is killed, and a program's own failure that a peer's kill follows in
the same second is beyond telling apart).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconcile.objects.observed import ObservedPod
from reconcile.objects.pods import PodPhase
from reconcile.policy.pod_outcome import PodOutcome, end_began, pod_outcome

#: How long after a peer's trouble a permanent end still counts as its consequence, and
#: how long a permanent end is held for a peer's end to arrive. Survivors of a SIGKILLed
#: MWMS worker failed within about 3 s on the real node (docs/development.md); the
#: kubelet reports an end within a second or two.
DEFAULT_WINDOW = timedelta(seconds=20)

_PERMANENT = (PodOutcome.FAIL_EXIT_CODE, PodOutcome.FAIL_NEVER)
_ENDED = (PodPhase.SUCCEEDED, PodPhase.FAILED)


@dataclass(frozen=True, slots=True)
class Trouble:
    """A pod's retryable end, or its deletion by someone else: when it began."""

    pod: str
    at: datetime


@dataclass(frozen=True, slots=True)
class Ends:
    """What a pass's pods say about collateral failures, read once."""

    #: pods whose end is permanent under their replica's restart policy
    permanent: tuple[ObservedPod, ...]
    troubles: tuple[Trouble, ...]
    #: pods that have not ended (peers that may yet report an end)
    live: int


@dataclass(frozen=True, slots=True)
class Followed:
    """A permanent end that came ``seconds`` after ``peer``'s trouble."""

    pod: str
    peer: str
    seconds: int


@dataclass(frozen=True, slots=True)
class Collateral:
    """What the accounting of this pass leaves out, and when to look again."""

    #: UIDs of permanent ends not accounted in this pass (collateral, or held)
    deferred: frozenset[str] = frozenset()
    #: seconds until the earliest held end is judged
    wait: float | None = None
    followed: tuple[Followed, ...] = ()


NONE = Collateral()


def read_ends(
    pods: Iterable[ObservedPod],
    policies: Mapping[str, str],
    now: datetime,
    *,
    resumed_at: datetime | None = None,
) -> Ends:
    """The permanent ends, troubles and live pods among ``pods``; ``policies`` maps a
    lower-case replica type to its restart policy (pods of other types are not read)."""
    permanent: list[ObservedPod] = []
    troubles: list[Trouble] = []
    live = 0
    for pod in pods:
        policy = policies.get(pod.rtype or "")
        if policy is None:
            continue
        if pod.phase not in _ENDED:
            live += 1
            if not pod.terminating:
                continue
        outcome = pod_outcome(pod, policy, resumed_at=resumed_at)
        if outcome in _PERMANENT:
            permanent.append(pod)
        elif outcome in (PodOutcome.RETRY, PodOutcome.DISRUPTED, PodOutcome.TERMINATING):
            troubles.append(Trouble(pod.name, end_began(pod, now)))
    return Ends(tuple(permanent), tuple(troubles), live)


def collateral(
    ends: Ends,
    now: datetime,
    window: timedelta,
    *,
    whole_gang: bool,
    earlier: Iterable[Trouble] = (),
) -> Collateral:
    """Which permanent ends this pass leaves out of its accounting (whole-gang restart
    only), and which followed a peer's trouble (for the event without it). ``earlier``:
    troubles already accounted and no longer among the pods (their indexes'
    ``lastEndTime``), which only the event reads: with whole-gang restart an accounted
    trouble has already moved the gang to its next epoch."""
    if not ends.permanent:
        return NONE
    deferred: set[str] = set()
    followed: list[Followed] = []
    wait: float | None = None
    known = (*ends.troubles, *(() if whole_gang else earlier))
    for pod in ends.permanent:
        ended = pod.finished or now
        cause = _cause(pod, ended, known, window)
        if cause is not None:
            followed.append(Followed(pod.name, cause.pod, int((ended - cause.at).total_seconds())))
            if whole_gang:
                deferred.add(pod.uid)
            continue
        if not whole_gang or known or ends.live == 0:
            # a peer's trouble came after this end, or long before it: the end is the
            # program's own
            continue
        left = (ended + window - now).total_seconds()
        if left > 0:
            deferred.add(pod.uid)
            wait = left if wait is None else min(wait, left)
    return Collateral(frozenset(deferred), wait, tuple(followed))


def _cause(
    pod: ObservedPod, ended: datetime, troubles: Iterable[Trouble], window: timedelta
) -> Trouble | None:
    """The earliest peer trouble this end followed within ``window``."""
    causes = [t for t in troubles if t.pod != pod.name and t.at <= ended <= t.at + window]
    return min(causes, key=lambda t: t.at) if causes else None
