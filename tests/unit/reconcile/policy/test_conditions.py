"""Conditions (upstream setCondition rules), messages, events and the status model."""

from __future__ import annotations

import pytest

from reconcile.api.status_types import (
    IndexRetry,
    JobCondition,
    JobStatus,
    ReplicaStatus,
    format_indexes,
    parse_indexes,
)
from reconcile.policy import conditions as st
from tests.builders import at

T1, T2 = at(1), at(2)


def c(t: str, s: str = "True", r: str | None = None, at_: float = 1) -> JobCondition:
    return JobCondition(
        type=t, status=s, reason=r or f"TFJob{t}", message="m", last_update_time=at(at_),
        last_transition_time=at(at_),
    )  # fmt: skip


def summary(conds: list[JobCondition]) -> list[tuple[str, str, str]]:
    return [(x.type, x.status, x.reason) for x in conds]


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param([], ("Created", "True", "TFJobCreated"),
                     [("Created", "True", "TFJobCreated")], id="first"),
        pytest.param([c("Created")], ("Running", "True", "TFJobRunning"),
                     [("Created", "True", "TFJobCreated"), ("Running", "True", "TFJobRunning")],
                     id="append"),
        pytest.param([c("Created"), c("Running")], ("Restarting", "True", "TFJobRestarting"),
                     [("Created", "True", "TFJobCreated"), ("Restarting", "True", "TFJobRestarting")],
                     id="restarting-removes-running"),
        pytest.param([c("Created"), c("Restarting")], ("Running", "True", "TFJobRunning"),
                     [("Created", "True", "TFJobCreated"), ("Running", "True", "TFJobRunning")],
                     id="running-removes-restarting"),
        pytest.param([c("Created"), c("Running")], ("Succeeded", "True", "TFJobSucceeded"),
                     [("Created", "True", "TFJobCreated"), ("Running", "False", "TFJobRunning"),
                      ("Succeeded", "True", "TFJobSucceeded")], id="succeeded-forces-running-false"),
        pytest.param([c("Running"), c("Created")], ("Failed", "True", "TFJobFailed"),
                     [("Running", "False", "TFJobRunning"), ("Created", "True", "TFJobCreated"),
                      ("Failed", "True", "TFJobFailed")], id="failed-keeps-running-in-place"),
        pytest.param([c("Created"), c("Failed")], ("Running", "True", "TFJobRunning"),
                     [("Created", "True", "TFJobCreated"), ("Failed", "True", "TFJobFailed")],
                     id="failed-is-absorbing"),
        pytest.param([c("Created"), c("Succeeded")], ("Failed", "True", "TFJobFailed"),
                     [("Created", "True", "TFJobCreated"), ("Succeeded", "True", "TFJobSucceeded"),
                      ("Failed", "True", "TFJobFailed")], id="succeeded-not-protected"),
        pytest.param([c("Created"), c("Suspended"), c("Running", "False", "TFJobSuspended")],
                     ("Suspended", "False", "TFJobResumed"),
                     [("Created", "True", "TFJobCreated"), ("Running", "False", "TFJobSuspended"),
                      ("Suspended", "False", "TFJobResumed")], id="resume-moves-to-end"),
    ],
)  # fmt: skip
def test_set_condition_transitions(
    old: list[JobCondition], new: tuple[str, str, str], want: list[tuple[str, str, str]]
) -> None:
    got = st.set_condition(old, *new, "msg", T2)
    assert summary(got) == want


def test_same_status_and_reason_is_a_no_op() -> None:
    old = [c("Running", at_=1)]
    got = st.set_condition(old, "Running", "True", "TFJobRunning", "other message", T2)
    assert got == old  # message and timestamps not refreshed


def test_same_status_new_reason_keeps_transition_time() -> None:
    old = [c("Running", r="A", at_=1)]
    (got,) = st.set_condition(old, "Running", "True", "B", "m", T2)
    assert (got.reason, got.last_transition_time, got.last_update_time) == ("B", T1, T2)


