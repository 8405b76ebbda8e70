"""Whole-gang restart with real collectives (`make e2e-tf`): a MultiWorkerMirroredStrategy
job whose worker process is SIGKILLed mid-training. With the gang-restart annotation
every pod is replaced together, one restart is counted, and training resumes from the
last BackupAndRestore backup; without it the surviving worker fails its collective
(exit 1) seconds later, which ExitCode takes as permanent. The backup lives in a host
directory every pod of the job mounts (one real node)."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from reconcile.api.names import GANG_RESTART_ANNOTATION
from tests.cluster.kube import ControllerProcess, Kube, wait_for
from tests.cluster.policy_helpers import rs
from tests.cluster.test_real_node import _container_pid, container_status
from tests.cluster.tf_workloads import (
    epoch_losses,
    parse_rfc3339,
    programs_configmap,
    progress,
    tf_job,
    tf_template,
    timed_progress,
    wait_finished,
    wait_progress,
    with_backup,
)
from tests.conftest import Cluster

pytestmark = [pytest.mark.local_only, pytest.mark.tf]

EPOCHS = 10
STEPS = 30


def mwms_job(
    name: str, backup: Path, *, gang_restart: bool, epochs: int = EPOCHS
) -> dict[str, Any]:
    fit = tf_template(
        "mwms_fit.py",
        *("--epochs", str(epochs), "--steps-per-epoch", str(STEPS), "--log-every", "5"),
        *("--backup-dir", "/backup", "--save-freq", "10"),
    )
    job = tf_job(name, {"Worker": (2, "ExitCode", with_backup(fit, backup / name))})
    if gang_restart:
        job["metadata"]["annotations"] = {GANG_RESTART_ANNOTATION: "true"}
    return job


def kill_mid_training(
    cluster: Cluster, ns: str, pod: str, epoch: int
) -> tuple[dict[str, Any], datetime]:
    """SIGKILL the pod's training process once it has trained into ``epoch``; the last
    progress line it printed before, and when the kill was sent."""
    lines = wait_progress(
        cluster, ns, pod, lambda x: x.get("event") == "step" and x["epoch"] >= epoch, 180
    )
    os.kill(_container_pid(cluster, ns, pod), signal.SIGKILL)
    return lines[-1], datetime.now(UTC)


def restart_timeline(
    cluster: Cluster, kube: Kube, ns: str, name: str, killed: datetime
) -> dict[str, float]:
    """Seconds from the kill until every pod of the new epoch was created, had started
    its program (TensorFlow imported, the backup restored) and had trained a step."""
    created, started, training = [], [], []
    for pod in kube.pods(ns, name):
        created.append(parse_rfc3339(pod["metadata"]["creationTimestamp"]))
        lines = timed_progress(cluster, ns, pod["metadata"]["name"])
        started.append(next(t for t, x in lines if x["event"] == "start"))
        training.append(next(t for t, x in lines if x["event"] == "step"))
    return {
        what: round((max(times) - killed).total_seconds(), 1)
        for what, times in (("created", created), ("started", started), ("training", training))
    }


@pytest.mark.parametrize(("victim", "epoch"), [(1, 3), (0, 3), (0, 2), (1, 6)])
def test_a_killed_worker_restarts_the_gang_and_training_resumes(
    victim: int,
    epoch: int,
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    ns, name = namespace, f"gang{victim}e{epoch}"
    programs_configmap(kube, ns)
    kube.create_tfjob(ns, mwms_job(name, host_dir, gang_restart=True))
    last, killed = kill_mid_training(cluster, ns, f"{name}-worker-{victim}", epoch=epoch)
    done = wait_finished(kube, ns, name, "Succeeded", timeout=360)
    timeline = restart_timeline(cluster, kube, ns, name, killed)
    print(f"gang restart, seconds after the kill of worker {victim} in epoch {epoch}: {timeline}")
    # the pods come back after the first failure's backoff (0.5 s here) and the old
    # epoch's end; a survivor waiting out its grace period, or a lost event, shows here
    assert timeline["created"] < 10, timeline
    # one restart for the gang, whatever the survivor did meanwhile (its exit 1)
    assert (done["status"].get("gangEpoch"), rs(done, "Worker")["restarts"]) == (1, 1)
    for i in range(2):
        # the new epoch's pods; the job Succeeds with worker 0, and the other may print
        # its last line after that (one e2e-tf run in this session read its log first)
        lines = wait_progress(
            cluster, ns, f"{name}-worker-{i}", lambda x: x.get("event") == "done", 30
        )
        start = lines[0]
        assert start["event"] == "start" and start["replicas_in_sync"] == 2
        # resumed from the backup, not from the beginning: the kill came in `epoch` or
        # later, after epoch - 1 whole ones, the last of whose steps was backed up (every
        # 10 steps; the epoch it is counted in depends on where the kill fell)
        assert start["step"] >= (epoch - 1) * STEPS, (start, last)
        assert start["initial_epoch"] >= epoch - 2, (start, last)
        assert lines[-1]["event"] == "done"
        assert epoch_losses(lines)[-1] < 0.2


def test_without_gang_restart_the_survivor_fails_and_so_does_the_job(
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    """What a user of upstream gets today, and of ours without the annotation: the killed
    worker's 137 is retryable under ExitCode, but the surviving worker's collective
    fails within seconds (exit 1), which ExitCode takes as the program's own verdict."""
    ns = namespace
    programs_configmap(kube, ns)
    kube.create_tfjob(ns, mwms_job("plain", host_dir, gang_restart=False))
    _, killed = kill_mid_training(cluster, ns, "plain-worker-1", epoch=3)
    failed = wait_finished(kube, ns, "plain", "Failed", timeout=120)
    survivor = container_status(kube.pod(ns, "plain-worker-0") or {})
    terminated = survivor["state"]["terminated"]
    assert terminated["exitCode"] == 1
    assert rs(failed, "Worker")["failed"] >= 1
    # the survivor's last words (the collective's error, on stderr) and when
    logged = cluster.kubectl("logs", "-n", ns, "plain-worker-0", "--timestamps").splitlines()
    last_words = parse_rfc3339(logged[-1].split(" ", 1)[0])
    print(f"survivor failed {(last_words - killed).total_seconds():.1f}s after the kill")
    assert any("Collective ops is aborted" in x or "UnavailableError" in x for x in logged)
    said = failed_after_peer(kube, ns, failed, "Worker")
    if said is not None:
        message = said["message"]
        assert "plain-worker-0 failed" in message and "peer plain-worker-1" in message, message
        assert GANG_RESTART_ANNOTATION in message


