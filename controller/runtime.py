"""Workers, the reconcile result contract, and the process lifecycle.

Result contract (controller-runtime's reconcileHandler; the worker owns retries):
- ``Result()``                    → forget the key's failure history (once the work the
                                    pass spawned, if any, has succeeded too). Done.
- ``Result(requeue_after=s)``     → forget, then ``add_after(key, s)``.
- ``TerminalError``               → log and count; no retry until the key changes.
- ``controller.errors.Conflict``  → expected under optimistic concurrency: debug log,
                                    rate-limited requeue, counted as "requeue".
- any other exception             → error log, rate-limited requeue.
Work a pass spawns (controller.background) belongs to that pass: its failure requeues
the key rate-limited, exactly as if the pass itself had failed.
Every reconcile runs with ``controller``, ``key`` and ``reconcile_id`` bound in structlog
contextvars and ends with exactly one ``event="reconciled"`` line carrying ``result``
and ``duration``. Workers are "stingy": the queue never hands a key to two at once.

Lifecycle (``Manager.run``), one anyio root task group:
1. probe/metrics servers, signal handling and informers start; readiness follows
   the informers' sync (the server reads ``has_synced``);
2. wait for every informer to sync, then for the lease if leader election is on;
3. start the controllers' workers (and the lease renewal);
4. SIGTERM/SIGINT (or ``stop()``): stop taking work, let in-flight reconciles finish
   within ``drain_timeout``, cancel the rest, release the lease, return 0. A second
   signal cancels at once;
5. lease lost: cancel all work at once (another replica may already lead) and
   return 1, so the process exits non-zero and is restarted.
"""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskStatus

from controller import errors
from controller.background import Background
from controller.clock import SystemClock
from controller.informer import Informer
from controller.metrics import Metrics, ReconcileMetrics
from controller.types import Clock, Reconciler, Result, TerminalError
from controller.workqueue import ShutDown, WorkQueue

log = structlog.get_logger("controller.runtime")


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
        self._stopping = False
        self._idle: anyio.Event | None = None
        self._in_flight = 0

    # handlers call these; they never block
    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def enqueue_after(self, key: str, delay: float) -> None:
        self.queue.add_after(key, delay)

    @property
    def in_flight(self) -> int:
        return self._in_flight

    async def wait_idle(self) -> None:
        """Wait until no reconcile, and no work a reconcile spawned, is running."""
        while self._in_flight:
            self._idle = anyio.Event()
            await self._idle.wait()
        if self.background is not None:
            await self.background.wait_idle()

    def stop_taking_work(self) -> None:
        """Workers finish their current key and exit; queued keys are left behind
        (the next leader relists and rebuilds the queue)."""
        self._stopping = True
        self.queue.shut_down()

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

    async def process(self, key: str) -> None:
        """Reconcile one key and apply the result contract (the queue's ``done`` is the
        caller's job)."""
        self._in_flight += 1
        if self._metrics:
            self._metrics.active_workers.inc()
        start = self._clock.monotonic()
        # Each reconcile starts from a clean log context: fields a reconciler binds
        # (counts for the summary line) must not leak into the worker's next key.
        saved = structlog.contextvars.get_contextvars()
        structlog.contextvars.clear_contextvars()
        try:
            with structlog.contextvars.bound_contextvars(
                controller=self.name, key=key, reconcile_id=uuid.uuid4().hex
            ):
                await self._reconcile_and_log(key, start)
        finally:
            structlog.contextvars.clear_contextvars()
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


class LeaseHolder(Protocol):
    """What the Manager needs from leader election (controller.leader.LeaderElector)."""

    async def acquire(self) -> None: ...

    async def hold(self) -> None:
        """Keep renewing; return only when the lease is lost."""
        ...

    async def release(self) -> None: ...


Service = Callable[..., Coroutine[Any, Any, None]]


class Manager:
    def __init__(
        self,
        *,
        informers: Sequence[Informer] = (),
        controllers: Sequence[Controller] = (),
        elector: LeaseHolder | None = None,
        services: Sequence[Service] = (),
        drain_timeout: float = 30.0,
        release_timeout: float = 5.0,
        handle_signals: bool = True,
    ) -> None:
        """``services`` are long-running coroutines started first and cancelled last
        (probe/metrics servers, the event recorder); each is started with
        ``tg.start`` and must call ``task_status.started()``."""
        self.informers = list(informers)
        self.controllers = list(controllers)
        self.elector = elector
        self.services = list(services)
        self.drain_timeout = drain_timeout
        self.release_timeout = release_timeout
        self.handle_signals = handle_signals
        self._stop = anyio.Event()
        self._lease_lost = False
        self._leading = False
        self._startup_scope: anyio.CancelScope | None = None
        self._root: anyio.abc.TaskGroup | None = None

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def caches_synced(self) -> bool:
        return all(i.has_synced for i in self.informers)

    def stop(self) -> None:
        """Graceful stop, as SIGTERM does."""
        self._stop.set()
        if self._startup_scope is not None:
            self._startup_scope.cancel()

    async def run(self) -> int:
        """Run until stopped (returns 0) or the lease is lost (returns 1)."""
        async with anyio.create_task_group() as root:
            self._root = root
            if self.handle_signals:
                root.start_soon(self._signals)
            for service in self.services:
                await root.start(service)
            for informer in self.informers:
                root.start_soon(informer.run)
            code = await self._run_phases()
            root.cancel_scope.cancel()
        log.info("manager stopped", exit_code=code)
        return code

    async def _signals(self) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                if self._stop.is_set():
                    log.warning("second signal, exiting now", signal=signum.name)
                    if self._root is not None:
                        self._root.cancel_scope.cancel()
                    return
                log.info("signal received, shutting down", signal=signum.name)
                self.stop()

    async def _run_phases(self) -> int:
        with anyio.CancelScope() as self._startup_scope:
            if self._stop.is_set():  # a signal arrived before we got here
                self._startup_scope.cancel()
            for informer in self.informers:
                await informer.wait_for_sync()
            log.info("caches synced", informers=[i.name for i in self.informers])
            if self.elector is not None:
                await self.elector.acquire()
                self._leading = True
        self._startup_scope = None
        if self._stop.is_set():
            await self._release()
            return 0

        async with anyio.create_task_group() as work:
            if self.elector is not None:
                work.start_soon(self._hold_lease)
            for controller in self.controllers:
                await work.start(controller.run)
            await self._stop.wait()
            if not self._lease_lost:
                await self._drain()
            work.cancel_scope.cancel()
        if self._lease_lost:
            return 1
        await self._release()
        return 0

    async def _hold_lease(self) -> None:
        assert self.elector is not None
        await self.elector.hold()
        # past the renew deadline another replica may take over at any moment: stop
        # everything now rather than drain
        self._lease_lost = True
        self._leading = False
        log.error("leader election lost, stopping")
        self._stop.set()

    async def _drain(self) -> None:
        for controller in self.controllers:
            controller.stop_taking_work()
        in_flight = sum(c.in_flight for c in self.controllers)
        log.info("draining in-flight reconciles", in_flight=in_flight)
        with anyio.move_on_after(self.drain_timeout) as scope:
            for controller in self.controllers:
                await controller.wait_idle()
        if scope.cancelled_caught:
            log.warning(
                "drain timed out, cancelling", in_flight=sum(c.in_flight for c in self.controllers)
            )

    async def _release(self) -> None:
        if self.elector is None:
            return
        with anyio.CancelScope(shield=True), anyio.move_on_after(self.release_timeout):
            await self.elector.release()
        self._leading = False