@pytest.mark.parametrize(
    ("fn", "args", "want"),
    [
        pytest.param(st.msg_created, ("t",), "TFJob t is created.", id="created"),
        pytest.param(st.msg_running, ("ns", "t"), "TFJob ns/t is running.", id="running"),
        pytest.param(st.msg_succeeded, ("ns", "t"), "TFJob ns/t successfully completed.", id="succeeded"),
        pytest.param(st.msg_replicas_failed, ("ns", "t", 2, "PS"),
                     "TFJob ns/t has failed because 2 PS replica(s) failed.", id="replica-failed"),
        pytest.param(st.msg_exit_code_failed, ("t", "Worker"),
                     'job "t" is failing because "Worker" replica(s) failed.', id="exit-code"),
        pytest.param(st.msg_restarting, ("t", "Worker"),
                     "job t is restarting because Worker replica(s) failed.", id="restarting"),
        pytest.param(st.msg_backoff_limit, ("t",),
                     "Job t has failed because it has reached the specified backoff limit", id="backoff"),
        pytest.param(st.msg_deadline, ("t",),
                     "Job t has failed because it was active longer than specified deadline", id="deadline"),
        pytest.param(st.msg_suspended, ("t",), "TFJob t is suspended.", id="suspended"),
        pytest.param(st.msg_resumed, ("t",), "TFJob t is resumed.", id="resumed"),
    ],
)  # fmt: skip
def test_upstream_messages(fn: object, args: tuple[object, ...], want: str) -> None:
    assert fn(*args) == want  # type: ignore[operator]


@pytest.mark.parametrize(
    ("old", "new", "want"),
    [
        pytest.param([], [c("Created")], [], id="created-silent"),
        pytest.param([c("Created")], [c("Created"), c("Running")], [], id="running-silent"),
        pytest.param([c("Running")], [c("Restarting")], [("Warning", "TFJobRestarting")], id="restarting"),
        pytest.param([c("Restarting")], [c("Restarting", at_=5)], [], id="restarting-again-silent"),
        pytest.param([c("Running")], [c("Running", "False"), c("Succeeded")],
                     [("Normal", "TFJobSucceeded")], id="succeeded"),
        pytest.param([], [c("Failed")], [("Normal", "TFJobFailed")], id="failed"),
        pytest.param([], [c("Suspended")], [("Normal", "TFJobSuspended")], id="suspended"),
        pytest.param([c("Suspended")], [c("Suspended", "False", "TFJobResumed")],
                     [("Normal", "TFJobResumed")], id="resumed"),
    ],
)  # fmt: skip
def test_transition_events(
    old: list[JobCondition], new: list[JobCondition], want: list[tuple[str, str]]
) -> None:
    assert [(e.type, e.reason) for e in st.transition_events(old, new)] == want


@pytest.mark.parametrize(
    ("text", "indexes"),
    [
        pytest.param("", set(), id="empty"),
        pytest.param("0", {0}, id="one"),
        pytest.param("0-2,5", {0, 1, 2, 5}, id="range-and-single"),
        pytest.param("1,3,5-6", {1, 3, 5, 6}, id="mixed"),
    ],
)
def test_index_sets_round_trip(text: str, indexes: set[int]) -> None:
    assert parse_indexes(text) == indexes
    assert format_indexes(indexes) == text


def test_parse_indexes_tolerates_garbage() -> None:
    assert parse_indexes("x,2,4-3,-1, 7") == {2, 7}


def test_status_json_round_trip_and_omitempty() -> None:
    status = JobStatus(
        conditions=[c("Created")],
        replica_statuses={
            "Worker": ReplicaStatus(
                active=1, restarts=2, succeeded_indexes="0",
                index_retries={"1": IndexRetry(failures=1, last_failure_time=T1, last_pod_uid="p")},
            ),
            "PS": ReplicaStatus(),
        },
        start_time=T1,
        observed_generation=3,
    )  # fmt: skip
    out = status.to_json()
    assert out["replicaStatuses"] == {
        "Worker": {
            "active": 1, "restarts": 2, "succeededIndexes": "0",
            "indexRetries": {"1": {"failures": 1, "lastFailureTime": "2024-01-01T00:00:01Z",
                                   "lastPodUID": "p"}},
        },
        "PS": {},
    }  # fmt: skip
    assert out["startTime"] == "2024-01-01T00:00:01Z" and out["observedGeneration"] == 3
    assert "completionTime" not in out
    assert JobStatus.from_json(out) == status


def test_status_tolerates_unknown_and_bad_input() -> None:
    assert JobStatus.from_json(None) == JobStatus()
    assert JobStatus.from_json({"conditions": "nonsense"}) == JobStatus()
    parsed = JobStatus.from_json(
        {"conditions": [], "someday": 1, "startTime": "2024-01-01T00:00:01.5Z"}
    )
    assert parsed.start_time == T1  # second precision, like metav1.Time
