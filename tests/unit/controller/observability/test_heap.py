"""HeapKeeper: a full collection's survivors frozen (the next one walks only what is
new), frozen cycles reclaimed by the rescan, each pause timed and the long ones logged
from the keeper's own task."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import anyio
import pytest
import structlog

from controller.observability.heap import HeapKeeper, settle
from controller.observability.metrics import Metrics


class Node:
    """A reference cycle of one: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture
def keeper() -> Iterator[HeapKeeper]:
    gc.unfreeze()
    k = HeapKeeper()
    k.install()
    try:
        yield k
    finally:
        k.uninstall()
        gc.unfreeze()


def tracked(obj: object) -> bool:
    """Whether ``obj`` is in a generation a collection walks (not the permanent one)."""
    return any(o is obj for o in gc.get_objects())


def test_a_full_collection_freezes_what_survived_it(keeper: HeapKeeper) -> None:
    survivor = Node()
    assert tracked(survivor)
    gc.collect()
    assert not tracked(survivor), "the survivor went to the permanent generation"
    assert gc.get_freeze_count() > 0
    young = Node()  # made after: the next full collection's to walk
    assert tracked(young)
    gc.collect(1)  # a young collection freezes nothing
    assert tracked(young)


def test_the_hook_leaves_with_the_keeper() -> None:
    gc.unfreeze()
    k = HeapKeeper()
    k.install()
    k.install()  # once only
    assert gc.callbacks.count(k._callback) == 1
    k.uninstall()
    survivor = Node()
    gc.collect()
    assert tracked(survivor)


def test_a_cycle_that_dies_frozen_waits_for_the_rescan(keeper: HeapKeeper) -> None:
    node = Node()
    gone = weakref.ref(node)
    gc.collect()  # frozen while alive
    del node
    gc.collect()
    assert gone() is not None, "a frozen cycle is not walked by an ordinary collection"
    assert keeper.rescan() >= 0
    assert gone() is None, "the rescan thaws everything and collects it"
    assert gc.get_freeze_count() > 0, "and freezes what survived"


def test_each_pause_is_timed_by_generation() -> None:
    metrics = Metrics()
    seen: list[tuple[int, float]] = []

    def observe(generation: int, seconds: float) -> None:
        seen.append((generation, seconds))
        metrics.gc_paused(generation, seconds)

    gc.unfreeze()
    k = HeapKeeper(observe)
    k.install()
    try:
        gc.collect(0)
        gc.collect()
    finally:
        k.uninstall()
        gc.unfreeze()
    assert [g for g, _ in seen][-2:] == [0, 2]
    assert all(s >= 0 for _, s in seen)
    assert k.full >= 1 and k.worst >= 0
    assert metrics.gc_pause.labels("2").count >= 1, "the full collection in the histogram"
    assert metrics.gc_pause.labels("0").count >= 1
    text = metrics.registry.expose().decode()
    assert 'python_gc_pause_seconds_count{generation="2"}' in text


async def test_long_pauses_are_logged_from_the_task_and_the_heap_rescanned() -> None:
    k = HeapKeeper(report_every=0.01, rescan_every=0.02, warn_after=0.0)
    rescans: list[float] = []
    twice = anyio.Event()
    real = k.rescan

    def rescan() -> float:
        took = real()
        rescans.append(took)
        if len(rescans) == 2:
            twice.set()
        return took

    k.rescan = rescan  # type: ignore[method-assign]
    gc.unfreeze()
    try:
        with structlog.testing.capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                await tg.start(k.run)
                assert k._callback in gc.callbacks
                gc.collect()
                with anyio.fail_after(5):
                    await twice.wait()
                tg.cancel_scope.cancel()
    finally:
        gc.unfreeze()
    assert k._callback not in gc.callbacks, "the hook goes with the task"
    warned = [e for e in logs if e["event"] == "garbage collection paused the process"]
    assert warned and warned[0]["full_collections"] >= 1


def test_settle_frees_young_cycles_and_freezes_the_survivors_without_a_full_walk() -> None:
    gc.unfreeze()
    was_enabled = gc.isenabled()
    gc.disable()  # no automatic collection in between: only settle's runs here
    old = Node()
    gc.collect()  # old now sits in the oldest generation
    old_ref = weakref.ref(old)
    del old  # dead, but only a full collection would see it
    young_dead, survivor = Node(), Node()
    dead_ref = weakref.ref(young_dead)
    del young_dead
    try:
        settle()
        assert dead_ref() is None  # the young generations were collected
        assert not tracked(survivor)  # frozen: no later collection walks it
        # the oldest generation was not walked: its dead cycle waits for the rescan
        assert old_ref() is not None
    finally:
        gc.unfreeze()
        gc.collect()
        if was_enabled:
            gc.enable()
    assert old_ref() is None
