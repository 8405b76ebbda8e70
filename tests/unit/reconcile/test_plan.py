"""compute_plan end to end: a small in-memory world applies each plan like the orchestrator
would (children, then status, then events) and the tests drive pod phases."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from reconcile.api.names import RETIRED_ANNOTATION, TRACKING_FINALIZER
from reconcile.api.spec import read_job
from reconcile.api.status_types import format_time
from reconcile.objects.observed import observe_all, raws
from reconcile.plan import EventIntent, Plan, PlanConfig, Snapshot, compute_plan
from reconcile.policy.gang_restart import GANG_RESTART_ANNOTATION
from tests import conformance
from tests.builders import at, make_pod, make_service, make_tfjob, ts

CFG = PlanConfig()


def cond_types(status: dict[str, Any] | None) -> list[tuple[str, str]]:
    return [(c["type"], c["status"]) for c in (status or {}).get("conditions", [])]


def cond(status: dict[str, Any] | None, cond_type: str) -> dict[str, Any]:
    return next(c for c in (status or {})["conditions"] if c["type"] == cond_type)


def plan_for(job: dict[str, Any], pods=(), services=(), now: float = 100, config=CFG) -> Plan:
    return compute_plan(Snapshot(read_job(job), observe_all(pods), list(services), at(now)), config)


@dataclass
class World:
    """The API server as far as one TFJob is concerned."""

    job: dict[str, Any]
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    services: dict[str, dict[str, Any]] = field(default_factory=dict)
    now: float = 0
    status_writes: int = 0
    events: list[EventIntent] = field(default_factory=list)
    serial: int = 0
    deleted_job: bool = False
    last: Plan | None = None
    #: the replicas' training-progress records the pass is given (reconcile.progress)
    training: tuple[Any, ...] = ()
    #: the endpoint's last deaf window, as the intake holds it
    unheard: tuple[datetime, str] | None = None
    #: the cluster's nodes, as the node cache holds them (None: no cache)
    nodes: list[dict[str, Any]] | None = None

    def reconcile(self, config: PlanConfig = CFG) -> Plan:
        snap = Snapshot(
            read_job(copy.deepcopy(self.job)),
            observe_all(copy.deepcopy(p) for p in self.pods.values()),
            [copy.deepcopy(s) for s in self.services.values()],
            at(self.now),
            training=self.training,
            unheard=self.unheard,
            nodes=copy.deepcopy(self.nodes),
        )
        pods, services = copy.deepcopy(raws(snap.pods)), copy.deepcopy(snap.services)
        job = snap.job.raw
        job_before = copy.deepcopy(job)
        plan = compute_plan(snap, config)
        # the planner is pure: every pass of every table test checks it changed nothing
        assert (raws(snap.pods), snap.services, job) == (pods, services, job_before)
        for pod in plan.delete_pods:
            # Kubelet is not simulated: deleting makes the pod terminating; tests call
            # gone() to let it disappear.
            live = self.pods.get(pod["metadata"]["name"])
            if live and live["metadata"]["uid"] == pod["metadata"]["uid"]:
                live["metadata"]["deletionTimestamp"] = ts(self.now)
                live["metadata"]["deletionGracePeriodSeconds"] = 0
        for pod in plan.release_pods:
            live = self.pods.get(pod["metadata"]["name"])
            if live and live["metadata"]["uid"] == pod["metadata"]["uid"]:
                meta = live["metadata"]
                meta["finalizers"] = [
                    f for f in meta.get("finalizers", []) if f != TRACKING_FINALIZER
                ]
                if meta["uid"] in plan.retired:
                    meta.setdefault("annotations", {})[RETIRED_ANNOTATION] = "true"
        for svc in plan.delete_services:
            self.services.pop(svc["metadata"]["name"], None)
        for pod in plan.create_pods:
            name = pod["metadata"]["name"]
            assert name not in self.pods, f"duplicate pod {name}"
            self.serial += 1
            pod = copy.deepcopy(pod)
            pod["metadata"]["uid"] = f"{name}-u{self.serial}"
            pod["metadata"]["creationTimestamp"] = ts(self.now)
            pod["status"] = {"phase": "Pending"}
            self.pods[name] = pod
        for svc in plan.create_services:
            name = svc["metadata"]["name"]
            assert name not in self.services, f"duplicate service {name}"
            svc = copy.deepcopy(svc)
            svc["metadata"]["uid"] = f"svc-{name}"
            self.services[name] = svc
        if plan.status is not None:
            self.job["status"] = plan.status
            self.status_writes += 1
        self.events.extend(plan.events)
        self.deleted_job = self.deleted_job or plan.delete_job
        self.last = plan
        return plan

    def settle(self, rounds: int = 4) -> None:
        for _ in range(rounds):
            self.reconcile()

    def gone(self, *names: str) -> None:
        """Terminating pods (or the named ones) disappear from the API."""
        for name in names or [
            n for n, p in self.pods.items() if p["metadata"].get("deletionTimestamp")
        ]:
            self.pods.pop(name, None)

    def set_phase(self, name: str, phase: str, code: int | None = None, **extra: Any) -> None:
        pod = self.pods[name]
        pod["status"]["phase"] = phase
        pod["status"].setdefault("startTime", ts(self.now))
        if code is not None:
            pod["status"]["containerStatuses"] = [
                {
                    "name": "tensorflow",
                    "restartCount": 0,
                    "state": {"terminated": {"exitCode": code, "finishedAt": ts(self.now)}},
                }
            ]
        pod["status"].update(extra)

    def run_all(self) -> None:
        for name, pod in self.pods.items():
            if pod["status"]["phase"] == "Pending":
                self.set_phase(name, "Running")

    @property
    def status(self) -> dict[str, Any]:
        return self.job.get("status") or {}

    def reasons(self) -> list[str]:
        return [e.reason for e in self.events]


# --- the basic path -------------------------------------------------------------------------


def test_basic_path_three_status_writes_and_idempotent() -> None:
    w = World(make_tfjob("mnist", "kubeflow").chief().ps(1).worker(2).obj())
    p = w.reconcile()
    assert sorted(x["metadata"]["name"] for x in p.create_pods) == [
        "mnist-chief-0", "mnist-ps-0", "mnist-worker-0", "mnist-worker-1",
    ]  # fmt: skip
    assert len(p.create_services) == 4
    assert cond_types(w.status) == [("Created", "True")]
    assert w.status["startTime"] == ts(0)
    # Pods exist but are pending: nothing to write.
    w.now = 5
    assert w.reconcile().status is None
    w.run_all()
    w.now = 10
    w.reconcile()
    assert cond_types(w.status) == [("Created", "True"), ("Running", "True")]
    assert w.status["replicaStatuses"]["Worker"]["active"] == 2
    assert w.reconcile().status is None  # unchanged world, no write
    w.now = 50
    w.set_phase("mnist-chief-0", "Succeeded", 0)
    w.reconcile()
    assert cond_types(w.status) == [
        ("Created", "True"), ("Running", "False"), ("Succeeded", "True"),
    ]  # fmt: skip
    assert w.status["completionTime"] == ts(50)
    # Upstream bookkeeping: the still-active PS and workers are counted as succeeded.
    assert w.status["replicaStatuses"]["Worker"] == {"succeeded": 2}
    assert w.status["replicaStatuses"]["Chief"]["succeededIndexes"] == "0"
    assert w.status_writes == 3
    assert w.reasons() == ["TFJobSucceeded"]
    # Finished with cleanPodPolicy None: nothing to do, nothing written, ever.
    w.now = 60
    p = w.reconcile()
    assert (p.skip_reason, p.status, p.delete_pods) == ("finished", None, [])


def test_created_and_running_in_one_write_when_pods_already_run() -> None:
    job = make_tfjob("t").worker(2).obj()
    pods = [make_pod(job, "Worker", i).running().obj() for i in range(2)]
    svcs = [make_service(job, "Worker", i) for i in range(2)]
    p = plan_for(job, pods, svcs)
    assert p.create_pods == [] and p.create_services == []
    assert cond_types(p.status) == [("Created", "True"), ("Running", "True")]


def test_status_only_gives_the_same_status_and_events_without_children() -> None:
    """A pass still waiting on its own creates plans the status alone: the same status
    and events a full plan would give, and no writes to children."""
    job = make_tfjob("t").worker(4).obj()
    pods = [make_pod(job, "Worker", i).running().obj() for i in range(2)]  # 2 of 4 made
    svcs = [make_service(job, "Worker", 0)]
    snap = Snapshot(read_job(job), observe_all(pods), svcs, at(100))
    full = compute_plan(snap, CFG)
    alone = compute_plan(snap, CFG, status_only=True)
    assert len(full.create_pods) == 2 and len(full.create_services) == 3
    assert (alone.status, alone.events, alone.progress) == (
        full.status,
        full.events,
        full.progress,
    )
    assert alone.create_pods == alone.create_services == alone.delete_pods == []
    assert alone.release_pods == [] and alone.podgroup is None


def test_status_is_none_for_unchanged_world() -> None:
    job = make_tfjob("t").worker(2).obj()
    pods = [make_pod(job, "Worker", i).running().obj() for i in range(2)]
    svcs = [make_service(job, "Worker", i) for i in range(2)]
    first = plan_for(job, pods, svcs, now=100)
    job["status"] = first.status
    again = plan_for(job, pods, svcs, now=200)
    assert again.status is None and again.events == [] and again.create_pods == []


def test_observed_generation_follows_spec_edits() -> None:
    job = make_tfjob("t").worker(1).obj()
    job["status"] = plan_for(job).status
    job["metadata"]["generation"] = 2
    pods = [make_pod(job, "Worker", 0).obj()]
    assert plan_for(job, pods, [make_service(job, "Worker", 0)]).status["observedGeneration"] == 2


# --- success rules -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("builder", "phases", "succeeded"),
    [
        pytest.param(make_tfjob().chief().worker(2), {("Chief", 0): "Succeeded"}, True, id="chief-decides"),
        pytest.param(
            make_tfjob().chief().worker(2),
            {("Worker", 0): "Succeeded", ("Worker", 1): "Succeeded", ("Chief", 0): "Running"},
            False, id="workers-ignored-with-chief",
        ),
        pytest.param(make_tfjob().master().worker(1), {("Master", 0): "Succeeded"}, True, id="master-decides"),
        pytest.param(make_tfjob().worker(3), {("Worker", 0): "Succeeded"}, True, id="worker0-decides"),
        pytest.param(make_tfjob().worker(3), {("Worker", 1): "Succeeded"}, False, id="worker1-does-not"),
        pytest.param(
            make_tfjob().worker(2).success_policy("AllWorkers"), {("Worker", 0): "Succeeded"},
            False, id="all-workers-needs-all",
        ),
        pytest.param(
            make_tfjob().worker(2).success_policy("AllWorkers"),
            {("Worker", 0): "Succeeded", ("Worker", 1): "Succeeded"}, True, id="all-workers-done",
        ),
        pytest.param(make_tfjob().ps(2).evaluator(1), {("PS", 0): "Succeeded"}, False, id="ps-never-decides"),
    ],
)  # fmt: skip
def test_success_rules(builder: Any, phases: dict[tuple[str, int], str], succeeded: bool) -> None:
    job = builder.obj()
    pods = []
    for rtype, spec in job["spec"]["tfReplicaSpecs"].items():
        for i in range(spec.get("replicas", 1)):
            pb = make_pod(job, rtype, i)
            phase = phases.get((rtype, i), "Running")
            pods.append((pb.succeeded() if phase == "Succeeded" else pb.running()).obj())
    p = plan_for(job, pods)
    assert (("Succeeded", "True") in cond_types(p.status)) is succeeded


def test_succeeded_index_survives_pod_gc() -> None:
    """AllWorkers: worker 0 finished and its pod was garbage-collected; it is not re-run and
    the job succeeds when worker 1 finishes (upstream #1186)."""
    w = World(make_tfjob("t").worker(2).success_policy("AllWorkers").obj())
    w.reconcile()
    w.run_all()
    w.now = 10
    w.set_phase("t-worker-0", "Succeeded", 0)
    w.reconcile()
    assert w.status["replicaStatuses"]["Worker"]["succeededIndexes"] == "0"
    w.gone("t-worker-0")
    w.now = 20
    p = w.reconcile()
    assert p.create_pods == [] and "t-worker-0" not in w.pods
    w.set_phase("t-worker-1", "Succeeded", 0)
    w.reconcile()
    assert ("Succeeded", "True") in cond_types(w.status)


# --- failure rules -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rtype", "policy", "code", "want_failed", "message"),
    [
        pytest.param("Worker", "Never", 1, True,
                     "TFJob ns/t has failed because 1 Worker replica(s) failed.", id="never-worker"),
        pytest.param("PS", "Never", 1, True,
                     "TFJob ns/t has failed because 1 PS replica(s) failed.", id="never-ps"),
        pytest.param("Evaluator", "Never", 137, True,
                     "TFJob ns/t has failed because 1 Evaluator replica(s) failed.", id="never-evaluator"),
        pytest.param("Worker", "ExitCode", 1, True,
                     'job "t" is failing because "Worker" replica(s) failed.', id="exitcode-permanent"),
        pytest.param("Worker", "ExitCode", 127, True,
                     'job "t" is failing because "Worker" replica(s) failed.', id="exitcode-127"),
        pytest.param("Worker", "ExitCode", 137, False, None, id="exitcode-retryable"),
        pytest.param("Worker", "ExitCode", None, False, None, id="exitcode-no-status-retries"),
        pytest.param("Worker", "OnFailure", 1, False, None, id="onfailure-replaced"),
        pytest.param("Worker", "Always", 1, False, None, id="always-replaced"),
    ],
)  # fmt: skip
def test_failure_rules(
    rtype: str, policy: str, code: int | None, want_failed: bool, message: str | None
) -> None:
    job = (
        make_tfjob("t").chief().replica(rtype, 2, restart_policy=policy).clean_pod_policy("None")
    ).obj()
    pods = [make_pod(job, "Chief", 0).running().obj(), make_pod(job, rtype, 0).running().obj()]
    pods.append(make_pod(job, rtype, 1).failed(code).obj())
    p = plan_for(job, pods)
    failed = [c for c in p.status["conditions"] if c["type"] == "Failed"]
    if want_failed:
        assert failed and failed[0]["message"] == message and failed[0]["reason"] == "TFJobFailed"
        assert p.create_pods == [] and p.delete_pods == []  # cleanPodPolicy None keeps all
        assert [e.reason for e in p.events] == ["TFJobFailed"]
        assert p.events[0].type == ("Warning" if policy == "ExitCode" else "Normal")
        assert p.status["completionTime"] == ts(100)
    else:
        assert not failed
        # Account first: the failure is recorded in this pass and the pod deleted by the
        # next one, once the record is stored.
        assert p.delete_pods == [] and p.create_pods == []
        assert ("Restarting", "True") in cond_types(p.status)
        assert [(e.type, e.reason) for e in p.events] == [("Warning", "TFJobRestarting")]
        assert p.status["replicaStatuses"][rtype]["restarts"] == 1
        job["status"] = p.status
        p = plan_for(job, pods)
        assert [d["metadata"]["name"] for d in p.delete_pods] == [f"t-{rtype.lower()}-1"]
        assert p.status is None and p.events == [] and p.create_pods == []


