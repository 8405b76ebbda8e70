from __future__ import annotations

import time

import anyio
import structlog

from controller.clock import FakeClock
from controller.observability.looplag import LoopLagMonitor
from controller.observability.metrics import Metrics


async def test_a_blocking_callback_shows_as_lag() -> None:
    metrics = Metrics()
    monitor = LoopLagMonitor(metrics.loop_lag.observe, interval=0.01, warn_after=10)
    async with anyio.create_task_group() as tg:
        await tg.start(monitor.run)
        await anyio.sleep(0.005)  # the monitor is asleep now
        time.sleep(0.15)  # noqa: ASYNC251  (the point: a callback that never yields)
        await anyio.sleep(0.03)
        tg.cancel_scope.cancel()
    registry = metrics.registry
    assert (registry.sample("event_loop_lag_seconds_count") or 0) >= 2
    assert registry.sample("event_loop_lag_seconds_bucket", {"le": "0.1"}) < (
        registry.sample("event_loop_lag_seconds_bucket", {"le": "0.25"})
    ), "one sample lagged between 0.1 and 0.25 s"


def test_warnings_are_rate_limited_and_carry_the_worst_lag() -> None:
    clock = FakeClock()
    seen: list[float] = []
    monitor = LoopLagMonitor(seen.append, warn_after=0.25, warn_every=30, clock=clock)
    with structlog.testing.capture_logs() as logs:
        monitor.sample(0.3)  # warns
        monitor.sample(0.9)  # within 30 s: remembered, not logged
        monitor.sample(0.01)
        clock.advance(31)
        monitor.sample(0.4)  # warns with the worst since the last warning
        monitor.sample(-0.001)  # an early wake counts as no lag
    assert seen == [0.3, 0.9, 0.01, 0.4, 0.0]
    assert [entry["lag_seconds"] for entry in logs] == [0.3, 0.9]
