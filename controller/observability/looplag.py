"""How late the event loop runs what is due: the one measure of a blocked loop.

Every ``interval`` a task asks to be woken after ``interval`` seconds; the time it
wakes beyond that is the lag any callback due then suffered (a reconcile that
computed for 200 ms without awaiting shows as 200 ms). Each sample goes into the
``event_loop_lag_seconds`` histogram; a lag above ``warn_after`` is also logged, at
most once per ``warn_every`` seconds, with the worst lag since the last warning.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog
from anyio.abc import TaskStatus

from controller.clock import SystemClock, on_tick
from controller.types import Clock

log = structlog.get_logger(__name__)


class LoopLagMonitor:
    def __init__(
        self,
        observe: Callable[[float], None],
        *,
        interval: float = 0.1,
        warn_after: float = 0.25,
        warn_every: float = 30.0,
        clock: Clock | None = None,
    ) -> None:
        self._observe = observe
        self.interval = interval
        self.warn_after = warn_after
        self.warn_every = warn_every
        self._clock = clock or SystemClock()
        self.worst = 0.0  # since the last warning
        self._warned_at: float | None = None

    def sample(self, lag: float) -> None:
        lag = max(lag, 0.0)
        self._observe(lag)
        if lag < self.warn_after:
            return
        self.worst = max(self.worst, lag)
        now = self._clock.monotonic()
        if self._warned_at is None or now - self._warned_at >= self.warn_every:
            log.warning("event loop stalled", lag_seconds=round(self.worst, 3))
            self._warned_at, self.worst = now, 0.0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            # on the interval's own grid: the wake-up is shared with other timers on it
            asked = self._clock.monotonic()
            wait = on_tick(self.interval, self.interval, self._clock)
            await anyio.sleep(wait)
            self.sample(self._clock.monotonic() - asked - wait)
