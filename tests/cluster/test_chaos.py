"""Chaos: 20 random pod kills across 5 running jobs with mixed policies.

The kills come from a seeded RNG and are planned up front; a small model of the run
policies says what each kill must do (a disruption, a counted retry, the end of the job),
so the final state of every job is asserted exactly. A container killed (exit 137) under
OnFailure or Always is restarted in place by kwok, as by a kubelet: a retry counted from
the pod's restartCount, no new pod. A kill waits only until its target
pod is running (never for the whole job to recover), so retries, replacements and kills
of other jobs overlap; PodHistory checks throughout that no index ever has two live pods.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from reconcile.api.status_types import parse_indexes
from reconcile.objects.pods import restart_count
from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    PodHistory,
    is_true,
    live,
    wait_for,
    wait_job,
    wait_running,
)
from tests.cluster.policy_helpers import (
    cond_of,
    make_job,
    parse_ts,
    rs,
    settled,
    svc_names,
)
from tests.conftest import Cluster

#: needs kwok pods killed and exited on the test's say
pytestmark = pytest.mark.local_only

SEED = 20240601
KILLS = 20
DELETE, SIGKILL = "delete", "sigkill"  # deleted by someone else / exit code 137


@dataclass
class Model:
    """One job, its policies, and what the kills so far must have done to it."""

    name: str
    body: dict[str, Any]
    backoff_limit: int | None = None
    restarts: dict[str, int] = field(default_factory=dict)
    disruptions: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    #: pods the controller must make in place of ended ones: every disruption, and every
    #: retry under ExitCode (OnFailure and Always restart in place)
    replaced: int = 0
    outcome: tuple[str, str] | None = None  # (condition type, message) once decided

    @property
    def specs(self) -> dict[str, Any]:
        return dict(self.body["spec"]["tfReplicaSpecs"])

    def slots(self) -> list[tuple[str, int]]:
        return [(rt, i) for rt, s in sorted(self.specs.items()) for i in range(s["replicas"])]

    def pods(self) -> int:
        return len(self.slots())

    def kill(self, rtype: str, kind: str, ns: str) -> None:
        if kind == DELETE:
            self.disruptions[rtype] = self.disruptions.get(rtype, 0) + 1
            self.replaced += 1
            return
        if self.specs[rtype]["restartPolicy"] == "Never":
            self.failed[rtype] = 1
            self.outcome = (
                "Failed",
                f"TFJob {ns}/{self.name} has failed because 1 {rtype} replica(s) failed.",
            )
            return
        self.restarts[rtype] = self.restarts.get(rtype, 0) + 1
        if self.specs[rtype]["restartPolicy"] == "ExitCode":
            self.replaced += 1
        if self.backoff_limit is not None and sum(self.restarts.values()) > self.backoff_limit:
            self.outcome = (
                "Failed",
                f"Job {self.name} has failed because it has reached the specified backoff limit",
            )


def jobs() -> list[Model]:
    def model(name: str, backoff_limit: int | None = None, **kw: Any) -> Model:
        rp = {"backoffLimit": backoff_limit} if backoff_limit is not None else None
        return Model(name, make_job(name, run_policy=rp, **kw), backoff_limit)

    return [
        model("onf", chief="Never", workers=(3, "OnFailure")),
        model("exc", workers=(3, "ExitCode")),
        model("nev", chief="Never", ps=(1, "Never"), workers=(2, "Never")),
        model("lim", chief="Never", workers=(2, "ExitCode"), backoff_limit=1),
        model("alw", chief="OnFailure", ps=(1, "Always"), workers=(2, "Always"), backoff_limit=3),
    ]


def run_of(pod: dict[str, Any]) -> tuple[str, int]:
    """One run of a pod's program: a pod restarted in place runs it again."""
    return pod["metadata"]["uid"], restart_count(pod)


def target(
    kube: Kube, ns: str, m: Model, rtype: str, index: int, killed: set[tuple[str, int]]
) -> dict[str, Any] | None:
    """The pod at (rtype, index) once it is a fair target: running, this run of it not
    killed before, and known to the controller — the earlier kills of its type are accounted and the status
    lists the index as active. (A pod removed before the controller ever saw it running
    cannot be told from one that never existed; see docs/semantics.md#run-policies.)"""
    pod = kube.pod(ns, f"{m.name}-{rtype.lower()}-{index}")
    if not pod or not live(pod) or pod["status"].get("phase") != "Running":
        return None
    if run_of(pod) in killed:
        return None
    job = kube.tfjob(ns, m.name)
    got = rs(job, rtype)
    if (got["restarts"], got["disruptions"]) != (
        m.restarts.get(rtype, 0),
        m.disruptions.get(rtype, 0),
    ):
        return None
    status = ((job or {}).get("status") or {}).get("replicaStatuses", {}).get(rtype, {})
    if index not in parse_indexes(status.get("activeIndexes", "")):
        return None
    return pod


def only_finished_left(kube: Kube, ns: str, job: str) -> bool:
    """Every pod left of the job has finished, and the services are exactly theirs."""
    pods = kube.pods(ns, job)
    finished = all((p.get("status") or {}).get("phase") in ("Succeeded", "Failed") for p in pods)
    return finished and svc_names(kube, ns, job) == sorted(p["metadata"]["name"] for p in pods)


