"""TF_CONFIG as real TensorFlow reads it (`make e2e-tf`): every task's own value goes
through TFConfigClusterResolver and the cluster validation of tf.distribute's strategies
(tests/tf/programs/tf_config_check.py), and so do upstream's variants of it, which
TensorFlow refuses: evaluators in the cluster, `"ps":null`, the `master` key
(docs/semantics.md#tf_config)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.cluster.kube import ControllerProcess, Kube, wait_for
from tests.cluster.tf_workloads import (
    programs_configmap,
    progress,
    tf_job,
    tf_template,
    wait_finished,
)
from tests.conftest import Cluster

pytestmark = [pytest.mark.local_only, pytest.mark.tf]


def verdicts(kube: Kube, cluster: Cluster, ns: str, job: str) -> dict[str, list[dict[str, Any]]]:
    """Each pod's lines, once every pod of the job has run the check to its end."""

    def ended() -> list[dict[str, Any]] | None:
        pods = kube.pods(ns, job)
        done = all((p.get("status") or {}).get("phase") == "Succeeded" for p in pods)
        return pods if pods and done else None

    pods = wait_for(ended, 120, f"{job}'s pods Succeeded")
    return {p["metadata"]["name"]: progress(cluster, ns, p["metadata"]["name"]) for p in pods}


def test_every_task_of_a_full_job_passes_tensorflows_validation(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    programs_configmap(kube, ns)
    check = tf_template(
        "tf_config_check.py", "--variants", "evaluators,master", "--evaluators", "2"
    )
    job = tf_job(
        "tfc",
        {
            rt: (n, "Never", check)
            for rt, n in [("Chief", 1), ("PS", 1), ("Worker", 2), ("Evaluator", 2)]
        },
        runPolicy={"cleanPodPolicy": "None"},
    )
    kube.create_tfjob(ns, job)
    wait_finished(kube, ns, "tfc", "Succeeded", timeout=180)
    seen = verdicts(kube, cluster, ns, "tfc")
    assert len(seen) == 6
    for pod, lines in seen.items():
        by = {x.get("name", x["event"]): x for x in lines}
        own = by["own"]
        # ours: accepted, and no task's cluster names an evaluator
        assert own["error"] is None, (pod, own)
        assert own["jobs"] == ["chief", "ps", "worker"], (pod, own)
        assert "evaluator" not in own["tf_config"]["cluster"]
        assert own["tf_config"]["environment"] == "cloud"
        # upstream's: two evaluators in the cluster fail every task's validation
        assert "at most one 'evaluator'" in (by["evaluators"]["error"] or ""), (pod, by)
        # and the master key is not a task type TensorFlow 2's strategies know
        assert "Disallowed task type" in (by["master"]["error"] or ""), (pod, by)


def test_a_dynamic_worker_job_without_ps_parses(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    programs_configmap(kube, ns)
    # each worker sees itself alone and starts a server with that (the sparse form)
    check = tf_template("tf_config_check.py", "--variants", "ps-null", "--use", "server")
    job = tf_job("tfd", {"Worker": (2, "Never", check)}, enableDynamicWorker=True)
    kube.create_tfjob(ns, job)
    seen = verdicts(kube, cluster, ns, "tfd")
    for pod, lines in seen.items():
        by = {x.get("name", x["event"]): x for x in lines}
        assert by["own"]["error"] is None, (pod, by["own"])
        assert by["own"]["tf_config"]["cluster"]["ps"] == []
        assert (by["ps-null"]["error"] or "").startswith("TypeError"), (pod, by)
