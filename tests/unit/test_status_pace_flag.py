"""``--status-pace``: how long progress-only status waits after a job's status write."""

from __future__ import annotations

import pytest

from controller.observability.prometheus import Registry
from reconcile.sync.handlers import job_handler
from reconcile.sync.metrics import JobMetrics
from reconcile.sync.pacing import MAX_STATUS_PACE, STATUS_PACE_SECONDS
from tests.unit.reconcile.sync.test_handlers import JOB, KEY, world
from tfjob_controller.app import parse_args


def test_the_default_and_a_longer_pace() -> None:
    assert parse_args([]).status_pace == STATUS_PACE_SECONDS
    assert parse_args(["--status-pace", "0.5"]).status_pace == 0.5
    assert parse_args(["--status-pace=0"]).status_pace == 0


@pytest.mark.parametrize("value", ["-0.1", str(MAX_STATUS_PACE + 1)])
def test_a_pace_out_of_range_is_refused(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse_args([f"--status-pace={value}"])
    assert exit_.value.code == 2
    assert "--status-pace must be between 0 and" in capsys.readouterr().err


def test_our_own_status_write_is_looked_at_again_after_the_pace() -> None:
    exp, queue = world()
    handler = job_handler(exp, queue, JobMetrics(Registry()), pace=0.5)
    assert handler.on_update
    written = {**JOB, "metadata": {**JOB["metadata"], "resourceVersion": "8"}, "status": {}}
    handler.on_update(JOB, written)
    assert queue.now == [] and queue.later == [(KEY, 0.5)]
