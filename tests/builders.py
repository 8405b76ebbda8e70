"""Fluent builders for TFJobs, pods and services as plain dicts (jobset ``wrappers.go`` style).

    job = make_tfjob("t").chief().ps(1).worker(2).obj()
    pod = make_pod(job, "Worker", 0).running().obj()
    svc = make_service(job, "Worker", 0)

Every builder returns fresh dicts, so tests can mutate what they get.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any, Self

from reconcile.api.labels import (
    JOB_ROLE_LABEL,
    JOB_ROLE_MASTER,
    replica_labels,
    replica_name,
)
from reconcile.api.models import TFJob
from reconcile.api.names import TRACKING_FINALIZER
from reconcile.api.spec import read_job
from reconcile.api.status_types import format_time
from reconcile.objects.observed import ObservedPod, observe
from reconcile.objects.pods import JobRef, owner_reference
from reconcile.objects.services import build_service

T0 = datetime(2024, 1, 1, 0, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    """T0 + seconds: test clocks are offsets from a fixed instant."""
    return T0 + timedelta(seconds=seconds)


def ts(seconds: float) -> str:
    return format_time(at(seconds))


def container(
    name: str = "tensorflow", image: str = "img", ports: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image}
    if ports is not None:
        c["ports"] = ports
    return c


class TFJobBuilder:
    def __init__(self, name: str, namespace: str = "ns", uid: str | None = None) -> None:
        self._job: dict[str, Any] = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "TFJob",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "uid": uid or f"uid-{name}",
                "generation": 1,
                "resourceVersion": "1",
                "creationTimestamp": ts(0),
            },
            "spec": {"tfReplicaSpecs": {}},
        }

    # --- replicas -----------------------------------------------------------------------

    def replica(
        self,
        rtype: str,
        replicas: int | None = 1,
        *,
        restart_policy: str | None = None,
        containers: list[dict[str, Any]] | None = None,
        template: dict[str, Any] | None = None,
    ) -> Self:
        spec: dict[str, Any] = {}
        if replicas is not None:
            spec["replicas"] = replicas
        if restart_policy is not None:
            spec["restartPolicy"] = restart_policy
        spec["template"] = template or {"spec": {"containers": containers or [container()]}}
        self._job["spec"]["tfReplicaSpecs"][rtype] = spec
        return self

    def chief(self, replicas: int | None = 1, **kw: Any) -> Self:
        return self.replica("Chief", replicas, **kw)

    def master(self, replicas: int | None = 1, **kw: Any) -> Self:
        return self.replica("Master", replicas, **kw)

    def ps(self, replicas: int | None = 1, **kw: Any) -> Self:
        return self.replica("PS", replicas, **kw)

    def worker(self, replicas: int | None = 1, **kw: Any) -> Self:
        return self.replica("Worker", replicas, **kw)

    def evaluator(self, replicas: int | None = 1, **kw: Any) -> Self:
        return self.replica("Evaluator", replicas, **kw)

    # --- policies -----------------------------------------------------------------------

    def _run_policy(self) -> dict[str, Any]:
        rp: dict[str, Any] = self._job["spec"].setdefault("runPolicy", {})
        return rp

    def clean_pod_policy(self, policy: str) -> Self:
        self._run_policy()["cleanPodPolicy"] = policy
        return self

    def ttl(self, seconds: int) -> Self:
        self._run_policy()["ttlSecondsAfterFinished"] = seconds
        return self

    def active_deadline(self, seconds: int) -> Self:
        self._run_policy()["activeDeadlineSeconds"] = seconds
        return self

    def backoff_limit(self, limit: int) -> Self:
        self._run_policy()["backoffLimit"] = limit
        return self

    def suspend(self, value: bool = True) -> Self:
        self._run_policy()["suspend"] = value
        return self

    def managed_by(self, value: str) -> Self:
        self._run_policy()["managedBy"] = value
        return self

    def success_policy(self, value: str) -> Self:
        self._job["spec"]["successPolicy"] = value
        return self

    def dynamic_worker(self, value: bool = True) -> Self:
        self._job["spec"]["enableDynamicWorker"] = value
        return self

    # --- metadata and status ------------------------------------------------------------

    def generation(self, gen: int) -> Self:
        self._job["metadata"]["generation"] = gen
        return self

    def deleting(self) -> Self:
        self._job["metadata"]["deletionTimestamp"] = ts(0)
        return self

    def status(self, status: dict[str, Any] | None) -> Self:
        if status is None:
            self._job.pop("status", None)
        else:
            self._job["status"] = copy.deepcopy(status)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._job)


def typed(builder: TFJobBuilder) -> TFJob:
    """The job as the planner reads it (reconcile.api.spec): valid, defaulted."""
    job = read_job(builder.obj()).tfjob
    assert job is not None, read_job(builder.obj()).invalid_message
    return job


def make_tfjob(name: str = "t", namespace: str = "ns", uid: str | None = None) -> TFJobBuilder:
    return TFJobBuilder(name, namespace, uid)


def _ref(job: dict[str, Any]) -> JobRef:
    meta = job["metadata"]
    return JobRef(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])


class PodBuilder:
    def __init__(self, job: dict[str, Any], rtype: str, index: int) -> None:
        ref = _ref(job)
        name = replica_name(ref.name, rtype, index)
        labels = replica_labels(ref.name, rtype, index)
        specs = job["spec"]["tfReplicaSpecs"]
        if rtype in ("Chief", "Master") or (
            rtype == "Worker" and index == 0 and not ({"Chief", "Master"} & set(specs))
        ):
            labels[JOB_ROLE_LABEL] = JOB_ROLE_MASTER
        self._pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": ref.namespace,
                "uid": f"pod-{name}-1",
                "labels": labels,
                "ownerReferences": [owner_reference(ref)],
                "creationTimestamp": ts(1),
            },
            "spec": {"nodeName": "node-1", "containers": [container()]},
            "status": {"phase": "Pending"},
        }

    def tracked(self) -> Self:
        """Carrying the controller's tracking finalizer, as every pod it creates does."""
        self._pod["metadata"]["finalizers"] = [TRACKING_FINALIZER]
        return self

    def unscheduled(self) -> Self:
        self._pod["spec"].pop("nodeName", None)
        return self

    def uid(self, uid: str) -> Self:
        self._pod["metadata"]["uid"] = uid
        return self

    def created(self, seconds: float) -> Self:
        self._pod["metadata"]["creationTimestamp"] = ts(seconds)
        return self

    def phase(self, phase: str) -> Self:
        self._pod["status"]["phase"] = phase
        return self

    def pending(self) -> Self:
        return self.phase("Pending")

    def running(self, started: float = 2) -> Self:
        self._pod["status"]["startTime"] = ts(started)
        return self.phase("Running")

    def _terminated(self, code: int, finished: float, started: float) -> None:
        self._pod["status"]["startTime"] = ts(started)
        self._pod["status"]["containerStatuses"] = [
            {
                "name": "tensorflow",
                "restartCount": 0,
                "state": {"terminated": {"exitCode": code, "finishedAt": ts(finished)}},
            }
        ]

    def succeeded(self, finished: float = 10, started: float = 2) -> Self:
        self._terminated(0, finished, started)
        return self.phase("Succeeded")

    def failed(self, code: int | None = 1, finished: float = 10, started: float = 2) -> Self:
        """Failed; code None means no terminated container status (never ran)."""
        if code is not None:
            self._terminated(code, finished, started)
        return self.phase("Failed")

    def restarts(self, count: int) -> Self:
        statuses = self._pod["status"].setdefault(
            "containerStatuses", [{"name": "tensorflow", "state": {"running": {}}}]
        )
        statuses[0]["restartCount"] = count
        return self

    def evicted(self) -> Self:
        self._pod["status"]["reason"] = "Evicted"
        return self.phase("Failed")

    def disruption_target(self) -> Self:
        self._pod["status"].setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
        )
        return self

    def terminating(self, requested: float = 20, grace: int = 30) -> Self:
        self._pod["metadata"]["deletionTimestamp"] = ts(requested + grace)
        self._pod["metadata"]["deletionGracePeriodSeconds"] = grace
        return self

    def label(self, key: str, value: str) -> Self:
        self._pod["metadata"]["labels"][key] = value
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)

    def view(self) -> ObservedPod:
        """The pod as a pass reads it (reconcile.objects.observed)."""
        return observe(self.obj())


def make_pod(job: dict[str, Any], rtype: str, index: int) -> PodBuilder:
    return PodBuilder(job, rtype, index)


def make_service(job: dict[str, Any], rtype: str, index: int) -> dict[str, Any]:
    svc = build_service(
        _ref(job),
        rtype,
        index,
        {"spec": {"containers": [container()]}},
        operator_name="tfjob-controller",
    )
    svc["metadata"]["uid"] = f"svc-{svc['metadata']['name']}"
    return svc
