"""Pod faults: graceful delete, force delete (grace 0), eviction (the Eviction API) and a
container kill (exit 137 through kwok's exit-code annotation). kwok does what a kubelet
does with the kill: under OnFailure and Always it restarts the container in place (the
pod stays Running, its restartCount goes up), under Never (ExitCode's pods too) the pod
fails.

A fault waits until its target is fair — the pod is Running and not hit before (a pod
restarted in place is a fair target again once its restart is counted), the job
is neither suspended nor finished, its earlier faults are all in its status and the
status lists the index as active — because a pod removed before the controller ever saw
it running cannot be told from one that never existed (docs/semantics.md#run-policies), and the
model could not say what it must count. Faults on one job are serialized (the job's
lock); faults on different jobs overlap freely.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from reconcile.api.status_types import parse_indexes
from reconcile.objects.pods import restart_count
from tests.chaos.env import Api, Unreachable
from tests.chaos.history import History, counters, live, true_condition
from tests.chaos.model import EVICT, EXIT, FAILED, FORCE, GRACEFUL, SUCCEEDED, JobModel
from tests.chaos.plan import PodFault
from tests.chaos.progress import say

EXIT_ANNOTATION = "kwok.test/exit-code"
#: How long a fault may wait for a fair target (a failover takes up to ~17 s, an
#: apiserver restart a few more; a replacement after a retry up to 2 s of backoff).
TARGET_PATIENCE = 120.0


def suspended(job: dict[str, Any]) -> bool:
    return bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend")) or bool(
        true_condition(job, "Suspended")
    )


def quiet(history: History, m: JobModel) -> bool:
    """Every pod of the job Running and live, and the status shows every fault done."""
    job = history.jobs.by_name(m.name)
    if job is None or suspended(job) or true_condition(job, SUCCEEDED, FAILED):
        return False
    status = job.get("status") or {}
    if any(counters(status, rt) != m.counts(rt) for rt in m.specs):
        return False
    pods = history.job_pods(m.name)
    return len(pods) == len(m.slots()) and all(
        live(p) and (p.get("status") or {}).get("phase") == "Running" for p in pods
    )


@dataclass
class PodFaults:
    api: Api
    history: History
    models: list[JobModel]
    ns: str
    applied: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    #: (pod UID, restartCount) of every pod hit: a pod restarted in place is another
    #: run of its program, and may be hit again
    _hit: set[tuple[str, int]] = field(default_factory=set)

    def _target(self, m: JobModel, rtype: str, index: int) -> dict[str, Any] | None:
        job = self.history.jobs.by_name(m.name)
        if job is None or suspended(job) or true_condition(job, SUCCEEDED, FAILED):
            return None
        pod = self.history.pods.by_name(f"{m.name}-{rtype.lower()}-{index}")
        if pod is None or not live(pod) or (pod.get("status") or {}).get("phase") != "Running":
            return None
        if _run(pod) in self._hit:
            return None
        status = job.get("status") or {}
        if counters(status, rtype) != m.counts(rtype):
            return None
        rs = (status.get("replicaStatuses") or {}).get(rtype) or {}
        if index not in parse_indexes(rs.get("activeIndexes", "")):
            return None
        return pod

    def _job_for(self, f: PodFault) -> JobModel | None:
        """The planned job, or the next one still running if it has ended."""
        n = len(self.models)
        for i in range(n):
            m = self.models[(f.job + i) % n]
            if m.outcome is None and not m.spoiled:
                return m
        return None

    async def run_one(self, f: PodFault) -> None:
        m = self._job_for(f)
        if m is None:
            self.skipped[f.kind] += 1
            return
        async with m.lock:
            if m.outcome is not None:
                self.skipped[f.kind] += 1
                return
            slots = m.slots()
            rtype, index = slots[int(f.pick * len(slots))]
            pod = await self.history.until(
                lambda: self._target(m, rtype, index) if not m.spoiled else None,
                TARGET_PATIENCE if not m.spoiled else 0,
            )
            if pod is None:
                self.skipped[f.kind] += 1
                say(f"fault {f.kind} on {m.name} {rtype}-{index} skipped: never a fair target")
                return
            self._hit.add(_run(pod))
            token = m.apply(f.kind, rtype)
            if await self._send(f.kind, pod):
                self.applied[f.kind] += 1
            else:
                m.undo(token)
                self.skipped[f.kind] += 1

    async def _send(self, kind: str, pod: dict[str, Any]) -> bool:
        """True once the fault certainly landed; False when it certainly did not.

        A 5xx or a lost answer is ambiguous (etcd may commit a write the apiserver timed
        out on): then what the API and the watch history show decides, never a retry's
        404 or 409 alone, since the first attempt may have killed and replaced the pod."""
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        restarts = restart_count(pod)
        path = f"/api/v1/namespaces/{self.ns}/pods/{name}"
        ambiguous = False
        deadline = time.monotonic() + TARGET_PATIENCE
        while time.monotonic() < deadline:
            try:
                status = await self._request(kind, path, name, uid)
            except Unreachable:
                status = 0
            if status and status < 300:
                return True
            if status in (404, 409, 422):
                # gone or replaced meanwhile: ours only if an earlier attempt did it
                return ambiguous and await self._landed(kind, path, uid, restarts)
            if status != 429:
                ambiguous = True
                if await self._landed(kind, path, uid, restarts):
                    return True
            await asyncio.sleep(0.5)
        return False

    async def _request(self, kind: str, path: str, name: str, uid: str) -> int:
        pre = {"preconditions": {"uid": uid}}
        if kind == GRACEFUL:
            status, _ = await self.api.once("DELETE", path, pre)
        elif kind == FORCE:
            status, _ = await self.api.once("DELETE", path, {**pre, "gracePeriodSeconds": 0})
        elif kind == EVICT:
            body = {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": name, "namespace": self.ns},
                "deleteOptions": pre,
            }
            status, _ = await self.api.once("POST", f"{path}/eviction", body)
        else:
            assert kind == EXIT
            annotations = {EXIT_ANNOTATION: "137", "kwok.test/container": "tensorflow"}
            patch = {"metadata": {"uid": uid, "annotations": annotations}}
            status, _ = await self.api.once("PATCH", path, patch, "application/merge-patch+json")
        return status

    async def _landed(self, kind: str, path: str, uid: str, restarts: int) -> bool:
        """Whether an attempt whose answer was lost or ambiguous took effect: the pod as
        the API shows it now, or, once it is gone, as the watch history last saw it. An
        exit landed if the annotation is there still, or was consumed by an in-place
        restart (restartCount above ``restarts``), or the pod failed."""
        status, pod = await self.api.call("GET", path)
        if status == 200 and (pod or {}).get("metadata", {}).get("uid") == uid:
            versions = [pod]
        else:
            versions = self.history.pods.ever.get(uid, [])
            if kind != EXIT:
                return True  # a running pod of ours gone: nothing else deletes those
        if kind == EXIT:
            return any(
                EXIT_ANNOTATION in (p["metadata"].get("annotations") or {})
                or restart_count(p) > restarts
                or (p.get("status") or {}).get("phase") == "Failed"
                for p in versions
            )
        return bool(versions[-1]["metadata"].get("deletionTimestamp"))


def _run(pod: dict[str, Any]) -> tuple[str, int]:
    """One run of a pod's program: its UID and how often it was restarted in place."""
    return pod["metadata"]["uid"], restart_count(pod)
