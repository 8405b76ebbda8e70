"""ParameterServerStrategy with real TensorFlow on the real node (`make e2e-tf`): the
chief coordinates, the ps and worker tasks serve, the job Succeeds when the chief
finishes (the upstream rule), and an evaluator reads the chief's checkpoints beside it
without joining the training cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cluster.kube import ControllerProcess, Kube
from tests.cluster.policy_helpers import rs
from tests.cluster.tf_workloads import (
    epoch_losses,
    programs_configmap,
    progress,
    tf_job,
    tf_template,
    wait_finished,
    wait_progress,
    with_backup,
)
from tests.conftest import Cluster

pytestmark = [pytest.mark.local_only, pytest.mark.tf]

EPOCHS = 4


def test_chief_coordinates_and_the_evaluator_follows(
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    ns = namespace
    programs_configmap(kube, ns)
    # The ps tasks hold the variables and write their shards of each checkpoint
    # themselves, to the path the chief names: every task mounts the directory.
    ps = with_backup(
        tf_template("ps_fit.py", "--epochs", str(EPOCHS), "--steps-per-epoch", "20"), host_dir
    )
    chief = with_backup(
        tf_template(
            "ps_fit.py", "--epochs", str(EPOCHS), "--steps-per-epoch", "20",
            "--checkpoint-dir", "/backup",
        ),
        host_dir,
    )  # fmt: skip
    evaluator = with_backup(
        tf_template("evaluator.py", "--epochs", str(EPOCHS), "--checkpoint-dir", "/backup"),
        host_dir,
    )
    job = tf_job(
        "pst",
        {
            "Chief": (1, "Never", chief),
            "PS": (1, "Never", ps),
            "Worker": (2, "Never", ps),
            "Evaluator": (1, "Never", evaluator),
        },
    )
    kube.create_tfjob(ns, job)
    done = wait_finished(kube, ns, "pst", "Succeeded", timeout=300)
    assert rs(done, "Chief")["succeeded"] == 1
    lines = progress(cluster, ns, "pst-chief-0")
    assert lines[-1]["event"] == "done" and lines[-1]["workers"] == 2, lines
    losses = epoch_losses(lines)
    assert len(losses) == EPOCHS and losses[-1] < losses[0], losses
    for rtype, count in (("ps", 1), ("worker", 2)):
        for i in range(count):
            served = progress(cluster, ns, f"pst-{rtype}-{i}")
            assert served and served[0]["event"] == "serving", (rtype, i, served)
    # The evaluator saw every epoch's checkpoint, and the model got better on data
    # training never saw.
    seen = wait_progress(cluster, ns, "pst-evaluator-0", lambda x: x.get("event") == "done", 120)
    evals = [x for x in seen if x.get("event") == "evaluation"]
    assert [x["epoch"] for x in evals][-1] == EPOCHS
    assert evals[-1]["eval_loss"] < evals[0]["eval_loss"], evals
