"""The progress deadline: whether a Running job's training has stopped advancing (pure).

A job that sets a deadline (reconcile.api.watch) is checked on every pass while it is
Running: not while suspended, waiting for its gang, restarting, or before its pods run,
because the clock starts when the Running condition last became True (a resume, a
gang's admission and a restart all end with Running set anew). From there:

- until the run shows progress (a replica's step advancing, or the job's first report:
  reconcile.progress.records), the first-progress deadline counts from Running;
- after it, the progress deadline counts from the last progress.

A deadline does not run out on a window in which the controller's own endpoint may not
have heard reports (``unheard``: its slots full, an accept failed, reviews unavailable):
the silence may be ours, not the job's. Such a deadline counts again from the window's
end, and the job's Stalled condition says so (False, ``ProgressUnheard``, with a Warning
event) instead of a verdict.

The times live in the status (the Running condition, ``trainingProgress.
lastProgressTime``), so a new leader keeps the deadline the old one counted; the records
only add progress newer than the last write. The pass that finds the job not yet due
sets a timer for when it would be (``due_in``): nothing polls.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from reconcile.api.status_types import JobCondition, TrainingProgress, format_time, stored_now
from reconcile.api.watch import TrainingWatch
from reconcile.policy import conditions as cond
from reconcile.progress.records import ReplicaRecord
from reconcile.progress.summary import human_duration

#: replicas a stall's message names, those stopped longest first
NAMED = 8


@dataclass(frozen=True, slots=True)
class Stall:
    stalled: bool
    #: the Stalled condition's reason: which deadline ran out (or would)
    reason: str
    #: seconds until the job is stalled, when it is not yet
    due_in: float | None = None
    #: "it made no progress for 2m5s (progress deadline 120s)"
    summary: str = ""
    #: the condition's message: the summary and the replicas, with their last progress
    message: str = ""
    #: the deadline would have run out but for a window the endpoint may have been deaf
    #: in; the deadline counts from its end
    unheard: bool = False


def check_stall(
    watch: TrainingWatch,
    name: str,
    conditions: Sequence[JobCondition],
    stored: TrainingProgress | None,
    live: Sequence[ReplicaRecord],
    now: datetime,
    unheard: tuple[datetime, str] | None = None,
) -> Stall | None:
    """The job's stall check at ``now``; None when no deadline applies (none set, the
    job not Running, or the deadline for the run's current phase unset). ``unheard``:
    the last time the endpoint may have missed reports, and why."""
    if not watch.watches_stalls or cond.is_finished(conditions):
        return None
    running = cond.find(conditions, cond.RUNNING)
    if running is None or running.status != cond.TRUE or running.last_transition_time is None:
        return None
    since = running.last_transition_time
    last = last_progress(stored, live)
    if last is not None and last < since:
        last = None  # an earlier run's: this one has shown none yet
    if last is None:
        deadline, origin, reason = (
            watch.first_progress_deadline,
            since,
            cond.REASON_FIRST_PROGRESS_DEADLINE,
        )
    else:
        deadline, origin, reason = watch.progress_deadline, last, cond.REASON_PROGRESS_DEADLINE
    if deadline is None:
        return None
    due = origin + timedelta(seconds=deadline)
    at = stored_now(now)
    if at < due:
        return Stall(False, reason, due_in=(due - at).total_seconds())
    excused = _unheard(name, origin, deadline, at, unheard)
    if excused is not None:
        return excused
    quiet = human_duration((at - origin).total_seconds())
    if last is None:
        summary = (
            f"it has been Running for {quiet} with no progress reported"
            f" (first-progress deadline {deadline}s)"
        )
    else:
        summary = f"it made no progress for {quiet} (progress deadline {deadline}s)"
    message = f"TFJob {name}: {summary}; {_replicas(live)}."
    return Stall(True, reason, summary=summary, message=message)


def _unheard(
    name: str,
    origin: datetime,
    deadline: int,
    at: datetime,
    unheard: tuple[datetime, str] | None,
) -> Stall | None:
    """A deadline that ran out on a window the endpoint may have been deaf in: not a
    stall, due again a deadline after that window's end."""
    if unheard is None:
        return None
    deaf_at = stored_now(unheard[0])
    deaf_due = deaf_at + timedelta(seconds=deadline)
    if deaf_at <= origin or at >= deaf_due:
        return None
    message = (
        f"TFJob {name}: its deadline ({deadline}s) ran out, but this controller may not"
        f" have heard its reports at {format_time(deaf_at)} ({unheard[1]});"
        " the deadline counts again from then."
    )
    return Stall(
        False,
        cond.REASON_PROGRESS_UNHEARD,
        due_in=(deaf_due - at).total_seconds(),
        message=message,
        unheard=True,
    )


def last_progress(
    stored: TrainingProgress | None, live: Sequence[ReplicaRecord]
) -> datetime | None:
    """The latest progress: the stored mark, or a live record's newer one."""
    marks = [stored_now(r.progress_at) for r in live if r.progress_at is not None]
    if stored is not None and stored.last_progress_time is not None:
        marks.append(stored.last_progress_time)
    return max(marks) if marks else None


def stalled_conditions(
    conditions: Sequence[JobCondition],
    stall: Stall | None,
    name: str,
    now: datetime,
    *,
    restarted: bool = False,
) -> list[JobCondition]:
    """The conditions with Stalled set from ``stall``: True with the deadline's reason;
    False once progress resumes, or when the stall restarted the gang (``restarted``).
    Absent until the first stall. Kept first in the list, as GangAdmitted is: kubectl's
    State column and the SDK read the last condition, which stays Running."""
    current = list(conditions)
    old = cond.find(current, cond.STALLED)
    if stall is None or cond.is_finished(current):
        return current
    if restarted:
        status, reason = cond.FALSE, cond.REASON_STALL_RESTARTED
        message = f"TFJob {name} restarted its gang: {stall.summary}."
    elif stall.stalled:
        status, reason, message = cond.TRUE, stall.reason, stall.message
    elif stall.unheard:
        status, reason, message = cond.FALSE, cond.REASON_PROGRESS_UNHEARD, stall.message
    elif old is not None and old.status == cond.TRUE:
        status, reason = cond.FALSE, cond.REASON_PROGRESS_RESUMED
        message = f"TFJob {name} is making progress again."
    else:
        return current
    return cond.put_first(current, cond.STALLED, status, reason, message, now)


def _replicas(live: Sequence[ReplicaRecord]) -> str:
    if not live:
        return "no replica has reported to this controller since it started"
    stopped = sorted(live, key=lambda r: (r.progress_at or r.at, r.who.replica_type, r.who.index))
    parts = [
        f"{r.who.replica_type.lower()}-{r.who.index} at step {r.report.step}"
        + (f" since {format_time(r.progress_at)}" if r.progress_at is not None else "")
        + (f" on {r.who.node}" if r.who.node else "")
        for r in stopped[:NAMED]
    ]
    more = len(stopped) - NAMED
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")
