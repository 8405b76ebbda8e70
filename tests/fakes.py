"""Small recording fakes shared by unit tests: the writers, the event sink, and a whole
reconciler over in-memory caches, wired exactly as the composition root wires it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio

from controller import errors
from controller.cache.store import Store, key_of
from controller.clock import FakeClock
from controller.queue.workqueue import WorkQueue
from controller.runtime.background import Background
from controller.runtime.expectations import ControllerExpectations
from controller.runtime.pacer import Pacer
from controller.types import JSON, split_key
from reconcile.sync.handlers import pod_handler, service_handler
from reconcile.sync.pacing import STATUS_PACE_SECONDS
from reconcile.sync.tfjob import UNSATISFIED_RECHECK_SECONDS, Caches, TFJobReconciler, Writers


class RecordingEvents:
    """An EventSink that remembers the reasons it was given, in order."""

    def __init__(self) -> None:
        self.reasons: list[str] = []

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.reasons.append(reason)


class RecordingWriter:
    """An ObjectWriter that records every write. Creates wait for ``release`` (set by
    default); names in ``fail`` fail with ``error`` (a server error unless set); deletes of UIDs not in
    ``live`` answer NotFound when ``strict_deletes`` is set."""

    def __init__(
        self, *, hold_creates: bool = False, on_create: Callable[[JSON], None] | None = None
    ) -> None:
        self.on_create = on_create
        self.release = anyio.Event()
        if not hold_creates:
            self.release.set()
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.fail: set[str] = set()
        self.error: Callable[[], Exception] = lambda: errors.ServerError(
            500, "InternalError", "boom"
        )
        self.statuses: list[dict[str, Any]] = []
        self.urgent: list[bool] = []  # replace_status urgency, per write
        #: what ``get`` finds, by name (a create whose answer was lost)
        self.stored: dict[str, JSON] = {}
        self.patched: list[tuple[str, Mapping[str, Any]]] = []
        self.batches: list[int] = []  # patch_many's batch sizes
        self.create_attempts = 0

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        self.create_attempts += 1
        await self.release.wait()
        name = body["metadata"]["name"]
        if name in self.fail:
            raise self.error()
        self.created.append(name)
        created = {**body, "metadata": {**body["metadata"], "uid": f"uid-{name}"}}
        if self.on_create is not None:
            self.on_create(created)
        return created

    async def get(self, namespace: str, name: str) -> JSON | None:
        return self.stored.get(name)

    async def delete(self, namespace: str, name: str, **kw: Any) -> None:
        self.deleted.append(name)

    async def replace_status(
        self, namespace: str, name: str, body: Mapping[str, Any], *, urgent: bool = True
    ) -> JSON:
        self.statuses.append(dict(body["status"]))
        self.urgent.append(urgent)
        return {"metadata": {"resourceVersion": str(100 + len(self.statuses))}}

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any], **kw: Any) -> JSON:
        if name in self.fail:
            raise self.error()
        self.patched.append((name, body))
        return {"metadata": {"name": name, "resourceVersion": f"patched-{len(self.patched)}"}}

    async def patch_many(
        self, items: list[tuple[str, str, Mapping[str, Any]]], **kw: Any
    ) -> list[Any]:
        """As the pipelined writer answers: each patch's answer or its exception."""
        self.batches.append(len(items))
        out: list[Any] = []
        for namespace, name, body in items:
            try:
                out.append(await self.patch(namespace, name, body, **kw))
            except Exception as e:
                out.append(e)
        return out


def take_all(queue: WorkQueue[str]) -> list[str]:
    """Every key queued now, each taken and done."""
    out = []
    while (item := queue.get_nowait()) is not None:
        queue.done(item)
        out.append(item)
    return out


class ReconcilerWorld:
    """A TFJobReconciler over in-memory stores, with the production queue and background
    work (run them with ``running()``)."""

    def __init__(
        self, job: JSON, *, hold_creates: bool = False, own_releases: bool = False
    ) -> None:
        self.clock = FakeClock()
        self.jobs, self.pods, self.services = Store(), Store(), Store()
        self.jobs.upsert(job)
        self.key = key_of(job)
        self.writer = RecordingWriter(hold_creates=hold_creates, on_create=self._observe)
        self.events = RecordingEvents()
        #: the tracking finalizer's writer, with ``own_releases`` (the app's own budget)
        self.releases = RecordingWriter()
        self.expectations = ControllerExpectations(self.clock)
        self.queue = WorkQueue[str]("tfjob", clock=self.clock)
        self.background = Background(self.queue, drained_recheck=UNSATISFIED_RECHECK_SECONDS)
        self.reconciler = TFJobReconciler(
            caches=Caches(jobs=self.jobs, pods=self.pods, services=self.services),
            writers=Writers(
                jobs=self.writer,
                pods=self.writer,
                services=self.writer,
                releases=self.releases if own_releases else None,
            ),
            expectations=self.expectations,
            events=self.events,
            clock=self.clock,
            spawner=self.background,
            pacer=Pacer(self.clock, STATUS_PACE_SECONDS),
        )

    def _observe(self, obj: JSON) -> None:
        """What the informers and their handlers would do with a created child."""
        store = self.pods if obj.get("kind") == "Pod" else self.services
        store.upsert(obj)
        handler = pod_handler if obj.get("kind") == "Pod" else service_handler
        on_add = handler(self.expectations, self.queue).on_add
        assert on_add is not None
        on_add(obj)

    def store_status(self) -> None:
        """The informer delivering the job with its last written status."""
        job = self.jobs.get(*split_key(self.key))
        assert job is not None and self.writer.statuses
        rv = str(100 + len(self.writer.statuses))
        job = {**job, "metadata": {**job["metadata"], "resourceVersion": rv}}
        job["status"] = self.writer.statuses[-1]
        self.jobs.upsert(job)
        self.expectations.observe_resource_version(self.key, rv)
