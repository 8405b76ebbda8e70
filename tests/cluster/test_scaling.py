"""Replicas scaled down and up again before the scaled-down pods are gone (issue 29):
the controller's own deletions are not disruptions, and a whole-gang job keeps its
healthy gang."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    PodHistory,
    live,
    wait_for,
    wait_running,
)
from tests.cluster.policy_helpers import HOLD, TEMPLATE, let_go, make_job, release_held, rs, settled
from tests.conftest import Cluster

RETIRED = "training.kubeflow.org/retired"


def _scale(kube: Kube, ns: str, name: str, replicas: int) -> None:
    kube.patch_tfjob(ns, name, {"spec": {"tfReplicaSpecs": {"Worker": {"replicas": replicas}}}})


@pytest.mark.local_only  # kwok pods held in their grace period on the test's say
@pytest.mark.parametrize("whole_gang", [False, True], ids=["per-pod", "whole-gang"])
def test_scaling_down_and_straight_back_up_counts_no_disruption(
    controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str, whole_gang: bool
) -> None:
    job = make_job("scale", workers=(3, "OnFailure"))
    # The pods stay in their grace period until the test lets them go (kwok stage).
    template: dict[str, Any] = {"metadata": {"annotations": {HOLD: "true"}}, **TEMPLATE}
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"] = template
    if whole_gang:
        job["metadata"]["annotations"] = {"training.kubeflow.org/gang-restart": "true"}
    name = kube.create_tfjob(namespace, job)["metadata"]["name"]
    try:
        _scale_down_and_up(controller, kube, cluster, namespace, name)
    finally:
        release_held(kube, namespace)


def _scale_down_and_up(
    controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str, name: str
) -> None:
    with PodHistory(cluster, namespace) as history:
        pods = wait_running(kube, namespace, name, 3)
        first = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
        _scale(kube, namespace, name, 1)
        retiring = [f"{name}-worker-1", f"{name}-worker-2"]

        def retired() -> bool:
            got = [kube.pod(namespace, n) for n in retiring]
            return all(
                p is not None and not live(p) and RETIRED in p["metadata"].get("annotations", {})
                for p in got
            )

        wait_for(retired, 30, "the scaled-down pods deleted and marked by the controller")
        _scale(kube, namespace, name, 3)
        settled(kube, controller, namespace, name)
        # their names are still taken: nothing is created for them yet
        assert {p["metadata"]["uid"] for p in kube.pods(namespace, name)} == set(first.values())
        for pod_name in retiring:  # the kubelet ends them (137) and they go
            let_go(kube, namespace, pod_name)

        def replaced() -> list[dict[str, Any]] | None:
            now = kube.pods(namespace, name)
            uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in now}
            fresh = all(uids.get(n) not in (None, first[n]) for n in retiring)
            running = all(live(p) and p["status"].get("phase") == "Running" for p in now)
            return now if fresh and running and len(now) == 3 else None

        wait_for(replaced, 60, "worker 1 and 2 back, new pods, running")
        settled(kube, controller, namespace, name)
    got = kube.tfjob(namespace, name)
    assert rs(got, "Worker")["disruptions"] == 0 and rs(got, "Worker")["restarts"] == 0
    assert (got or {})["status"].get("gangEpoch", 0) == 0
    survivor = f"{name}-worker-0"
    assert kube.pod(namespace, survivor)["metadata"]["uid"] == first[survivor]  # type: ignore[index]
    assert not [e for e in history.events if e[1] == survivor and e[0] == "DELETED"]
    assert history.violations == []