def test_dynamic_worker_failure_does_not_fail_job() -> None:
    job = make_tfjob("t").chief().worker(2).dynamic_worker().obj()
    pods = [
        make_pod(job, "Chief", 0).running().obj(),
        make_pod(job, "Worker", 0).running().obj(),
        make_pod(job, "Worker", 1).failed(1).obj(),
    ]
    p = plan_for(job, pods)
    assert ("Failed", "True") not in cond_types(p.status)
    assert p.status["replicaStatuses"]["Worker"]["failedIndexes"] == "1"
    assert p.create_pods == []


def test_restart_policy_on_pod_and_exit_code_maps_to_never() -> None:
    job = (
        make_tfjob("t").worker(1, restart_policy="ExitCode").ps(1, restart_policy="OnFailure").obj()
    )
    pods = {p["metadata"]["name"]: p for p in plan_for(job).create_pods}
    assert pods["t-worker-0"]["spec"]["restartPolicy"] == "Never"
    assert pods["t-ps-0"]["spec"]["restartPolicy"] == "OnFailure"


# --- replacement: wait for the old pod, then backoff -----------------------------------------


def test_replacement_waits_for_old_pod_and_backoff() -> None:
    w = World(make_tfjob("t").chief().worker(1, restart_policy="OnFailure").obj())
    w.reconcile()
    w.run_all()
    w.now = 100
    w.reconcile()
    w.set_phase("t-worker-0", "Failed", 1)
    p = w.reconcile()
    assert p.delete_pods == [] and p.create_pods == []  # recorded first ...
    rs = w.status["replicaStatuses"]["Worker"]
    assert rs["restarts"] == 1
    assert rs["indexRetries"]["0"]["failures"] == 1
    p = w.reconcile()  # ... deleted once the record is stored
    assert [d["metadata"]["name"] for d in p.delete_pods] == ["t-worker-0"]
    assert p.create_pods == [] and p.status is None
    # Still terminating: the index is occupied, nothing created, nothing counted twice.
    w.now = 101
    p = w.reconcile()
    assert p.create_pods == [] and p.status is None and p.delete_pods == []
    # Gone, but the 10 s backoff (from the failure at t=100) is not over.
    w.gone()
    w.now = 104
    p = w.reconcile()
    assert p.create_pods == [] and p.requeue_after == pytest.approx(6)
    w.now = 110
    p = w.reconcile()
    assert [c["metadata"]["name"] for c in p.create_pods] == ["t-worker-0"]
    # The replacement runs: Restarting gives way to Running and the ended UID is forgotten.
    w.run_all()
    w.now = 115
    w.reconcile()
    assert cond_types(w.status)[-1] == ("Running", "True")
    assert "lastPodUID" not in w.status["replicaStatuses"]["Worker"]["indexRetries"]["0"]
    assert w.reasons() == ["TFJobRestarting"]


