"""The apiserver's verdicts (TokenReview, SubjectAccessReview), cached for a while.

A verdict is asked once per key and kept until its time runs out: a client sending a
request every few seconds costs one review per cache lifetime, not one per request.
Concurrent first requests of one key share one review, and reviews in flight are
bounded. A question that could not be asked (the ``ask`` function raised) caches
nothing: the next request asks again.

What a stranger can fill must not push out what a real client earned:
- refusals are kept apart from acceptances, each with its own capacity
  (``max_refusals``, ``max_entries``), so a flood of made-up tokens evicts only other
  made-up tokens' refusals;
- within each, the least recently used entry goes first, and a hit counts as a use;
- expired entries are swept when something is stored (at most once per
  ``sweep_interval``), not only when their key comes back, so a flood's refusals are
  gone a few seconds after it stops;
- every miss takes a token from ``budget`` when one is given (controller.serving.
  limits.Budget), shared by every cache of the process: a stranger's fresh keys cost
  the apiserver at most that many reviews a second, and past it the caller is told to
  come back (ReviewUnavailable, answered 503 with Retry-After).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

from controller.serving.limits import Budget
from controller.types import Clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: a review is one small POST; this many at once is plenty
DEFAULT_MAX_IN_FLIGHT = 8
DEFAULT_MAX_ENTRIES = 100_000
#: refusals are cheap to make up: far fewer are kept (about 400 bytes each)
DEFAULT_MAX_REFUSALS = 10_000
DEFAULT_SWEEP_INTERVAL = 5.0


class ReviewUnavailable(Exception):
    """The apiserver could not be asked: no verdict. ``retry_after``: when to ask again."""

    retry_after = 2.0


class OverBudget(ReviewUnavailable):
    """The process's budget of reviews is spent for now, for ``retry_after`` seconds."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(f"too many reviews: try again in {retry_after:.1f}s")
        self.retry_after = max(1.0, retry_after)


@dataclass(slots=True)
class _Entry(Generic[V]):
    verdict: V
    until: float  # monotonic


class VerdictCache(Generic[K, V]):
    def __init__(
        self,
        clock: Clock,
        *,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        max_refusals: int = DEFAULT_MAX_REFUSALS,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        refused: Callable[[V], bool] | None = None,
        budget: Budget | None = None,
        sweep_interval: float = DEFAULT_SWEEP_INTERVAL,
    ) -> None:
        """``refused(verdict)`` says which verdicts are refusals (default: falsy ones)."""
        self._clock = clock
        self._max = {True: max_refusals, False: max_entries}
        self._refused = refused or (lambda v: not v)
        self._caches: dict[bool, OrderedDict[K, _Entry[V]]] = {
            True: OrderedDict(),
            False: OrderedDict(),
        }
        self._pending: dict[K, anyio.Event] = {}
        self._limit = anyio.Semaphore(max_in_flight)
        self._budget = budget
        self._sweep_interval = sweep_interval
        self._next_sweep = 0.0
        self.hits = 0

    def __len__(self) -> int:
        return len(self._caches[True]) + len(self._caches[False])

    @property
    def refusals(self) -> int:
        return len(self._caches[True])

    async def get(self, key: K, ask: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The cached verdict for ``key``, else ``ask()``'s (verdict, seconds to keep
        it; 0 keeps nothing). What ``ask`` raises reaches the caller, cached for no
        one; OverBudget when the budget has no review to spare."""
        while True:
            hit = self._cached(key)
            if hit is not None:
                self.hits += 1
                return hit.verdict
            pending = self._pending.get(key)
            if pending is None:
                break
            await pending.wait()  # the same key's review is on its way: share it
            if self._cached(key) is None:
                break  # it failed, or is not to be kept: ask ourselves
        if self._budget is not None:
            wait = self._budget.take()
            if wait > 0:
                raise OverBudget(wait)
        done = self._pending[key] = anyio.Event()
        try:
            async with self._limit:
                verdict, ttl = await ask()
            self._store(key, verdict, ttl)
            return verdict
        finally:
            del self._pending[key]
            done.set()

    def _cached(self, key: K) -> _Entry[V] | None:
        for cache in self._caches.values():
            entry = cache.get(key)
            if entry is None:
                continue
            if entry.until <= self._clock.monotonic():
                del cache[key]
                return None
            cache.move_to_end(key)  # a hit is a use: the least recently used goes first
            return entry
        return None

    def _store(self, key: K, verdict: V, ttl: float) -> None:
        if ttl <= 0:
            return
        now = self._clock.monotonic()
        if now >= self._next_sweep:
            self._sweep(now)
        refusal = bool(self._refused(verdict))
        self._caches[not refusal].pop(key, None)
        cache = self._caches[refusal]
        cache[key] = _Entry(verdict, now + ttl)
        cache.move_to_end(key)
        while len(cache) > self._max[refusal]:
            cache.popitem(last=False)

    def _sweep(self, now: float) -> None:
        self._next_sweep = now + self._sweep_interval
        for cache in self._caches.values():
            for key in [k for k, e in cache.items() if e.until <= now]:
                del cache[key]
