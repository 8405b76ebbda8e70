"""Controller: a queue of keys, its workers, and the reconcile result contract.

Result contract (controller-runtime's reconcileHandler; the worker owns retries):
- ``Result()``                    → forget the key's failure history (once the work the
                                    pass spawned, if any, has succeeded too). Done.
- ``Result(requeue_after=s)``     → forget, then ``add_after(key, s)``.
- ``TerminalError``               → log and count; no retry until the key changes.
- ``controller.errors.Conflict``  → expected under optimistic concurrency: debug log,
                                    rate-limited requeue, counted as "requeue".
- any other exception             → error log, rate-limited requeue.
Work a pass spawns (controller.runtime.background) belongs to that pass: its failure requeues
the key rate-limited, exactly as if the pass itself had failed.
Every reconcile runs with ``controller``, ``key`` and ``reconcile_id`` bound in structlog
contextvars and ends with exactly one ``event="reconciled"`` line carrying ``result``
and ``duration``. Workers are "stingy": the queue never hands a key to two at once.
The process lifecycle around the controllers is controller.runtime.manager.
"""

from __future__ import annotations

import uuid

import anyio
import anyio.lowlevel
import structlog
from anyio.abc import TaskStatus

from controller import errors
from controller.clock import SystemClock
from controller.observability.metrics import Metrics, ReconcileMetrics
from controller.queue.workqueue import ShutDown, WorkQueue
from controller.runtime.background import Background
from controller.types import Clock, Reconciler, Result, TerminalError

log = structlog.get_logger("controller.runtime.controller")


