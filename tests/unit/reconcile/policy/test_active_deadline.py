"""reconcile.policy.active_deadline: the seconds left of activeDeadlineSeconds."""

from __future__ import annotations

import pytest

from reconcile.policy.active_deadline import remaining
from tests.builders import at, make_tfjob, typed


@pytest.mark.parametrize(
    ("start", "now", "want"),
    [
        pytest.param(0, 0, 11.0, id="just-started"),
        pytest.param(0, 5, 6.0, id="time-left"),
        pytest.param(0, 10.5, 0.5, id="never-early"),  # startTime is whole seconds
        pytest.param(0, 11, 0.0, id="due"),
        pytest.param(0, 15, -4.0, id="passed"),
        pytest.param(50, 55, 6.0, id="clock-from-start-time"),
    ],
)
def test_remaining(start: float, now: float, want: float) -> None:
    job = typed(make_tfjob("t").worker(1).active_deadline(10))
    assert remaining(job, at(start), at(now)) == want


def test_no_deadline_means_no_timer() -> None:
    assert remaining(typed(make_tfjob("t").worker(1)), at(0), at(10**6)) is None