def test_backoff_grows_and_resets_after_a_long_run() -> None:
    cfg = PlanConfig(
        backoff_base_seconds=10, backoff_max_seconds=25, backoff_reset_after_seconds=600
    )
    w = World(make_tfjob("t").chief().worker(1, restart_policy="OnFailure").obj())
    w.reconcile(cfg)
    w.run_all()
    delays = []
    for start in (100, 200, 300):
        w.now = start
        w.reconcile(cfg)
        w.set_phase("t-worker-0", "Failed", 1)
        w.reconcile(cfg)
        w.reconcile(cfg)
        w.gone()
        w.now = start + 1
        delays.append(round(w.reconcile(cfg).requeue_after or 0) + 1)
        w.now = start + 50
        w.reconcile(cfg)
        w.run_all()
    assert delays == [10, 20, 25]  # 10 * 2^(n-1), capped at 25
    # A pod that ran 600 s resets the count: the next failure waits the base again.
    w.now = 400
    w.reconcile(cfg)
    w.pods["t-worker-0"]["status"]["startTime"] = ts(400)
    w.now = 1100
    w.set_phase("t-worker-0", "Failed", 1)
    w.reconcile(cfg)
    assert w.status["replicaStatuses"]["Worker"]["indexRetries"]["0"]["failures"] == 1


