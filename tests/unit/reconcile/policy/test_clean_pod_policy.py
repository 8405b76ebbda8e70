"""reconcile.policy.clean_pod_policy: what cleanPodPolicy removes, and what a failed
job stops under None."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.objects.observed import ObservedPod, observe
from reconcile.policy.clean_pod_policy import cleanup_deletions, effective_policy
from tests.builders import make_pod, make_service, make_tfjob

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
