"""Per-index accounting under the restart policies (reconcile.policy.restart)."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.status_types import IndexRetry, ReplicaStatus
from reconcile.policy.pod_outcome import PodOutcome
from reconcile.policy.restart import BackoffPolicy, ReplicaInput, account_replica
from tests.builders import at, make_pod, make_tfjob

JOB = make_tfjob("j").worker(3).obj()
Out = PodOutcome


def pod(index: int = 0) -> Any:
    return make_pod(JOB, "Worker", index)


@pytest.mark.parametrize(
    ("failures", "want"),
    [(0, 0.0), (1, 10.0), (2, 20.0), (3, 40.0), (6, 320.0), (7, 360.0), (1000, 360.0)],
)
def test_backoff_delay(failures: int, want: float) -> None:
    assert BackoffPolicy().delay(failures) == want


B = BackoffPolicy()


def account(pods: dict[int, list[Any]], old: ReplicaStatus | None = None, *, policy: str = "OnFailure",
            replicas: int = 2, now: float = 100, tolerated: bool = False) -> Any:  # fmt: skip
    return account_replica(
        ReplicaInput("Worker", replicas, policy, failures_tolerated=tolerated),
        pods,
        old or ReplicaStatus(),
        at(now),
        B,
    )


def test_missing_indexes_are_created() -> None:
    out = account({1: [pod(1).running().view()]})
    assert out.create == [0] and out.status.active == 1 and not out.restarting


def test_failure_accounted_once_by_uid() -> None:
    failed = pod(0).failed(1, finished=90).uid("a").view()
    out = account({0: [failed]}, replicas=1)
    # Recorded, not deleted: the delete waits for the status holding the record.
    assert out.status.restarts == 1 and out.delete == [] and out.restarting
    assert out.ends == ["0:retry:a"]  # for the reconcile's log line
    assert out.status.index_retries["0"] == IndexRetry(
        failures=1, last_failure_time=at(90), last_pod_uid="a", last_end_time=at(90)
    )
    again = account({0: [failed]}, out.status, replicas=1)  # recorded: now it goes
    assert again.status == out.status and again.delete == [failed] and again.ends == []
    once_more = account({0: [failed]}, out.status, replicas=1)  # delete not observed yet
    assert once_more.status.restarts == 1 and once_more.delete == [failed]
    terminating = pod(0).failed(1, finished=90).uid("a").terminating(requested=95).view()
    third = account({0: [terminating]}, out.status, replicas=1)
    assert third.status == out.status and third.delete == [] and third.create == []


def test_replacement_due_after_backoff() -> None:
    old = ReplicaStatus(
        restarts=2,
        index_retries={"0": IndexRetry(failures=2, last_failure_time=at(90), last_pod_uid="a")},
    )
    early = account({}, old, replicas=1, now=100)
    assert early.create == [] and early.wait == pytest.approx(10) and early.restarting
    due = account({}, old, replicas=1, now=110)
    assert due.create == [0] and due.wait is None


def test_container_restarts_folded_by_increase() -> None:
    p1 = pod(0).running().uid("a").restarts(2).view()
    out = account({0: [p1]}, replicas=1)
    assert out.status.restarts == 2
    same = account({0: [p1]}, out.status, replicas=1)
    assert same.status == out.status
    p1_more = pod(0).running().uid("a").restarts(5).view()
    assert account({0: [p1_more]}, out.status, replicas=1).status.restarts == 5
    # A new pod at the index starts from zero again.
    p2 = pod(0).running().uid("b").restarts(1).view()
    assert account({0: [p2]}, out.status, replicas=1).status.restarts == 3


def test_terminal_indexes_are_neither_rerun_nor_rejudged() -> None:
    old = ReplicaStatus(succeeded=1, succeeded_indexes="0", failed=1, failed_indexes="1")
    out = account({1: [pod(1).failed(1).view()]}, old, policy="Never")
    assert out.create == [] and out.permanent_failure is None
    assert (out.status.succeeded, out.status.failed) == (1, 1)


def test_tolerated_failures_record_but_do_not_fail() -> None:
    out = account({0: [pod(0).failed(1).view()]}, policy="Never", replicas=1, tolerated=True)
    assert out.permanent_failure is None and out.status.failed_indexes == "0"


def test_scale_down_deletes_highest_indexes_and_forgets_them() -> None:
    old = ReplicaStatus(succeeded_indexes="2", index_retries={"1": IndexRetry(failures=1)})
    pods = {i: [pod(i).running().view()] for i in range(3)}
    out = account(pods, old, replicas=1)
    assert [p.name for p in out.delete] == ["j-worker-1", "j-worker-2"]
    assert out.status.succeeded_indexes == "" and out.status.index_retries == {}


def test_long_run_resets_backoff_count() -> None:
    old = ReplicaStatus(index_retries={"0": IndexRetry(failures=4, last_failure_time=at(0))})
    long_run = pod(0).failed(1, finished=1000, started=100).uid("x").view()
    out = account({0: [long_run]}, old, replicas=1, now=1000)
    assert out.status.index_retries["0"].failures == 1
    short_run = pod(0).failed(1, finished=200, started=100).uid("y").view()
    out = account({0: [short_run]}, old, replicas=1, now=200)
    assert out.status.index_retries["0"].failures == 5


def test_running_pod_that_vanished_unseen_is_a_disruption() -> None:
    running = account({0: [pod(0).running().uid("a").view()], 1: [pod(1).running().view()]})
    assert running.status.active_indexes == "0-1"
    # Index 0's pod was force-deleted: the controller never saw it terminating.
    out = account({1: [pod(1).running().view()]}, running.status)
    assert out.status.disruptions == 1 and out.status.restarts == 0
    # Recorded first; the replacement waits for the pass after the record is stored.
    assert out.create == [] and out.restarting and out.accounted == [0]
    assert out.ends == ["0:vanished"]
    assert out.status.active_indexes == "1"
    lost = account({1: [pod(1).running().view()]}, running.status)  # its write was lost
    assert lost.status == out.status and lost.create == []
    stored = account({1: [pod(1).running().view()]}, out.status)
    assert stored.create == [0] and stored.status.disruptions == 1 and stored.wait is None
    # Counted once: the next pass (replacement pending) does not count it again.
    again = account({0: [pod(0).uid("b").view()], 1: [pod(1).running().view()]}, out.status)
    assert again.status.disruptions == 1 and again.create == []


def test_index_that_never_ran_or_ended_seen_is_not_a_disruption() -> None:
    # A pending pod that vanished, and a failure whose deleted pod is gone: neither counts.
    pending = account({0: [pod(0).view()]}, replicas=1)
    assert pending.status.active_indexes == ""
    assert account({}, pending.status, replicas=1).status.disruptions == 0
    failed = account({0: [pod(0).failed(137, finished=90).uid("a").view()]}, replicas=1)
    assert failed.status.active_indexes == "" and failed.status.restarts == 1
    gone = account({}, failed.status, replicas=1)
    assert gone.status.disruptions == 0 and gone.status.restarts == 1