def test_backoff_state_survives_controller_restart() -> None:
    """Only the job (with status) and pods are inputs: a fresh controller computes the
    same remaining backoff from status alone."""
    w = World(make_tfjob("t").chief().worker(1, restart_policy="OnFailure").obj())
    w.reconcile()
    w.run_all()
    w.now = 100
    w.reconcile()
    w.set_phase("t-worker-0", "Failed", 1)
    w.reconcile()
    w.reconcile()
    w.gone()
    fresh = plan_for(
        copy.deepcopy(w.job), list(w.pods.values()), list(w.services.values()), now=103
    )
    assert fresh.requeue_after == pytest.approx(7) and fresh.create_pods == []


# --- backoffLimit ----------------------------------------------------------------------------


def test_backoff_limit_counts_exit_code_recreations() -> None:
    w = World(
        make_tfjob("t").chief().worker(1, restart_policy="ExitCode").backoff_limit(1)
        .clean_pod_policy("Running").obj()
    )  # fmt: skip
    w.reconcile()
    w.run_all()
    for n, start in enumerate((100, 200)):
        w.now = start
        w.reconcile()
        w.set_phase("t-worker-0", "Failed", 137)
        w.reconcile()
        if n == 0:
            assert ("Failed", "True") not in cond_types(w.status)
            w.reconcile()
            w.gone()
            w.now = start + 20
            w.reconcile()
            w.run_all()
    failed = cond(w.status, "Failed")
    assert (
        failed["message"] == "Job t has failed because it has reached the specified backoff limit"
    )
    # cleanPodPolicy Running honoured: the running chief and its service went, with the
    # failed worker's service (its pod is terminating); the failed pod itself stays.
    assert w.last is not None
    assert [d["metadata"]["name"] for d in w.last.delete_pods] == ["t-chief-0"]
    assert sorted(s["metadata"]["name"] for s in w.last.delete_services) == ["t-chief-0"]


def test_backoff_limit_counts_container_restarts_once() -> None:
    job = make_tfjob("t").chief().worker(1, restart_policy="OnFailure").backoff_limit(3).obj()
    chief = make_pod(job, "Chief", 0).running().obj()
    svcs = [make_service(job, "Chief", 0), make_service(job, "Worker", 0)]
    worker = make_pod(job, "Worker", 0).running().restarts(2).obj()
    p = plan_for(job, [chief, worker], svcs)
    assert p.status["replicaStatuses"]["Worker"]["restarts"] == 2
    job["status"] = p.status
    # Same observation again: no double count, no write.
    assert plan_for(job, [chief, worker], svcs).status is None
    worker = make_pod(job, "Worker", 0).running().restarts(4).obj()
    p = plan_for(job, [chief, worker], svcs)
    assert ("Failed", "True") in cond_types(p.status)
    assert p.status["replicaStatuses"]["Worker"]["restarts"] == 4


# --- deadlines and TTL -------------------------------------------------------------------------


def test_active_deadline_requeues_then_fails() -> None:
    w = World(make_tfjob("t").worker(2).active_deadline(60).obj())
    p = w.reconcile()
    # startTime is stored at second precision: the deadline is a lower bound, so it is due
    # one tick after startTime + 60 (see elapsed_due).
    assert p.requeue_after == pytest.approx(61)
    w.now = 45
    assert w.reconcile().requeue_after == pytest.approx(16)
    w.now = 60
    assert w.reconcile().requeue_after == pytest.approx(1)
    assert "Failed" not in [t for t, _ in cond_types(w.status)]
    w.now = 61
    w.reconcile()
    failed = cond(w.status, "Failed")
    assert (
        failed["message"] == "Job t has failed because it was active longer than specified deadline"
    )


