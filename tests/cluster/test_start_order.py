"""A new leader acts first on the jobs that wait for it.

A controller starting (or taking over) finds every job of the cluster in its informers'
first list, in the apiserver's order (by name). Jobs whose own object says they run or
have finished go to the queue's low lane, with every child found; a job submitted while
no controller led is reconciled before them, however many there are and wherever its
name sorts. One worker thread makes the order the order of the passes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.cluster.kube import ControllerProcess, Kube, in_place_of, is_true, wait_for
from tests.conftest import Cluster

#: needs kwok pods that exit on the test's say
pytestmark = pytest.mark.local_only

RUNNING, FINISHED = 24, 8


def one_worker(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": {
            "tfReplicaSpecs": {
                "Worker": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "spec": {"containers": [{"name": "tensorflow", "image": "tf:local"}]}
                    },
                }
            }
        },
    }


def reconciled_keys(proc: ControllerProcess) -> list[str]:
    keys = []
    for line in proc.log_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("event") == "reconciled":
            keys.append(entry["key"])
    return keys


def test_a_job_submitted_while_no_controller_led_is_reconciled_first(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> None:
    own = ControllerProcess(
        cluster, f"--namespace={namespace}", "--controller-threads=1", log_name="start-order"
    )
    names = [f"a-{i:02d}" for i in range(RUNNING + FINISHED)]
    with in_place_of(controller, own, kube):
        for name in names:
            kube.create_tfjob(namespace, one_worker(name))
        wait_for(
            lambda: all(is_true(kube.tfjob(namespace, n), "Running") for n in names),
            120,
            "every job Running",
        )
        for name in names[RUNNING:]:
            kube.exit_pod(namespace, f"{name}-worker-0", 0)
        wait_for(
            lambda: all(is_true(kube.tfjob(namespace, n), "Succeeded") for n in names[RUNNING:]),
            60,
            "the finished jobs Succeeded",
        )
        own.stop()
        # sorts last: the first list hands it to the controller after every other job
        kube.create_tfjob(namespace, one_worker("zz-new"))
        own.start()
        wait_for(
            lambda: is_true(kube.tfjob(namespace, "zz-new"), "Running"), 60, "the new job Running"
        )
        wait_for(
            lambda: len(set(reconciled_keys(own))) > len(names),
            60,
            "every job reconciled once",
        )
        keys = reconciled_keys(own)
    assert keys[0] == f"{namespace}/zz-new", keys[:5]
    assert set(keys) == {f"{namespace}/{n}" for n in [*names, "zz-new"]}
