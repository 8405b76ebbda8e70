"""Helpers shared by the run-policy and chaos cluster tests.

- ``make_job``: a small TFJob body with per-type restart policies and a runPolicy;
- ``JobHistory``: a TFJob watch recording every stored status, so transient conditions
  (Restarting for half a second) are asserted from what the apiserver stored, not from
  what a poll happened to see;
- ``settled``: a barrier that returns once the controller has reconciled after a trigger
  and has nothing queued or in progress — how a test proves that something did *not*
  happen (no pod recreated) without sleeping.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

from tests.cluster.kube import (
    ApiFailure,
    ControllerProcess,
    Kube,
    PodHistory,
    WatchThread,
    condition,
    live,
    wait_for,
)
from tests.conftest import Cluster

TEMPLATE: dict[str, Any] = {
    "spec": {
        "containers": [
            {
                "name": "tensorflow",
                "image": "tf-test:latest",
                "ports": [{"name": "tfjob-port", "containerPort": 2222}],
            }
        ]
    }
}


def make_job(
    name: str,
    *,
    chief: str | None = None,
    ps: tuple[int, str] | None = None,
    workers: tuple[int, str] | None = (2, "OnFailure"),
    run_policy: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A TFJob: ``chief`` is the Chief's restartPolicy (None: no Chief); ``ps`` and
    ``workers`` are (replicas, restartPolicy)."""
    specs: dict[str, Any] = {}
    if chief is not None:
        specs["Chief"] = {"replicas": 1, "restartPolicy": chief, "template": TEMPLATE}
    if ps is not None:
        specs["PS"] = {"replicas": ps[0], "restartPolicy": ps[1], "template": TEMPLATE}
    if workers is not None:
        specs["Worker"] = {
            "replicas": workers[0],
            "restartPolicy": workers[1],
            "template": TEMPLATE,
        }
    spec: dict[str, Any] = {"tfReplicaSpecs": specs}
    if run_policy is not None:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": name},
        "spec": json.loads(json.dumps(spec)),
    }