def test_active_deadline_never_fires_early_despite_truncated_start_time() -> None:
    # Regression: the job started at 0.9 s, stored as startTime 0; a deadline of 5 s used
    # to fail it at 5.0 s, after 4.1 s of activity.
    w = World(make_tfjob("t").worker(1).active_deadline(5).obj(), now=0.9)
    p = w.reconcile()
    assert w.status["startTime"] == ts(0)
    assert p.requeue_after == pytest.approx(5.1)
    w.now = 5.0
    w.reconcile()
    assert "Failed" not in [t for t, _ in cond_types(w.status)]
    w.now = 5.95
    w.reconcile()
    assert "Failed" not in [t for t, _ in cond_types(w.status)]
    w.now = 6.0
    w.reconcile()
    assert ("Failed", "True") in cond_types(w.status)


def test_ttl_requeues_then_deletes_job() -> None:
    w = World(make_tfjob("t").worker(2).ttl(30).obj())
    w.reconcile()
    w.run_all()
    w.now = 10
    w.set_phase("t-worker-0", "Succeeded", 0)
    p = w.reconcile()
    assert p.requeue_after == pytest.approx(31) and not p.delete_job
    w.now = 25
    p = w.reconcile()
    assert p.requeue_after == pytest.approx(16) and not p.delete_job
    w.now = 40
    p = w.reconcile()
    assert p.requeue_after == pytest.approx(1) and not p.delete_job
    w.now = 41
    assert w.reconcile().delete_job


def test_ttl_never_deletes_early_despite_truncated_completion_time() -> None:
    # Regression: finished at 10.8 s (completionTime 10); a TTL of 3 deleted the job at
    # 13.0 s, 2.2 s after it finished.
    w = World(make_tfjob("t").worker(1).ttl(3).obj())
    w.reconcile()
    w.run_all()
    w.now = 10.8
    w.set_phase("t-worker-0", "Succeeded", 0)
    p = w.reconcile()
    assert w.status["completionTime"] == ts(10)
    assert p.requeue_after == pytest.approx(3.2)
    w.now = 13.0
    assert not w.reconcile().delete_job
    w.now = 14.0
    assert w.reconcile().delete_job


# --- cleanPodPolicy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "pods_deleted", "services_deleted"),
    [
        pytest.param("None", [], [], id="none"),
        pytest.param("Running", ["t-ps-0", "t-worker-1"], ["t-ps-0", "t-worker-1", "t-worker-2"], id="running"),
        pytest.param("All", ["t-chief-0", "t-ps-0", "t-worker-0", "t-worker-1"],
                     ["t-chief-0", "t-ps-0", "t-worker-0", "t-worker-1", "t-worker-2"], id="all"),
    ],
)  # fmt: skip
def test_clean_pod_policy_on_finish(
    policy: str, pods_deleted: list[str], services_deleted: list[str]
) -> None:
    job = make_tfjob("t").chief().ps(1).worker(3).clean_pod_policy(policy).obj()
    pods = [
        make_pod(job, "Chief", 0).succeeded().obj(),
        make_pod(job, "PS", 0).running().obj(),
        make_pod(job, "Worker", 0).failed(1).uid("w0").obj(),  # kept by Running
        make_pod(job, "Worker", 1).pending().obj(),
        # worker 2's pod is gone already: its service must not be left behind
    ]
    svcs = [
        make_service(job, rt, i)
        for rt, i in [("Chief", 0), ("PS", 0), ("Worker", 0), ("Worker", 1), ("Worker", 2)]
    ]
    job["spec"]["tfReplicaSpecs"]["Worker"]["restartPolicy"] = "OnFailure"
    p = plan_for(job, pods, svcs)
    assert ("Succeeded", "True") in cond_types(p.status)
    assert sorted(d["metadata"]["name"] for d in p.delete_pods) == pods_deleted
    assert sorted(d["metadata"]["name"] for d in p.delete_services) == services_deleted
    # And again on the finished job, for whatever the last pass did not get to.
    job["status"] = p.status
    again = plan_for(job, pods, svcs, now=200)
    assert again.status is None and again.events == []
    assert sorted(d["metadata"]["name"] for d in again.delete_pods) == pods_deleted


# --- suspend / resume ---------------------------------------------------------------------------


def test_suspend_and_resume() -> None:
    w = World(make_tfjob("t").worker(2).active_deadline(1000).obj())
    w.reconcile()
    w.run_all()
    w.now = 10
    w.reconcile()
    w.job["spec"]["runPolicy"]["suspend"] = True
    w.now = 20
    p = w.reconcile()
    assert len(p.delete_pods) == 2 and len(p.delete_services) == 2 and p.create_pods == []
    assert cond_types(w.status) == [
        ("Created", "True"),
        ("Running", "False"),
        ("Suspended", "True"),
    ]
    running = cond(w.status, "Running")
    assert running["reason"] == "TFJobSuspended" and running["message"] == "TFJob t is suspended."
    assert w.status["replicaStatuses"]["Worker"].get("active", 0) == 0
    assert w.reconcile().status is None  # suspended and settled: no writes, no events
    # Resume while the old pods are still terminating: they are not disruptions, and their
    # indexes stay occupied until they are gone.
    w.job["spec"]["runPolicy"]["suspend"] = False
    w.now = 30
    p = w.reconcile()
    suspended = cond(w.status, "Suspended")
    assert (suspended["status"], suspended["reason"]) == ("False", "TFJobResumed")
    assert w.status["startTime"] == ts(30)
    assert p.create_pods == [] and len(p.create_services) == 2
    assert "disruptions" not in w.status["replicaStatuses"]["Worker"]
    w.gone()
    w.now = 31
    assert len(w.reconcile().create_pods) == 2
    assert w.reasons() == ["TFJobSuspended", "TFJobResumed"]


