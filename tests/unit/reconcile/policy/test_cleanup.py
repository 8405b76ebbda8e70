"""reconcile.policy.cleanup on its own: what cleanPodPolicy deletes, and the TTL after finishing."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.models import RunPolicy
from reconcile.api.status_types import JobStatus
from reconcile.objects.observed import ObservedPod, observe
from reconcile.policy import conditions as cond
from reconcile.policy.cleanup import (
    Cleanup,
    cleanup_deletions,
    effective_policy,
    finished_at,
    finished_cleanup,
    finishing_cleanup,
    ttl_remaining,
)
from tests.builders import at, make_pod, make_service, make_tfjob

JOB = make_tfjob("t").chief().ps(1).worker(4).obj()
PODS = [
    make_pod(JOB, "Chief", 0).succeeded().view(),
    make_pod(JOB, "PS", 0).running().view(),
    make_pod(JOB, "Worker", 0).failed(1).view(),
    make_pod(JOB, "Worker", 1).pending().view(),
    make_pod(JOB, "Worker", 2).running().terminating().view(),  # already on its way out
    # worker 3's pod is gone
]
SERVICES = [make_service(JOB, rt, i) for rt, i in [("Chief", 0), ("PS", 0)]] + [
    make_service(JOB, "Worker", i) for i in range(4)
]


def names(objs: list[Any]) -> list[str]:
    return sorted(o.name if isinstance(o, ObservedPod) else o["metadata"]["name"] for o in objs)


@pytest.mark.parametrize(
    ("policy", "pods", "services"),
    [
        pytest.param(None, [], [], id="unset"),
        pytest.param("None", [], [], id="none"),
        pytest.param(
            "Running",
            ["t-ps-0", "t-worker-1"],
            # kept: the services of the finished pods that stay (chief, worker 0)
            ["t-ps-0", "t-worker-1", "t-worker-2", "t-worker-3"],
            id="running",
        ),
        pytest.param(
            "All",
            ["t-chief-0", "t-ps-0", "t-worker-0", "t-worker-1"],
            ["t-chief-0", "t-ps-0", "t-worker-0", "t-worker-1", "t-worker-2", "t-worker-3"],
            id="all",
        ),
    ],
)
def test_cleanup_deletions(policy: str | None, pods: list[str], services: list[str]) -> None:
    del_pods, del_svcs = cleanup_deletions(policy, PODS, SERVICES)
    assert (names(del_pods), names(del_svcs)) == (pods, services)


def test_running_policy_treats_a_pod_without_phase_as_pending() -> None:
    raw = make_pod(JOB, "Worker", 0).obj()
    del raw["status"]
    pod = observe(raw)
    assert cleanup_deletions("Running", [pod], []) == ([pod], [])


def test_terminating_services_are_not_deleted_again() -> None:
    svc = make_service(JOB, "Worker", 0)
    svc["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:30Z"
    assert cleanup_deletions("All", [], [svc]) == ([], [])
    assert cleanup_deletions("Running", [], [svc]) == ([], [])


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


@pytest.mark.parametrize(
    ("policy", "failed", "want"),
    [
        (None, True, "Running"),
        ("None", True, "Running"),
        ("Running", True, "Running"),
        ("All", True, "All"),
        (None, False, None),
        ("None", False, "None"),
        ("All", False, "All"),
    ],
)
def test_effective_policy(policy: str | None, failed: bool, want: str | None) -> None:
    assert effective_policy(policy, failed) == want


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
