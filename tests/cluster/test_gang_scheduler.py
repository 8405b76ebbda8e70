"""The local cluster's gang scheduler on its own, no TFJob controller involved:
scheduler-plugins' Coscheduling (`hack/cluster.sh up --gang scheduler-plugins`) binds a
PodGroup's pods all together or not at all, its PodGroup controller keeps their status,
and the Volcano PodGroup CRD comes and goes at run time.

Each test makes kwok nodes of its own (cpu 2 each) with a label its pods select and a
NoSchedule taint only its pods tolerate, so no other test's pods land there and its pods
land nowhere else; a watch records every bind as it happens.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster.kube import Kube, WatchThread, wait_for
from tests.conftest import Cluster, cluster_mod

#: needs the local cluster's gang scheduler and kwok pods
pytestmark = pytest.mark.local_only

gang = cluster_mod.gang
NODE_KEY = "tfjob-test/gang-nodes"
PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{ns}/podgroups"
#: How long past the Permit timeout a gang that cannot fit is watched staying unbound.
MARGIN = 5.0


class Binds(WatchThread):
    """Every bind of a namespace's pods, with the monotonic time it was seen."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.lock = threading.Lock()
        self.bound: dict[str, float] = {}
        super().__init__(cluster, f"/api/v1/namespaces/{ns}/pods")

    def _observe(self, type_: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        with self.lock:
            if type_ != "DELETED" and pod["spec"].get("nodeName"):
                self.bound.setdefault(name, time.monotonic())

    def count(self) -> int:
        with self.lock:
            return len(self.bound)

    def burst(self) -> float:
        """Seconds from the first bind seen to the last."""
        with self.lock:
            times = sorted(self.bound.values())
        return times[-1] - times[0] if times else 0.0


class GangNodes:
    """kwok nodes only this test's pods can use (its label, its taint)."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.tag = f"g{uuid.uuid4().hex[:8]}"
        self.names: list[str] = []

    def add(self) -> str:
        name = f"{self.tag}-node-{len(self.names)}"
        res = {"cpu": "2", "memory": "8Gi", "pods": "110"}
        self.kube.api.apply(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {"type": "kwok", NODE_KEY: self.tag, "kubernetes.io/hostname": name},
                    "annotations": {"kwok.x-k8s.io/node": "fake"},
                },
                "spec": {"taints": [{"key": NODE_KEY, "value": self.tag, "effect": "NoSchedule"}]},
                "status": {"allocatable": res, "capacity": res},
            },
            "/api/v1/nodes",
        )
        self.names.append(name)
        wait_for(lambda: self._ready(name), 30, f"node {name} Ready")
        return name

    def _ready(self, name: str) -> bool:
        node = self.kube.req("GET", f"/api/v1/nodes/{name}") or {}
        conds = (node.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def pod(self, name: str, group: str, cpu: str = "1") -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {gang.POD_GROUP_LABEL: group}},
            "spec": {
                "schedulerName": gang.SCHEDULER_NAME,
                "nodeSelector": {NODE_KEY: self.tag},
                "tolerations": [
                    {
                        "key": NODE_KEY,
                        "operator": "Equal",
                        "value": self.tag,
                        "effect": "NoSchedule",
                    }
                ],
                "terminationGracePeriodSeconds": 0,
                # A program that finishes: exit 0 ends the pod (under the default,
                # Always, a kubelet would restart it in place).
                "restartPolicy": "Never",
                "containers": [
                    {"name": "c", "image": "fake", "resources": {"requests": {"cpu": cpu}}}
                ],
            },
        }

    def remove(self, ns: str) -> None:
        """The namespace's pods first (grace 0: no kubelet would finish them once their
        node is gone, and the namespace would never go), then the nodes."""
        self.kube.req("DELETE", f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
        wait_for(
            lambda: not self.kube.req("GET", f"/api/v1/namespaces/{ns}/pods")["items"],
            30,
            "the test's pods to be gone",
        )
        for name in self.names:
            self.kube.api.request("DELETE", f"/api/v1/nodes/{name}")


@pytest.fixture
def nodes(kube: Kube, namespace: str) -> Iterator[GangNodes]:
    n = GangNodes(kube)
    try:
        yield n
    finally:
        n.remove(namespace)


def make_gang(
    kube: Kube, nodes: GangNodes, ns: str, group: str, min_member: int, pods: int, cpu: str = "1"
) -> None:
    kube.req(
        "POST",
        PODGROUPS.format(ns=ns),
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": group},
            "spec": {"minMember": min_member},
        },
    )
    for i in range(pods):
        kube.req("POST", f"/api/v1/namespaces/{ns}/pods", nodes.pod(f"{group}-{i}", group, cpu))


def unschedulable(kube: Kube, ns: str) -> list[str]:
    """Pods the scheduler has tried and turned down (PodScheduled False)."""
    return [
        p["metadata"]["name"]
        for p in kube.req("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        if any(
            c["type"] == "PodScheduled" and c["status"] == "False"
            for c in p["status"].get("conditions") or []
        )
    ]


def running(kube: Kube, ns: str) -> int:
    pods = kube.req("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    return sum(1 for p in pods if p["status"].get("phase") == "Running")


def hold(binds: Binds, seconds: float, expected: int) -> None:
    """Watch the bound count for `seconds`: it must stay `expected` throughout."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert binds.count() == expected, f"bound: {sorted(binds.bound)}"
        time.sleep(0.05)