def failed_after_peer(
    kube: Kube, ns: str, failed: dict[str, Any], killed_type: str
) -> dict[str, Any] | None:
    """The FailedAfterPeerEnd Warning of a job that failed on a collateral end, when the
    pass that failed it saw the killed peer's end (its restart is in the Failed status);
    the kubelet may report the survivor first, and then there is none (printed)."""
    if not rs(failed, killed_type).get("restarts"):
        print(f"the killed {killed_type}'s end came after the job had failed: no event")
        return None

    name = failed["metadata"]["name"]
    said = wait_for(lambda: failed_after_peer_events(kube, ns, name), 30, "the event")
    assert len(said) == 1 and said[0]["type"] == "Warning", said  # once
    return said[0]


@pytest.mark.parametrize("gang_restart", [True, False])
def test_a_worker_deleted_mid_training_is_a_disruption(
    gang_restart: bool,
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    """A preemption as a user sees it: worker 1 deleted gracefully while training. The
    program exits 143 on SIGTERM and the end counts as a disruption, never against
    backoffLimit. Its peer's collective fails (exit 1) at once: with whole-gang restart
    that is collateral and the gang resumes from the backup; without it the job fails,
    and the event names the deleted peer."""
    ns, name = namespace, "pre" if gang_restart else "prp"
    programs_configmap(kube, ns)
    # long enough for the deletion to reach the program mid-training (about 30 s)
    kube.create_tfjob(ns, mwms_job(name, host_dir, gang_restart=gang_restart, epochs=60))
    wait_progress(
        cluster,
        ns,
        f"{name}-worker-1",
        lambda x: x.get("event") == "step" and x["epoch"] >= 3,
        180,
    )
    kube.delete_pod(ns, f"{name}-worker-1")
    if gang_restart:
        done = wait_finished(kube, ns, name, "Succeeded", timeout=360)
        worker = rs(done, "Worker")
        assert (done["status"]["gangEpoch"], worker["restarts"], worker["disruptions"]) == (
            1,
            0,
            1,
        ), worker
        start = progress(cluster, ns, f"{name}-worker-1")[0]
        assert start["event"] == "start" and start["initial_epoch"] >= 2, start
        return
    failed = wait_finished(kube, ns, name, "Failed", timeout=120)
    survivor = container_status(kube.pod(ns, f"{name}-worker-0") or {})
    assert survivor["state"]["terminated"]["exitCode"] == 1
    # The deletion is the apiserver's (deletionTimestamp), seen before the survivor's
    # end, which the kubelet reports: the event is always there.
    said = wait_for(lambda: failed_after_peer_events(kube, ns, name), 30, "the event")
    assert f"peer {name}-worker-1" in said[0]["message"], said
    assert rs(failed, "Worker").get("restarts", 0) == 0  # a disruption is no restart


def failed_after_peer_events(kube: Kube, ns: str, name: str) -> list[dict[str, Any]] | None:
    """The job's FailedAfterPeerEnd events, None while there is none."""
    found = [
        e
        for e in kube.events(ns)
        if e.get("reason") == "FailedAfterPeerEnd" and e["involvedObject"]["name"] == name
    ]
    return found or None
