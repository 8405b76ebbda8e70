"""A work queue with client-go's contract, for one event loop.

Guarantees (client-go ``util/workqueue`` doc.go):
- Fair: items are handed out in the order they were added.
- Stingy: an item added many times before it is processed is processed once, and an
  item is never held by two workers at once. An item re-added while a worker holds
  it is processed again after that worker calls ``done``.

State is three structures whose invariant is that every item in ``queue`` is in
``dirty`` and not in ``processing``. All bookkeeping is synchronous; only ``get`` (and
the delay loop ``run``) await.

Two lanes: ``add_low`` queues an item behind every plain ``add``; the low lane is handed
out only while the first is empty, each lane in the order of its adds. A plain ``add`` of
an item waiting in the low lane moves it to the end of the first (client-go has no such
lane; a new leader uses it to put the jobs that wait for it before the ones that run).
The low lane's entries carry an entry number, and an entry whose number is no longer the
item's is skipped when reached, so a move is O(1).

Delays: ``add_after`` parks an item until its time, keeping the EARLIEST time when an
item is parked twice. Parked items are released by ``run()``, which must be running
(the runtime starts it next to the workers); it also wakes every ``heartbeat`` seconds
as insurance, like client-go's 10s ``maxWait``. ``add_rate_limited`` is
``add_after(item, limiter.when(item))``; ``forget`` clears the limiter's history
and must be called on success.

Shutdown: after ``shut_down`` new adds are dropped, ``get`` still hands out what is
queued and raises ``ShutDown`` once the queue is empty. ``shut_down_with_drain`` also
waits until no item is being processed, so workers MUST call ``done``.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import anyio

from controller.clock import SystemClock, wait_event
from controller.queue.ratelimit import RateLimiter, default_controller_rate_limiter
from controller.types import Clock

T = TypeVar("T", bound=Hashable)


class ShutDown(Exception):
    """Raised by ``get`` once the queue is shut down and empty."""


class QueueMetrics(Protocol):
    """Hooks called at the points client-go's queue metrics are taken."""

    def add(self, item: Hashable) -> None: ...

    def get(self, item: Hashable) -> None: ...

    def done(self, item: Hashable) -> None: ...

    def retry(self) -> None: ...


class _NoMetrics:
    def add(self, item: Hashable) -> None:
        pass

    def get(self, item: Hashable) -> None:
        pass

    def done(self, item: Hashable) -> None:
        pass

    def retry(self) -> None:
        pass


@dataclass(frozen=True, slots=True)
class ItemState:
    queued: bool
    processing: bool
    #: seconds until a parked add_after releases the item; None when none is parked
    requeue_in: float | None