class Controller:
    """A named queue of keys and N workers that feed them to a Reconciler."""

    def __init__(
        self,
        name: str,
        reconciler: Reconciler,
        *,
        workers: int = 1,
        clock: Clock | None = None,
        metrics: Metrics | None = None,
        queue: WorkQueue[str] | None = None,
        background: Background[str] | None = None,
    ) -> None:
        """``queue`` and ``background`` are built by the caller when the reconciler needs
        them first (a reconciler that spawns work is given ``background``, which is
        given the queue); the Controller runs both."""
        self.name = name
        self.reconciler = reconciler
        self.workers = workers
        self._clock = clock or SystemClock()
        # "is None", not "or": an empty queue is falsy (it has __len__)
        if queue is None:
            queue = WorkQueue[str](
                name,
                clock=self._clock,
                metrics=metrics.queue(name, self._clock) if metrics else None,
            )
        self.queue: WorkQueue[str] = queue
        self.background = background
        self._metrics: ReconcileMetrics | None = (
            metrics.reconciles(name, workers) if metrics else None
        )
        if metrics is not None:
            metrics.pending(name, lambda: self.queue.waiting, self._spawned)
        self._stopping = False
        self._idle: anyio.Event | None = None
        self._in_flight = 0

    def _spawned(self) -> int:
        return self.background.backlog() if self.background is not None else 0

    # handlers call these; they never block
    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def describe(self, key: str) -> dict[str, object]:
        """What the controller has pending for ``key``: queued, being reconciled, a
        requeue parked (seconds to go), spawned work not finished. All false, None and
        0: nothing about the key is pending, bar a requeue further off."""
        state = self.queue.state(key)
        return {
            "key": key,
            "queued": state.queued,
            "processing": state.processing,
            "requeue_in": state.requeue_in,
            "spawned": self.background.backlog(key) if self.background is not None else 0,
        }

    async def wait_idle(self) -> None:
        """Wait until no reconcile, and no work a reconcile spawned, is running."""
        while self._in_flight:
            self._idle = anyio.Event()
            await self._idle.wait()
        if self.background is not None:
            await self.background.wait_idle()

    def stop_taking_work(self) -> None:
        """Workers finish their current key and exit; queued keys are left behind
        (the next leader relists and rebuilds the queue), and so is spawned work that
        has not started: at a low QPS a burst's queued creates would hold the drain
        for minutes."""
        self._stopping = True
        self.queue.shut_down()
        if self.background is not None:
            dropped = self.background.drop_waiting()
            if dropped:
                log.info(
                    "spawned work dropped",
                    controller=self.name,
                    dropped=dropped,
                    running=self.background.backlog(),
                )

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Run the delay loop, the background work and the workers until
        ``stop_taking_work``; spawned work still running then is cancelled."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self.queue.run)
            if self.background is not None:
                await tg.start(self.background.run)
            async with anyio.create_task_group() as workers:
                for _ in range(self.workers):
                    workers.start_soon(self._worker)
                task_status.started()
            tg.cancel_scope.cancel()

    async def _worker(self) -> None:
        while not self._stopping:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                if self._stopping:
                    return
                await self.process(key)
            finally:
                self.queue.done(key)
            # A pass that needs no I/O never yields: thousands of settled jobs in a row
            # (a new leader's low lane) would hold the loop, and the watches and the
            # first lane's jobs with it, for seconds.
            await anyio.lowlevel.checkpoint()

    async def process(self, key: str) -> None:
        """Reconcile one key and apply the result contract (the queue's ``done`` is the
        caller's job)."""
        self._in_flight += 1
        if self._metrics:
            self._metrics.active_workers.inc()
        start = self._clock.monotonic()
        # Each reconcile starts from a clean log context: fields a reconciler binds
        # (counts for the summary line) must not leak into the worker's next key. Each
        # clear walks every context variable: twice per pass, not four times.
        saved = structlog.contextvars.get_contextvars()
        if saved:
            structlog.contextvars.clear_contextvars()
        try:
            structlog.contextvars.bind_contextvars(
                controller=self.name, key=key, reconcile_id=uuid.uuid4().hex
            )
            await self._reconcile_and_log(key, start)
        finally:
            structlog.contextvars.clear_contextvars()
            if saved:
                structlog.contextvars.bind_contextvars(**saved)
            self._in_flight -= 1
            if self._metrics:
                self._metrics.active_workers.dec()
            if not self._in_flight and self._idle is not None:
                self._idle.set()

    async def _reconcile_and_log(self, key: str, start: float) -> None:
        exc_info: BaseException | None = None
        requeue_after: float | None = None
        level = "info"
        error = terminal = False
        if self.background is not None:
            self.background.begin(key)
        failed = True  # until the pass returns (a cancelled pass counts as failed)
        try:
            result: Result = await self.reconciler.reconcile(key)
            failed = False
        except TerminalError as exc:
            failed = False  # nothing to retry: it must not hold the key's batch open
            # retrying cannot help: forget the key's backoff, wait for it to change
            self.queue.forget(key)
            outcome, level, error, terminal, exc_info = "error", "error", True, True, exc
        except errors.Conflict as exc:
            self.queue.add_rate_limited(key)
            outcome, level, exc_info = "requeue", "debug", exc
        except Exception as exc:
            self.queue.add_rate_limited(key)
            outcome, level, error, exc_info = "error", "error", True, exc
        else:
            if self.background is None:
                self.queue.forget(key)
            if result.requeue_after is not None and result.requeue_after > 0:
                requeue_after = result.requeue_after
                self.queue.add_after(key, requeue_after)
                outcome = "requeue_after"
            else:
                outcome = "success"
        finally:
            if self.background is not None:
                self.background.end(key, failed=failed)
        duration = self._clock.monotonic() - start
        if self._metrics:
            self._metrics.observe(outcome, duration, error=error, terminal=terminal)
        fields: dict[str, object] = {"result": outcome, "duration": round(duration, 6)}
        if requeue_after is not None:
            fields["requeue_after"] = requeue_after
        if exc_info is not None:
            fields["error"] = f"{type(exc_info).__name__}: {exc_info}"
            if terminal:
                fields["terminal"] = True
            else:
                fields["retries"] = self.queue.num_requeues(key)
            if error and not terminal:
                # a traceback only where the failure is unexpected
                fields["exc_info"] = exc_info
        getattr(log, level)("reconciled", **fields)
