"""reconcile.policy.success_policy: which replica type decides, and when it has succeeded."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.policy.success_policy import deciding_type, succeeded
from tests.builders import TFJobBuilder, make_tfjob, typed
from tests.unit.reconcile.policy.test_verdict import out


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
    assert deciding_type(typed(builder).replica_specs) == want


@pytest.mark.parametrize(
    ("builder", "outcomes", "want"),
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
def test_succeeded(builder: TFJobBuilder, outcomes: dict[str, Any], want: bool) -> None:
    assert succeeded(typed(builder), outcomes) is want


def test_a_zero_replica_chief_counts_as_absent() -> None:
    """Upstream let `Chief: {replicas: 0}` succeed the job at once with no pod run."""
    job = typed(make_tfjob().chief(0).worker(2))
    assert deciding_type(job.replica_specs) == "Worker"
    assert not succeeded(job, {"Chief": out(), "Worker": out(active=2)})
    assert succeeded(job, {"Chief": out(), "Worker": out(active=1, succeeded="0")})
