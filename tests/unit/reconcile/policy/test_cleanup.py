"""reconcile.policy.cleanup: cleanPodPolicy and the TTL applied together, in the pass that
finishes a job and in the passes after."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.models import RunPolicy
from reconcile.api.status_types import JobStatus
from reconcile.policy import conditions as cond
from reconcile.policy.cleanup import Cleanup, finished_cleanup, finishing_cleanup
from tests.builders import at
from tests.unit.reconcile.policy.test_clean_pod_policy import PODS, SERVICES, names


def finishing(cond_type: str, status: str, when: float) -> list[Any]:
    conds = cond.set_condition([], cond.CREATED, cond.TRUE, cond.REASON_CREATED, "m", at(0))
    return cond.set_condition(conds, cond_type, status, "r", "m", at(when))


def test_finished_cleanup_waits_for_the_ttl_then_deletes_the_job() -> None:
    policy = RunPolicy(clean_pod_policy="Running", ttl_seconds_after_finished=30)
    status = JobStatus(completion_time=at(100))
    waiting = finished_cleanup(policy, status, PODS, SERVICES, at(110))
    assert (waiting.requeue_after, waiting.delete_job) == (21.0, False)
    assert names(waiting.delete_pods) == ["t-ps-0", "t-worker-1"]
    assert not waiting.idle
    expired = finished_cleanup(policy, status, [], [], at(131))
    assert expired == Cleanup(requeue_after=None, delete_job=True)
    assert not expired.idle


def test_finished_cleanup_without_policy_or_ttl_is_idle() -> None:
    done = finished_cleanup(RunPolicy(), JobStatus(completion_time=at(0)), PODS, SERVICES, at(9))
    assert done == Cleanup() and done.idle


def test_finished_cleanup_uses_the_condition_when_completion_time_is_missing() -> None:
    policy = RunPolicy(ttl_seconds_after_finished=5)
    status = JobStatus(conditions=finishing("Failed", "True", 50))
    assert finished_cleanup(policy, status, [], [], at(52)).requeue_after == 4.0
    assert finished_cleanup(policy, status, [], [], at(56)).delete_job


@pytest.mark.parametrize("ttl", [0, 3])
def test_finishing_cleanup_never_deletes_the_job_in_the_finishing_pass(ttl: int) -> None:
    policy = RunPolicy(clean_pod_policy="All", ttl_seconds_after_finished=ttl)
    done = finishing_cleanup(policy, PODS, SERVICES, at(100), at(100.4))
    assert not done.delete_job
    assert done.requeue_after == pytest.approx(ttl + 0.6)
    assert names(done.delete_pods) == ["t-chief-0", "t-ps-0", "t-worker-0", "t-worker-1"]
    assert len(done.delete_services) == 6


def test_finishing_cleanup_without_ttl_sets_no_timer() -> None:
    policy = RunPolicy(clean_pod_policy="None")
    done = finishing_cleanup(policy, PODS, SERVICES, at(1), at(1))
    assert done == Cleanup()


@pytest.mark.parametrize("policy", [None, "None"])
def test_a_failed_job_stops_its_active_pods_under_policy_none(policy: str | None) -> None:
    """Pending and Running pods go (an OnFailure pod would be restarted forever); the
    finished ones stay with their services, for their logs. Not in the pass that fails
    the job: only once its Failed status is stored."""
    run_policy = RunPolicy(clean_pod_policy=policy)
    assert finishing_cleanup(run_policy, PODS, SERVICES, at(1), at(1)) == Cleanup()
    status = JobStatus(conditions=finishing_conditions("Failed"), completion_time=at(1))
    later = finished_cleanup(run_policy, status, PODS, SERVICES, at(9))
    assert names(later.delete_pods) == ["t-ps-0", "t-worker-1"]
    assert "t-chief-0" not in names(later.delete_services)
    succeeded = JobStatus(conditions=finishing_conditions("Succeeded"), completion_time=at(1))
    assert finished_cleanup(run_policy, succeeded, PODS, SERVICES, at(9)).idle


def finishing_conditions(cond_type: str) -> list[Any]:
    return finishing(cond_type, "True", 1)
