from __future__ import annotations

import anyio
import pytest

from controller.clock import FakeClock
from controller.queue.workqueue import ShutDown, WorkQueue
from tests.unit.controller.conftest import get_soon, running_queue


def drain_now(q: WorkQueue[str]) -> list[str]:
    out = []
    while (item := q.get_nowait()) is not None:
        out.append(item)
    return out


@pytest.mark.parametrize(
    ("adds", "expected"),
    [
        pytest.param(["a", "b", "c"], ["a", "b", "c"], id="fifo"),
        pytest.param(
            ["a", "b", "a", "a", "c", "b"], ["a", "b", "c"], id="dedup-keeps-first-position"
        ),
        pytest.param([], [], id="empty"),
    ],
)
def test_add_dedups_and_keeps_order(adds: list[str], expected: list[str]) -> None:
    q = WorkQueue[str]()
    for item in adds:
        q.add(item)
    assert len(q) == len(expected)
    assert drain_now(q) == expected


def test_readd_while_processing_is_deferred_until_done() -> None:
    q = WorkQueue[str]()
    q.add("a")
    assert q.get_nowait() == "a"
    q.add("a")
    q.add("a")
    assert q.get_nowait() is None, "a second worker must not get an item being processed"
    q.done("a")
    assert q.get_nowait() == "a", "re-added while processing → queued again on done"
    q.done("a")
    assert q.get_nowait() is None


def test_done_without_readd_does_not_requeue() -> None:
    q = WorkQueue[str]()
    q.add("a")
    q.add("b")
    assert q.get_nowait() == "a"
    q.done("a")
    assert drain_now(q) == ["b"]


async def test_get_blocks_until_add() -> None:
    q = WorkQueue[str]()
    got: list[str] = []
    async with anyio.create_task_group() as tg:

        async def worker() -> None:
            got.append(await get_soon(q))

        tg.start_soon(worker)
        await anyio.wait_all_tasks_blocked()
        assert got == []
        q.add("x")
    assert got == ["x"]


async def test_two_workers_never_share_an_item() -> None:
    q = WorkQueue[str]()
    seen: list[str] = []
    release = anyio.Event()
    async with anyio.create_task_group() as tg:

        async def worker() -> None:
            item = await get_soon(q)
            seen.append(item)
            await release.wait()
            q.done(item)

        tg.start_soon(worker)
        tg.start_soon(worker)
        q.add("a")
        await anyio.wait_all_tasks_blocked()
        q.add("a")  # dirty while processing: the second worker must keep waiting
        await anyio.wait_all_tasks_blocked()
        assert seen == ["a"]
        release.set()
    assert seen == ["a", "a"]


@pytest.mark.parametrize(
    ("delays", "advance", "expected", "still_waiting"),
    [
        pytest.param({"a": 3.0, "b": 1.0, "c": 2.0}, 3.0, ["b", "c", "a"], 0, id="ready-order"),
        pytest.param({"a": 1.0, "b": 5.0}, 1.0, ["a"], 1, id="only-due-items"),
        pytest.param({"a": 0.0}, 0.0, ["a"], 0, id="zero-delay-is-immediate"),
    ],
)
async def test_add_after_releases_in_ready_order(
    clock: FakeClock,
    delays: dict[str, float],
    advance: float,
    expected: list[str],
    still_waiting: int,
) -> None:
    async with running_queue(clock) as queue:
        for item, delay in delays.items():
            queue.add_after(item, delay)
        clock.advance(advance)
        got = [await get_soon(queue) for _ in expected]
        assert got == expected
        assert queue.waiting == still_waiting
        assert len(queue) == 0


@pytest.mark.parametrize(
    ("first", "second", "due_at"),
    [
        pytest.param(5.0, 1.0, 1.0, id="earlier-readd-moves-earlier"),
        pytest.param(1.0, 5.0, 1.0, id="later-readd-does-not-postpone"),
    ],
)
async def test_add_after_earliest_time_wins(
    clock: FakeClock, first: float, second: float, due_at: float
) -> None:
    async with running_queue(clock) as queue:
        queue.add_after("a", first)
        queue.add_after("a", second)
        assert queue.waiting == 1
        clock.advance(due_at - 0.01)
        await anyio.wait_all_tasks_blocked()
        assert len(queue) == 0
        clock.advance(0.01)
        assert await get_soon(queue) == "a"
        assert queue.waiting == 0


async def test_add_after_item_already_queued_is_deduped(clock: FakeClock) -> None:
    async with running_queue(clock) as queue:
        queue.add("a")
        queue.add_after("a", 1.0)
        clock.advance(1.0)
        await anyio.wait_all_tasks_blocked()
        assert drain_now(queue) == ["a"]