class WorkQueue(Generic[T]):
    def __init__(
        self,
        name: str = "",
        *,
        clock: Clock | None = None,
        rate_limiter: RateLimiter[T] | None = None,
        metrics: QueueMetrics | None = None,
        heartbeat: float = 10.0,
    ) -> None:
        self.name = name
        self._clock = clock or SystemClock()
        if rate_limiter is None:
            rate_limiter = default_controller_rate_limiter(self._clock)  # type: ignore[assignment]
        self._limiter: RateLimiter[T] = rate_limiter  # type: ignore[assignment]
        self._metrics: QueueMetrics = _NoMetrics() if metrics is None else metrics
        self._heartbeat = heartbeat

        self._queue: deque[T] = deque()
        self._low: deque[tuple[T, int]] = deque()
        #: items queued in the low lane (or to be, when their pass is done): entry number
        self._low_entry: dict[T, int] = {}
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._shutting_down = False
        self._drain = False
        self._not_empty: anyio.Event | None = None
        self._drained: anyio.Event | None = None

        self._waiting: list[tuple[float, int, T]] = []
        self._ready_at: dict[T, float] = {}
        self._seq = itertools.count()
        self._timer_wakeup: anyio.Event | None = None

    # ---- core queue -------------------------------------------------------------

    def add(self, item: T) -> None:
        if self._shutting_down:
            return
        if item in self._dirty:
            if self._low_entry.pop(item, None) is not None and item not in self._processing:
                self._queue.append(item)
                self._signal_not_empty()
            return
        self._dirty.add(item)
        self._metrics.add(item)
        if item in self._processing:
            # picked up again by done(), so two workers never hold the same item
            return
        self._queue.append(item)
        self._signal_not_empty()

    def add_low(self, item: T) -> None:
        """Queue ``item`` behind every plain add; nothing if it is queued already."""
        if self._shutting_down or item in self._dirty:
            return
        self._dirty.add(item)
        self._metrics.add(item)
        entry = next(self._seq)
        self._low_entry[item] = entry
        if item in self._processing:
            return
        self._low.append((item, entry))
        self._signal_not_empty()

    def _signal_not_empty(self) -> None:
        if self._not_empty is not None:
            self._not_empty.set()
            self._not_empty = None

    def get_nowait(self) -> T | None:
        """Take the next item, or None when nothing is queued."""
        if self._queue:
            item = self._queue.popleft()
        else:
            while True:
                if not self._low:
                    return None
                item, entry = self._low.popleft()
                if self._low_entry.get(item) == entry:
                    del self._low_entry[item]
                    break
        self._dirty.discard(item)
        self._processing.add(item)
        self._metrics.get(item)
        return item

    async def get(self) -> T:
        """Wait for an item. Raises ShutDown when shut down and empty."""
        while True:
            item = self.get_nowait()
            if item is not None:
                return item
            if self._shutting_down:
                raise ShutDown
            if self._not_empty is None:
                self._not_empty = anyio.Event()
            await self._not_empty.wait()

    def done(self, item: T) -> None:
        self._processing.discard(item)
        self._metrics.done(item)
        if item in self._dirty:
            entry = self._low_entry.get(item)
            if entry is None:
                self._queue.append(item)
            else:
                self._low.append((item, entry))
            self._signal_not_empty()
        elif not self._processing and self._drained is not None:
            self._drained.set()

    def __len__(self) -> int:
        """Queued items, both lanes (informational: never gate add or get on it)."""
        held = sum(1 for item in self._processing if item in self._low_entry)
        return len(self._queue) + len(self._low_entry) - held

    @property
    def processing(self) -> int:
        return len(self._processing)

    @property
    def waiting(self) -> int:
        """Items parked by add_after."""
        return len(self._ready_at)

    def state(self, item: T) -> ItemState:
        """Where ``item`` is now: queued (or to be queued again when its current pass is
        done), being processed, parked until a time."""
        ready_at = self._ready_at.get(item)
        return ItemState(
            queued=item in self._dirty,
            processing=item in self._processing,
            requeue_in=None if ready_at is None else max(0.0, ready_at - self._clock.monotonic()),
        )

    # ---- shutdown ---------------------------------------------------------------

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    def shut_down(self) -> None:
        """Stop accepting items; wake every waiter. Cancels a pending drain wait."""
        self._shutting_down = True
        self._drain = False
        self._signal_not_empty()
        if self._drained is not None:
            self._drained.set()
        if self._timer_wakeup is not None:
            self._timer_wakeup.set()

    async def shut_down_with_drain(self) -> None:
        """Shut down and wait until every item being processed is done."""
        self.shut_down()
        self._drain = True
        if not self._processing:
            return
        self._drained = anyio.Event()
        await self._drained.wait()

    # ---- delays and rate limiting ----------------------------------------------

    def add_after(self, item: T, delay: float) -> None:
        if self._shutting_down:
            return
        self._metrics.retry()
        if delay <= 0:
            self.add(item)
            return
        ready_at = self._clock.monotonic() + delay
        current = self._ready_at.get(item)
        if current is not None and current <= ready_at:
            return
        # the old heap entry becomes stale; _release_due skips it
        self._ready_at[item] = ready_at
        heapq.heappush(self._waiting, (ready_at, next(self._seq), item))
        if self._waiting[0][2] == item and self._timer_wakeup is not None:
            self._timer_wakeup.set()

    def add_rate_limited(self, item: T) -> None:
        self.add_after(item, self._limiter.when(item))

    def forget(self, item: T) -> None:
        self._limiter.forget(item)

    def num_requeues(self, item: T) -> int:
        return self._limiter.num_requeues(item)

    def _release_due(self) -> float | None:
        """Add every parked item whose time has come; return the next ready time."""
        now = self._clock.monotonic()
        while self._waiting:
            ready_at, _, item = self._waiting[0]
            if self._ready_at.get(item) != ready_at:
                heapq.heappop(self._waiting)
                continue
            if ready_at > now:
                return ready_at
            heapq.heappop(self._waiting)
            del self._ready_at[item]
            self.add(item)
        return None

    async def run(self) -> None:
        """Release parked items when due. Returns once the queue is shut down."""
        while not self._shutting_down:
            next_ready = self._release_due()
            delay = self._heartbeat
            if next_ready is not None:
                delay = min(delay, next_ready - self._clock.monotonic())
            self._timer_wakeup = anyio.Event()
            await wait_event(self._timer_wakeup, delay, self._clock)
