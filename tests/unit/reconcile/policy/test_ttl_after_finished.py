"""reconcile.policy.ttl_after_finished: when the TTL of a finished job runs out, and
from when it runs."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.models import RunPolicy
from reconcile.api.status_types import JobStatus
from reconcile.policy import conditions as cond
from reconcile.policy.ttl_after_finished import finished_at, ttl_remaining
from tests.builders import at


@pytest.mark.parametrize(
    ("ttl", "finished", "now", "want"),
    [
        pytest.param(None, 0, 0, None, id="no-ttl"),
        pytest.param(10, None, 0, None, id="not-finished"),
        pytest.param(10, 0, 5, 6.0, id="running-down"),  # never early: +1s for truncation
        pytest.param(10, 0, 10.5, 0.5, id="last-half-second"),
        pytest.param(10, 0, 11, 0.0, id="due"),
        pytest.param(10, 0, 20, -9.0, id="overdue"),
        pytest.param(0, 0, 0, 1.0, id="zero"),
        pytest.param(-5, 0, 0, 1.0, id="negative-is-zero"),
    ],
)
def test_ttl_remaining(ttl: int | None, finished: float | None, now: float, want: float) -> None:
    policy = RunPolicy(ttl_seconds_after_finished=ttl)
    done = at(finished) if finished is not None else None
    assert ttl_remaining(policy, done, at(now)) == want


def finishing(cond_type: str, status: str, when: float) -> list[Any]:
    conds = cond.set_condition([], cond.CREATED, cond.TRUE, cond.REASON_CREATED, "m", at(0))
    return cond.set_condition(conds, cond_type, status, "r", "m", at(when))


@pytest.mark.parametrize(
    ("status", "want"),
    [
        pytest.param(JobStatus(), None, id="empty"),
        pytest.param(JobStatus(completion_time=at(7)), at(7), id="completion-time"),
        pytest.param(
            JobStatus(completion_time=at(7), conditions=finishing("Succeeded", "True", 9)),
            at(7),
            id="completion-time-first",
        ),
        pytest.param(
            JobStatus(conditions=finishing("Succeeded", "True", 9)), at(9), id="succeeded"
        ),
        pytest.param(JobStatus(conditions=finishing("Failed", "True", 8)), at(8), id="failed"),
        pytest.param(JobStatus(conditions=finishing("Running", "True", 8)), None, id="running"),
        pytest.param(JobStatus(conditions=finishing("Succeeded", "False", 8)), None, id="false"),
    ],
)
def test_finished_at(status: JobStatus, want: Any) -> None:
    assert finished_at(status) == want
