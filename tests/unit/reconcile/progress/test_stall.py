"""The progress deadline, pure (reconcile.progress.stall), and what a record counts as
progress (reconcile.progress.records)."""

from __future__ import annotations

import pytest

from reconcile.api.status_types import JobCondition, TrainingProgress
from reconcile.api.watch import TrainingWatch
from reconcile.policy import conditions as cond
from reconcile.progress.records import ReplicaRecord, Reporter, known_step, record
from reconcile.progress.stall import Stall, check_stall, stalled_conditions
from reconcile.progress.wire import Report
from tests.builders import at

W = TrainingWatch(progress_deadline=60, first_progress_deadline=180)


def running_since(t: float, status: str = cond.TRUE) -> list[JobCondition]:
    return [
        JobCondition(type=cond.CREATED, status=cond.TRUE, last_transition_time=at(0)),
        JobCondition(type=cond.RUNNING, status=status, last_transition_time=at(t)),
    ]


def rec(
    step: int, t: float, progress_at: float | None, index: int = 0, uid: str = "u0"
) -> ReplicaRecord:
    who = Reporter("Worker", index, f"m-worker-{index}", uid, "node-a")
    moved = at(progress_at) if progress_at is not None else None
    return ReplicaRecord(who, Report(step=step), at(t), ((at(t).timestamp(), step),), moved)


def stored(last: float | None) -> TrainingProgress:
    return TrainingProgress(step=1, last_progress_time=at(last) if last is not None else None)


@pytest.mark.parametrize(
    ("conds", "progress", "live", "now", "stalled", "reason", "due_in"),
    [
        # not Running: no check at all
        ([], None, (), 1_000, None, None, None),
        (running_since(10, cond.FALSE), None, (), 1_000, None, None, None),
        # first progress: from Running, edges exact
        (running_since(10), None, (), 10, False, "FirstProgressDeadlineExceeded", 180),
        (running_since(10), None, (), 189, False, "FirstProgressDeadlineExceeded", 1),
        (running_since(10), None, (), 190, True, "FirstProgressDeadlineExceeded", None),
        # stored progress from before this run is not this run's
        (running_since(10), stored(5), (), 190, True, "FirstProgressDeadlineExceeded", None),
        # stored progress in this run: the progress deadline from it
        (running_since(10), stored(20), (), 79, False, "ProgressDeadlineExceeded", 1),
        (running_since(10), stored(20), (), 80, True, "ProgressDeadlineExceeded", None),
        # a live record's newer progress wins
        (running_since(10), stored(20), (rec(9, 50, 50),), 80, False, "ProgressDeadlineExceeded", 30),
        # a record with no progress (a resumed step) moves nothing
        (running_since(10), None, (rec(9, 50, None),), 190, True, "FirstProgressDeadlineExceeded", None),
        # finished jobs are not checked
    ],
)  # fmt: skip
def test_deadline_edges(
    conds: list[JobCondition],
    progress: TrainingProgress | None,
    live: tuple[ReplicaRecord, ...],
    now: float,
    stalled: bool | None,
    reason: str | None,
    due_in: float | None,
) -> None:
    found = check_stall(W, "m", conds, progress, live, at(now))
    if stalled is None:
        assert found is None
        return
    assert found is not None
    assert (found.stalled, found.reason, found.due_in) == (stalled, reason, due_in)


def test_finished_or_unwatched_jobs_are_not_checked() -> None:
    done = [*running_since(10), JobCondition(type=cond.FAILED, status=cond.TRUE)]
    assert check_stall(W, "m", done, None, (), at(10_000)) is None
    assert check_stall(TrainingWatch(), "m", running_since(10), None, (), at(10_000)) is None
    only_first = TrainingWatch(first_progress_deadline=30)
    assert check_stall(only_first, "m", running_since(10), stored(20), (), at(10_000)) is None


def test_the_message_names_the_replicas_stopped_longest_first_and_caps_them() -> None:
    live = tuple(rec(100 + i, 40 + i, 20 + i, index=i, uid=f"u{i}") for i in range(10))
    found = check_stall(W, "m", running_since(10), None, live, at(200))
    assert found is not None and found.stalled
    assert found.message.startswith(
        "TFJob m: it made no progress for 2m51s (progress deadline 60s);"
        " worker-0 at step 100 since 2024-01-01T00:00:20Z on node-a,"
        " worker-1 at step 101 since 2024-01-01T00:00:21Z on node-a,"
    )
    assert found.message.endswith(
        "worker-7 at step 107 since 2024-01-01T00:00:27Z on node-a and 2 more."
    )
    nobody = check_stall(W, "m", running_since(10), stored(20), (), at(200))
    assert nobody is not None
    assert "no replica has reported to this controller since it started" in nobody.message


