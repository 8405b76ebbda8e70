"""Gang scheduling through the controller, on the real cluster with a real gang scheduler
(scheduler-plugins' Coscheduling, `hack/cluster.sh up --gang scheduler-plugins`), and in
Volcano mode against Volcano's PodGroup CRD with the test playing Volcano's scheduler.

Each test runs a controller of its own with `--gang-scheduler-name`, for its namespace
only, while the session's controller (no gang scheduling) is stopped; the jobs' pods
land only on the test's own kwok nodes (GangNodes: a label they select, a taint they
tolerate), 2 CPUs each.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.cluster.kube import (
    ControllerProcess,
    Kube,
    condition,
    wait_for,
    wait_job,
    wait_namespaces_gone,
)
from tests.cluster.policy_helpers import JobHistory, make_job, rs, settled
from tests.cluster.test_gang_scheduler import (
    MARGIN,
    NODE_KEY,
    Binds,
    GangNodes,
    gang,
    hold,
    make_gang,
    pod_group_status,
)
from tests.conftest import Cluster

#: needs the local cluster's gang scheduler and kwok pods
pytestmark = pytest.mark.local_only

PLUGINS = gang.SCHEDULER_NAME
PG_PLUGINS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
PG_VOLCANO = "/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups"


def gang_job(
    name: str,
    pool: GangNodes,
    workers: int,
    *,
    cpu: str = "1",
    min_available: int | None = None,
    clean: str = "All",
    **policy: Any,
) -> dict[str, Any]:
    """Workers only (worker 0 decides), each asking for ``cpu``, placed on the test's
    nodes; finished pods are removed (cleanPodPolicy All) so a waiting gang gets room."""
    job = make_job(
        name, chief=None, workers=(workers, "Never"), run_policy={"cleanPodPolicy": clean}
    )
    spec = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": cpu}}
    spec["nodeSelector"] = {NODE_KEY: pool.tag}
    spec["tolerations"] = [
        {"key": NODE_KEY, "operator": "Equal", "value": pool.tag, "effect": "NoSchedule"}
    ]
    sched = dict(policy)
    if min_available is not None:
        sched["minAvailable"] = min_available
    if sched:
        job["spec"]["runPolicy"]["schedulingPolicy"] = sched
    return job


@dataclass
class GangEnv:
    pool: GangNodes  # the test's own kwok nodes
    controller: ControllerProcess  # --gang-scheduler-name=scheduler-plugins-scheduler


@pytest.fixture
def env(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> Iterator[GangEnv]:
    """A controller with --gang-scheduler-name=scheduler-plugins-scheduler for the test's
    namespace, and nodes of the test's own. Afterwards the jobs go first (their pods let
    go while the controller still runs), then the controller, then the nodes; and the
    session controller is back, whatever happened."""
    wait_namespaces_gone(kube)
    pool = GangNodes(kube)
    controller.stop()
    gc = ControllerProcess(
        cluster,
        f"--gang-scheduler-name={PLUGINS}",
        f"--namespace={namespace}",
        "--restart-backoff-base=0.5",
        log_name="gang",
    )
    try:
        gc.start()
        yield GangEnv(pool, gc)
        assert gc.proc is not None and gc.proc.poll() is None, "the gang controller exited"
    finally:
        delete_jobs(kube, namespace)
        code = gc.stop()
        controller.start()
        pool.remove(namespace)
    assert code == 0


def delete_jobs(kube: Kube, ns: str) -> None:
    """The test's jobs go while its controller still runs, so their pods are let go
    (tracking finalizer) and collected before the pool are removed."""
    kube.req("DELETE", kube.tfjobs(ns))
    wait_for(lambda: not kube.pods(ns), 60, "the jobs' pods gone")


def podgroup(kube: Kube, ns: str, name: str, path: str = PG_PLUGINS) -> dict[str, Any] | None:
    return kube.req("GET", f"{path.format(ns=ns)}/{name}")  # type: ignore[no-any-return]


def job_pods(kube: Kube, ns: str, name: str) -> list[dict[str, Any]]:
    return kube.pods(ns, name)


def bound(kube: Kube, ns: str, name: str) -> int:
    return sum(1 for p in job_pods(kube, ns, name) if p["spec"].get("nodeName"))


def finish(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    kube.exit_pod(ns, f"{name}-worker-0", 0)
    return wait_job(kube, ns, name, "Succeeded", timeout=60)


def decided_by_worker_0(done: dict[str, Any]) -> None:
    """The job succeeded as upstream decides it with no Chief: worker 0 among the
    succeeded indexes, no failure and no restart counted on the way."""
    cond = condition(done, "Succeeded")
    assert cond is not None and cond["reason"] == "TFJobSucceeded", cond
    workers = rs(done, "Worker")
    assert (workers["failed"], workers["restarts"], workers["disruptions"]) == (0, 0, 0), workers
    indexes = done["status"]["replicaStatuses"]["Worker"].get("succeededIndexes", "")
    assert indexes.split(",")[0].split("-")[0] == "0", indexes


def test_a_gang_that_does_not_fit_binds_nothing_until_it_does(
    cluster: Cluster, kube: Kube, namespace: str, env: GangEnv
) -> None:
    """8 workers of 1 CPU with minAvailable 8 on 8 CPUs of which another group's pods
    hold 2: none binds while they run; all 8 together once they finish, woken by the
    PodGroup controller's status update of the finished group (no nudge)."""
    ns, pool = namespace, env.pool
    for _ in range(4):
        pool.add()  # 8 CPUs
    with Binds(cluster, ns) as binds:
        make_gang(kube, pool, ns, "blocker", min_member=2, pods=2)
        wait_for(lambda: binds.count() == 2, 30, "the blocker bound")
        kube.create_tfjob(ns, gang_job("big", pool, 8, min_available=8))
        pg = wait_for(lambda: podgroup(kube, ns, "big"), 20, "the PodGroup")
        assert pg["spec"]["minMember"] == 8 and pg["spec"]["minResources"] == {"cpu": "8"}
        (ref,) = pg["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["name"], ref["controller"]) == ("TFJob", "big", True)
        wait_for(lambda: len(job_pods(kube, ns, "big")) == 8, 30, "the 8 pods")
        for pod in job_pods(kube, ns, "big"):
            assert pod["spec"]["schedulerName"] == PLUGINS
            assert pod["metadata"]["labels"][gang.POD_GROUP_LABEL] == "big"
        # nothing bound through the Permit wait and past it, watched all the while
        hold(binds, gang.PERMIT_WAITING_TIME_SECONDS + MARGIN, expected=2)
        job = kube.tfjob(ns, "big")
        assert condition(job, "Running") is None
        t0 = time.monotonic()
        for i in range(2):
            kube.exit_pod(ns, f"blocker-{i}", 0, container=None)
        wait_for(lambda: bound(kube, ns, "big") == 8, 60, "all 8 bound")
        wait_job(kube, ns, "big", "Running", timeout=30)
        print(f"all 8 bound and the job Running {time.monotonic() - t0:.1f}s after the room")
        big = [t for name, t in binds.bound.items() if name.startswith("big-")]
        assert max(big) - min(big) < gang.PERMIT_WAITING_TIME_SECONDS, binds.bound
        wait_for(
            lambda: (
                pod_group_status(kube, ns, "big")
                == {"phase": "Running", "running": 8, "occupiedBy": f"{ns}/big"}
            ),
            30,
            "the PodGroup's status: Running, 8 running",
        )
    decided_by_worker_0(finish(kube, ns, "big"))
    # finished: the PodGroup goes, once
    wait_for(lambda: podgroup(kube, ns, "big") is None, 20, "the PodGroup deleted")
    deleted = [e for e in kube.events(ns) if e["reason"] == "SuccessfulDeletePodGroup"]
    assert len(deleted) == 1 and deleted[0].get("count", 1) == 1, deleted


def test_min_available_below_the_gang_binds_exactly_that_many(
    cluster: Cluster, kube: Kube, namespace: str, env: GangEnv
) -> None:
    ns, pool = namespace, env.pool
    for _ in range(3):
        pool.add()
    with Binds(cluster, ns) as binds:
        kube.create_tfjob(ns, gang_job("six", pool, 8, min_available=6))
        wait_for(lambda: binds.count() == 6, 60, "6 bound")
        hold(binds, gang.PERMIT_WAITING_TIME_SECONDS + 1, expected=6)
    assert podgroup(kube, ns, "six")["spec"]["minMember"] == 6  # type: ignore[index]


def test_two_gangs_that_do_not_fit_together_run_one_after_the_other(
    cluster: Cluster, kube: Kube, namespace: str, env: GangEnv
) -> None:
    ns, pool = namespace, env.pool
    for _ in range(3):
        pool.add()  # 6 CPUs; each gang needs 4
    with Binds(cluster, ns) as binds:
        kube.create_tfjob(ns, gang_job("first", pool, 4))
        kube.create_tfjob(ns, gang_job("second", pool, 4))
        wait_for(lambda: binds.count() == 4, 60, "one gang bound")

        def winner() -> str:
            names = {n.rsplit("-worker-", 1)[0] for n in binds.bound}
            assert len(names) == 1, binds.bound
            return names.pop()

        one = winner()
        other = "second" if one == "first" else "first"
        # the other waits whole: none of its pods bound, through the Permit wait
        hold(binds, gang.PERMIT_WAITING_TIME_SECONDS + MARGIN, expected=4)
        assert bound(kube, ns, other) == 0
        # Its workers 1-3 finish first, as workers may before worker 0 decides: their
        # room frees, and the PodGroup controller's update of the group's status (3
        # succeeded) is what has Coscheduling try the other again. Finishing worker 0
        # first would end the job, and the job's PodGroup can go before its pods do, so
        # no status update would follow the room.
        for i in range(1, 4):
            kube.exit_pod(ns, f"{one}-worker-{i}", 0)
        wait_for(lambda: bound(kube, ns, other) == 4, 60, f"{other} bound")
        wait_for(
            lambda: (
                pod_group_status(kube, ns, one)
                == {"phase": "Running", "running": 1, "succeeded": 3, "occupiedBy": f"{ns}/{one}"}
            ),
            30,
            f"{one}'s PodGroup status: 1 running, 3 succeeded",
        )
        finish(kube, ns, one)
    decided_by_worker_0(finish(kube, ns, other))


def test_an_unschedulable_min_available_waits_then_runs_once_lowered(
    cluster: Cluster, kube: Kube, namespace: str, env: GangEnv
) -> None:
    """The SDK's gang test: minAvailable 10 for a job of one worker stays Created; lowered
    to 1, the PodGroup follows and the job runs to Succeeded."""
    ns, pool = namespace, env.pool
    pool.add()
    with Binds(cluster, ns) as binds:
        kube.create_tfjob(ns, gang_job("lone", pool, 1, cpu="2", min_available=10))
        wait_for(lambda: job_pods(kube, ns, "lone"), 30, "the pod")
        wait_job(kube, ns, "lone", "Created")
        hold(binds, gang.PERMIT_WAITING_TIME_SECONDS + MARGIN, expected=0)
        assert condition(kube.tfjob(ns, "lone"), "Running") is None
        kube.patch_tfjob(
            ns, "lone", {"spec": {"runPolicy": {"schedulingPolicy": {"minAvailable": 1}}}}
        )
        wait_for(lambda: podgroup(kube, ns, "lone")["spec"]["minMember"] == 1, 20,  # type: ignore[index]
                 "the PodGroup updated")  # fmt: skip
        wait_for(lambda: binds.count() == 1, 60, "bound")
    wait_job(kube, ns, "lone", "Running", timeout=30)
    decided_by_worker_0(finish(kube, ns, "lone"))


# --- Volcano --------------------------------------------------------------------------


@pytest.fixture
def volcano(
    cluster: Cluster, controller: ControllerProcess, kube: Kube, namespace: str
) -> Iterator[GangEnv]:
    """A controller with --gang-scheduler-name=Volcano, once the Volcano PodGroup CRD is
    installed (it refuses to start before, and says why); torn down like ``env``."""
    wait_namespaces_gone(kube)
    pool = GangNodes(kube)
    controller.stop()
    vc = ControllerProcess(
        cluster, "--gang-scheduler-name=Volcano", f"--namespace={namespace}", log_name="volcano"
    )
    try:
        with pytest.raises(RuntimeError, match="exited with 1"):
            vc.start()
        assert "the PodGroup CRD is not served" in vc.log_text()
        assert "podgroups.scheduling.volcano.sh" in vc.log_text()
        cluster.install_volcano_crd()
        vc.start()
        yield GangEnv(pool, vc)
    finally:
        if vc.proc is not None and vc.proc.poll() is None:
            delete_jobs(kube, namespace)
        code = vc.stop()
        cluster.remove_volcano_crd()
        controller.start()
        pool.remove(namespace)
    assert code == 0


def test_volcano_pods_wait_for_the_scheduler_to_admit_the_gang(
    cluster: Cluster, kube: Kube, namespace: str, volcano: GangEnv
) -> None:
    ns, pool = namespace, volcano.pool
    pool.add()
    job = gang_job("vj", pool, 2, min_available=2, queue="team-a", priorityClass="high")
    job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "500m", "memory": "1Gi"}
    }
    with JobHistory(cluster, ns) as history:
        kube.create_tfjob(ns, job)
        pg = wait_for(lambda: podgroup(kube, ns, "vj", PG_VOLCANO), 20, "the PodGroup")
        assert pg["spec"] == {
            "minMember": 2,
            "minResources": {"cpu": "1", "memory": str(2 * 2**30)},
            "queue": "team-a",
            "priorityClassName": "high",
        }
        # Pending: no pod, a condition that says why, and then nothing written
        waiting = wait_for(
            lambda: (
                (c := condition(kube.tfjob(ns, "vj"), "GangAdmitted"))
                and c["status"] == "False"
                and c
            ),
            20,
            "the GangAdmitted condition",
        )
        assert waiting["reason"] == "PodGroupPending"
        writes = len(history.statuses.get("vj", []))
        pg["status"] = {"phase": "Pending"}
        kube.req("PUT", f"{PG_VOLCANO.format(ns=ns)}/vj/status", pg)
        # whatever the controller does about a Pending PodGroup, it has done by now
        settled(kube, volcano.controller, ns, "vj")
        assert kube.pods(ns, "vj") == []
        assert len(history.statuses.get("vj", [])) == writes, "a status write while waiting"
        # admitted: the pods, for Volcano
        pg = podgroup(kube, ns, "vj", PG_VOLCANO)
        assert pg is not None
        pg["status"] = {"phase": "Inqueue"}
        kube.req("PUT", f"{PG_VOLCANO.format(ns=ns)}/vj/status", pg)
        pods = wait_for(lambda: len(p := kube.pods(ns, "vj")) == 2 and p, 20, "the pods")
        for pod in pods:
            assert pod["spec"]["schedulerName"] == "volcano"
            assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "vj"
            assert pod["metadata"]["annotations"]["volcano.sh/task-spec"] == "worker"
        # kube-scheduler's "volcano" profile binds them (the local cluster's stand-in
        # for Volcano's scheduler: no gang semantics, which the phase above played)
        wait_job(kube, ns, "vj", "Running", timeout=30)
        admitted = condition(kube.tfjob(ns, "vj"), "GangAdmitted")
        assert admitted is not None and admitted["status"] == "True"
    finish(kube, ns, "vj")
    wait_for(lambda: podgroup(kube, ns, "vj", PG_VOLCANO) is None, 20, "the PodGroup deleted")
    # a job deleted while its PodGroup exists: the garbage collector takes it
    kube.create_tfjob(ns, gang_job("gc", pool, 1))
    wait_for(lambda: podgroup(kube, ns, "gc", PG_VOLCANO), 20, "the second PodGroup")
    kube.req("DELETE", f"{kube.tfjobs(ns)}/gc")
    wait_for(lambda: podgroup(kube, ns, "gc", PG_VOLCANO) is None, 60, "the PodGroup collected")
