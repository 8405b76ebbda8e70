"""Creates the apiserver keeps refusing (reconcile.policy.failures): when they fail the
job, and what undoes that."""

from __future__ import annotations

import pytest

from controller.clock import FakeClock
from reconcile.policy.failures import CreateFailures, PersistentFailure

KEY, UID = "ns/j", "uid-1"


def failing(clock: FakeClock, times: int, every: float = 10.0) -> CreateFailures:
    failures = CreateFailures(clock, grace_seconds=30, min_attempts=3)
    for _ in range(times):
        failures.failed(KEY, UID, "Pod", "j-worker-0", "422 Invalid: quota")
        clock.advance(every)
    return failures


@pytest.mark.parametrize(
    ("times", "every", "persistent"),
    [
        pytest.param(2, 20.0, False, id="past-the-grace-but-too-few-attempts"),
        pytest.param(3, 5.0, False, id="enough-attempts-within-the-grace"),
        pytest.param(3, 10.0, True, id="enough-attempts-and-the-grace-over"),
        pytest.param(6, 10.0, True, id="many"),
    ],
)
def test_a_job_fails_after_the_grace_and_enough_attempts(
    times: int, every: float, persistent: bool
) -> None:
    found = failing(FakeClock(), times, every).persistent(KEY, UID)
    expected = PersistentFailure(
        "FailedCreatePod", "pod j-worker-0 could not be created: 422 Invalid: quota"
    )
    assert found == (expected if persistent else None)


def test_a_create_that_goes_through_starts_the_count_again() -> None:
    clock = FakeClock()
    failures = failing(clock, 3)
    failures.created(KEY, UID)
    assert failures.persistent(KEY, UID) is None
    failures.failed(KEY, UID, "Service", "j-worker-0", "403 Forbidden")
    clock.advance(60)
    assert failures.persistent(KEY, UID) is None  # one attempt since


def test_a_new_job_of_the_same_name_is_not_failed_for_the_old_ones_refusals() -> None:
    clock = FakeClock()
    failures = failing(clock, 5)
    assert failures.persistent(KEY, "uid-2") is None
    failures.failed(KEY, "uid-2", "Pod", "j-worker-0", "422 Invalid")
    assert failures.persistent(KEY, UID) is None  # the old job's record is gone
    failures.forget(KEY)
    assert failures.persistent(KEY, "uid-2") is None
