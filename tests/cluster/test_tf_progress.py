"""Training progress from Keras 3 with real TensorFlow on the real node (`make e2e-tf`):
the reporting helper's callback built on Keras 3's Callback class reports a single
replica's fit, and the job's status shows what its log printed. (tf_keras under
MultiWorkerMirroredStrategy: test_tf_mwms.py; the ParameterServerStrategy chief:
test_tf_ps.py.)"""

from __future__ import annotations

import pytest

from tests.cluster.kube import ControllerProcess, Kube
from tests.cluster.tf_workloads import (
    epoch_losses,
    programs_configmap,
    progress,
    tf_job,
    tf_template,
    wait_finished,
)
from tests.conftest import Cluster

pytestmark = [pytest.mark.local_only, pytest.mark.tf]

EPOCHS, STEPS = 3, 20


def test_keras3_fit_reports_its_progress(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    programs_configmap(kube, ns)
    fit = tf_template("keras3_fit.py", "--epochs", str(EPOCHS), "--steps-per-epoch", str(STEPS))
    kube.create_tfjob(ns, tf_job("k3", {"Worker": (1, "Never", fit)}))
    done = wait_finished(kube, ns, "k3", "Succeeded", timeout=300)
    lines = progress(cluster, ns, "k3-worker-0")
    assert lines[-1]["event"] == "done", lines
    assert lines[0]["keras"].startswith("3."), lines[0]
    losses = epoch_losses(lines)
    assert len(losses) == EPOCHS and losses[-1] < losses[0], losses
    final = done["status"]["trainingProgress"]
    assert (final["reporter"], final["epoch"], final["totalEpochs"]) == ("worker-0", EPOCHS, EPOCHS)
    assert (final["step"], final["totalSteps"], final["percent"]) == (
        EPOCHS * STEPS,
        EPOCHS * STEPS,
        100,
    )
    assert final["metrics"]["loss"] == pytest.approx(losses[-1], rel=1e-4)
    assert final["replicas"]["Worker"]["replicas"][0]["node"] == tf_node
