"""Garbage-collection pauses kept out of the way of reconciles.

CPython's full collection walks every tracked object: with the kubernetes-asyncio
client imported and a cache of a few thousand objects, that is 100-300 ms with the
event loop stopped, and a burst of creates (a large job's pod bodies) triggers them.
Almost all of those objects live as long as the process: modules and classes from the
imports, then the informers' first lists. ``settle`` collects once and moves every
survivor to the permanent generation (``gc.freeze``), which collections skip; memory is
still freed by reference counting when a frozen object is dropped (a deleted pod). It
runs once the caches have synced, before any worker starts (Manager's ``on_synced``).
"""

from __future__ import annotations

import gc
import time

import structlog

log = structlog.get_logger(__name__)


def settle() -> None:
    start = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.debug(
        "heap settled",
        frozen=gc.get_freeze_count(),
        seconds=round(time.perf_counter() - start, 3),
    )
