"""Both event loops run the controller against the real apiserver: the gated asyncio loop
under a client-side rate limit (every other cluster test's controller), uvloop without
one (--kube-api-qps 0, as the unlimited benchmarks run it)."""

from __future__ import annotations

import json

import pytest

from tests.cluster.kube import ControllerProcess, Kube, wait_job, wait_running
from tests.cluster.policy_helpers import make_job
from tests.conftest import Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only


def _loop(controller: ControllerProcess) -> tuple[str, float]:
    for line in controller.log_text().splitlines():
        if '"starting"' in line:
            started = json.loads(line)
            return started["event_loop"], started["wake_gate"]
    raise AssertionError("no starting line")


def test_a_job_runs_to_success_on_uvloop_without_a_rate_limit(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    assert _loop(controller) == ("asyncio", 0.05)
    controller.stop()
    unlimited = ControllerProcess(cluster, "--kube-api-qps=0", log_name="tfjob-controller-uvloop")
    try:
        unlimited.start()
        assert _loop(unlimited) == ("uvloop", 0.0)
        name = kube.create_tfjob(
            namespace, make_job("uvloop", chief="Never", workers=(2, "Never"))
        )["metadata"]["name"]
        wait_running(kube, namespace, name, 3, timeout=60)
        kube.exit_pod(namespace, f"{name}-chief-0", 0)
        wait_job(kube, namespace, name, "Succeeded", timeout=60)
        assert unlimited.stop() == 0
    finally:
        unlimited.stop()
        controller.start()
