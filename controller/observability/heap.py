"""Garbage-collection pauses kept out of the way of reconciles.

CPython's full collection walks every tracked object with the event loop stopped: with
the kubernetes-asyncio client imported and a cache of a few thousand objects, that is
100-300 ms, and at 5,000 jobs (80,000 pods and Services cached, with their jobs' specs)
1-2 s. Almost all of those objects live as long as the process: modules and classes
from the imports, the informers' caches.

- ``settle`` collects the young generations and moves every survivor to the permanent
  generation (``gc.freeze``), which collections skip; memory is still freed by reference
  counting when a frozen object is dropped (a deleted pod). It runs once the caches
  have synced, before any worker starts (Manager's ``on_synced``). Not a full
  collection: the oldest generation holds what the imports left (the launcher put it
  there, tfjob_controller.launch), ~70,000 objects whose walk is a twentieth of the
  start and finds a few hundred dead ones; those stay frozen until the first
  ``rescan``.
- ``HeapKeeper`` does the same after every full collection, from a ``gc.callbacks``
  hook, right when the young generations are empty: its survivors are frozen, so the
  next full collection walks only what reached the oldest generation since, not the
  whole cache again. A cache that grows to 80,000 objects is then walked about once
  instead of at every quarter of growth (CPython starts a full collection when the
  oldest generation grew by a quarter of what the last one left), and no pause grows
  with the size of the cache.
- What freezing costs: a reference cycle whose objects were frozen while alive is not
  reclaimed when it dies (reference counting frees everything else). So every
  ``rescan_every`` the keeper thaws the permanent generation and collects it once
  (``rescan``): one walk of the whole heap, the pause there was before at every
  quarter of growth, now at a fixed, long interval.

The keeper also times every collection (``observe(generation, seconds)``: the
``python_gc_pause_seconds`` histogram) and logs the longest pause over ``warn_after``
from its own task, never from inside a collection.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

log = structlog.get_logger(__name__)

FULL = 2  # the oldest generation: a collection of it is a full collection
RESCAN_EVERY_SECONDS = 1800.0
REPORT_EVERY_SECONDS = 30.0


def settle() -> None:
    start = time.perf_counter()
    gc.collect(1)
    gc.freeze()
    log.debug(
        "heap settled",
        frozen=gc.get_freeze_count(),
        seconds=round(time.perf_counter() - start, 3),
    )


class HeapKeeper:
    """Freezes the survivors of each full collection and thaws them all for one
    collection every ``rescan_every`` seconds (the module doc says why)."""

    def __init__(
        self,
        observe: Callable[[int, float], None] | None = None,
        *,
        rescan_every: float = RESCAN_EVERY_SECONDS,
        report_every: float = REPORT_EVERY_SECONDS,
        warn_after: float = 0.25,
    ) -> None:
        self._observe = observe
        self.rescan_every = rescan_every
        self.report_every = report_every
        self.warn_after = warn_after
        self._started: float | None = None
        #: the longest full collection since the last report, and how many there were
        self.worst = 0.0
        self.full = 0

    # ---- the gc.callbacks hook -------------------------------------------------------

    def install(self) -> None:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        # Inside a collection: no I/O, no logging (a collection can start in the middle
        # of a write to the same stream), nothing that can raise.
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info.get("generation")
        if phase != "stop" or self._started is None or not isinstance(generation, int):
            return
        pause = time.perf_counter() - self._started
        self._started = None
        if generation == FULL:
            # The young generations are empty now: what is frozen is what survived.
            gc.freeze()
            self.full += 1
            self.worst = max(self.worst, pause)
        if self._observe is not None:
            try:
                self._observe(generation, pause)
            except Exception:  # a metric must never break a collection
                pass

    # ---- the service -----------------------------------------------------------------

    def rescan(self) -> float:
        """Collect the whole heap once, frozen objects included (the hook freezes the
        survivors again); the seconds it took."""
        start = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        return time.perf_counter() - start

    def report(self) -> None:
        if self.worst >= self.warn_after:
            log.warning(
                "garbage collection paused the process",
                longest_seconds=round(self.worst, 3),
                full_collections=self.full,
                frozen=gc.get_freeze_count(),
            )
        self.worst, self.full = 0.0, 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self.install()
        try:
            task_status.started()
            since_rescan = 0.0
            while True:
                await anyio.sleep(self.report_every)
                self.report()
                since_rescan += self.report_every
                if since_rescan >= self.rescan_every:
                    since_rescan = 0.0
                    took = self.rescan()
                    log.debug(
                        "heap rescanned", seconds=round(took, 3), frozen=gc.get_freeze_count()
                    )
        finally:
            self.uninstall()
