"""Taking over jobs the upstream operator started: rules of ours that upstream did not
enforce warn instead of failing a running job; new jobs still fail them."""

from __future__ import annotations

from typing import Any

import pytest

from reconcile.api.spec import read_job
from reconcile.objects.observed import observe_all
from reconcile.plan import Plan, PlanConfig, Snapshot, compute_plan
from tests.builders import TFJobBuilder, at, container, make_pod, make_tfjob

CFG = PlanConfig()


def _no_tensorflow() -> TFJobBuilder:
    return make_tfjob("t").worker(2, containers=[container(name="trainer")])


def _two_chiefs() -> TFJobBuilder:
    return make_tfjob("t").chief(2).worker(1)


def _case_duplicate() -> TFJobBuilder:
    return make_tfjob("t").worker(1).replica("ps", 1).replica("PS", 1)


LEGACY = [
    pytest.param(_two_chiefs, "Chief replicas must be 0 or 1", id="chief-replicas-2"),
    pytest.param(_case_duplicate, "duplicates replica type", id="case-duplicate-types"),
    pytest.param(_no_tensorflow, "container with name tensorflow", id="no-tensorflow-container"),
]


def _plan(job: dict[str, Any], pods: list[dict[str, Any]]) -> Plan:
    return compute_plan(Snapshot(read_job(job), observe_all(pods), [], at(100)), CFG)


@pytest.mark.parametrize(("builder", "rule"), LEGACY)
def test_a_started_job_is_taken_over_with_a_warning_naming_the_rule(
    builder: Any, rule: str
) -> None:
    job = builder().obj()
    running = make_pod(job, "Worker", 0).running().obj()
    plan = _plan(job, [running])
    assert plan.status is not None
    assert not any(c["type"] == "Failed" for c in plan.status["conditions"])
    (warning,) = [e for e in plan.events if e.reason == "TFJobValidationTolerated"]
    assert warning.type == "Warning" and rule in warning.message
    assert plan.create_pods, "the rest of the job is created as upstream would"
    assert "t-worker-0" not in {p["metadata"]["name"] for p in plan.create_pods}
    # Once a status of ours records this generation, the warning is not repeated.
    job["status"] = plan.status
    job["metadata"]["generation"] = plan.status.get("observedGeneration")
    again = _plan(job, [running])
    assert not [e for e in again.events if e.reason == "TFJobValidationTolerated"]


@pytest.mark.parametrize(("builder", "rule"), LEGACY)
def test_a_new_job_breaking_the_same_rule_still_fails(builder: Any, rule: str) -> None:
    plan = _plan(builder().obj(), [])
    assert plan.status is not None and plan.create_pods == []
    (failed,) = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
    assert failed["reason"] == "TFJobFailedValidation" and rule in failed["message"]


def test_a_rule_upstream_enforced_fails_even_a_started_job() -> None:
    job = make_tfjob("t").chief(2).worker(1, containers=[{"name": "tensorflow"}]).obj()
    plan = _plan(job, [make_pod(job, "Worker", 0).running().obj()])
    assert plan.status is not None and plan.create_pods == []
    (failed,) = [c for c in plan.status["conditions"] if c["type"] == "Failed"]
    assert "containers[0].image: must be required" in failed["message"]
