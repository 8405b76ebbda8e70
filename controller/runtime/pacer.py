"""Pacer: at most one paced action per key per interval.

Implements controller.types.Pacer. A reconciler asks ``delay(key)`` before an action
that is worth batching (a status write that only reports progress): 0 means go ahead,
and the action is recorded (``mark``); more means wait that long, which the reconciler
returns as its ``requeue_after``, so the workqueue's delay brings the key back when the
pace allows. The pacer only remembers when each key last acted, and forgets keys whose
last action is older than the interval once it holds more than ``max_keys``; it never
blocks, sleeps or schedules anything itself.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, TypeVar

from controller.types import Clock

K = TypeVar("K", bound=Hashable)


MIN_WAIT_SECONDS = 0.001


class Pacer(Generic[K]):
    def __init__(self, clock: Clock, interval: float, *, max_keys: int = 10_000) -> None:
        self._clock = clock
        self.interval = interval
        self._max_keys = max_keys
        self._last: dict[K, float] = {}

    def delay(self, key: K) -> float:
        """Seconds until ``key`` may act again (0: now)."""
        last = self._last.get(key)
        if last is None:
            return 0.0
        wait = last + self.interval - self._clock.monotonic()
        # A wait below a millisecond is the clock's arithmetic, not a wait: a requeue
        # that early would only find the same rounding again.
        return wait if wait >= MIN_WAIT_SECONDS else 0.0

    def mark(self, key: K) -> None:
        """``key`` acted now."""
        now = self._clock.monotonic()
        self._last[key] = now
        if len(self._last) > self._max_keys:
            horizon = now - self.interval
            self._last = {k: t for k, t in self._last.items() if t > horizon}

    def forget(self, key: K) -> None:
        self._last.pop(key, None)

    def __len__(self) -> int:
        return len(self._last)