def test_created_suspended_never_creates_pods() -> None:
    p = plan_for(make_tfjob("t").worker(2).suspend().obj())
    assert p.create_pods == [] and p.create_services == []
    assert cond_types(p.status) == [("Created", "True"), ("Suspended", "True")]
    assert "startTime" not in p.status


# --- durable terminal record -----------------------------------------------------------------


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_finished_job_with_deleted_pods_recreates_nothing(outcome: str) -> None:
    w = World(make_tfjob("t").chief().worker(2).obj())
    w.reconcile()
    w.run_all()
    w.now = 10
    w.reconcile()
    w.set_phase("t-chief-0", outcome, 0 if outcome == "Succeeded" else 1)
    w.reconcile()
    writes = w.status_writes
    w.pods.clear()
    w.services.clear()
    w.now = 100
    p = w.reconcile()
    assert p.create_pods == [] and p.create_services == [] and p.status is None
    assert w.status_writes == writes


# --- disruptions ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "disrupt",
    [
        pytest.param(lambda b: b.evicted(), id="evicted"),
        pytest.param(lambda b: b.failed(137).disruption_target(), id="disruption-target"),
        pytest.param(
            lambda b: b.failed(143, finished=55).terminating(requested=50), id="killed-by-delete"
        ),
    ],
)
def test_disruptions_replace_without_counting(disrupt: Any) -> None:
    job = make_tfjob("t").chief().worker(2).backoff_limit(0).obj()  # Never + limit 0
    job["status"] = {
        "conditions": [{"type": "Created", "status": "True", "reason": "TFJobCreated"}],
        "startTime": ts(0),
    }
    chief = make_pod(job, "Chief", 0).running().obj()
    w0 = make_pod(job, "Worker", 0).running().obj()
    w1 = disrupt(make_pod(job, "Worker", 1)).obj()
    svcs = [make_service(job, rt, i) for rt, i in [("Chief", 0), ("Worker", 0), ("Worker", 1)]]
    p = plan_for(job, [chief, w0, w1], svcs)
    rs = p.status["replicaStatuses"]["Worker"]
    assert rs["disruptions"] == 1 and "restarts" not in rs
    assert ("Failed", "True") not in cond_types(p.status)
    assert ("Restarting", "True") in cond_types(p.status)
    assert p.create_pods == []  # the old pod is still in the API
    # Once it is gone, the replacement comes at once (no backoff for disruptions), and
    # nothing is counted again.
    job["status"] = p.status
    p2 = plan_for(job, [chief, w0], svcs, now=101)
    assert [c["metadata"]["name"] for c in p2.create_pods] == ["t-worker-1"]
    assert p2.status is None


def _chief_and_two_workers() -> tuple[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]]]:
    job = make_tfjob("t").chief().worker(2).backoff_limit(0).obj()  # Never + limit 0
    job["status"] = {
        "conditions": [{"type": "Created", "status": "True", "reason": "TFJobCreated"}],
        "startTime": ts(0),
    }
    pods = [make_pod(job, "Chief", 0).running().obj(), make_pod(job, "Worker", 0).running().obj()]
    svcs = [make_service(job, rt, i) for rt, i in [("Chief", 0), ("Worker", 0), ("Worker", 1)]]
    return job, pods, svcs


def test_a_pod_deleted_by_someone_else_is_judged_by_its_end() -> None:
    """Deleted but still running: nothing is counted yet, and nothing replaces it. If it
    then vanishes without an end we saw, that is a disruption (not counted against
    backoffLimit), recorded first, and the replacement follows."""
    job, pods, svcs = _chief_and_two_workers()
    deleted = make_pod(job, "Worker", 1).running().terminating(requested=50).obj()
    p = plan_for(job, [*pods, deleted], svcs)
    rs = p.status["replicaStatuses"]["Worker"]
    assert "disruptions" not in rs and rs["activeIndexes"] == "0-1"
    assert p.create_pods == []
    job["status"] = p.status
    gone = plan_for(job, pods, svcs, now=101)
    assert gone.status["replicaStatuses"]["Worker"]["disruptions"] == 1
    assert ("Failed", "True") not in cond_types(gone.status)
    job["status"] = gone.status
    again = plan_for(job, pods, svcs, now=102)
    assert [c["metadata"]["name"] for c in again.create_pods] == ["t-worker-1"]


def test_a_graceful_delete_the_program_survives_to_exit_0_is_a_success() -> None:
    """A node drain deletes a worker; it finishes its work within the grace period and
    exits 0: the index succeeded, it is not re-run."""
    job, pods, svcs = _chief_and_two_workers()
    deleted = make_pod(job, "Worker", 1).running().terminating(requested=50)
    p = plan_for(job, [*pods, deleted.obj()], svcs)
    job["status"] = p.status
    done = make_pod(job, "Worker", 1).succeeded(finished=55).terminating(requested=50).obj()
    p2 = plan_for(job, [*pods, done], svcs, now=101)
    rs = p2.status["replicaStatuses"]["Worker"]
    assert rs["succeededIndexes"] == "1" and "disruptions" not in rs
    job["status"] = p2.status
    p3 = plan_for(job, pods, svcs, now=102)
    assert p3.create_pods == [], "a succeeded index is never re-run"


def test_failed_pod_we_deleted_is_a_failure_not_a_disruption() -> None:
    """The status write recording a failure was lost; the pod we deleted is seen again,
    terminating. It failed before the DELETE, so it is still a failure."""
    job = make_tfjob("t").chief().worker(1, restart_policy="OnFailure").obj()
    chief = make_pod(job, "Chief", 0).running().obj()
    w0 = make_pod(job, "Worker", 0).failed(1, finished=40).terminating(requested=50).obj()
    p = plan_for(job, [chief, w0])
    rs = p.status["replicaStatuses"]["Worker"]
    assert rs["restarts"] == 1 and "disruptions" not in rs


