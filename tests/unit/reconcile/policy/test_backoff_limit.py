"""reconcile.policy.backoff_limit: restarts summed over replica types against the limit."""

from __future__ import annotations

import pytest

from reconcile.api.status_types import ReplicaStatus
from reconcile.policy.backoff_limit import exceeded
from reconcile.policy.restart import ReplicaAccount
from tests.builders import make_tfjob, typed


def restarted(restarts: int) -> ReplicaAccount:
    return ReplicaAccount(status=ReplicaStatus(restarts=restarts))


@pytest.mark.parametrize(
    ("restarts", "failed"), [((0, 0), False), ((1, 1), False), ((2, 0), False), ((2, 1), True)]
)
def test_backoff_limit_sums_restarts_over_types(restarts: tuple[int, int], failed: bool) -> None:
    job = typed(make_tfjob("t").chief().worker(1).backoff_limit(2))
    accounts = {"Chief": restarted(restarts[0]), "Worker": restarted(restarts[1])}
    assert exceeded(job, accounts) is failed


def test_no_backoff_limit_means_unlimited_retries() -> None:
    assert not exceeded(typed(make_tfjob("t").worker(1)), {"Worker": restarted(1000)})


def test_disruptions_are_not_restarts() -> None:
    job = typed(make_tfjob("t").worker(1).backoff_limit(0))
    disrupted = ReplicaAccount(status=ReplicaStatus(disruptions=5))
    assert not exceeded(job, {"Worker": disrupted})
