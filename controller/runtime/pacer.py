"""Pacer: at most one paced action per key per interval; SlotGate: at most so many a
second across keys (below).

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


class SlotGate(Generic[K]):
    """At most ``rate`` paced actions a second across all keys, each key given a slot of
    its own.

    Implements controller.types.SlotGate. Many keys waiting for a shared rate must not
    all come back at the same moment to find one token among them (each return costs a
    reconcile pass): ``reserve(key)`` gives a key that may not act now the next free
    slot and remembers it, so the key returns once, at its slot, and acts then. A slot
    not taken up within ``grace`` seconds of its time lapses, and the key starts again
    at the back.
    """

    def __init__(self, clock: Clock, rate: float, *, grace: float = 5.0) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self._clock = clock
        self.rate = rate
        self._grace = grace
        self._next = clock.monotonic()  # when the next slot is free
        self._held: dict[K, float] = {}  # key -> the time of its slot

    def reserve(self, key: K) -> float:
        """0: act now (the slot is taken); more: come back in that many seconds."""
        now = self._clock.monotonic()
        slot = self._held.get(key)
        if slot is not None:
            if slot <= now + MIN_WAIT_SECONDS:
                del self._held[key]
                if now - slot <= self._grace:
                    return 0.0
            else:
                return slot - now
        slot = max(now, self._next)
        self._next = slot + 1.0 / self.rate
        if slot <= now + MIN_WAIT_SECONDS:
            return 0.0
        self._held[key] = slot
        return slot - now

    def held(self, key: K) -> float:
        """Seconds until the slot ``key`` holds (0: none, or due): when to look again."""
        slot = self._held.get(key)
        return max(0.0, slot - self._clock.monotonic()) if slot is not None else 0.0

    def forget(self, key: K) -> None:
        self._held.pop(key, None)

    def __len__(self) -> int:
        return len(self._held)
