"""reconcile.policy.status on its own: the active job's clocks and new status, the suspended and
invalid statuses, and what counts as a change worth writing."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from reconcile.api.models import TFJob
from reconcile.api.spec import read_job
from reconcile.api.status_types import JobCondition, JobStatus, ReplicaStatus
from reconcile.policy import conditions as cond
from reconcile.policy.restart import ReplicaAccount
from reconcile.policy.status import (
    active_clock,
    calculate_status,
    changed,
    invalid_status,
    is_progress_only,
    suspended_status,
)
from reconcile.policy.verdict import Verdict
from tests.builders import TFJobBuilder, at, make_tfjob

JOB = make_tfjob("t").chief().ps(1).worker(2)


def tfjob(builder: TFJobBuilder = JOB) -> TFJob:
    job = read_job(builder.obj()).tfjob
    assert job is not None
    return job


def kinds(status: JobStatus) -> list[tuple[str, str]]:
    return [(c.type, c.status) for c in status.conditions]


def conds(*entries: tuple[str, str, str, float]) -> list[JobCondition]:
    out: list[JobCondition] = []
    for cond_type, status, reason, when in entries:
        out = cond.set_condition(out, cond_type, status, reason, "m", at(when))
    return out


CREATED = (cond.CREATED, cond.TRUE, cond.REASON_CREATED, 0)
RUNNING = (cond.RUNNING, cond.TRUE, cond.REASON_RUNNING, 5)


def outcomes(restarting: str | None = None, **active: int) -> dict[str, ReplicaAccount]:
    return {
        rt: ReplicaAccount(status=ReplicaStatus(active=active.get(rt, 0)), restarting=rt == restarting)
        for rt in ("Chief", "PS", "Worker")
    }  # fmt: skip


def calc(old: JobStatus, outs: dict[str, ReplicaAccount], verdict: Verdict | None = None,
         now: float = 100, job: TFJob | None = None) -> JobStatus:  # fmt: skip
    job = job or tfjob()
    clock = active_clock(old, job.name, at(now))
    return calculate_status(old, outs, verdict, at(now), job=job, clock=clock)


# --- active_clock ------------------------------------------------------------------------


def test_active_clock_first_pass_records_created_and_starts_now() -> None:
    clock = active_clock(JobStatus(), "t", at(3))
    assert [(c.type, c.reason, c.message) for c in clock.conditions] == [
        ("Created", "TFJobCreated", "TFJob t is created.")
    ]
    assert (clock.start_time, clock.resumed_at) == (at(3), None)


def test_active_clock_keeps_an_existing_start_time() -> None:
    old = JobStatus(conditions=conds(CREATED), start_time=at(1))
    clock = active_clock(old, "t", at(50))
    assert (clock.conditions, clock.start_time, clock.resumed_at) == (old.conditions, at(1), None)


def test_active_clock_resume_restarts_the_deadline_clock() -> None:
    suspended = (cond.SUSPENDED, cond.TRUE, cond.REASON_SUSPENDED, 10)
    old = JobStatus(conditions=conds(CREATED, suspended), start_time=at(1))
    clock = active_clock(old, "t", at(40))
    resumed = cond.find(clock.conditions, cond.SUSPENDED)
    assert resumed is not None
    assert (resumed.status, resumed.reason, resumed.message) == ("False", "TFJobResumed",
                                                                 "TFJob t is resumed.")  # fmt: skip
    assert (clock.start_time, clock.resumed_at) == (at(40), at(40))
    # A later pass reads the resume time back from the stored condition.
    later = active_clock(old.model_copy(update={"conditions": clock.conditions,
                                                "start_time": at(40)}), "t", at(90))  # fmt: skip
    assert (later.start_time, later.resumed_at) == (at(40), at(40))


# --- calculate_status --------------------------------------------------------------------


def test_first_pass_with_pending_pods_is_created_only() -> None:
    new = calc(JobStatus(), outcomes(), now=7)
    assert kinds(new) == [("Created", "True")]
    assert (new.start_time, new.completion_time, new.observed_generation) == (at(7), None, 1)
    assert new.replica_statuses == {rt: ReplicaStatus() for rt in ("Chief", "PS", "Worker")}


@pytest.mark.parametrize(
    ("builder", "active", "running"),
    [
        pytest.param(JOB, {"Chief": 1}, True, id="chief-running"),
        pytest.param(JOB, {"PS": 1, "Worker": 2}, False, id="only-chief-counts"),
        pytest.param(make_tfjob("t").ps(1).worker(2), {"Worker": 1}, True, id="worker-decides"),
        pytest.param(make_tfjob("t").ps(1).evaluator(), {"PS": 1}, False, id="no-decider"),
    ],
)
def test_running_follows_the_deciding_type(
    builder: TFJobBuilder, active: dict[str, int], running: bool
) -> None:
    job = tfjob(builder)
    outs = {rt: ReplicaAccount(ReplicaStatus(active=active.get(rt, 0))) for rt in job.replica_specs}
    new = calc(JobStatus(conditions=conds(CREATED), start_time=at(0)), outs, job=job)
    assert (("Running", "True") in kinds(new)) is running
    assert {rt: rs.active for rt, rs in new.replica_statuses.items()} == {
        rt: active.get(rt, 0) for rt in job.replica_specs
    }


def test_restarting_replaces_running_and_back() -> None:
    old = JobStatus(conditions=conds(CREATED, RUNNING), start_time=at(0))
    restarting = calc(old, outcomes(restarting="Worker", Chief=1), now=20)
    assert kinds(restarting) == [("Created", "True"), ("Restarting", "True")]
    msg = cond.find(restarting.conditions, cond.RESTARTING)
    assert (
        msg is not None and msg.message == "job t is restarting because Worker replica(s) failed."
    )
    recovered = calc(restarting, outcomes(Chief=1, Worker=2), now=30)
    assert kinds(recovered) == [("Created", "True"), ("Running", "True")]
    running = cond.find(recovered.conditions, cond.RUNNING)
    assert running is not None and running.last_transition_time == at(30)


def test_restarting_names_the_first_type_in_status_order() -> None:
    outs = outcomes(Chief=1)
    for rt in ("PS", "Worker"):
        outs[rt] = replace(outs[rt], restarting=True)
    new = calc(JobStatus(conditions=conds(CREATED), start_time=at(0)), outs)
    found = cond.find(new.conditions, cond.RESTARTING)
    assert found is not None and "because PS replica(s)" in found.message


def test_success_counts_still_active_replicas_as_succeeded() -> None:
    old = JobStatus(conditions=conds(CREATED, RUNNING), start_time=at(0))
    outs = outcomes(PS=1, Worker=2)
    outs["Chief"] = ReplicaAccount(ReplicaStatus(succeeded=1, succeeded_indexes="0"))
    outs["Worker"] = ReplicaAccount(ReplicaStatus(active=2, active_indexes="0-1", restarts=3))
    new = calc(old, outs, Verdict(True, "done"), now=60)
    assert kinds(new) == [("Created", "True"), ("Running", "False"), ("Succeeded", "True")]
    assert (new.start_time, new.completion_time) == (at(0), at(60))
    assert new.replica_statuses["Worker"] == ReplicaStatus(succeeded=2, restarts=3)
    assert new.replica_statuses["PS"] == ReplicaStatus(succeeded=1)
    assert new.replica_statuses["Chief"] == ReplicaStatus(succeeded=1, succeeded_indexes="0")


def test_failure_keeps_replica_counts_as_accounted() -> None:
    old = JobStatus(conditions=conds(CREATED, RUNNING), start_time=at(0))
    outs = outcomes(Chief=1, PS=1)
    outs["Worker"] = ReplicaAccount(ReplicaStatus(active=1, failed=1, failed_indexes="1"))
    new = calc(old, outs, Verdict(False, "boom", cond.WARNING), now=60)
    assert kinds(new)[-1] == ("Failed", "True")
    failed = cond.find(new.conditions, cond.FAILED)
    assert failed is not None and (failed.reason, failed.message) == ("TFJobFailed", "boom")
    assert new.completion_time == at(60)
    assert new.replica_statuses["Worker"] == outs["Worker"].status


def test_observed_generation_and_other_fields_carried() -> None:
    old = JobStatus(conditions=conds(CREATED), start_time=at(0), last_reconcile_time=at(2))
    new = calc(old, outcomes(), job=tfjob(make_tfjob("t").chief().ps(1).worker(2).generation(4)))
    assert (new.observed_generation, new.last_reconcile_time) == (4, at(2))


# --- suspended and invalid ---------------------------------------------------------------


def test_suspended_status_zeroes_active_and_keeps_the_record() -> None:
    old = JobStatus(
        conditions=conds(CREATED, RUNNING),
        start_time=at(0),
        replica_statuses={
            "Worker": ReplicaStatus(active=1, active_indexes="1", succeeded=1,
                                    succeeded_indexes="0", restarts=2),
            "Evaluator": ReplicaStatus(active=1),  # no longer in the spec
        },
    )  # fmt: skip
    new = suspended_status(old, tfjob(), at(30))
    assert kinds(new) == [("Created", "True"), ("Running", "False"), ("Suspended", "True")]
    running = cond.find(new.conditions, cond.RUNNING)
    assert running is not None and running.reason == "TFJobSuspended"
    assert new.replica_statuses == {
        "Chief": ReplicaStatus(),
        "PS": ReplicaStatus(),
        "Worker": ReplicaStatus(succeeded=1, succeeded_indexes="0", restarts=2),
    }
    assert (new.start_time, new.observed_generation) == (at(0), 1)


def test_suspended_before_first_run_records_created_too() -> None:
    new = suspended_status(JobStatus(), tfjob(), at(3))
    assert kinds(new) == [("Created", "True"), ("Suspended", "True")]


@pytest.mark.parametrize(("completed", "want"), [(None, at(9)), (at(4), at(4))])
def test_invalid_status(completed: Any, want: Any) -> None:
    new = invalid_status(JobStatus(completion_time=completed), "t", "spec: bad", 3, at(9))
    assert kinds(new) == [("Created", "True"), ("Failed", "True")]
    failed = cond.find(new.conditions, cond.FAILED)
    assert failed is not None
    assert (failed.reason, failed.message) == ("TFJobFailedValidation", "spec: bad")
    assert (new.completion_time, new.observed_generation) == (want, 3)


# --- is_progress_only and changed --------------------------------------------------------

WRITTEN = JobStatus(
    conditions=conds(CREATED),
    start_time=at(0),
    replica_statuses={"Worker": ReplicaStatus(active=1)},
    observed_generation=1,
)


@pytest.mark.parametrize(
    ("old", "update", "want"),
    [
        pytest.param(JobStatus(), {"conditions": conds(CREATED)}, False, id="first-write"),
        pytest.param(WRITTEN, {"replica_statuses": {"Worker": ReplicaStatus(active=2)}}, True,
                     id="counts"),
        pytest.param(WRITTEN, {"conditions": conds(CREATED, RUNNING)}, True, id="running"),
        pytest.param(WRITTEN, {"conditions": conds(
            CREATED, (cond.RESTARTING, cond.TRUE, cond.REASON_RESTARTING, 5))}, False,
            id="restarting"),
        pytest.param(WRITTEN, {"completion_time": at(9)}, False, id="completion-time"),
        pytest.param(WRITTEN, {"start_time": at(9)}, False, id="start-time"),
        pytest.param(WRITTEN, {"observed_generation": 2}, False, id="generation"),
        pytest.param(WRITTEN, {"replica_statuses": {"Worker": ReplicaStatus(
            active=2, active_indexes="0-1")}}, True, id="running-indexes"),
        # outcomes are never held: they are what a lost write would lose
        pytest.param(WRITTEN, {"replica_statuses": {"Worker": ReplicaStatus(
            succeeded=1, succeeded_indexes="0")}}, False, id="succeeded-index"),
        pytest.param(WRITTEN, {"replica_statuses": {"Worker": ReplicaStatus(
            active=1, failed_indexes="1")}}, False, id="failed-index"),
        pytest.param(WRITTEN, {"replica_statuses": {"Worker": ReplicaStatus(
            active=1, restarts=1)}}, False, id="restart"),
        pytest.param(WRITTEN, {"replica_statuses": {"Worker": ReplicaStatus(
            active=1, disruptions=1)}}, False, id="disruption"),
    ],
)  # fmt: skip
def test_is_progress_only(old: JobStatus, update: dict[str, Any], want: bool) -> None:
    assert is_progress_only(old, old.model_copy(update=update)) is want


def test_changed() -> None:
    assert changed(WRITTEN, WRITTEN.model_copy()) is None
    # Compared as written: sub-second differences do not make a write.
    assert changed(WRITTEN, WRITTEN.model_copy(update={"start_time": at(0.7)})) is None
    new = WRITTEN.model_copy(update={"replica_statuses": {"Worker": ReplicaStatus(active=2)}})
    body = changed(WRITTEN, new)
    assert body == new.to_json()
    assert body is not None and body["replicaStatuses"] == {"Worker": {"active": 2}}