def parse_ts(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


def rs(job: dict[str, Any] | None, rtype: str) -> dict[str, int]:
    """The counters of one replica status, omitempty zeros filled in."""
    got = (((job or {}).get("status") or {}).get("replicaStatuses") or {}).get(rtype) or {}
    return {
        k: int(got.get(k, 0)) for k in ("active", "succeeded", "failed", "restarts", "disruptions")
    }


def cond_of(job: dict[str, Any] | None, type_: str) -> tuple[str, str, str] | None:
    """(status, reason, message) of a condition."""
    c = condition(job, type_)
    return (c["status"], c.get("reason", ""), c.get("message", "")) if c else None


def phases(kube: Kube, ns: str, job: str) -> dict[str, str]:
    """{pod name: phase, with "+T" when terminating}."""
    return {
        p["metadata"]["name"]: p.get("status", {}).get("phase", "") + ("" if live(p) else "+T")
        for p in kube.pods(ns, job)
    }


def svc_names(kube: Kube, ns: str, job: str) -> list[str]:
    return [s["metadata"]["name"] for s in kube.services(ns, job)]


def uid_of(kube: Kube, ns: str, pod: str) -> str:
    got = kube.pod(ns, pod)
    assert got is not None, pod
    return str(got["metadata"]["uid"])


def replaced_after_gone(history: PodHistory, old_uid: str, name: str) -> str:
    """The UID of the pod that replaced ``old_uid`` under the same name; asserts it was
    created only after the old pod was gone from the API."""
    events = list(history.events)
    # The old pod may predate the watch (listed, not ADDED): then everything is later.
    born = next((i for i, (t, _, u) in enumerate(events) if t == "ADDED" and u == old_uid), -1)
    deleted_at = next(i for i, (t, _, u) in enumerate(events) if t == "DELETED" and u == old_uid)
    added = [
        (i, u)
        for i, (t, n, u) in enumerate(events)
        if t == "ADDED" and n == name and i > born and u != old_uid
    ]
    assert added, f"no replacement of {name}"
    assert added[0][0] > deleted_at, f"{name} replaced before the old pod was gone"
    return added[0][1]


def metric(text: str, name: str, **labels: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        head, _, value = line.rpartition(" ")
        if all(f'{k}="{v}"' in head for k, v in labels.items()):
            total += float(value)
    return total


#: kwok keeps a deleted pod so annotated in its grace period (hack/kwok-delete-stages.yaml)
HOLD = "kwok.test/hold-on-delete"


def let_go(kube: Kube, ns: str, pod: str) -> None:
    """The kubelet may end the held pod now (kwok kills a deleted pod with 137)."""
    try:
        kube.req("PATCH", f"/api/v1/namespaces/{ns}/pods/{pod}",
                 {"metadata": {"annotations": {HOLD: None}}}, "application/merge-patch+json")  # fmt: skip
    except ApiFailure as e:
        if e.status != 404:
            raise


def release_held(kube: Kube, ns: str) -> None:
    """After a test whose pods carry HOLD (pass or fail): delete the namespace's TFJobs,
    so no new held pod is made, and let go of every pod until none is left, or the
    namespace could never be deleted."""
    for job in kube.req("GET", kube.tfjobs(ns))["items"]:
        kube.req("DELETE", f"{kube.tfjobs(ns)}/{job['metadata']['name']}")

    def none_left() -> bool:
        pods = kube.req("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
        for pod in pods:
            if HOLD in (pod["metadata"].get("annotations") or {}):
                let_go(kube, ns, pod["metadata"]["name"])
        return not pods

    wait_for(none_left, 60, "the held pods let go and gone")


def leading(c: ControllerProcess) -> bool:
    """The replica says it leads (leader_election_master_status)."""
    return metric(c.metrics(), "leader_election_master_status") == 1


#: A requeue due within this many seconds is work the controller is about to do (a
#: status write's pacing, the recheck after background creates, a short backoff): the
#: barrier waits for it. One further off (a deadline, a TTL, a long backoff) is the
#: future, which a test waits for by name.
SOON_SECONDS = 15.0


def settled(
    kube: Kube, controller: ControllerProcess, ns: str, job: str, soon: float = SOON_SECONDS
) -> None:
    """Poke the job (an annotation) and wait until the controller's cache holds the poke
    and nothing is pending for the job: not queued, not in a reconcile, no background
    work (creates at the rate limit, a status write) unfinished, no requeue due within
    ``soon`` seconds. Whatever the controller was going to do about the current world,
    it has done. Per job, from the controller's /debug/queue, so other jobs' work on a
    shared controller neither holds the barrier nor ends it early."""
    poked = kube.patch_tfjob(
        ns, job, {"metadata": {"annotations": {"test/poke": str(time.monotonic())}}}
    )
    version = int(poked["metadata"]["resourceVersion"])
    last: dict[str, Any] = {}

    def idle() -> bool:
        last.clear()
        last.update(controller.pending(f"{ns}/{job}"))
        seen = last["cached_resource_version"]
        requeue_in = last["requeue_in"]
        return (
            # The handler queued the job when its cache took the poke: idle after
            # that means a pass ran since.
            seen is not None
            and int(seen) >= version
            and not last["queued"]
            and not last["processing"]
            and last["spawned"] == 0
            and (requeue_in is None or requeue_in > soon)
        )

    try:
        wait_for(idle, soon + 30, f"the controller idle for {ns}/{job}")
    except AssertionError as e:
        raise AssertionError(f"{e}; its /debug/queue said {last}") from None


class JobHistory(WatchThread):
    """Watches the TFJobs of a namespace and records, per job, every stored status."""

    def __init__(self, cluster: Cluster, ns: str) -> None:
        self.ns = ns
        self.statuses: dict[str, list[dict[str, Any]]] = {}
        super().__init__(cluster, f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs")

    def _observe(self, type_: str, job: dict[str, Any]) -> None:
        if type_ == "DELETED":
            return
        self._record(job)

    def _record(self, job: dict[str, Any]) -> None:
        status = job.get("status") or {}
        seen = self.statuses.setdefault(job["metadata"]["name"], [])
        if not seen or seen[-1] != status:
            seen.append(status)

    def true_sequence(self, name: str) -> list[str]:
        """The condition types in the order they became True, over the stored statuses
        (a type that stays True across several writes appears once)."""
        out: list[str] = []
        before: set[str] = set()
        for status in list(self.statuses.get(name, [])):
            now = {c["type"] for c in status.get("conditions") or [] if c.get("status") == "True"}
            for c in status.get("conditions") or []:
                if c["type"] in now and c["type"] not in before:
                    out.append(c["type"])
            before = now
        return out

    def saw(self, name: str, type_: str, status: str, reason: str) -> dict[str, Any] | None:
        for st in list(self.statuses.get(name, [])):
            for c in st.get("conditions") or []:
                if (c["type"], c.get("status"), c.get("reason")) == (type_, status, reason):
                    return dict(c)
        return None