def test_random_pod_kills_every_job_reaches_its_policy_outcome(
    controller: ControllerProcess, kube: Kube, namespace: str, cluster: Cluster
) -> None:
    ns = namespace
    rng = random.Random(SEED)
    models = jobs()
    plan = [
        (rng.randrange(len(models)), rng.random(), rng.choice([DELETE, SIGKILL]))
        for _ in range(KILLS)
    ]
    killed: set[tuple[str, int]] = set()
    applied = 0
    with PodHistory(cluster, ns) as history:
        for m in models:
            kube.create_tfjob(ns, m.body)
        for m in models:
            wait_running(kube, ns, m.name, m.pods())

        for job_i, pick, kind in plan:
            m = models[job_i]
            if m.outcome is not None:
                continue  # the job already ended by its policy: nothing left to kill
            rtype, index = m.slots()[int(pick * m.pods())]
            pod_name = f"{m.name}-{rtype.lower()}-{index}"
            pod = wait_for(
                lambda: target(kube, ns, m, rtype, index, killed),  # noqa: B023 (called now)
                30,
                f"{pod_name} running and known",
            )
            killed.add(run_of(pod))
            if kind == DELETE:
                kube.delete_pod(ns, pod_name)
            else:
                kube.exit_pod(ns, pod_name, 137)
            m.kill(rtype, kind, ns)
            applied += 1

        # The jobs that survived their kills recover fully, then their chief (or worker 0)
        # finishes: Succeeded.
        for m in models:
            if m.outcome is None:
                wait_running(kube, ns, m.name, m.pods(), timeout=60)
                decider = "chief" if "Chief" in m.specs else "worker"
                kube.exit_pod(ns, f"{m.name}-{decider}-0", 0)
                m.outcome = ("Succeeded", f"TFJob {ns}/{m.name} successfully completed.")
        finals = {m.name: wait_job(kube, ns, m.name, m.outcome[0]) for m in models if m.outcome}
        for m in models:
            settled(kube, controller, ns, m.name)

    assert applied >= 10, applied  # the seed spreads the kills; most land
    assert history.violations == []
    outcomes = {m.name: m.outcome[0] for m in models if m.outcome}
    # The seed gives each policy something to do; pin it so a changed seed is noticed.
    assert outcomes == {
        "onf": "Succeeded",
        "exc": "Succeeded",
        "nev": "Failed",
        "lim": "Failed",
        "alw": "Succeeded",
    }, outcomes
    for m in models:
        job = kube.tfjob(ns, m.name)
        assert job is not None
        assert m.outcome is not None
        ctype, message = m.outcome
        reason = "TFJobSucceeded" if ctype == "Succeeded" else "TFJobFailed"
        assert cond_of(job, ctype) == ("True", reason, message), m.name
        assert job["status"] == finals[m.name]["status"], f"{m.name}: status moved after the end"
        assert not is_true(job, "Running"), m.name
        if ctype == "Succeeded":
            # Fully recovered before the end: Running replaced Restarting, then went False.
            assert cond_of(job, "Running")[:2] == ("False", "TFJobRunning"), m.name  # type: ignore[index]
            assert cond_of(job, "Restarting") is None, m.name
        for rtype, spec in m.specs.items():
            got = rs(job, rtype)
            want = (
                m.restarts.get(rtype, 0),
                m.disruptions.get(rtype, 0),
                m.failed.get(rtype, 0),
            )
            assert (got["restarts"], got["disruptions"], got["failed"]) == want, (m.name, rtype)
            if ctype == "Succeeded":
                # Everything ran at the end; the finished bookkeeping moves active into
                # succeeded.
                assert (got["active"], got["succeeded"]) == (0, spec["replicas"]), m.name
        status = job["status"]
        started, completed = parse_ts(status["startTime"]), parse_ts(status["completionTime"])
        assert started <= completed
        terminal = next(c for c in status["conditions"] if c["type"] == ctype)
        assert parse_ts(terminal["lastTransitionTime"]) == completed
        if ctype == "Succeeded":
            # cleanPodPolicy None: every service stays, one per index.
            assert svc_names(kube, ns, m.name) == sorted(
                f"{m.name}-{rt.lower()}-{i}" for rt, i in m.slots()
            )
        else:
            # A failed job's active pods are stopped; its finished ones stay, each with
            # its service (docs/semantics.md#run-policies).
            wait_for(lambda m=m: only_finished_left(kube, ns, m.name), 20, f"{m.name} stopped")
    # A new pod for each kill that had to be replaced (a disruption, an ExitCode retry),
    # and none for a container restarted in place. A job that failed may have ended
    # before its last replacements were due, so there it is an upper bound.
    added: dict[str, int] = {}
    for t, name, _ in history.events:
        if t == "ADDED":
            job_name = name.split("-")[0]
            added[job_name] = added.get(job_name, 0) + 1
    for m in models:
        if m.outcome and m.outcome[0] == "Succeeded":
            assert added[m.name] == m.pods() + m.replaced, m.name
        else:
            assert m.pods() <= added[m.name] <= m.pods() + m.replaced, m.name
