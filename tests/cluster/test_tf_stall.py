"""Stalls with real TensorFlow on the real node (`make e2e-tf`, docs/stalls.md): a
MultiWorkerMirroredStrategy job one of whose workers is frozen (SIGSTOP on its
process, as a lost network or a wedged device would leave it). Its peer waits in the
all-reduce, no step advances, and the progress deadline catches it: with the restart
action the gang restarts, training resumes from its BackupAndRestore backup and the job
succeeds; report-only leaves it Running with the condition set, and SIGCONT clears it;
a freeze shorter than the deadline sets nothing."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from reconcile.api.names import PROGRESS_DEADLINE_ANNOTATION, STALL_ACTION_ANNOTATION
from tests.cluster.kube import ControllerProcess, Kube, condition, wait_for
from tests.cluster.policy_helpers import rs
from tests.cluster.test_real_node import _container_pid
from tests.cluster.tf_workloads import (
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

STEPS = 30
#: TensorFlow's coordination service finds a frozen peer itself (no heartbeat for 10 s:
#: the collectives abort, the survivor exits 1); the program lengthens that
#: (mwms_fit.py --heartbeat-timeout) so the freeze looks like the hangs heartbeats miss
#: (a stuck input pipeline, a process that still answers), which the deadline is for
DEADLINE = 15
#: the helper's reporting interval: how stale the last progress the controller saw may be
REPORT_INTERVAL = 5


def stall_job(name: str, backup: Path, action: str, epochs: int) -> dict[str, Any]:
    fit = tf_template(
        "mwms_fit.py",
        *("--epochs", str(epochs), "--steps-per-epoch", str(STEPS), "--log-every", "5"),
        *("--backup-dir", "/backup", "--save-freq", "10"),
        *("--heartbeat-timeout", "600"),
    )
    job = tf_job(name, {"Worker": (2, "ExitCode", with_backup(fit, backup / name))})
    job["metadata"]["annotations"] = {
        PROGRESS_DEADLINE_ANNOTATION: str(DEADLINE),
        STALL_ACTION_ANNOTATION: action,
    }
    return job


def freeze_in(cluster: Cluster, ns: str, pod: str, epoch: int) -> tuple[int, datetime]:
    """SIGSTOP the pod's training process once it has trained into ``epoch``."""
    wait_progress(cluster, ns, pod, lambda x: x.get("event") == "step" and x["epoch"] >= epoch, 240)
    pid = _container_pid(cluster, ns, pod)
    os.kill(pid, signal.SIGSTOP)
    return pid, datetime.now(UTC)


def stalled(kube: Kube, ns: str, name: str) -> dict[str, Any] | None:
    return condition(kube.tfjob(ns, name), "Stalled")


def last_progress(kube: Kube, ns: str, name: str) -> datetime:
    tp = ((kube.tfjob(ns, name) or {}).get("status") or {}).get("trainingProgress") or {}
    stamp = tp.get("lastProgressTime")
    return parse_rfc3339(stamp) if stamp else datetime.min.replace(tzinfo=UTC)


def since(c: dict[str, Any], frozen: datetime) -> float:
    return (parse_rfc3339(c["lastTransitionTime"]) - frozen).total_seconds()


def test_a_frozen_worker_is_caught_and_the_gang_restart_resumes_training(
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    ns, name = namespace, "frozen"
    programs_configmap(kube, ns)
    kube.create_tfjob(ns, stall_job(name, host_dir, "restart", epochs=10))
    _, frozen = freeze_in(cluster, ns, f"{name}-worker-1", epoch=3)
    # the stall's restart: Stalled False (GangRestarted) in the write that starts it
    restarted = wait_for(
        lambda: (c := stalled(kube, ns, name)) and c["reason"] == "GangRestarted" and c,
        DEADLINE + REPORT_INTERVAL + 30,
        "the stall's gang restart",
    )
    took = since(restarted, frozen)
    print(f"stall caught {took:.0f}s after the freeze (deadline {DEADLINE}s)")
    # the condition's time is whole seconds: one more for the rounding
    assert took <= DEADLINE + REPORT_INTERVAL + 1, (took, restarted)
    done = wait_finished(kube, ns, name, "Succeeded", timeout=360)
    assert (done["status"].get("gangEpoch"), rs(done, "Worker")["restarts"]) == (1, 1)
    warned = [e for e in kube.events(ns) if e["reason"] == "ProgressDeadlineExceeded"]
    assert warned and warned[0]["type"] == "Warning", warned
    assert "worker-0 at step" in warned[0]["message"], warned
    for i in range(2):
        lines = progress(cluster, ns, f"{name}-worker-{i}")  # the new epoch's pods
        start = lines[0]
        # resumed from the backup (every 10 steps), not from the beginning
        assert start["event"] == "start" and start["step"] >= 2 * STEPS, start
        assert lines[-1]["event"] == "done", lines[-1]


def test_report_only_sets_the_condition_and_a_short_freeze_sets_nothing(
    tf_node: str,
    controller: ControllerProcess,
    kube: Kube,
    cluster: Cluster,
    namespace: str,
    host_dir: Path,
) -> None:
    ns, name = namespace, "paused"
    programs_configmap(kube, ns)
    # far longer than the test: it ends once training has resumed after the freezes
    kube.create_tfjob(ns, stall_job(name, host_dir, "report", epochs=1000))
    pod = f"{name}-worker-1"
    # a freeze shorter than the deadline: SIGCONT in time, and nothing is set
    pid, frozen = freeze_in(cluster, ns, pod, epoch=2)
    time.sleep(5)  # the freeze itself: what is tested is that it is short
    os.kill(pid, signal.SIGCONT)
    # training went on past the moment the deadline would have run out, had the steps
    # not resumed, and the controller wrote so: no Stalled condition, then or since
    later = frozen + timedelta(seconds=DEADLINE + REPORT_INTERVAL)
    wait_for(lambda: last_progress(kube, ns, name) > later, 120, "progress past the deadline")
    assert stalled(kube, ns, name) is None
    # frozen past the deadline: Stalled, and the job still Running with its pods
    uids = {p["metadata"]["uid"] for p in kube.pods(ns, name)}
    pid, frozen = freeze_in(cluster, ns, pod, epoch=0)
    try:
        c = wait_for(
            lambda: (c := stalled(kube, ns, name)) and c["status"] == "True" and c,
            DEADLINE + REPORT_INTERVAL + 30,
            "Stalled",
        )
        assert since(c, frozen) <= DEADLINE + REPORT_INTERVAL + 1, (c, frozen)
        assert c["reason"] == "ProgressDeadlineExceeded"
        job = kube.tfjob(ns, name) or {}
        assert job["status"]["conditions"][-1]["type"] == "Running"
        assert {p["metadata"]["uid"] for p in kube.pods(ns, name)} == uids
    finally:
        with contextlib.suppress(ProcessLookupError):  # the failure above says why
            os.kill(pid, signal.SIGCONT)
    wait_for(
        lambda: (c := stalled(kube, ns, name)) and c["reason"] == "ProgressResumed",
        60,
        "progress resumed",
    )
    job = kube.tfjob(ns, name) or {}
    assert job["status"]["conditions"][-1]["type"] == "Running"
    assert rs(job, "Worker").get("restarts", 0) == 0
