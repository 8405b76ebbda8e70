"""The watch history: the driver's own LIST+WATCH of the namespace's pods and TFJobs
(straight to the apiserver, relisting after a restart or a 410), with the invariants
checked on every event:

- never two live pods (no deletionTimestamp) for one (job, replica type, index);
- a job's stored counters (restarts, disruptions, failed) never exceed what the faults
  done so far can explain (the model is updated before a fault is sent);
- restarts past ``backoffLimit`` only together with the job's Failed condition;
- a terminal condition only as the job's policy says, and nothing about it (condition,
  counters) moves afterwards.

Waiters use ``until``: a predicate re-evaluated on every event.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

import aiohttp
import orjson

from tests.chaos.env import Api, Unreachable
from tests.chaos.model import FAILED, SUCCEEDED, JobModel
from tests.chaos.violations import Violations

T = TypeVar("T")
Handler = Callable[[str, dict[str, Any]], None]
LABEL = "training.kubeflow.org/"


class Pulse:
    """Fires on every change; waiters re-check their condition."""

    def __init__(self) -> None:
        self._ev = asyncio.Event()

    def fire(self) -> None:
        self._ev.set()
        self._ev = asyncio.Event()

    async def wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._ev.wait(), timeout)
        except TimeoutError:
            pass


class Collection:
    """LIST, then WATCH from its resourceVersion; relist (with synthetic events for what
    changed in between) whenever the watch cannot go on."""

    def __init__(self, api: Api, path: str, handler: Handler) -> None:
        self.api = api
        self.path = path
        self.handler = handler
        self.store: dict[str, dict[str, Any]] = {}  # by uid
        self._names: dict[str, str] = {}  # name -> uid of the newest object so named
        #: every version seen of every object, gone ones included (for "did it happen?")
        self.ever: dict[str, list[dict[str, Any]]] = {}
        self.synced = asyncio.Event()
        self.relists = 0

    def by_name(self, name: str) -> dict[str, Any] | None:
        uid = self._names.get(name)
        return self.store.get(uid) if uid else None

    def _put(self, obj: dict[str, Any]) -> None:
        md = obj["metadata"]
        self.store[md["uid"]] = obj
        self.ever.setdefault(md["uid"], []).append(obj)
        self._names[md["name"]] = md["uid"]

    def _drop(self, obj: dict[str, Any]) -> None:
        md = obj["metadata"]
        self.store.pop(md["uid"], None)
        if self._names.get(md["name"]) == md["uid"]:
            del self._names[md["name"]]

    async def run(self) -> None:
        while True:
            try:
                status, lst = await self.api.once("GET", self.path)
                if status != 200:
                    await asyncio.sleep(0.5)
                    continue
                self._replace(lst["items"])
                self.synced.set()
                await self._watch(lst["metadata"]["resourceVersion"])
            except (Unreachable, aiohttp.ClientError, TimeoutError, OSError, ValueError):
                await asyncio.sleep(0.5)
            self.relists += 1

    def _replace(self, items: list[dict[str, Any]]) -> None:
        fresh = {o["metadata"]["uid"]: o for o in items}
        for uid, old in list(self.store.items()):
            if uid not in fresh:
                self._drop(old)
                self.handler("DELETED", old)
        for uid, obj in fresh.items():
            prev = self.store.get(uid)
            if (
                prev is None
                or prev["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]
            ):
                self._put(obj)
                self.handler("ADDED" if prev is None else "MODIFIED", obj)

    async def _watch(self, rv: str) -> None:
        http = self.api.http
        while True:
            params = {
                "watch": "1",
                "resourceVersion": rv,
                "allowWatchBookmarks": "true",
                "timeoutSeconds": "60",
            }
            async with http.session.get(
                http.base + self.path,
                params=params,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=90),
            ) as r:
                if r.status != 200:
                    return
                while True:
                    line = await r.content.readline()
                    if not line:
                        break  # the server's timeout: watch on from rv
                    ev = orjson.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        return  # 410 Gone and the like: relist
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if ev["type"] == "BOOKMARK":
                        continue
                    if ev["type"] == "DELETED":
                        self._drop(obj)
                    else:
                        self._put(obj)
                    self.handler(ev["type"], obj)


def live(obj: dict[str, Any]) -> bool:
    return not obj["metadata"].get("deletionTimestamp")


def counters(status: dict[str, Any], rtype: str) -> tuple[int, int, int]:
    got = ((status.get("replicaStatuses") or {}).get(rtype)) or {}
    return (int(got.get("restarts", 0)), int(got.get("disruptions", 0)), int(got.get("failed", 0)))


def true_condition(job: dict[str, Any], *types: str) -> dict[str, Any] | None:
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in types and c.get("status") == "True":
            return dict(c)
    return None


class History:
    def __init__(
        self, api: Api, ns: str, models: dict[str, JobModel], violations: Violations
    ) -> None:
        self.models = models
        self.violations = violations
        self.pulse = Pulse()
        self.pods = Collection(api, f"/api/v1/namespaces/{ns}/pods", self._pod)
        self.jobs = Collection(api, f"/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs", self._job)
        self._slots: dict[tuple[str, str, str], dict[str, str]] = {}
        self._added: deque[float] = deque(maxlen=256)
        self._ended: dict[str, Any] = {}
        self.status_changes = 0
        self.status_pulse = Pulse()

    async def run(self) -> None:
        await asyncio.gather(self.pods.run(), self.jobs.run())

    async def synced(self) -> None:
        await self.pods.synced.wait()
        await self.jobs.synced.wait()

    async def until(self, pred: Callable[[], T | None], timeout: float) -> T | None:
        deadline = time.monotonic() + timeout
        while True:
            got = pred()
            if got:
                return got
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            await self.pulse.wait(min(left, 1.0))

    def burst(self, n: int, within: float) -> bool:
        """n pods or more created within the last ``within`` seconds."""
        now = time.monotonic()
        return sum(1 for t in self._added if now - t <= within) >= n

    def job_pods(self, job: str) -> list[dict[str, Any]]:
        return [
            p
            for p in self.pods.store.values()
            if (p["metadata"].get("labels") or {}).get(LABEL + "job-name") == job
        ]

    # --- invariants -----------------------------------------------------------------

    def _pod(self, type_: str, pod: dict[str, Any]) -> None:
        md = pod["metadata"]
        labels = md.get("labels") or {}
        slot = (
            labels.get(LABEL + "job-name", ""),
            labels.get(LABEL + "replica-type", ""),
            labels.get(LABEL + "replica-index", ""),
        )
        held = self._slots.setdefault(slot, {})
        if type_ == "DELETED" or not live(pod):
            held.pop(md["uid"], None)
        else:
            held[md["uid"]] = md["name"]
            if len(held) > 1:
                self.violations.add(
                    "two-live-pods", f"{slot}: {sorted(held.values())} ({sorted(held)})"
                )
        if type_ == "ADDED":
            self._added.append(time.monotonic())
        self.pulse.fire()

    def _job(self, type_: str, job: dict[str, Any]) -> None:
        self.pulse.fire()
        if type_ == "DELETED":
            return
        name = job["metadata"]["name"]
        m = self.models.get(name)
        if m is None:
            return
        self.status_changes += 1
        self.status_pulse.fire()
        status = job.get("status") or {}
        for rtype in m.specs:
            got, want = counters(status, rtype), m.counts(rtype)
            for label, g, w in zip(("restarts", "disruptions", "failed"), got, want, strict=True):
                if g > w:
                    m.spoiled = True
                    self.violations.add(
                        "counted", f"{name} {rtype} {label} = {g}, but only {w} happened"
                    )
        end = true_condition(job, SUCCEEDED, FAILED)
        limit = m.shape.backoff_limit
        restarts = sum(counters(status, rt)[0] for rt in m.specs)
        if limit is not None and restarts > limit and (end is None or end["type"] != FAILED):
            self.violations.add(
                "backoff-limit", f"{name}: {restarts} restarts > backoffLimit {limit}, not Failed"
            )
        if end is None:
            return
        got_end = (end["type"], end.get("reason", ""), end.get("message", ""))
        if m.outcome is None or got_end != m.outcome:
            self.violations.add(
                "outcome", f"{name} ended {got_end}, its policy says {m.outcome or 'running'}"
            )
        frozen = (
            got_end,
            end.get("lastTransitionTime"),
            [counters(status, rt) for rt in sorted(m.specs)],
        )
        first = self._ended.setdefault(name, frozen)
        if first != frozen:
            self.violations.add("moved-after-end", f"{name}: {first} then {frozen}")