def test_gang_binds_all_or_nothing(
    cluster: Cluster, kube: Kube, namespace: str, nodes: GangNodes
) -> None:
    """8 pods of minMember 8 where a finished group's pod held 2 of 8 CPUs: nothing
    binds while it runs, all 8 together once it finishes. Nothing nudges the scheduler:
    scheduler-plugins' PodGroup controller records the finished group's status, and
    that PodGroup update is what makes Coscheduling try the waiting gang again.

    The blocker is one pod of 2 CPUs, so its end frees them in one event. With two pods
    of 1 CPU ending 17 ms apart, the first end let 7 of the 8 fit: the 8th failed, the
    group's waiting pods were rejected, and some were left where no later event moved
    them (once in 3 runs of make test: a race of the scheduler's, not of the gang)."""
    for _ in range(4):
        nodes.add()  # 8 cpu
    with Binds(cluster, namespace) as binds:
        make_gang(kube, nodes, namespace, "blocker", min_member=1, pods=1, cpu="2")
        wait_for(lambda: running(kube, namespace) == 1, 30, "the blocker's pod Running")
        make_gang(kube, nodes, namespace, "gang", min_member=8, pods=8)
        # The scheduler has tried every pod (so the wait below is not vacuous), and no
        # pod is bound through the Permit timeout and past it: 6 fit, 8 are needed.
        wait_for(lambda: len(unschedulable(kube, namespace)) == 8, 30, "8 pods tried")
        hold(binds, gang.PERMIT_WAITING_TIME_SECONDS + MARGIN, expected=1)
        assert pod_group_status(kube, namespace, "gang").get("running", 0) == 0
        # Room for all 8 once the blocker finishes: they bind together, in one burst.
        t0 = time.monotonic()
        kube.exit_pod(namespace, "blocker-0", 0, container=None)
        wait_for(lambda: binds.count() == 9, 60, "all 8 pods bound")
        bound_after = time.monotonic() - t0
        gang_binds = {k: v for k, v in binds.bound.items() if k.startswith("gang-")}
        assert max(gang_binds.values()) - min(gang_binds.values()) < (
            gang.PERMIT_WAITING_TIME_SECONDS
        ), gang_binds

    def status_is(group: str, **want: Any) -> bool:
        status = pod_group_status(kube, namespace, group)
        return all(status.get(k) == v for k, v in want.items())

    # the status a full install keeps: the finished group and the running one
    wait_for(lambda: status_is("blocker", phase="Finished", succeeded=1), 20,
             "the blocker's PodGroup Finished")  # fmt: skip
    wait_for(lambda: status_is("gang", phase="Running", running=8), 30,
             "the gang's PodGroup Running, 8 running")  # fmt: skip
    print(f"all 8 bound {bound_after:.1f}s after the blocker finished")


def pod_group_status(kube: Kube, ns: str, group: str) -> dict[str, Any]:
    """What scheduler-plugins' PodGroup controller has written (scheduleStartTime left
    out: a timestamp)."""
    pg = kube.req("GET", f"{PODGROUPS.format(ns=ns)}/{group}") or {}
    status = dict(pg.get("status") or {})
    status.pop("scheduleStartTime", None)
    return status


def test_gang_below_capacity_binds_min_member(
    cluster: Cluster, kube: Kube, namespace: str, nodes: GangNodes
) -> None:
    """Control: minMember 6 of 8 pods on room for 6 binds exactly 6. The scheduler and
    its PodGroup controller are restarted first, so this also checks `hack/cluster.sh
    restart` of each (the controller's status then says 6 running)."""
    cluster.restart(gang.COMPONENT)
    cluster.restart(gang.CONTROLLER)
    for _ in range(3):
        nodes.add()
    with Binds(cluster, namespace) as binds:
        make_gang(kube, nodes, namespace, "gang", min_member=6, pods=8)
        wait_for(lambda: binds.count() == 6, 60, "6 pods bound")
        hold(binds, gang.PERMIT_WAITING_TIME_SECONDS + 1, expected=6)
        assert binds.burst() < gang.PERMIT_WAITING_TIME_SECONDS, binds.bound
    wait_for(lambda: running(kube, namespace) == 6, 30, "6 pods Running")
    wait_for(lambda: pod_group_status(kube, namespace, "gang") == {"phase": "Running", "running": 6},
             30, "the PodGroup Running, 6 running")  # fmt: skip


def test_volcano_crd_installed_and_removed_at_run_time(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    """The helpers tests use: the CRD is served once install returns (status subresource
    included), and not served once remove returns."""
    path = "/apis/scheduling.volcano.sh/v1beta1"
    was_served = kube.api.request("GET", path)[0] == 200
    cluster.install_volcano_crd()
    try:
        made = kube.req(
            "POST",
            f"{path}/namespaces/{namespace}/podgroups",
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {"name": "pg"},
                "spec": {"minMember": 2, "minTaskMember": {"worker": 2}, "queue": "default"},
            },
        )
        assert made["spec"]["minTaskMember"] == {"worker": 2}
        made["status"] = {"phase": "Running", "running": 2}
        done = kube.req("PUT", f"{path}/namespaces/{namespace}/podgroups/pg/status", made)
        assert done["status"] == {"phase": "Running", "running": 2}
    finally:
        if not was_served:
            cluster.remove_volcano_crd()
    if not was_served:
        assert kube.api.request("GET", path)[0] == 404
