"""Manager: the process lifecycle around the controllers.

Lifecycle (``Manager.run``), one anyio root task group:
1. probe/metrics servers, signal handling and informers start; readiness follows
   the informers' sync (the server reads ``has_synced``);
2. wait for every informer to sync, then for the lease if leader election is on (the
   lease is followed, not sought, while they sync: a dead holder's lease runs out
   meanwhile);
3. start the controllers' workers (and the lease renewal);
4. SIGTERM/SIGINT (or ``stop()``): stop taking work, let in-flight reconciles finish
   within ``drain_timeout``, cancel the rest, release the lease, return 0. A second
   signal cancels at once;
5. lease lost: cancel all work at once (another replica may already lead) and
   return 1, so the process exits non-zero and is restarted.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, Protocol

import anyio
import structlog

from controller.cache.informer import Informer
from controller.runtime.controller import Controller

log = structlog.get_logger("controller.runtime.manager")


class LeaseHolder(Protocol):
    """What the Manager needs from leader election (controller.runtime.leader.LeaderElector)."""

    async def acquire(self) -> None: ...

    async def observe(self) -> None:
        """Follow the lease without competing for it, until cancelled (while the
        caches sync), so that ``acquire`` can count a dead holder's lease from then."""
        ...

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
        on_synced: Callable[[], None] | None = None,
        leader_services: Sequence[Service] = (),
        before_release: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """``services`` are long-running coroutines started first and cancelled last
        (probe/metrics servers, the loop-lag monitor); each is started with
        ``tg.start`` and must call ``task_status.started()``. ``on_synced`` runs once
        every informer has synced, before the lease is sought and workers start.

        ``leader_services`` write on the leader's behalf (the event recorder): they run
        only while leading, beside the workers, and are cancelled with them when the
        lease is lost, so nothing they hold is sent after. On a graceful stop,
        ``before_release`` (e.g. flushing the recorder) runs after the drain and before
        the lease is released, within ``release_timeout``: no request of ours leaves
        after the release."""
        self.informers = list(informers)
        self.on_synced = on_synced
        self.leader_services = list(leader_services)
        self.before_release = before_release
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
        # A second signal cancels everything, _run_phases included: not a clean stop.
        code = 1
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
            async with anyio.create_task_group() as syncing:
                if self.elector is not None:
                    syncing.start_soon(self.elector.observe)
                for informer in self.informers:
                    await informer.wait_for_sync()
                syncing.cancel_scope.cancel()
            log.info("caches synced", informers=[i.name for i in self.informers])
            if self.on_synced is not None:
                self.on_synced()
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
            for service in self.leader_services:
                await work.start(service)
            for controller in self.controllers:
                await work.start(controller.run)
            await self._stop.wait()
            if not self._lease_lost:
                await self._drain()
                if self.before_release is not None:
                    with anyio.move_on_after(self.release_timeout):
                        await self.before_release()
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