def test_conditions_true_false_and_first_in_the_list() -> None:
    base = running_since(10)
    s = Stall(True, cond.REASON_PROGRESS_DEADLINE, summary="x", message="m stalled")
    conds = stalled_conditions(base, s, "m", at(100))
    assert [c.type for c in conds] == ["Stalled", "Created", "Running"]
    assert (conds[0].status, conds[0].reason, conds[0].message) == ("True", s.reason, "m stalled")
    # the same stall again: the same list (no new transition, no write)
    assert stalled_conditions(conds, s, "m", at(150)) == conds
    going = Stall(False, cond.REASON_PROGRESS_DEADLINE, due_in=10)
    resumed = stalled_conditions(conds, going, "m", at(160))
    assert (resumed[0].status, resumed[0].reason) == ("False", "ProgressResumed")
    assert resumed[0].last_transition_time == at(160)
    # never stalled: nothing is added
    assert stalled_conditions(base, going, "m", at(160)) == base
    assert stalled_conditions(base, None, "m", at(160)) == base
    restarted = stalled_conditions(conds, s, "m", at(170), restarted=True)
    assert (restarted[0].status, restarted[0].reason) == ("False", "GangRestarted")


def test_a_records_progress() -> None:
    who = Reporter("Worker", 0, "m-worker-0", "u1", "n")
    first = record(None, who, Report(step=5), at(10))
    assert first.progress_at == at(10)  # nothing known: the job's first report
    same = record(first, who, Report(step=5), at(20))
    assert same.progress_at == at(10)
    up = record(same, who, Report(step=6), at(30))
    assert up.progress_at == at(30)
    # back (resumed in place): a new record, not progress
    back = record(up, who, Report(step=2), at(40))
    assert back.progress_at is None and len(back.samples) == 1
    # the next pod of the index, at the step it resumed at: not progress; past it: is
    nxt = Reporter("Worker", 0, "m-worker-0", "u2", "n")
    assert record(up, nxt, Report(step=6), at(50)).progress_at is None
    assert record(up, nxt, Report(step=7), at(50)).progress_at == at(50)
    # after a failover: against the stored step
    assert record(None, nxt, Report(step=6), at(60), baseline=6).progress_at is None
    assert record(None, nxt, Report(step=7), at(60), baseline=6).progress_at == at(60)


def test_known_step_reads_the_stored_progress() -> None:
    tp = {
        "replicas": {
            "Worker": {
                "reporting": 20,
                "maxStep": 90,
                "replicas": [{"index": 3, "step": 40}, {"index": 5, "step": 41}],
            },
            "Chief": {"reporting": 1, "maxStep": 7, "replicas": [{"index": 0, "step": 7}]},
        }
    }
    assert known_step(tp, "Worker", 3) == 40
    assert known_step(tp, "Worker", 9) == 90  # unlisted: no further than the furthest
    assert known_step(tp, "Chief", 0) == 7
    assert known_step(tp, "Chief", 1) is None  # all listed: this one never reported
    assert known_step(tp, "PS", 0) is None
    assert known_step(None, "Worker", 0) is None
    assert (
        known_step({"replicas": {"Worker": {"reporting": "x", "replicas": 3}}}, "Worker", 0) is None
    )


@pytest.mark.parametrize(
    ("deaf", "now", "stalled", "reason", "due_in"),
    [
        # a deaf window inside the quiet time: the deadline counts again from its end
        (150, 190, False, "ProgressUnheard", 140),
        (150, 329, False, "ProgressUnheard", 1),
        # a deadline from the window's end runs out as any other
        (150, 330, True, "FirstProgressDeadlineExceeded", None),
        # a window before the run started excuses nothing
        (5, 190, True, "FirstProgressDeadlineExceeded", None),
        # nor does it move a deadline not yet due
        (150, 100, False, "FirstProgressDeadlineExceeded", 90),
    ],
)
def test_a_window_the_endpoint_was_deaf_in_is_not_the_jobs_silence(
    deaf: float, now: float, stalled: bool, reason: str, due_in: float | None
) -> None:
    unheard = (at(deaf), "every connection slot is taken")
    found = check_stall(W, "m", running_since(10), None, (), at(now), unheard)
    assert found is not None
    assert (found.stalled, found.reason, found.due_in) == (stalled, reason, due_in)
    if reason == "ProgressUnheard":
        assert found.unheard
        assert "may not have heard its reports at 2024-01-01T00:02:30Z" in found.message
        assert "every connection slot is taken" in found.message


def test_an_unheard_window_is_said_on_the_stalled_condition_with_a_warning() -> None:
    base = running_since(10)
    found = check_stall(W, "m", base, None, (), at(190), (at(150), "token reviews: down"))
    assert found is not None and found.unheard
    conds = stalled_conditions(base, found, "m", at(190))
    assert (conds[0].type, conds[0].status, conds[0].reason) == (
        "Stalled",
        "False",
        "ProgressUnheard",
    )
    events = cond.transition_events(base, conds)
    assert [(e.type, e.reason) for e in events] == [("Warning", "ProgressUnheard")]
