"""reconcile.policy.verdict on its own: which replica type decides, and decide()'s order of
success, permanent failure, backoffLimit and activeDeadlineSeconds."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.models import TFJob
from reconcile.api.spec import read_job
from reconcile.api.status_types import ReplicaStatus, parse_indexes
from reconcile.policy import conditions as cond
from reconcile.policy.pod_outcome import PodOutcome
from reconcile.policy.restart import ReplicaAccount
from reconcile.policy.verdict import Verdict, decide, deciding_type, in_status_order
from tests.builders import TFJobBuilder, at, make_tfjob

SUCCESS = Verdict(True, "TFJob ns/t successfully completed.")


def tfjob(builder: TFJobBuilder) -> TFJob:
    job = read_job(builder.obj()).tfjob
    assert job is not None
    return job


def out(
    active: int = 0,
    succeeded: str = "",
    failed: int = 0,
    restarts: int = 0,
    permanent: PodOutcome | None = None,
) -> ReplicaAccount:
    """An outcome whose succeeded count matches its succeeded indexes (as accounting makes it)."""
    status = ReplicaStatus(
        active=active,
        succeeded=len(parse_indexes(succeeded)),
        succeeded_indexes=succeeded,
        failed=failed,
        restarts=restarts,
    )
    return ReplicaAccount(status=status, permanent_failure=permanent)


def verdict(builder: TFJobBuilder, now: float = 100, start: float = 0, **outcomes: Any) -> Any:
    return decide(tfjob(builder), outcomes, at(start), at(now))


@pytest.mark.parametrize(
    ("builder", "want"),
    [
        pytest.param(make_tfjob().chief().ps(1).worker(2), "Chief", id="chief"),
        pytest.param(make_tfjob().master().worker(2), "Master", id="master"),
        pytest.param(make_tfjob().ps(1).worker(2).evaluator(), "Worker", id="worker"),
        pytest.param(make_tfjob().ps(2).evaluator(), None, id="neither"),
    ],
)
def test_deciding_type(builder: TFJobBuilder, want: str | None) -> None:
    assert deciding_type(tfjob(builder).replica_specs) == want


def test_in_status_order_sorts_known_types_and_drops_others() -> None:
    rtypes = {"Worker": 0, "custom": 0, "PS": 0, "Evaluator": 0, "Chief": 0}
    assert in_status_order(rtypes) == ["Chief", "Evaluator", "PS", "Worker"]


@pytest.mark.parametrize(
    ("succeeded", "cond_type", "reason"),
    [(True, "Succeeded", "TFJobSucceeded"), (False, "Failed", "TFJobFailed")],
)
def test_verdict_condition(succeeded: bool, cond_type: str, reason: str) -> None:
    v = Verdict(succeeded, "m")
    assert (v.cond_type, v.reason, v.event_type) == (cond_type, reason, "Normal")


@pytest.mark.parametrize(
    ("builder", "outcomes", "succeeded"),
    [
        pytest.param(make_tfjob("t").chief().worker(2),
                     {"Chief": out(succeeded="0"), "Worker": out(active=2)}, True, id="chief-done"),
        pytest.param(make_tfjob("t").chief().worker(2),
                     {"Chief": out(active=1), "Worker": out(succeeded="0-1")}, False,
                     id="workers-ignored-with-chief"),
        pytest.param(make_tfjob("t").master().worker(1),
                     {"Master": out(succeeded="0"), "Worker": out(active=1)}, True, id="master-done"),
        pytest.param(make_tfjob("t").worker(3), {"Worker": out(active=2, succeeded="0")}, True,
                     id="worker0-done"),
        pytest.param(make_tfjob("t").worker(3), {"Worker": out(active=2, succeeded="1")}, False,
                     id="worker1-not-enough"),
        pytest.param(make_tfjob("t").worker(3), {"Worker": out(succeeded="1-2")}, False,
                     id="all-but-worker0-not-enough"),
        pytest.param(make_tfjob("t").worker(2).success_policy("AllWorkers"),
                     {"Worker": out(active=1, succeeded="0")}, False, id="all-workers-needs-all"),
        pytest.param(make_tfjob("t").worker(2).success_policy("AllWorkers"),
                     {"Worker": out(succeeded="0-1")}, True, id="all-workers-done"),
        pytest.param(make_tfjob("t").ps(1).evaluator(),
                     {"PS": out(succeeded="0"), "Evaluator": out(succeeded="0")}, False,
                     id="ps-and-evaluator-never-decide"),
        pytest.param(make_tfjob("t").chief().evaluator(),
                     {"Chief": out(active=1), "Evaluator": out(succeeded="0")}, False,
                     id="evaluator-ignored"),
    ],
)  # fmt: skip
def test_success(builder: TFJobBuilder, outcomes: dict[str, Any], succeeded: bool) -> None:
    assert verdict(builder, **outcomes) == ((SUCCESS, None) if succeeded else (None, None))


def test_success_wins_over_failure_and_deadline_in_the_same_pass() -> None:
    builder = make_tfjob("t").chief().ps(1).active_deadline(10).backoff_limit(0)
    got = verdict(
        builder,
        now=500,
        Chief=out(succeeded="0", restarts=3),
        PS=out(failed=1, permanent=PodOutcome.FAIL_NEVER),
    )
    assert got == (SUCCESS, None)


@pytest.mark.parametrize(
    ("outcomes", "want"),
    [
        pytest.param(
            {"Worker": out(active=1, failed=1, permanent=PodOutcome.FAIL_EXIT_CODE)},
            Verdict(False, 'job "t" is failing because "Worker" replica(s) failed.', "Warning"),
            id="exit-code-is-a-warning",
        ),
        pytest.param(
            {"PS": out(failed=2, permanent=PodOutcome.FAIL_NEVER)},
            Verdict(False, "TFJob ns/t has failed because 2 PS replica(s) failed."),
            id="never-counts-failed-replicas",
        ),
        pytest.param(
            {"Evaluator": out(failed=1, permanent=PodOutcome.FAIL_NEVER)},
            Verdict(False, "TFJob ns/t has failed because 1 Evaluator replica(s) failed."),
            id="evaluator-failure-fails",
        ),
        pytest.param(
            {"Worker": out(failed=1, permanent=PodOutcome.FAIL_EXIT_CODE),
             "PS": out(failed=1, permanent=PodOutcome.FAIL_NEVER)},
            Verdict(False, "TFJob ns/t has failed because 1 PS replica(s) failed."),
            id="first-in-status-order-names-the-type",
        ),
    ],
)  # fmt: skip
def test_permanent_failure(outcomes: dict[str, Any], want: Verdict) -> None:
    builder = make_tfjob("t").chief().ps(1).worker(2).evaluator()
    base = {"Chief": out(active=1), "PS": out(active=1), "Worker": out(), "Evaluator": out()}
    assert verdict(builder, **{**base, **outcomes}) == (want, None)


def test_failed_replicas_without_permanent_failure_do_not_fail() -> None:
    # restartPolicy OnFailure/Always or a retryable exit code: accounting leaves
    # permanent_failure unset and the replica is replaced.
    builder = make_tfjob("t").worker(2)
    assert verdict(builder, Worker=out(active=1, failed=1, restarts=1)) == (None, None)


@pytest.mark.parametrize(
    ("restarts", "failed"), [((0, 0), False), ((1, 1), False), ((2, 0), False), ((2, 1), True)]
)
def test_backoff_limit_sums_restarts_over_types(restarts: tuple[int, int], failed: bool) -> None:
    builder = make_tfjob("t").chief().worker(1).backoff_limit(2)
    got = verdict(
        builder, Chief=out(active=1, restarts=restarts[0]), Worker=out(restarts=restarts[1])
    )
    want = Verdict(False, cond.msg_backoff_limit("t")) if failed else None
    assert got == (want, None)


def test_no_backoff_limit_means_unlimited_retries() -> None:
    assert verdict(make_tfjob("t").worker(1), Worker=out(restarts=1000)) == (None, None)


@pytest.mark.parametrize(
    ("start", "now", "want"),
    [
        pytest.param(0, 0, (None, 11.0), id="just-started"),
        pytest.param(0, 5, (None, 6.0), id="time-left"),
        pytest.param(0, 10.5, (None, 0.5), id="never-early"),  # startTime is whole seconds
        pytest.param(0, 11, "failed", id="expired"),
        pytest.param(50, 55, (None, 6.0), id="clock-from-start-time"),
    ],
)
def test_active_deadline(start: float, now: float, want: Any) -> None:
    builder = make_tfjob("t").worker(1).active_deadline(10)
    got = verdict(builder, now=now, start=start, Worker=out(active=1))
    if want == "failed":
        want = (Verdict(False, cond.msg_deadline("t")), None)
    assert got == want


def test_no_deadline_means_no_timer() -> None:
    assert verdict(make_tfjob("t").worker(1), now=10**6, Worker=out(active=1)) == (None, None)


def test_a_zero_replica_chief_counts_as_absent() -> None:
    """Upstream let `Chief: {replicas: 0}` succeed the job at once with no pod run."""
    builder = make_tfjob().chief(0).worker(2)
    assert deciding_type(tfjob(builder).replica_specs) == "Worker"
    nothing_yet = verdict(builder, Chief=out(), Worker=out(active=2))
    assert nothing_yet == (None, None)
    done, _ = verdict(builder, Chief=out(), Worker=out(active=1, succeeded="0"))
    assert done is not None and done.succeeded
