"""The apiserver's verdicts (TokenReview, SubjectAccessReview), cached for a while.

A verdict is asked once per key and kept until its time runs out: a client sending a
request every few seconds costs one review per cache lifetime, not one per request.
Concurrent first requests of one key share one review, and reviews in flight are
bounded, so a flood of fresh keys cannot turn into a flood of API calls. A question
that could not be asked (the ``ask`` function raised) caches nothing: the next request
asks again. The least recently used entries go first when the cache is full.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

from controller.types import Clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

#: a review is one small POST; this many at once is plenty
DEFAULT_MAX_IN_FLIGHT = 8
DEFAULT_MAX_ENTRIES = 100_000


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
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._cache: OrderedDict[K, _Entry[V]] = OrderedDict()
        self._pending: dict[K, anyio.Event] = {}
        self._limit = anyio.Semaphore(max_in_flight)
        self.hits = 0

    def __len__(self) -> int:
        return len(self._cache)

    async def get(self, key: K, ask: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The cached verdict for ``key``, else ``ask()``'s (verdict, seconds to keep
        it; 0 keeps nothing). What ``ask`` raises reaches the caller, cached for no
        one."""
        while True:
            hit = self._cached(key)
            if hit is not None:
                self.hits += 1
                return hit.verdict
            pending = self._pending.get(key)
            if pending is None:
                break
            await pending.wait()  # the same key's review is on its way: share it
            if key not in self._cache:
                break  # it failed, or is not to be kept: ask ourselves
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
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry.until <= self._clock.monotonic():
            del self._cache[key]
            return None
        return entry

    def _store(self, key: K, verdict: V, ttl: float) -> None:
        if ttl <= 0:
            return
        self._cache[key] = _Entry(verdict, self._clock.monotonic() + ttl)
        self._cache.move_to_end(key)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
