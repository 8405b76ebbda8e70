"""The reconciler holds progress-only status changes for a short window, so the pods of
one job that start together cost one status write; the first write, a finished job and
anything that emits an event are written at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from controller.clock import FakeClock
from controller.expectations import ControllerExpectations
from controller.store import Store
from controller.types import JSON
from reconcile.tfjob import STATUS_COALESCE_SECONDS, Caches, TFJobReconciler, Writers
from tests.builders import make_pod, make_service, make_tfjob
from tests.fakes import RecordingEvents

KEY = "ns/t"


class StatusWriter:
    """Records status writes; creates and deletes are not expected here."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        raise AssertionError("no creates expected")

    async def delete(self, namespace: str, name: str, **kw: Any) -> None:
        raise AssertionError("no deletes expected")

    async def replace_status(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        self.statuses.append(dict(body["status"]))
        return {"metadata": {"resourceVersion": str(len(self.statuses) + 1)}}

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any], **kw: Any) -> JSON:
        raise AssertionError("no patches expected")


Events = RecordingEvents


class World:
    def __init__(self) -> None:
        self.clock = FakeClock()
        self.job = make_tfjob("t").chief().worker(2).obj()
        self.jobs, self.pods, self.services = Store(), Store(), Store()
        self.jobs.upsert(self.job)
        for rtype, index in (("Chief", 0), ("Worker", 0), ("Worker", 1)):
            self.pods.upsert(make_pod(self.job, rtype, index).obj())
            self.services.upsert(make_service(self.job, rtype, index))
        self.writer = StatusWriter()
        self.events = Events()
        self.expectations = ControllerExpectations(self.clock)
        self.reconciler = TFJobReconciler(
            caches=Caches(jobs=self.jobs, pods=self.pods, services=self.services),
            writers=Writers(jobs=self.writer, pods=self.writer, services=self.writer),
            expectations=self.expectations,
            events=self.events,
            clock=self.clock,
        )

    async def reconcile(self) -> float | None:
        before = len(self.writer.statuses)
        result = await self.reconciler.reconcile(KEY)
        if len(self.writer.statuses) > before:
            # what the informer would deliver: the job with the written status
            rv = str(len(self.writer.statuses) + 1)
            self.job = {
                **self.job,
                "metadata": {**self.job["metadata"], "resourceVersion": rv},
                "status": self.writer.statuses[-1],
            }
            self.jobs.upsert(self.job)
            self.expectations.observe_resource_version(KEY, rv)
        return result.requeue_after

    def set_pod(self, rtype: str, index: int, phase: str) -> None:
        b = make_pod(self.job, rtype, index)
        self.pods.upsert((b.running() if phase == "Running" else b.succeeded()).obj())


def active(status: dict[str, Any], rtype: str) -> int:
    return int(status["replicaStatuses"][rtype].get("active") or 0)


async def test_pods_starting_together_cost_one_status_write() -> None:
    w = World()
    await w.reconcile()
    assert len(w.writer.statuses) == 1  # Created goes out at once

    w.set_pod("Chief", 0, "Running")
    delay = await w.reconcile()
    assert len(w.writer.statuses) == 1
    assert delay == pytest.approx(STATUS_COALESCE_SECONDS)

    w.clock.advance(STATUS_COALESCE_SECONDS / 2)
    w.set_pod("Worker", 0, "Running")
    w.set_pod("Worker", 1, "Running")
    delay = await w.reconcile()
    assert len(w.writer.statuses) == 1
    assert delay == pytest.approx(STATUS_COALESCE_SECONDS / 2)

    w.clock.advance(delay)
    assert await w.reconcile() is None
    assert len(w.writer.statuses) == 2
    written = w.writer.statuses[-1]
    assert active(written, "Chief") == 1 and active(written, "Worker") == 2
    assert any(c["type"] == "Running" and c["status"] == "True" for c in written["conditions"])

    # Finishing is decisive: written in the same pass, with its event.
    w.set_pod("Chief", 0, "Succeeded")
    await w.reconcile()
    assert len(w.writer.statuses) == 3
    assert any(c["type"] == "Succeeded" for c in w.writer.statuses[-1]["conditions"])
    assert "TFJobSucceeded" in w.events.reasons


async def test_a_window_of_zero_writes_every_change() -> None:
    w = World()
    w.reconciler.status_coalesce_seconds = 0
    await w.reconcile()
    w.set_pod("Chief", 0, "Running")
    await w.reconcile()
    w.set_pod("Worker", 0, "Running")
    await w.reconcile()
    assert len(w.writer.statuses) == 3


async def test_a_finish_inside_the_window_is_written_at_once() -> None:
    w = World()
    await w.reconcile()
    w.set_pod("Chief", 0, "Running")
    assert await w.reconcile() is not None
    w.set_pod("Chief", 0, "Succeeded")
    await w.reconcile()
    assert len(w.writer.statuses) == 2
    assert any(c["type"] == "Succeeded" for c in w.writer.statuses[-1]["conditions"])