@pytest.mark.parametrize("finished_in_delete_second", [False, True])
def test_lost_status_write_never_loses_a_failure(finished_in_delete_second: bool) -> None:
    """Regression: the pass that saw a retryable failure deleted the pod *and* wrote the
    record; when that status write failed (Conflict with a concurrent edit, controller
    killed), the retried pass found the pod gone — the failure escaped backoffLimit and the
    backoff — or terminating with finishedAt in the DELETE's second, which reads as a
    disruption. Now the record is written first and the pod deleted by the next pass."""
    w = World(make_tfjob("t").chief().worker(1, restart_policy="ExitCode").backoff_limit(0).obj())
    w.reconcile()
    w.run_all()
    w.now = 50
    w.reconcile()
    w.set_phase("t-worker-0", "Failed", 137)
    if finished_in_delete_second:
        w.now = 50.4
    pods = observe_all(copy.deepcopy(p) for p in w.pods.values())
    snap = Snapshot(read_job(copy.deepcopy(w.job)), pods, [], at(w.now))
    lost = compute_plan(snap, CFG)  # its status write fails: nothing of it is applied ...
    assert lost.delete_pods == [] and lost.create_pods == []  # ... and it deleted nothing
    p = w.reconcile()  # the retried pass still sees the failed pod and counts it
    assert w.status["replicaStatuses"]["Worker"]["restarts"] == 1
    assert "disruptions" not in w.status["replicaStatuses"]["Worker"]
    assert cond(w.status, "Failed")["message"] == (
        "Job t has failed because it has reached the specified backoff limit"
    )
    assert p.delete_pods == []  # finished: cleanPodPolicy (None) keeps it


def test_disruption_recorded_before_the_pod_is_deleted() -> None:
    job = make_tfjob("t").chief().worker(1, restart_policy="OnFailure").obj()
    w = World(job)
    w.reconcile()
    w.run_all()
    w.now = 10
    w.reconcile()
    w.pods["t-worker-0"]["status"]["reason"] = "Evicted"
    w.set_phase("t-worker-0", "Failed")
    p = w.reconcile()
    assert w.status["replicaStatuses"]["Worker"]["disruptions"] == 1 and p.delete_pods == []
    p = w.reconcile()
    assert [d["metadata"]["name"] for d in p.delete_pods] == ["t-worker-0"]
    assert p.status is None
    w.gone()
    p = w.reconcile()
    assert [c["metadata"]["name"] for c in p.create_pods] == ["t-worker-0"]
    assert w.status["replicaStatuses"]["Worker"]["disruptions"] == 1


def test_suspend_and_success_clear_active_indexes() -> None:
    """Pods the controller itself removes (suspend, cleanPodPolicy) are not disruptions."""
    w = World(make_tfjob("t").worker(2).obj())
    w.reconcile()
    w.run_all()
    w.reconcile()
    assert w.status["replicaStatuses"]["Worker"]["activeIndexes"] == "0-1"
    w.job["spec"]["runPolicy"] = {"suspend": True}
    w.reconcile()
    assert "activeIndexes" not in w.status["replicaStatuses"]["Worker"]
    w.gone()
    w.job["spec"]["runPolicy"] = {"suspend": False}
    w.now = 5
    w.reconcile()
    w.run_all()
    w.reconcile()
    assert "disruptions" not in w.status["replicaStatuses"]["Worker"]
    w.set_phase("t-worker-0", "Succeeded", 0)
    w.reconcile()
    assert "activeIndexes" not in w.status["replicaStatuses"]["Worker"]


# --- invalid, managedBy, scaling --------------------------------------------------------------


def test_invalid_job_fails_validation_once() -> None:
    job = make_tfjob("t").worker(1, containers=[{"name": "tensorflow"}]).obj()  # no image
    p = plan_for(job)
    failed = cond(p.status, "Failed")
    assert failed["reason"] == "TFJobFailedValidation" and "image" in failed["message"]
    assert p.create_pods == [] and p.create_services == []
    assert [(e.type, e.reason) for e in p.events] == [("Warning", "TFJobFailedValidation")]
    job["status"] = p.status
    again = plan_for(job, now=200)
    assert again.status is None and again.events == [] and again.skip_reason == "finished"


@pytest.mark.parametrize(
    ("managed_by", "skipped"),
    [
        pytest.param("kueue.x-k8s.io/multikueue", True, id="multikueue"),
        pytest.param("example.com/other", True, id="other"),
        pytest.param("kubeflow.org/training-operator", False, id="training-operator"),
    ],
)
def test_managed_by(managed_by: str, skipped: bool) -> None:
    p = plan_for(make_tfjob("t").worker(2).managed_by(managed_by).obj())
    assert (p.skip_reason == "managed-by-other") is skipped
    assert bool(p.create_pods) is not skipped


def test_deleting_job_is_skipped() -> None:
    assert plan_for(make_tfjob("t").worker(2).deleting().obj()).skip_reason == "deleting"


def test_scale_up_and_down() -> None:
    w = World(make_tfjob("t").chief().worker(3).obj())
    w.reconcile()
    w.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    p = w.reconcile()
    assert sorted(d["metadata"]["name"] for d in p.delete_pods) == ["t-worker-1", "t-worker-2"]
    assert sorted(d["metadata"]["name"] for d in p.delete_services) == ["t-worker-1", "t-worker-2"]
    w.gone()
    w.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 2
    p = w.reconcile()
    assert [c["metadata"]["name"] for c in p.create_pods] == ["t-worker-1"]
    env = p.create_pods[0]["spec"]["containers"][0]["env"]
    assert '"worker":["t-worker-0.ns.svc:2222","t-worker-1.ns.svc:2222"]' in env[0]["value"]


