"""What one observed pod means for its index (reconcile.policy.pod_outcome)."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.policy.pod_outcome import (
    PodOutcome,
    end_began,
    is_permanent_exit_code,
    pod_outcome,
)
from tests.builders import at, make_pod, make_tfjob

JOB = make_tfjob("j").worker(3).obj()
Out = PodOutcome


def pod(index: int = 0) -> Any:
    return make_pod(JOB, "Worker", index)


@pytest.mark.parametrize(
    ("p", "policy", "want"),
    [
        pytest.param(pod().pending(), "Never", Out.PENDING, id="pending"),
        pytest.param(pod().running(), "Never", Out.RUNNING, id="running"),
        pytest.param(pod().succeeded(), "Never", Out.SUCCEEDED, id="succeeded"),
        pytest.param(pod().succeeded().terminating(), "OnFailure", Out.SUCCEEDED, id="succeeded-then-deleted"),
        pytest.param(pod().failed(1), "Never", Out.FAIL_NEVER, id="never"),
        pytest.param(pod().failed(137), "Never", Out.FAIL_NEVER, id="never-signal"),
        pytest.param(pod().failed(1), "OnFailure", Out.RETRY, id="onfailure"),
        pytest.param(pod().failed(1), "Always", Out.RETRY, id="always"),
        pytest.param(pod().failed(1), "ExitCode", Out.FAIL_EXIT_CODE, id="exitcode-1"),
        pytest.param(pod().failed(127), "ExitCode", Out.FAIL_EXIT_CODE, id="exitcode-127"),
        pytest.param(pod().failed(128), "ExitCode", Out.RETRY, id="exitcode-128"),
        pytest.param(pod().failed(137), "ExitCode", Out.RETRY, id="exitcode-137"),
        pytest.param(pod().failed(0), "ExitCode", Out.RETRY, id="exitcode-0-other-container"),
        pytest.param(pod().failed(None), "ExitCode", Out.RETRY, id="exitcode-no-status"),
        pytest.param(pod().evicted(), "Never", Out.DISRUPTED, id="evicted"),
        pytest.param(pod().failed(1).disruption_target(), "Never", Out.DISRUPTED, id="disruption-target"),
        pytest.param(pod().running().terminating(), "Never", Out.TERMINATING, id="deleted-running"),
        pytest.param(pod().pending().terminating(), "Never", Out.TERMINATING, id="deleted-pending"),
        pytest.param(pod().succeeded().terminating(), "Never", Out.SUCCEEDED, id="deleted-then-exit-0"),
        pytest.param(pod().failed(143, finished=60).terminating(requested=50), "Never", Out.DISRUPTED,
                     id="killed-by-delete"),
        pytest.param(pod().failed(1, finished=40).terminating(requested=50), "Never", Out.FAIL_NEVER,
                     id="failed-then-deleted"),
        # the kubelet's final grace-0 delete moved deletionTimestamp to just after the kill
        pytest.param(pod().failed(137, finished=60).terminating(requested=61, grace=0), "OnFailure",
                     Out.DISRUPTED, id="killed-then-final-delete"),
        pytest.param(pod().failed(1, finished=40).terminating(requested=90, grace=0), "OnFailure",
                     Out.RETRY, id="failed-long-before-a-force-delete"),
    ],
)  # fmt: skip
def test_pod_outcome(p: Any, policy: str, want: PodOutcome) -> None:
    assert pod_outcome(p.view(), policy) is want


def test_terminating_pod_from_before_resume_is_leftover() -> None:
    p = pod().running().created(5).terminating().view()
    assert pod_outcome(p, "Never", resumed_at=at(10)) is Out.LEFTOVER
    assert pod_outcome(p, "Never", resumed_at=at(4)) is Out.TERMINATING
    # created in the second the job resumed: one of the resumed job's pods, whose end
    # counts (the controller creates pods in that very second)
    same = pod().running().created(10).terminating().view()
    assert pod_outcome(same, "Never", resumed_at=at(10)) is Out.TERMINATING


def test_pod_killed_by_the_suspend_and_seen_after_the_resume_is_leftover() -> None:
    # The chaos run of seed 11: the suspend deleted the pod, kwok killed it (exit 137),
    # and a replica whose pod watch was cut saw that end only after the resume.
    killed = pod().failed(137, finished=52).created(5).terminating(requested=51).view()
    assert pod_outcome(killed, "OnFailure", resumed_at=at(53)) is Out.LEFTOVER
    assert pod_outcome(killed, "Never", resumed_at=at(53)) is Out.LEFTOVER
    # no resume on record: a delete from outside that killed it, a disruption
    assert pod_outcome(killed, "OnFailure") is Out.DISRUPTED
    # created after the resume: the resumed job's own pod, deleted from outside
    late = pod().failed(137, finished=60).created(54).terminating(requested=59).view()
    assert pod_outcome(late, "OnFailure", resumed_at=at(53)) is Out.DISRUPTED
    # it failed on its own before the suspend deleted it: a failure like any other
    failed = pod().failed(1, finished=40).created(5).terminating(requested=51).view()
    assert pod_outcome(failed, "OnFailure", resumed_at=at(53)) is Out.RETRY
    assert pod_outcome(failed, "Never", resumed_at=at(53)) is Out.FAIL_NEVER


@pytest.mark.parametrize(
    ("code", "want"), [(0, False), (1, True), (127, True), (128, False), (255, False)]
)
def test_is_permanent_exit_code(code: int, want: bool) -> None:
    assert is_permanent_exit_code(code) is want


def test_an_end_began_at_its_delete_else_at_its_finish() -> None:
    job = make_tfjob("t").worker(2).obj()
    deleted = make_pod(job, "Worker", 0).failed(143, finished=25).terminating(requested=20)
    assert end_began(deleted.view(), at(99)) == at(20)
    assert end_began(make_pod(job, "Worker", 0).failed(137, finished=25).view(), at(99)) == at(25)
    assert end_began(make_pod(job, "Worker", 0).running().view(), at(99)) == at(99)
