"""MultiWorkerMirroredStrategy with real TensorFlow on the real node (`make e2e-tf`):
tf.distribute accepts the TF_CONFIG the controller writes, the workers find each other
through the headless services it names, train in sync, and the job Succeeds by the
upstream rule. The training programs are tests/tf/programs/. The two-worker job is the
short version `make test` runs (marker tf_quick); `make e2e-tf` runs both."""

from __future__ import annotations

from typing import Any

import pytest
from kubeflow.training import TrainingClient

from tests.cluster.kube import ControllerProcess, Kube
from tests.cluster.policy_helpers import rs
from tests.cluster.tf_workloads import (
    ProgressHistory,
    epoch_losses,
    programs_configmap,
    progress,
    progress_of,
    tf_job,
    tf_template,
    timed_progress,
    wait_finished,
)
from tests.conftest import Cluster

pytestmark = [pytest.mark.local_only]

EPOCHS = 3
FIT = tf_template("mwms_fit.py", "--epochs", str(EPOCHS), "--steps-per-epoch", "20")


def assert_trained_in_sync(cluster: Cluster, ns: str, pods: list[str], replicas: int) -> None:
    """Every task saw ``replicas`` in sync, trained every epoch, and the loss fell; the
    tasks of one synchronous job report the same losses (one all-reduced model)."""
    losses = []
    for pod in pods:
        lines = progress(cluster, ns, pod)
        assert lines, f"{pod} printed no progress"
        assert {x["replicas_in_sync"] for x in lines} == {replicas}, (pod, lines)
        assert lines[0]["event"] == "start" and lines[0]["initial_epoch"] == 0
        assert lines[-1]["event"] == "done"
        per_epoch = epoch_losses(lines)
        assert len(per_epoch) == EPOCHS and per_epoch[-1] < per_epoch[0], (pod, per_epoch)
        losses.append(per_epoch)
    assert all(loss == pytest.approx(losses[0], rel=1e-4) for loss in losses), losses


#: the reporting helper's interval (its default), and the test controller's pace of
#: progress-only status writes (tests/cluster/progress_endpoint.py)
REPORT_INTERVAL, STATUS_PACE = 5.0, 1.0


def assert_progress_shown(
    cluster: Cluster, ns: str, name: str, history: ProgressHistory, done: dict[str, Any]
) -> None:
    """The tf_keras callback's reports: each epoch worker 0's log printed was in the
    job's status within one reporting interval (plus the write's pace), and the end
    shows the last step, epoch and loss, as `kubectl get tfjob` does."""
    logged = [
        x for x in timed_progress(cluster, ns, f"{name}-worker-0") if x[1]["event"] == "epoch"
    ]
    assert len(logged) == EPOCHS
    for at, line in logged:
        seen_at, _ = history.first(lambda p, e=line["epoch"]: (p.get("epoch") or 0) >= e)
        lag = (seen_at - at).total_seconds()
        assert lag <= REPORT_INTERVAL + STATUS_PACE + 1.0, (line, lag)
    final = done["status"]["trainingProgress"]
    last = logged[-1][1]
    assert (final["reporter"], final["epoch"], final["totalEpochs"]) == ("worker-0", EPOCHS, EPOCHS)
    assert (final["step"], final["totalSteps"], final["percent"]) == (
        last["step"],
        last["step"],
        100,
    )
    assert final["metrics"]["loss"] == pytest.approx(last["loss"], rel=1e-4)
    workers = final["replicas"]["Worker"]
    assert workers["reporting"] == 2 and workers["minStep"] == workers["maxStep"] == last["step"]
    wide = cluster.kubectl("get", "tfjob", name, "-n", ns, "-o", "wide")
    head, row = wide.splitlines()[:2]
    columns = dict(zip(head.split(), row.split(), strict=False))
    assert (columns["PROGRESS"], columns["EPOCH"], columns["STEP"]) == (
        "100",
        str(EPOCHS),
        str(last["step"]),
    )


@pytest.mark.tf_quick
def test_workers_only(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    ns = namespace
    programs_configmap(kube, ns)
    with ProgressHistory(cluster, ns, "mwms") as history:
        kube.create_tfjob(ns, tf_job("mwms", {"Worker": (2, "Never", FIT)}))
        done = wait_finished(kube, ns, "mwms", "Succeeded", timeout=300)
    assert rs(done, "Worker")["succeeded"] >= 1  # worker 0 decides (upstream)
    pods = ["mwms-worker-0", "mwms-worker-1"]
    assert all(p["spec"]["nodeName"] == tf_node for p in kube.pods(ns, "mwms"))
    assert_trained_in_sync(cluster, ns, pods, replicas=2)
    assert_progress_shown(cluster, ns, "mwms", history, done)

    # The SDK reads the same logs.
    tc = TrainingClient(config_file=cluster.kubeconfig, namespace=ns, job_kind="TFJob")
    got, _ = tc.get_job_logs("mwms", is_master=False)
    assert sorted(got) == pods
    assert all(progress_of(text)[-1]["event"] == "done" for text in got.values())


@pytest.mark.tf
def test_chief_and_workers(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """The chief is a replica of the synchronous group (3 in sync), and its success is the
    job's."""
    ns = namespace
    programs_configmap(kube, ns)
    job = tf_job("mwmsc", {"Chief": (1, "Never", FIT), "Worker": (2, "Never", FIT)})
    kube.create_tfjob(ns, job)
    done = wait_finished(kube, ns, "mwmsc", "Succeeded", timeout=300)
    assert rs(done, "Chief")["succeeded"] == 1
    assert_trained_in_sync(cluster, ns, ["mwmsc-chief-0", "mwmsc-worker-0", "mwmsc-worker-1"], 3)


@pytest.mark.tf
def test_custom_training_loop(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """No Model.fit: the steps written out (strategy.run, gradients all-reduced by the
    optimizer), over the same TF_CONFIG: both workers step together and agree."""
    ns = namespace
    programs_configmap(kube, ns)
    loop = tf_template("mwms_loop.py", "--epochs", str(EPOCHS), "--steps-per-epoch", "20")
    kube.create_tfjob(ns, tf_job("mwmsl", {"Worker": (2, "Never", loop)}))
    wait_finished(kube, ns, "mwmsl", "Succeeded", timeout=300)
    assert_trained_in_sync(cluster, ns, ["mwmsl-worker-0", "mwmsl-worker-1"], replicas=2)