@pytest.mark.parametrize("whole_gang", [False, True])
@pytest.mark.parametrize("killed", [True, False], ids=["killed", "still-running"])
def test_a_scale_down_undone_before_its_pods_are_gone_is_no_disruption(
    whole_gang: bool, killed: bool
) -> None:
    """The controller's own scale-down deletions are not somebody else's: when the
    replicas come back while those pods still terminate, their ends count nothing, and
    a whole-gang job does not restart its healthy gang."""
    job = make_tfjob("t").worker(3, restart_policy="OnFailure").obj()
    if whole_gang:
        job["metadata"]["annotations"] = {GANG_RESTART_ANNOTATION: "true"}
    w = World(job)
    w.reconcile()
    w.run_all()
    w.now = 10
    w.reconcile()
    w.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 1
    w.now = 20
    p = w.reconcile()
    assert sorted(d["metadata"]["name"] for d in p.delete_pods) == ["t-worker-1", "t-worker-2"]
    assert p.retired == {
        w.pods["t-worker-1"]["metadata"]["uid"],
        w.pods["t-worker-2"]["metadata"]["uid"],
    }
    # back up before they are gone; the kubelet kills them (137) or they still run
    w.job["spec"]["tfReplicaSpecs"]["Worker"]["replicas"] = 3
    if killed:
        for name in ("t-worker-1", "t-worker-2"):
            w.set_phase(name, "Failed", 137)
    w.now = 21
    first = w.reconcile()
    assert first.create_pods == [] and first.delete_pods == [], "their names are still taken"
    w.settle()
    survivor = w.pods["t-worker-0"]["metadata"]["uid"]
    w.gone()
    w.now = 22
    p = w.reconcile()
    assert sorted(c["metadata"]["name"] for c in p.create_pods) == ["t-worker-1", "t-worker-2"]
    w.run_all()
    w.settle()
    worker = w.status["replicaStatuses"]["Worker"]
    assert (worker.get("disruptions", 0), worker.get("restarts", 0)) == (0, 0)
    assert w.status.get("gangEpoch", 0) == 0
    assert w.pods["t-worker-0"]["metadata"]["uid"] == survivor, "the healthy pod stays"


def test_removed_replica_type_is_cleaned_up() -> None:
    job = make_tfjob("t").chief().worker(1).obj()
    pods = [make_pod(job, "Chief", 0).obj(), make_pod(job, "Worker", 0).obj()]
    evaluator = make_pod(make_tfjob("t").evaluator().obj(), "Evaluator", 0).obj()
    svc = make_service(job, "Evaluator", 0)
    p = plan_for(job, [*pods, evaluator], [svc])
    assert [d["metadata"]["name"] for d in p.delete_pods] == ["t-evaluator-0"]
    assert [d["metadata"]["name"] for d in p.delete_services] == ["t-evaluator-0"]


def test_timestamps_are_rfc3339_seconds() -> None:
    p = compute_plan(Snapshot(read_job(make_tfjob("t").worker(2).obj()), [], [], at(1.75)), CFG)
    assert p.status["startTime"] == format_time(at(1)) == "2024-01-01T00:00:01Z"


# --- upstream examples (conformance data, read in place) ------------------------------------


@pytest.mark.parametrize("path", conformance.example_params())
def test_upstream_examples_materialise(path: Path | None) -> None:
    for doc in yaml.safe_load_all(conformance.require(path).read_text()):
        if not doc or doc.get("kind") != "TFJob":
            continue
        doc["metadata"].update(namespace="ns", uid="u", generation=1)
        p = plan_for(doc)
        assert ("Failed", "True") not in cond_types(p.status), p.status
        specs = doc["spec"]["tfReplicaSpecs"]
        want = sum(s.get("replicas", 1) for s in specs.values())
        assert len(p.create_pods) == len(p.create_services) == want
        for pod in p.create_pods:
            tf = next(c for c in pod["spec"]["containers"] if c["name"] == "tensorflow")
            has_config = any(e["name"] == "TF_CONFIG" for e in tf.get("env", []))
            assert has_config is (want != 1)


def test_a_template_the_planner_cannot_use_fails_the_job_instead_of_raising(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import reconcile.plan.active as plan_mod

    def odd(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(plan_mod, "new_pods", odd)
    p = plan_for(make_tfjob("t").worker(2).obj())
    assert p.skip_reason == "unplannable" and p.create_pods == []
    assert p.status is not None
    failed = [c for c in p.status["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "TFJobFailedValidation"
    assert failed[0]["message"] == "t cannot be planned: TypeError: 'int' object is not iterable"


def test_renaming_master_to_chief_never_runs_both_coordinators() -> None:
    """Master renamed to Chief: master-0 is deleted first; chief-0 is created only once
    master-0 is gone (not merely terminating)."""
    old = make_tfjob("t").master().worker(1).obj()
    master = make_pod(old, "Master", 0).running().obj()
    worker = make_pod(old, "Worker", 0).running().obj()
    new = make_tfjob("t").chief().worker(1).obj()

    first = plan_for(new, [master, worker])
    assert [p["metadata"]["name"] for p in first.delete_pods] == ["t-master-0"]
    assert [p["metadata"]["name"] for p in first.create_pods] == []

    terminating = {
        **master,
        "metadata": {**master["metadata"], "deletionTimestamp": "2024-01-01T00:00:09Z"},
    }
    second = plan_for(new, [terminating, worker])
    assert second.create_pods == [] and second.delete_pods == []

    third = plan_for(new, [worker])
    assert [p["metadata"]["name"] for p in third.create_pods] == ["t-chief-0"]
