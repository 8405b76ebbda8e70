"""Whole-gang restart, pure (reconcile.policy.gang_restart through compute_plan): one pod's
retried end restarts every pod, all gone before any is back, one restart counted."""

from __future__ import annotations

import copy
from typing import Any

from reconcile.api.status_types import JobStatus, ReplicaStatus
from reconcile.policy.gang_restart import (
    GANG_EPOCH_LABEL,
    GANG_RESTART_ANNOTATION,
    as_one_restart,
    labelled,
)
from reconcile.policy.restart import ReplicaAccount
from tests.builders import make_tfjob
from tests.unit.reconcile.test_plan import World, cond


def gang_job(backoff_limit: int | None = None) -> dict[str, Any]:
    b = make_tfjob("g").chief(1, restart_policy="ExitCode").worker(2, restart_policy="ExitCode")
    if backoff_limit is not None:
        b = b.backoff_limit(backoff_limit)
    job = b.obj()
    job["metadata"]["annotations"] = {GANG_RESTART_ANNOTATION: "true"}
    return job


def running_world(job: dict[str, Any]) -> World:
    w = World(job)
    w.reconcile()
    w.run_all()
    w.now = 10
    w.reconcile()
    return w


def rs(w: World, rtype: str) -> dict[str, Any]:
    return dict(w.status["replicaStatuses"].get(rtype, {}))


def test_one_worker_failing_restarts_the_whole_gang_together() -> None:
    w = running_world(gang_job())
    old_uids = {p["metadata"]["uid"] for p in w.pods.values()}
    w.now = 20
    w.set_phase("g-worker-1", "Failed", 137)
    # 1. accounted, the epoch raised; nothing deleted or created in that pass
    p = w.reconcile()
    assert (p.delete_pods, p.create_pods) == ([], [])
    assert w.status["gangEpoch"] == 1 and rs(w, "Worker")["restarts"] == 1
    restarting = cond(w.status, "Restarting")
    assert restarting["status"] == "True" and "whole gang" in restarting["message"]
    # 2. every pod of the old epoch is deleted, none created
    w.now = 21
    p = w.reconcile()
    assert {x["metadata"]["name"] for x in p.delete_pods} == set(w.pods)
    assert p.create_pods == []
    # still terminating: nothing created; the kills are not counted
    w.set_phase("g-chief-0", "Failed", 137)
    w.now = 22
    assert w.reconcile().create_pods == []
    # 3. all gone and the backoff (10 s from the failure) over: all created together
    w.gone()
    w.now = 25
    assert w.reconcile().create_pods == []  # backoff
    w.now = 31
    p = w.reconcile()
    assert sorted(x["metadata"]["name"] for x in p.create_pods) == [
        "g-chief-0", "g-worker-0", "g-worker-1",
    ]  # fmt: skip
    assert {x["metadata"]["labels"][GANG_EPOCH_LABEL] for x in p.create_pods} == {"1"}
    assert not old_uids & {x["metadata"]["uid"] for x in w.pods.values()}
    w.run_all()
    w.now = 40
    w.reconcile()
    assert (rs(w, "Worker")["restarts"], rs(w, "Worker").get("disruptions", 0)) == (1, 0)
    assert rs(w, "Chief").get("restarts", 0) == 0
    assert cond(w.status, "Running")["status"] == "True"


def test_pods_ending_together_count_as_one_restart() -> None:
    w = running_world(gang_job())
    w.now = 20
    w.set_phase("g-worker-0", "Failed", 137)
    w.set_phase("g-worker-1", "Failed", 137)
    w.set_phase("g-chief-0", "Failed", 137)
    w.reconcile()
    assert w.status["gangEpoch"] == 1
    total = sum(rs(w, rt).get("restarts", 0) for rt in ("Chief", "Worker"))
    assert total == 1


def test_backoff_limit_still_fails_the_job() -> None:
    w = running_world(gang_job(backoff_limit=0))
    w.now = 20
    w.set_phase("g-worker-1", "Failed", 137)
    w.reconcile()
    assert cond(w.status, "Failed")["status"] == "True"
    assert w.status.get("gangEpoch", 0) == 0


def test_without_the_annotation_one_pod_is_replaced() -> None:
    job = gang_job()
    job["metadata"]["annotations"] = {}
    w = running_world(job)
    w.now = 20
    w.set_phase("g-worker-1", "Failed", 137)
    w.reconcile()
    w.now = 21
    p = w.reconcile()
    assert [x["metadata"]["name"] for x in p.delete_pods] == ["g-worker-1"]
    assert w.status.get("gangEpoch", 0) == 0


def test_one_restart_and_the_epoch_label_leave_their_inputs_as_they_were() -> None:
    old = JobStatus(replica_statuses={"Chief": ReplicaStatus(), "Worker": ReplicaStatus()})
    given = {
        "Chief": ReplicaAccount(status=ReplicaStatus(restarts=1)),
        "Worker": ReplicaAccount(status=ReplicaStatus(restarts=2), create=[0, 1]),
    }
    before = copy.deepcopy(given)
    out = as_one_restart(old, given)
    assert given == before
    assert (out["Chief"].status.restarts, out["Worker"].status.restarts) == (1, 0)
    assert out["Worker"].create == [0, 1]

    pod = {"metadata": {"name": "g-worker-0", "labels": {"a": "b"}}, "spec": {}}
    seen = copy.deepcopy(pod)
    new = labelled(pod, 3)
    assert pod == seen
    assert new["metadata"]["labels"] == {"a": "b", GANG_EPOCH_LABEL: "3"}
    assert new["spec"] is pod["spec"]  # shared, not copied: nothing edits it