async def test_rate_limited_delays_grow_until_forget(clock: FakeClock) -> None:
    async with running_queue(clock) as queue:
        expected_delays = [1.0, 2.0, 4.0]
        for n, delay in enumerate(expected_delays, start=1):
            queue.add_rate_limited("a")
            assert queue.num_requeues("a") == n
            clock.advance(delay - 0.01)
            await anyio.wait_all_tasks_blocked()
            assert len(queue) == 0, f"released before its {delay}s delay"
            clock.advance(0.01)
            assert await get_soon(queue) == "a"
            queue.done("a")
        queue.forget("a")
        assert queue.num_requeues("a") == 0
        queue.add_rate_limited("a")
        clock.advance(1.0)
        assert await get_soon(queue) == "a"


async def test_shut_down_hands_out_remaining_then_raises() -> None:
    q = WorkQueue[str]()
    q.add("a")
    q.shut_down()
    q.add("b")  # dropped after shutdown
    q.add_after("c", 0)
    assert await get_soon(q) == "a"
    with pytest.raises(ShutDown):
        await get_soon(q)


async def test_shut_down_wakes_blocked_getters() -> None:
    q = WorkQueue[str]()
    outcomes: list[str] = []
    async with anyio.create_task_group() as tg:

        async def worker() -> None:
            try:
                await get_soon(q)
            except ShutDown:
                outcomes.append("shutdown")

        for _ in range(3):
            tg.start_soon(worker)
        await anyio.wait_all_tasks_blocked()
        q.shut_down()
    assert outcomes == ["shutdown"] * 3


async def test_shut_down_with_drain_waits_for_in_flight() -> None:
    q = WorkQueue[str]()
    q.add("a")
    item = q.get_nowait()
    assert item == "a"
    drained = False
    async with anyio.create_task_group() as tg:

        async def drain() -> None:
            nonlocal drained
            await q.shut_down_with_drain()
            drained = True

        tg.start_soon(drain)
        await anyio.wait_all_tasks_blocked()
        assert not drained
        q.done("a")
    assert drained


async def test_shut_down_cancels_pending_drain_wait() -> None:
    q = WorkQueue[str]()
    q.add("a")
    q.get_nowait()
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.shut_down_with_drain)
        await anyio.wait_all_tasks_blocked()
        q.shut_down()
    assert q.processing == 1


async def test_delay_loop_exits_on_shutdown(clock: FakeClock) -> None:
    q = WorkQueue[str](clock=clock)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.run)
            q.add_after("a", 100.0)
            await anyio.wait_all_tasks_blocked()
            q.shut_down()


# ---- the low lane -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ops", "expected"),
    [
        pytest.param(
            [("low", "a"), ("low", "b"), ("add", "c")], ["c", "a", "b"], id="plain-adds-first"
        ),
        pytest.param(
            [("low", "a"), ("low", "b"), ("low", "c"), ("add", "b")],
            ["b", "a", "c"],
            id="plain-add-moves-a-low-item-up",
        ),
        pytest.param(
            [("add", "a"), ("low", "a"), ("low", "b")], ["a", "b"], id="low-add-never-moves-down"
        ),
        pytest.param(
            [("low", "a"), ("low", "a"), ("low", "b")], ["a", "b"], id="low-dedups-keeps-first"
        ),
        pytest.param(
            [("low", "a"), ("add", "x"), ("add", "a"), ("low", "a"), ("low", "b")],
            ["x", "a", "b"],
            id="moved-item-leaves-no-second-entry",
        ),
    ],
)
def test_low_lane_order(ops: list[tuple[str, str]], expected: list[str]) -> None:
    q = WorkQueue[str]()
    for op, item in ops:
        (q.add if op == "add" else q.add_low)(item)
    assert len(q) == len(expected)
    assert drain_now(q) == expected
    assert len(q) == 0


def test_low_item_readded_while_processing_returns_to_its_lane() -> None:
    q = WorkQueue[str]()
    q.add_low("a")
    assert q.get_nowait() == "a"
    q.add_low("a")
    assert len(q) == 0, "held by a worker: not counted as queued"
    q.add_low("b")
    q.done("a")
    assert drain_now(q) == ["b", "a"], "back to the end of the low lane"


def test_plain_add_while_processing_a_low_item_queues_it_first() -> None:
    q = WorkQueue[str]()
    q.add_low("a")
    q.add_low("b")
    assert q.get_nowait() == "a"
    q.add_low("a")
    q.add("a")
    q.done("a")
    assert drain_now(q) == ["a", "b"]


async def test_get_wakes_for_a_low_add() -> None:
    q = WorkQueue[str]()
    got: list[str] = []

    async def take() -> None:
        got.append(await q.get())

    async with anyio.create_task_group() as tg:
        tg.start_soon(take)
        await anyio.wait_all_tasks_blocked()
        q.add_low("a")
    assert got == ["a"]


def test_low_add_after_shutdown_is_dropped() -> None:
    q = WorkQueue[str]()
    q.shut_down()
    q.add_low("a")
    assert q.get_nowait() is None
