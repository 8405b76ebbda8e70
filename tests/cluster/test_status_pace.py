"""``--status-pace`` reaches the controller's pacing: with a long pace, a job's Running
condition (progress, paced) is written no sooner than the pace after its Created
(the job's first status write), where the default writes it as soon as the pods run."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tests.cluster.kube import ControllerProcess, Kube, condition, wait_running
from tests.cluster.policy_helpers import make_job
from tests.conftest import Cluster

PACE = 6


def at(job: dict[str, Any] | None, type_: str) -> datetime:
    cond = condition(job, type_)
    assert cond is not None, f"no {type_} condition"
    return datetime.fromisoformat(str(cond["lastTransitionTime"]).replace("Z", "+00:00"))


def test_a_long_status_pace_holds_progress_back(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    controller.stop()  # only the paced controller acts
    paced = ControllerProcess(
        cluster, f"--status-pace={PACE}", f"--namespace={namespace}", log_name="paced"
    )
    try:
        paced.start()
        kube.create_tfjob(namespace, make_job("paced", chief="Never", workers=(2, "Never")))
        wait_running(kube, namespace, "paced", 3, timeout=PACE + 60)
        job = kube.tfjob(namespace, "paced")
        # whole seconds on both: a pace of 6 s is at least 5 apart
        waited = (at(job, "Running") - at(job, "Created")).total_seconds()
        assert waited >= PACE - 1, f"Running written {waited} s after Created"
        assert paced.proc is not None and paced.proc.poll() is None
    finally:
        code = paced.stop()
        controller.start()  # the tests after this one need it
    assert code == 0
