"""With its background writer running, a pass hands its creates off and goes on to the
status write; expectations keep the job's next pass from acting until they are observed,
and a create that fails later requeues the job with backoff."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import anyio

from controller import errors
from controller.clock import FakeClock
from controller.expectations import ControllerExpectations
from controller.store import Store
from controller.types import JSON
from reconcile.tfjob import (
    CREATE_RETRY_BASE_SECONDS,
    Caches,
    TFJobReconciler,
    Writers,
    pods_key,
    services_key,
)
from tests.builders import make_tfjob
from tests.fakes import RecordingEvents

KEY = "ns/t"


class Writer:
    """Creates block until released; each may be told to fail."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.created: list[str] = []
        self.fail: set[str] = set()
        self.statuses: list[dict[str, Any]] = []

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        await self.release.wait()
        name = body["metadata"]["name"]
        if name in self.fail:
            raise errors.ServerError(500, "InternalError", "boom")
        self.created.append(name)
        return dict(body)

    async def delete(self, namespace: str, name: str, **kw: Any) -> None:
        raise AssertionError("no deletes expected")

    async def replace_status(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        self.statuses.append(dict(body["status"]))
        return {"metadata": {"resourceVersion": str(100 + len(self.statuses))}}

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any], **kw: Any) -> JSON:
        raise AssertionError("no patches expected")


Events = RecordingEvents


class Requeues:
    def __init__(self) -> None:
        self.after: list[tuple[str, float]] = []

    def requeue(self, key: str) -> None:
        self.after.append((key, 0.0))

    def requeue_after(self, key: str, seconds: float) -> None:
        self.after.append((key, seconds))


def world() -> tuple[TFJobReconciler, Writer, Events, Requeues, ControllerExpectations]:
    clock = FakeClock()
    jobs, pods, services = Store(), Store(), Store()
    jobs.upsert(make_tfjob("t").chief().worker(2).obj())
    writer, events, requeues = Writer(), Events(), Requeues()
    expectations = ControllerExpectations(clock)
    reconciler = TFJobReconciler(
        caches=Caches(jobs=jobs, pods=pods, services=services),
        writers=Writers(jobs=writer, pods=writer, services=writer),
        expectations=expectations,
        events=events,
        clock=clock,
        requeue=requeues,
    )
    return reconciler, writer, events, requeues, expectations


async def test_pass_returns_before_its_creates_and_gates_the_next_one() -> None:
    reconciler, writer, events, _, expectations = world()
    async with anyio.create_task_group() as tg:
        await tg.start(reconciler.run)
        with anyio.fail_after(1):
            await reconciler.reconcile(KEY)  # would hang if it waited for the creates
        assert writer.statuses, "the status write does not wait for the creates"
        assert writer.created == []
        assert expectations.pending(pods_key(KEY))[0] == 3
        assert expectations.pending(services_key(KEY))[0] == 3
        # the next pass does not act on a cache that lacks its own creates
        result = await reconciler.reconcile(KEY)
        assert result.requeue_after is not None
        assert len(writer.statuses) == 1
        writer.release.set()
        await anyio.wait_all_tasks_blocked()
        assert len(writer.created) == 6
        assert events.reasons.count("SuccessfulCreatePod") == 3
        tg.cancel_scope.cancel()


async def test_a_failed_background_create_lowers_expectation_and_requeues() -> None:
    reconciler, writer, events, requeues, expectations = world()
    writer.fail = {"t-worker-1"}
    async with anyio.create_task_group() as tg:
        await tg.start(reconciler.run)
        await reconciler.reconcile(KEY)
        writer.release.set()
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()
    assert "FailedCreatePod" in events.reasons
    # the pod and the service of that replica both failed: the backoff grows per failure
    assert requeues.after == [
        (KEY, CREATE_RETRY_BASE_SECONDS),
        (KEY, 2 * CREATE_RETRY_BASE_SECONDS),
    ]
    # the failed creates were lowered here; the others wait for the informer
    assert expectations.pending(pods_key(KEY))[0] == 2
    assert expectations.pending(services_key(KEY))[0] == 2


async def test_without_the_background_writer_creates_are_awaited_inline() -> None:
    reconciler, writer, _, requeues, _ = world()
    writer.release.set()
    await reconciler.reconcile(KEY)
    assert len(writer.created) == 6
    assert requeues.after == []
