"""What one pass costs does not grow with its namespace: a job beside 1 other job and
beside 1,000 (8 workers each, their pods and services cached) is reconciled with the
same cache reads returning the same number of objects, on its first pass (creates) and
on a pass with its pods running."""

from __future__ import annotations

from typing import Any

import anyio
import structlog

from controller.cache.store import Store
from reconcile.sync.tfjob import Caches
from tests.builders import make_pod, make_service, make_tfjob
from tests.fakes import ReconcilerWorld

WORKERS = 8


class Counting(Store):
    """A store that counts its reads and the objects they return."""

    def __init__(self) -> None:
        super().__init__()
        self.reads = 0
        self.returned = 0

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        out = super().get(namespace, name)
        self.returned += out is not None
        return out

    def by_index(self, index: str, value: str) -> list[dict[str, Any]]:
        self.reads += 1
        out = super().by_index(index, value)
        self.returned += len(out)
        return out

    def list(self) -> list[dict[str, Any]]:
        self.reads += 1
        out = super().list()
        self.returned += len(out)
        return out


def world(others: int) -> tuple[ReconcilerWorld, tuple[Counting, Counting, Counting]]:
    job = make_tfjob("t").worker(WORKERS).obj()
    w = ReconcilerWorld(job)
    jobs, pods, services = Counting(), Counting(), Counting()
    jobs.upsert(job)
    for i in range(others):
        other = make_tfjob(f"other-{i}").worker(WORKERS).obj()
        jobs.upsert(other)
        for k in range(WORKERS):
            pods.upsert(make_pod(other, "worker", k).tracked().running().obj())
            services.upsert(make_service(other, "worker", k))
    # the world's reconciler reads these stores, and its informer stand-in fills them
    w.jobs, w.pods, w.services = jobs, pods, services
    w.reconciler.caches = Caches(jobs=jobs, pods=pods, services=services)
    return w, (jobs, pods, services)


async def one_pass(w: ReconcilerWorld) -> None:
    structlog.contextvars.clear_contextvars()
    async with anyio.create_task_group() as tg:
        await tg.start(w.background.run)
        await w.reconciler.reconcile(w.key)
        await anyio.wait_all_tasks_blocked()
        tg.cancel_scope.cancel()


def cost(stores: tuple[Counting, ...]) -> list[tuple[int, int]]:
    out = [(s.reads, s.returned) for s in stores]
    for s in stores:
        s.reads = s.returned = 0
    return out


async def test_a_pass_reads_the_same_beside_1_or_1000_jobs() -> None:
    costs = []
    for others in (1, 1000):
        w, stores = world(others)
        cost(stores)
        await one_pass(w)  # creates the job's 8 pods and services
        first = cost(stores)
        assert len(w.writer.created) == 2 * WORKERS
        w.store_status()
        await one_pass(w)  # its children cached, nothing left to create
        steady = cost(stores)
        costs.append((first, steady))
    assert costs[0] == costs[1], costs
    # and all it reads is its own, (reads, objects) per store (jobs, pods, services):
    # the job; its pods by its name (an earlier job's strays) and by its UID; its
    # services by its UID
    first, steady = costs[1]
    assert first == [(1, 1), (2, 0), (1, 0)]
    assert steady == [(2, 2), (2, 2 * WORKERS), (1, WORKERS)]
