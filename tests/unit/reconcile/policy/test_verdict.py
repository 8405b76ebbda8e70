"""reconcile.policy.verdict: decide()'s order of success, permanent failure, backoffLimit
and activeDeadlineSeconds, and the verdict each gives."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.status_types import ReplicaStatus, parse_indexes
from reconcile.policy import conditions as cond
from reconcile.policy.pod_outcome import PodOutcome
from reconcile.policy.restart import ReplicaAccount
from reconcile.policy.verdict import Verdict, decide, in_status_order
from tests.builders import TFJobBuilder, at, make_tfjob, typed

SUCCESS = Verdict(True, "TFJob ns/t successfully completed.")


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
    return decide(typed(builder), outcomes, at(start), at(now))


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
    ("builder", "outcomes", "want"),
    [
        pytest.param(make_tfjob("t").worker(2), {"Worker": out(active=2, succeeded="0")}, SUCCESS,
                     id="success-policy"),
        pytest.param(make_tfjob("t").worker(1).backoff_limit(1), {"Worker": out(restarts=2)},
                     Verdict(False, cond.msg_backoff_limit("t")), id="backoff-limit"),
        pytest.param(make_tfjob("t").worker(1).active_deadline(10), {"Worker": out(active=1)},
                     Verdict(False, cond.msg_deadline("t")), id="deadline-passed"),
    ],
)  # fmt: skip
def test_each_field_ends_the_job(builder: TFJobBuilder, outcomes: dict[str, Any],
                                 want: Verdict) -> None:  # fmt: skip
    assert verdict(builder, now=100, **outcomes) == (want, None)


def test_no_verdict_gives_the_deadline_timer() -> None:
    builder = make_tfjob("t").worker(1).active_deadline(10)
    assert verdict(builder, now=5, Worker=out(active=1)) == (None, 6.0)
    assert verdict(make_tfjob("t").worker(1), now=10**6, Worker=out(active=1)) == (None, None)


def test_a_zero_replica_chief_never_succeeds_the_job_alone() -> None:
    """Upstream let `Chief: {replicas: 0}` succeed the job at once with no pod run."""
    builder = make_tfjob().chief(0).worker(2)
    assert verdict(builder, Chief=out(), Worker=out(active=2)) == (None, None)
