"""A straggler with real TensorFlow on the real node (`make e2e-tf`, docs/stalls.md):
asynchronous parameter-server training (tests/tf/programs/ps_async.py), where every
worker steps at its own rate, and one worker held to a tenth of a CPU by a real cgroup
limit (its container's CPU quota, written on the node as a throttled node would leave
it). The controller flags that worker, with its node and score, from the workers' own
reports; a new pod of that index, without the limit, clears it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.cluster.kube import ControllerProcess, Kube, wait_for
from tests.cluster.test_real_node import _container_pid
from tests.cluster.tf_workloads import programs_configmap, tf_job, tf_template, wait_progress
from tests.conftest import Cluster

pytestmark = [pytest.mark.local_only, pytest.mark.tf]

#: a move needs three peers to compare with (reconcile.progress.moves.MIN_PEERS)
WORKERS = 4
SLOW = 2
CGROUP_ROOT = Path("/sys/fs/cgroup")


def limit_cpu(pid: int, share: float) -> Path:
    """Hold the process's cgroup to ``share`` of one CPU (cgroup v2's cpu.max, or v1's
    CFS quota); the file written."""
    period = 100_000
    quota = int(period * share)
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        if controllers == "":  # v2: one hierarchy
            target = CGROUP_ROOT / rel.lstrip("/") / "cpu.max"
            if target.exists():
                target.write_text(f"{quota} {period}")
                return target
        elif "cpu" in controllers.split(","):
            base = CGROUP_ROOT / controllers / rel.lstrip("/")
            (base / "cpu.cfs_period_us").write_text(str(period))
            target = base / "cpu.cfs_quota_us"
            target.write_text(str(quota))
            return target
    raise AssertionError(f"no cpu cgroup for pid {pid}")


def async_job(name: str) -> dict[str, Any]:
    """One ps and WORKERS workers of ps_async.py, for ten minutes (the test ends it)."""
    run = ("--seconds", "600", "--log-every", "50")
    return tf_job(  # type: ignore[no-any-return]
        name,
        {
            "PS": (1, "ExitCode", tf_template("ps_async.py", *run)),
            "Worker": (WORKERS, "ExitCode", tf_template("ps_async.py", *run)),
        },
        runPolicy={"cleanPodPolicy": "All"},
    )


def stragglers(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    status = (kube.tfjob(ns, name) or {}).get("status") or {}
    return list((status.get("trainingProgress") or {}).get("stragglers") or [])


def test_a_cpu_limited_worker_is_flagged_with_its_node_and_cleared_by_a_new_pod(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    ns, name = namespace, "async"
    programs_configmap(kube, ns)
    job = async_job(name)
    kube.create_tfjob(ns, job)
    for i in range(WORKERS):
        wait_progress(cluster, ns, f"{name}-worker-{i}", lambda x: x.get("event") == "step", 240)
    slow = f"{name}-worker-{SLOW}"
    cpu_max = limit_cpu(_container_pid(cluster, ns, slow), 0.1)
    print(f"{cpu_max}: {cpu_max.read_text().strip()}")  # the limit, as the kernel holds it
    found = wait_for(
        lambda: [s for s in stragglers(kube, ns, name) if s["index"] == SLOW] or None,
        180,
        f"worker {SLOW} flagged",
    )
    (s,) = found
    print(f"flagged: {s}")
    assert (s["replicaType"], s["pod"], s["basis"]) == ("Worker", slow, "stepRate")
    assert s["node"] == tf_node and s["score"] < 0.75
    # the others are not
    assert [x["index"] for x in stragglers(kube, ns, name)] == [SLOW]
    warned = wait_for(
        lambda: [e for e in kube.events(ns) if e["reason"] == "StragglerDetected"] or None,
        20,
        "the StragglerDetected event",
    )
    assert warned[0]["type"] == "Warning" and tf_node in warned[0]["message"]
    # one event for the episode, however many passes it has lasted
    episode = [e for e in kube.events(ns) if e["reason"] == "StragglerDetected"]
    assert len(episode) == 1 and episode[0].get("count", 1) == 1, episode
    # a new pod of the index, without the limit: cleared
    old_uid = s["podUID"]
    kube.delete_pod(ns, slow)
    wait_for(
        lambda: not [x for x in stragglers(kube, ns, name) if x["index"] == SLOW],
        120,
        "the straggler cleared",
    )
    new = kube.pod(ns, slow)
    assert new is not None and new["metadata"]["uid"] != old_uid
    recovered = [e for e in kube.events(ns) if e["reason"] == "StragglerRecovered"]
    assert recovered and recovered[0]["type"] == "Normal", recovered


def test_with_the_move_action_a_worker_with_nowhere_else_to_go_stays_and_trains_on(
    tf_node: str, controller: ControllerProcess, kube: Kube, cluster: Cluster, namespace: str
) -> None:
    """One real node: no other node can take the slow worker (the kwok nodes lack the
    real node's label), so moving it would leave its new pod unschedulable. It is
    flagged, with its node, and left where it is; nothing is moved or counted, and every
    worker trains on."""
    ns, name = namespace, "moving"
    programs_configmap(kube, ns)
    job = async_job(name)
    job["metadata"]["annotations"] = {"training.kubeflow.org/straggler-action": "move"}
    kube.create_tfjob(ns, job)
    for i in range(WORKERS):
        wait_progress(cluster, ns, f"{name}-worker-{i}", lambda x: x.get("event") == "step", 240)
    slow = f"{name}-worker-{SLOW}"
    old_uid = (kube.pod(ns, slow) or {})["metadata"]["uid"]
    limit_cpu(_container_pid(cluster, ns, slow), 0.1)
    found = wait_for(
        lambda: [s for s in stragglers(kube, ns, name) if s["index"] == SLOW] or None,
        180,
        f"worker {SLOW} flagged",
    )
    (s,) = found
    assert s["node"] == tf_node and s["podUID"] == old_uid
    # the flagging pass is the one that would have moved it; a later status as well
    before = (kube.tfjob(ns, name) or {})["status"]["trainingProgress"]["lastReportTime"]
    wait_for(
        lambda: (
            (kube.tfjob(ns, name) or {})["status"]["trainingProgress"]["lastReportTime"] != before
        ),
        60,
        "a later report in the status",
    )
    assert (kube.pod(ns, slow) or {})["metadata"]["uid"] == old_uid
    rs = (kube.tfjob(ns, name) or {})["status"]["replicaStatuses"]["Worker"]
    assert (rs.get("moves", 0), rs.get("restarts", 0), rs.get("disruptions", 0)) == (0, 0, 0)
    assert not [e for e in kube.events(ns) if e["reason"] == "StragglerMoved"]
    for i in range(WORKERS):
        assert (kube.pod(ns, f"{name}-worker-{i}") or {})["status"]["phase"] == "Running"
