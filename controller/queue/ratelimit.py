"""Rate limiters for requeues (client-go's workqueue rate limiters).

Contract (client-go ``workqueue`` rate limiters): ``when(item)`` records one failure of
``item`` and returns how long to wait before retrying it; ``forget(item)`` clears the
item's failure history (call it on success, or the item is tracked forever);
``num_requeues(item)`` is the number of failures recorded since the last forget.

``default_controller_rate_limiter`` = max(per-item exponential 5ms·2^n capped at 1000s,
one global token bucket of 10/s with burst 100). The bucket is shared by all items: it
bounds the overall retry rate, not any single item's.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Generic, Protocol, TypeVar

from controller.client.flowcontrol import TokenBucket
from controller.types import Clock

T = TypeVar("T", bound=Hashable)
T_contra = TypeVar("T_contra", bound=Hashable, contravariant=True)


class RateLimiter(Protocol[T_contra]):
    def when(self, item: T_contra) -> float: ...

    def forget(self, item: T_contra) -> None: ...

    def num_requeues(self, item: T_contra) -> int: ...


class ItemExponentialRateLimiter(Generic[T]):
    """delay = base · 2^failures (failures counted before this call), capped at max."""

    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0) -> None:
        self._base = base_delay
        self._max = max_delay
        self._failures: dict[T, int] = {}

    def when(self, item: T) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        # 2.0**1024 overflows a float; any base this far up the curve is past the cap
        if exp >= 1000:
            return self._max
        return min(self._base * 2.0**exp, self._max)

    def forget(self, item: T) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)


class BucketRateLimiter(Generic[T]):
    """Every ``when`` takes a token from one global bucket; items are not tracked."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock: Clock | None = None) -> None:
        self._bucket = TokenBucket(qps, burst, clock)

    def when(self, item: T) -> float:
        return self._bucket.reserve()

    def forget(self, item: T) -> None:
        return None

    def num_requeues(self, item: T) -> int:
        return 0


class MaxOfRateLimiter(Generic[T]):
    """The longest delay of several limiters. Every limiter's ``when`` is called, so
    each one records the failure (the global bucket is consumed even when the
    per-item delay wins, as in client-go)."""

    def __init__(self, *limiters: RateLimiter[T]) -> None:
        if not limiters:
            raise ValueError("MaxOfRateLimiter needs at least one limiter")
        self._limiters = limiters

    def when(self, item: T) -> float:
        return max(limiter.when(item) for limiter in self._limiters)

    def forget(self, item: T) -> None:
        for limiter in self._limiters:
            limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return max(limiter.num_requeues(item) for limiter in self._limiters)


def default_controller_rate_limiter(clock: Clock | None = None) -> MaxOfRateLimiter[str]:
    return MaxOfRateLimiter[str](
        ItemExponentialRateLimiter[str](0.005, 1000.0),
        BucketRateLimiter[str](10.0, 100, clock),
    )
