"""ParameterServerStrategy with real TensorFlow on the real node (`make e2e-tf`): the
chief coordinates, the ps and worker tasks serve, the job Succeeds when the chief
finishes (the upstream rule), and an evaluator reads the chief's checkpoints beside it
without joining the training cluster."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reconcile.api.names import GANG_RESTART_ANNOTATION
from tests.cluster.kube import ControllerProcess, Kube
from tests.cluster.policy_helpers import rs
from tests.cluster.test_real_node import _container_pid, container_status
from tests.cluster.test_tf_gang_restart import failed_after_peer
from tests.cluster.tf_workloads import (
    epoch_losses,
    parse_rfc3339,
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
LONG_EPOCHS = 8


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
    # The coordinator reports the job's progress (docs/progress.md): the chief's figures
    final = done["status"]["trainingProgress"]
    assert (final["reporter"], final["epoch"], final["percent"]) == ("chief-0", EPOCHS, 100)
    last_epoch = [x for x in lines if x["event"] == "epoch"][-1]
    assert final["step"] == last_epoch["step"] and set(final["replicas"]) == {"Chief"}
    assert final["metrics"]["loss"] == pytest.approx(losses[-1], rel=1e-4)
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


def ps_job(
    name: str, host_dir: Path, *, gang_restart: bool = False, policy: str = "ExitCode"
) -> dict[str, Any]:
    """Chief, one ps and two workers under ``policy``, long enough to be hit mid-training;
    the chief backs up each epoch (BackupAndRestore) in a directory every task mounts."""
    args = ("--epochs", str(LONG_EPOCHS), "--steps-per-epoch", "30")
    chief = with_backup(
        tf_template("ps_fit.py", *args, "--backup-dir", f"/backup/{name}"), host_dir
    )
    server = with_backup(tf_template("ps_fit.py", *args), host_dir)
    job = tf_job(
        name,
        {
            "Chief": (1, policy, chief),
            "PS": (1, policy, server),
            "Worker": (2, policy, server),
        },
    )
    if gang_restart:
        job["metadata"]["annotations"] = {GANG_RESTART_ANNOTATION: "true"}
    return job


def kill_when_chief_reaches(
    cluster: Cluster, ns: str, job: str, victim: str, epoch: int
) -> datetime:
    """SIGKILL ``victim``'s process once the chief has finished ``epoch`` epochs; when."""
    wait_progress(
        cluster,
        ns,
        f"{job}-chief-0",
        lambda x: x.get("event") == "epoch" and x["epoch"] >= epoch,
        240,
    )
    os.kill(_container_pid(cluster, ns, victim), signal.SIGKILL)
    return datetime.now(UTC)


def test_a_killed_worker_is_replaced_and_the_coordinator_carries_on(
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    """ParameterServerStrategy tolerates a lost worker: the coordinator schedules its
    steps on the other one and takes the replacement back when it serves again."""
    ns = namespace
    programs_configmap(kube, ns)
    kube.create_tfjob(ns, ps_job("psw", host_dir))
    kill_when_chief_reaches(cluster, ns, "psw", "psw-worker-1", epoch=2)
    done = wait_finished(kube, ns, "psw", "Succeeded", timeout=360)
    assert rs(done, "Worker")["restarts"] == 1  # 137: retried under ExitCode
    lines = progress(cluster, ns, "psw-chief-0")
    assert lines[-1]["event"] == "done", lines
    assert len(epoch_losses(lines)) == LONG_EPOCHS  # one run of the coordinator, whole


@pytest.mark.parametrize(
    ("policy", "gang_restart"), [("ExitCode", False), ("ExitCode", True), ("OnFailure", False)]
)
def test_a_killed_ps_takes_the_coordinator_down(
    policy: str,
    gang_restart: bool,
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    """A lost ps is not tolerated: the coordinator fails (exit 1) seconds after it. Under
    ExitCode alone that fails the job, with the FailedAfterPeerEnd event saying why;
    with whole-gang restart the chief's exit 1 is collateral, every task starts again
    and the coordinator resumes from its last backup. Under OnFailure the kubelet
    restarts the ps and the chief in place, and the chief resumes from its backup."""
    ns, name = namespace, {"ExitCode": "psg" if gang_restart else "psp"}.get(policy, "pso")
    programs_configmap(kube, ns)
    kube.create_tfjob(ns, ps_job(name, host_dir, gang_restart=gang_restart, policy=policy))
    killed = kill_when_chief_reaches(cluster, ns, name, f"{name}-ps-0", epoch=2)
    if policy == "OnFailure":
        done = wait_finished(kube, ns, name, "Succeeded", timeout=420)
        assert rs(done, "PS")["restarts"] >= 1 and rs(done, "Chief")["restarts"] >= 1, done
        # the chief's container started again: its log now is the second run's
        lines = progress(cluster, ns, f"{name}-chief-0")
        assert lines[0]["event"] == "start" and lines[0]["initial_epoch"] >= 2, lines[0]
        assert lines[-1]["event"] == "done"
        return
    if not gang_restart:
        failed = wait_finished(kube, ns, name, "Failed", timeout=180)
        chief = container_status(kube.pod(ns, f"{name}-chief-0") or {})
        assert chief["state"]["terminated"]["exitCode"] == 1
        ended = parse_rfc3339(chief["state"]["terminated"]["finishedAt"])
        print(f"the coordinator failed {(ended - killed).total_seconds():.0f}s after the ps kill")
        assert rs(failed, "Chief")["failed"] == 1
        said = failed_after_peer(kube, ns, failed, "PS")
        if said is not None:
            assert f"peer {name}-ps-0" in said["message"], said
        return
    done = wait_finished(kube, ns, name, "Succeeded", timeout=420)
    assert done["status"]["gangEpoch"] == 1
    lines = progress(cluster, ns, f"{name}-chief-0")  # the new epoch's coordinator
    start = lines[0]
    assert start["event"] == "start" and start["initial_epoch"] >= 2, start
    assert lines[-1]["event"] == "done"
