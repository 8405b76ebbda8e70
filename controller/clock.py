"""Clocks: the real one and a manually driven one for tests.

Contract (controller.types.Clock): ``now()`` is timezone-aware UTC wall time and is only
for timestamps written to the API; every local decision (delays, TTLs, leases) uses
``monotonic()``; ``sleep()`` is the only way machinery waits for time to pass.
``FakeClock`` never moves on its own: ``advance()`` moves both readings and wakes the
sleepers whose deadline has been reached, in deadline order.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from datetime import UTC, datetime, timedelta

import anyio
from anyio.lowlevel import checkpoint

from controller.types import Clock


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(seconds, 0.0))


class FakeClock:
    def __init__(self, start: datetime | None = None, monotonic: float = 1000.0) -> None:
        self._wall = start or datetime(2024, 1, 1, tzinfo=UTC)
        self._mono = monotonic
        self._sleepers: list[tuple[float, int, anyio.Event]] = []
        self._seq = itertools.count()

    def now(self) -> datetime:
        return self._wall

    def monotonic(self) -> float:
        return self._mono

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await checkpoint()
            return
        event = anyio.Event()
        heapq.heappush(self._sleepers, (self._mono + seconds, next(self._seq), event))
        await event.wait()

    @property
    def sleepers(self) -> int:
        """How many sleeps are pending (cancelled sleeps are counted until woken)."""
        return len(self._sleepers)

    def next_deadline(self) -> float | None:
        return self._sleepers[0][0] if self._sleepers else None

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper that is due. Woken tasks run at
        their next scheduling point, so callers await a condition afterwards."""
        self._mono += seconds
        self._wall += timedelta(seconds=seconds)
        while self._sleepers and self._sleepers[0][0] <= self._mono:
            heapq.heappop(self._sleepers)[2].set()


#: What ``on_tick`` adds on the event loop's timeline: uvloop truncates a delay to whole
#: milliseconds, and half a millisecond past the tick survives that.
TICK_SLACK = 0.0005


def on_tick(seconds: float, tick: float, clock: Clock) -> float:
    """``seconds``, lengthened so the wait ends on the next multiple of ``tick`` on the
    timeline that ``clock``'s sleeps use (the event loop's, for the system clock).

    Why: in a VM, a wake-up from idle costs this process far more CPU than the work it
    wakes for (measured here: a request sent alone every 50 ms costs 640 us of CPU, five
    sent together every 250 ms 220 us each; caches and TLB come back cold). Timers that
    share a tick share one wake-up, and so do the requests they release and, mostly,
    the answers. ``tick <= 0``: exactly ``seconds``."""
    if tick <= 0:
        return max(seconds, 0.0)
    loop = isinstance(clock, SystemClock)
    now = anyio.current_time() if loop else clock.monotonic()
    # a target already on the grid stays there; half a millisecond past it survives
    # uvloop's truncation of a delay to whole milliseconds
    target = math.ceil((now + seconds) / tick - 1e-9) * tick
    return max(target - now, 0.0) + (TICK_SLACK if loop else 0.0)


async def wait_event(event: anyio.Event, seconds: float | None, clock: Clock) -> bool:
    """Wait for ``event`` for at most ``seconds`` of ``clock`` time.
    Returns whether the event was set. ``seconds=None`` waits forever."""
    if event.is_set():
        return True
    if seconds is None:
        await event.wait()
        return True
    if isinstance(clock, SystemClock):
        # A deadline on the event loop's own clock: no timer task per wait.
        with anyio.move_on_after(max(seconds, 0.0)):
            await event.wait()
        return event.is_set()
    async with anyio.create_task_group() as tg:

        async def _timer() -> None:
            await clock.sleep(seconds)
            tg.cancel_scope.cancel()

        tg.start_soon(_timer)
        await event.wait()
        tg.cancel_scope.cancel()
    return event.is_set()
