"""Per-caller token buckets: how often one sender may report.

Each key (a pod, by the UID its token is bound to) gets ``burst`` reports at once and
``rate`` a second after that; a report over the limit is told how long to wait (429
with Retry-After). Buckets that have refilled are forgotten once more than
``max_keys`` are held, so memory follows the senders of the last few seconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.types import Clock


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class KeyedLimiter:
    def __init__(self, clock: Clock, *, rate: float, burst: int, max_keys: int = 100_000) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError("rate must be positive and burst at least 1")
        self._clock = clock
        self.rate = rate
        self.burst = burst
        self._max_keys = max_keys
        self._buckets: dict[str, _Bucket] = {}

    def take(self, key: str) -> float:
        """Take one token for ``key``: 0 when granted, else the seconds until one is."""
        now = self._clock.monotonic()
        b = self._buckets.get(key)
        if b is None:
            if len(self._buckets) >= self._max_keys:
                self._prune(now)
            b = self._buckets[key] = _Bucket(float(self.burst), now)
        b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.rate)
        b.at = now
        if b.tokens >= 1.0:
            b.tokens -= 1.0
            return 0.0
        return (1.0 - b.tokens) / self.rate

    def _prune(self, now: float) -> None:
        full = self.burst / self.rate
        self._buckets = {k: b for k, b in self._buckets.items() if now - b.at < full}
        if len(self._buckets) >= self._max_keys:
            # every sender is busy: drop the least recently seen half
            keep = sorted(self._buckets.items(), key=lambda kv: kv[1].at)[self._max_keys // 2 :]
            self._buckets = dict(keep)

    def __len__(self) -> int:
        return len(self._buckets)


class Budget:
    """One token bucket for a whole process: ``rate`` a second after a burst of
    ``burst``. ``take()`` is 0 when granted, else the seconds until a token is due
    (none taken). A rate of 0 or less grants everything."""

    def __init__(self, clock: Clock, *, rate: float, burst: int) -> None:
        self._clock = clock
        self.rate = rate
        self.burst = max(1, burst)
        self._tokens = float(self.burst)
        self._at = clock.monotonic()
        #: what was refused, for the metrics
        self.refused = 0

    def take(self) -> float:
        if self.rate <= 0:
            return 0.0
        now = self._clock.monotonic()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return 0.0
        self.refused += 1
        return (1.0 - self._tokens) / self.rate
