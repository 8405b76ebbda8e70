"""The restart guard: restarts in a row that make no progress fail the job (pure).

backoffLimit counts restarts whatever they achieved; a job that crashes on the same bad
batch, or cannot restore its checkpoint, burns all of them without training a step.
For a job that reports progress, the guard keeps where the current run of restarts
began: the furthest step any replica had reported before the first of them, and the
restarts counted until then (``status.restartGuard``). A restart counted when the
furthest step is past that mark begins a new run from there; one counted when it is not
extends the run. When more restarts than the limit are counted in one run, the limit's
worth of restarted runs ended without getting past the mark, and the job fails (reason
TFJobRestartsWithoutProgress) instead of restarting again.

The furthest step is the job's own, not any replica's: the reporter's type's middle step
(``mark_step``), so one worker reporting step 2**53 cannot pin the mark out of reach.

A job that has never reported has no furthest step: nothing says whether its restarts
progressed, and the guard leaves it to backoffLimit. The mark only moves on passes that
count a restart, which write the status anyway: the guard adds no write of its own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconcile.api.status_types import RestartGuard, TrainingProgress
from reconcile.progress.records import ReplicaRecord
from reconcile.progress.summary import mark_step


@dataclass(frozen=True, slots=True)
class GuardCheck:
    #: what the status keeps
    guard: RestartGuard | None
    #: restarted runs that ended without progress, in the current run of restarts
    without_progress: int = 0
    #: the limit is exceeded: the job fails
    tripped: bool = False


def check_guard(
    limit: int,
    stored: RestartGuard | None,
    restarts_before: int,
    restarts_now: int,
    furthest: int | None,
) -> GuardCheck:
    """``restarts_before`` are the restarts the stored status counts (every replica
    type's), ``restarts_now`` those after this pass's accounting; ``furthest`` is the
    furthest step reported so far (stored or newer)."""
    if limit <= 0 or furthest is None:
        return GuardCheck(stored)
    guard = stored
    if restarts_now > restarts_before and (guard is None or furthest > guard.since_step):
        # progress since the last run began (or none began): a new run, from here
        guard = RestartGuard(since_step=furthest, since_restarts=restarts_before)
    if guard is None or furthest > guard.since_step:
        return GuardCheck(guard)
    ended = restarts_now - guard.since_restarts - 1
    return GuardCheck(guard, max(0, ended), ended >= limit)


def furthest_step(stored: TrainingProgress | None, records: Iterable[ReplicaRecord]) -> int | None:
    """The furthest step reported: the stored mark, or the records' that is further
    (reconcile.progress.summary.mark_step: what one replica's absurd report cannot pin)."""
    steps = [s] if (s := mark_step(records)) is not None else []
    if stored is not None and stored.furthest_step is not None:
        steps.append(stored.furthest_step)
    return max(steps) if steps else None
