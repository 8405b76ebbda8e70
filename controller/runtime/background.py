"""Background: work a reconcile pass hands off, with its retries owned by the workqueue.

Implements controller.types.Spawner. A pass that must wait on slow writes (creates, at
the client's rate limit) spawns them here and returns, so the worker is free for the
next key; the pass's expectations keep the key's next pass from acting on a view that
lacks those writes.

Contract, per key. A key's *batch* is its passes and the work they spawn, from the
moment one begins until none of it is left running; the Controller brackets every pass
with ``begin``/``end``, so a pass belongs to the batch of the work it spawns.
- Work runs concurrently, at most ``limit`` at once across all keys, in the order it
  was spawned; ``backlog`` says how much spawned work has not finished yet (one key's,
  or all), so a caller can bound what it hands off. Work waiting for its turn is only
  the callable in a queue, not a task: at 20 QPS a burst of 200 jobs leaves thousands
  of creates waiting for minutes, and a task apiece cost memory and time to start.
- Work that raises is logged, and the first failure of a batch puts the key back with
  ``add_rate_limited``: the queue's per-key backoff grows while the work keeps failing.
- The key's failure history is forgotten (``forget``) only when a batch ends with no
  failure in it. A pass that succeeds just after (or while) its work failed therefore
  cannot reset the backoff that failing work is building: without this, a create that
  is refused at once would be retried every few milliseconds forever.
- When the last of a key's spawned work ends, the key is looked at again
  ``drained_recheck`` seconds later, if set: a safety net for a write whose informer
  event never comes (or that lowered its own expectation), so the passes that ran while
  the work was pending need set no timer of their own.
- ``drop(key)`` ends a key's bounded work that is no longer wanted (its job is gone,
  replaced, suspended or changed since the work was planned): work not started is
  forgotten, work running but not yet ``committed`` (its request still waits for the
  rate limit) is cancelled, and each runs its ``on_drop`` (which lowers the expectation
  the work raised). Work whose request has gone out finishes: cancelled on the wire, a
  create may land all the same with its answer lost. Other keys' work no longer waits
  behind the dropped: at 20 QPS a deleted 1,000-replica job's queued creates held
  everyone else's for 50 s.
- ``wait_for_room(key, need)`` is for a pass that found the backlog too full to hand
  off its work: the key is put back (``add_after(key, 0)``) once ``need`` pieces of
  anyone's work have ended since it asked, or at once when the backlog empties. Keys
  waiting are put back in the order they asked, one at a time: each ended piece is a
  credit towards the first waiter only, and credit with nobody waiting is dropped. So a
  full backlog costs a waiting job one pass, not one a second (5,000 jobs polling it made
  60,000 passes a minute).
- ``spawn`` needs ``run()`` to be running (the Controller runs it beside its workers);
  work still running when it is cancelled (lease lost, shutdown) is cancelled with it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import anyio
import structlog
from anyio.abc import TaskGroup, TaskStatus

from controller.client.flowcontrol import Commitment, current_commitment

log = structlog.get_logger("controller.runtime.background")

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)


class RetryQueue(Protocol[K_contra]):
    """The slice of controller.queue.workqueue.WorkQueue that owns retries."""

    def add_rate_limited(self, item: K_contra) -> None: ...

    def forget(self, item: K_contra) -> None: ...

    def add_after(self, item: K_contra, delay: float) -> None: ...


@dataclass(slots=True)
class _Batch:
    pending: int = 0
    failed: bool = False
    work: int = 0  # spawned work not finished yet
    #: the key's bounded work running now (``drop`` cancels what has not committed)
    running: set[_Running] = field(default_factory=set)
    #: ``drop`` cancelled work of this batch
    cancelled: bool = False


OnDrop = Callable[[], None] | None


@dataclass(slots=True, eq=False)
class _Running:
    scope: anyio.CancelScope
    #: set by the API client once the work's request goes out (``drop`` then leaves it)
    sent: Commitment = field(default_factory=Commitment)


@dataclass(slots=True)
class _Work(Generic[K]):
    key: K
    batch: _Batch
    run: Callable[[], Awaitable[None]]
    on_drop: OnDrop


class Background(Generic[K]):
    def __init__(
        self, queue: RetryQueue[K], *, limit: int = 64, drained_recheck: float | None = None
    ) -> None:
        self._queue = queue
        self._drained_recheck = drained_recheck
        self._limit = limit
        #: bounded work not started yet, in spawn order, and the tasks running it
        self._waiting: deque[_Work[K]] = deque()
        self._runners = 0
        self._batches: dict[K, _Batch] = {}
        self._tg: TaskGroup | None = None
        self._idle: anyio.Event | None = None
        self._work = 0
        #: keys waiting for room (wait_for_room), in the order they asked: their need
        self._room_waiters: dict[K, int] = {}
        self._room_credit = 0

    def pending(self, key: K) -> bool:
        return key in self._batches

    def backlog(self, key: K | None = None) -> int:
        """Spawned work not finished yet: ``key``'s, or everyone's."""
        if key is None:
            return self._work
        batch = self._batches.get(key)
        return batch.work if batch is not None else 0

    @property
    def waiting_for_room(self) -> int:
        return len(self._room_waiters)

    def wait_for_room(self, key: K, need: int) -> None:
        """Put ``key`` back once ``need`` pieces of work have ended (see the module doc);
        nothing if it waits already."""
        if key in self._room_waiters:
            return
        self._room_waiters[key] = max(1, need)
        self._wake_room_waiter()

    def _wake_room_waiter(self) -> None:
        """Wake the first waiter once its credit reaches its need (credit grows by one a
        call, so none is left over) or the backlog is empty."""
        key, need = next(iter(self._room_waiters.items()))
        if self._room_credit < need and self._work:
            return
        del self._room_waiters[key]
        self._room_credit = 0
        self._queue.add_after(key, 0.0)

    def begin(self, key: K) -> None:
        """A pass of ``key`` starts: it is part of the key's batch until ``end``."""
        self._batches.setdefault(key, _Batch()).pending += 1

    def end(self, key: K, *, failed: bool) -> None:
        """The pass ends; ``failed`` when it raised (the caller has requeued the key)."""
        batch = self._batches.get(key)
        if batch is not None:
            self._settle(key, batch, failed=failed, requeue=False)

    @property
    def in_flight(self) -> int:
        return sum(b.pending for b in self._batches.values())

    def spawn(
        self,
        key: K,
        work: Callable[[], Awaitable[None]],
        *,
        bounded: bool = True,
        on_drop: OnDrop = None,
    ) -> None:
        """Run ``work`` for ``key``; ``bounded=False`` does not wait for one of the
        ``limit`` slots (for small work there is at most one of per key, which must not
        queue behind a backlog of other work) and is never dropped. ``on_drop`` runs if
        ``drop`` ends the work unfinished."""
        if self._tg is None:
            raise RuntimeError("Background.spawn called while run() is not running")
        batch = self._batches.setdefault(key, _Batch())
        batch.pending += 1
        batch.work += 1
        self._work += 1
        if not bounded:
            self._tg.start_soon(self._run_one, _Work(key, batch, work, None), False)
            return
        self._waiting.append(_Work(key, batch, work, on_drop))
        if self._runners < self._limit:
            self._runners += 1
            self._tg.start_soon(self._runner)

    async def _runner(self) -> None:
        """Run waiting work until there is none; at most ``limit`` of these at once."""
        try:
            while self._waiting:
                await self._run_one(self._waiting.popleft(), True)
        finally:
            self._runners -= 1

    def drop(self, key: K) -> int:
        """End ``key``'s bounded work: forget what has not started, cancel what runs;
        return how much. Unbounded work (a status write) is left to finish."""
        batch = self._batches.get(key)
        if batch is None:
            return 0
        keep: deque[_Work[K]] = deque()
        dropped: list[_Work[K]] = []
        for item in self._waiting:
            (dropped if item.batch is batch else keep).append(item)
        self._waiting = keep
        running = [r for r in batch.running if not r.sent.committed]
        batch.cancelled = batch.cancelled or bool(running)
        for r in running:
            r.scope.cancel()  # its runner calls on_drop once the cancel lands
        for item in dropped:
            _call(item.on_drop)
            self._work_ended(key, batch, failed=False, put_back=False)
        return len(dropped) + len(running)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                task_status.started()
                await anyio.sleep_forever()
        finally:
            self._tg = None
            self._batches.clear()
            self._waiting.clear()
            self._work = 0
            self._room_waiters.clear()
            self._room_credit = 0
            if self._idle is not None:
                self._idle.set()  # nothing is left to wait for

    def drop_waiting(self) -> int:
        """Forget the bounded work that has not started (the controller is stopping:
        what it would have written, the next leader finds missing and writes itself);
        return how much. Work already running is left to finish or be cancelled."""
        dropped = len(self._waiting)
        while self._waiting:
            item = self._waiting.popleft()
            self._work_ended(item.key, item.batch, failed=False, put_back=False)
        return dropped

    async def wait_idle(self) -> None:
        """Wait until no spawned work is running."""
        while self._batches:
            self._idle = anyio.Event()
            await self._idle.wait()

    async def _run_one(self, item: _Work[K], droppable: bool) -> None:
        key, batch = item.key, item.batch
        failed = False
        running = _Running(anyio.CancelScope())
        if droppable:
            batch.running.add(running)
        token = current_commitment.set(running.sent)
        try:
            with running.scope:
                await item.run()
        except Exception as exc:
            failed = True
            log.warning("background work failed", key=key, error=f"{type(exc).__name__}: {exc}")
        finally:
            current_commitment.reset(token)
            batch.running.discard(running)
            if running.scope.cancelled_caught:
                _call(item.on_drop)
            self._work_ended(key, batch, failed=failed, put_back=True)

    def _work_ended(self, key: K, batch: _Batch, *, failed: bool, put_back: bool) -> None:
        """One piece of ``key``'s work is over (run, or dropped unrun); ``put_back``: the
        queue may see the key again (the drained recheck, a failure's retry)."""
        batch.work -= 1
        self._work -= 1
        if self._room_waiters:
            self._room_credit += 1
            self._wake_room_waiter()
        if put_back and not batch.work:
            if batch.cancelled:
                # the pass that dropped it waits for this: the key acts again now
                self._queue.add_after(key, 0.0)
            elif self._drained_recheck is not None:
                self._queue.add_after(key, self._drained_recheck)
        self._settle(key, batch, failed=failed, requeue=put_back)

    def _settle(self, key: K, batch: _Batch, *, failed: bool, requeue: bool) -> None:
        if failed and not batch.failed:
            batch.failed = True
            if requeue:
                self._queue.add_rate_limited(key)
        batch.pending -= 1
        if batch.pending > 0:
            return
        if self._batches.get(key) is batch:
            del self._batches[key]
        if not batch.failed:
            self._queue.forget(key)
        if not self._batches and self._idle is not None:
            self._idle.set()


def _call(on_drop: OnDrop) -> None:
    if on_drop is None:
        return
    try:
        on_drop()
    except Exception as exc:  # bookkeeping: never let it stop the dropping
        log.warning("on_drop failed", error=f"{type(exc).__name__}: {exc}")
