"""The restart guard's counting, as a table (reconcile.progress.guard)."""

from __future__ import annotations

import pytest

from reconcile.api.status_types import RestartGuard
from reconcile.progress.guard import GuardCheck, check_guard

G50 = RestartGuard(since_step=50, since_restarts=0)


@pytest.mark.parametrize(
    ("limit", "stored", "before", "now", "furthest", "expected"),
    [
        # never reported: nothing to say, the guard keeps out of it
        (3, None, 0, 1, None, GuardCheck(None)),
        (3, G50, 3, 4, None, GuardCheck(G50)),
        # off
        (0, None, 0, 9, 50, GuardCheck(None)),
        # the first restart of a reporting job begins a run from its furthest step
        (3, None, 0, 1, 50, GuardCheck(G50, 0)),
        # reports but no restart: nothing begins
        (3, None, 0, 0, 50, GuardCheck(None)),
        # restarted runs that ended below the mark: 1, 2, then 3 trips a guard of 3
        (3, G50, 1, 2, 50, GuardCheck(G50, 1)),
        (3, G50, 2, 3, 50, GuardCheck(G50, 2)),
        (3, G50, 3, 4, 50, GuardCheck(G50, 3, tripped=True)),
        # two restarts counted in one pass count as two
        (3, G50, 1, 3, 50, GuardCheck(G50, 2)),
        # progress past the mark since: the next restart begins a new run
        (3, G50, 3, 4, 51, GuardCheck(RestartGuard(since_step=51, since_restarts=3), 0)),
        # progress past the mark and no restart: the run is broken, the mark moves later
        (3, G50, 3, 3, 51, GuardCheck(G50)),
        # a guard of 1: the first restarted run that ends without progress fails the job
        (1, G50, 1, 2, 50, GuardCheck(G50, 1, tripped=True)),
        # an edited status that counts fewer restarts than the mark: never negative
        (3, RestartGuard(since_step=50, since_restarts=7), 2, 3, 50,
         GuardCheck(RestartGuard(since_step=50, since_restarts=7), 0)),
    ],
)  # fmt: skip
def test_guard(
    limit: int,
    stored: RestartGuard | None,
    before: int,
    now: int,
    furthest: int | None,
    expected: GuardCheck,
) -> None:
    assert check_guard(limit, stored, before, now, furthest) == expected
