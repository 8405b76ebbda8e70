from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from controller.clock import FakeClock
from controller.ratelimit import ItemExponentialRateLimiter
from controller.workqueue import WorkQueue


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@asynccontextmanager
async def running_queue(clock: FakeClock) -> AsyncIterator[WorkQueue[str]]:
    """A queue with its delay loop running and a 1s→10s per-item limiter. (A context
    manager, not a fixture: pytest-asyncio runs fixture teardown in another task, and
    a task group must be exited by the task that entered it.)"""
    q = WorkQueue[str]("test", clock=clock, rate_limiter=ItemExponentialRateLimiter[str](1.0, 10.0))
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.run)
        yield q
        q.shut_down()


async def get_soon(q: WorkQueue[str]) -> str:
    """get() with a safety net so a broken queue fails the test instead of hanging."""
    with anyio.fail_after(5):
        return await q.get()
