"""Background work: its batches, and the retries it leaves to the workqueue."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio
import pytest

from controller.client.flowcontrol import committed
from controller.clock import FakeClock
from controller.queue.workqueue import WorkQueue
from controller.runtime.background import Background
from tests.fakes import take_all

KEY = "ns/job"


class Boom(Exception):
    pass


def make() -> tuple[Background[str], WorkQueue[str]]:
    queue = WorkQueue[str]("q", clock=FakeClock())
    return Background(queue, limit=2), queue


def gated(gate: anyio.Event, *, fail: bool = False) -> Callable[[], Awaitable[None]]:
    async def work() -> None:
        await gate.wait()
        if fail:
            raise Boom("refused")

    return work


async def settle() -> None:
    await anyio.wait_all_tasks_blocked()


async def test_spawn_needs_run() -> None:
    background, _ = make()
    with pytest.raises(RuntimeError):
        background.spawn(KEY, gated(anyio.Event()))


async def test_a_failed_batch_requeues_once_and_keeps_its_history() -> None:
    background, queue = make()
    gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for fail in (True, True, False):
            background.spawn(KEY, gated(gate, fail=fail))
        assert background.pending(KEY) and background.in_flight == 3
        gate.set()
        await settle()
        assert not background.pending(KEY)
        assert queue.num_requeues(KEY) == 1  # two failures, one batch: one requeue
        assert queue.waiting == 1
        tg.cancel_scope.cancel()


async def test_a_clean_batch_forgets_the_key() -> None:
    background, queue = make()
    queue.add_rate_limited(KEY)  # an earlier failure
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        background.spawn(KEY, gated(anyio.Event()))
        background.spawn("other", gated(anyio.Event()))
        await settle()
        assert queue.num_requeues(KEY) == 1  # still running: not forgotten yet
        tg.cancel_scope.cancel()
    background, queue = make()
    queue.add_rate_limited(KEY)
    gate = anyio.Event()
    gate.set()
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        background.spawn(KEY, gated(gate))
        await settle()
        assert queue.num_requeues(KEY) == 0
        tg.cancel_scope.cancel()


@pytest.mark.parametrize("work_fails_first", [True, False], ids=["fails-before-pass-ends", "after"])
async def test_a_pass_belongs_to_the_batch_of_its_work(work_fails_first: bool) -> None:
    """The pass that spawned failing work succeeds: that must not reset the backoff the
    failure built, whichever of the two finishes first."""
    background, queue = make()
    gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        background.begin(KEY)
        background.spawn(KEY, gated(gate, fail=True))
        if work_fails_first:
            gate.set()
            await settle()
            background.end(KEY, failed=False)
        else:
            background.end(KEY, failed=False)
            assert background.pending(KEY)
            gate.set()
            await settle()
        assert not background.pending(KEY)
        assert queue.num_requeues(KEY) == 1
        tg.cancel_scope.cancel()


async def test_a_pass_alone_is_a_batch() -> None:
    background, queue = make()
    queue.add_rate_limited(KEY)
    background.begin(KEY)
    background.end(KEY, failed=True)  # the runtime requeued it itself
    assert queue.num_requeues(KEY) == 1 and queue.waiting == 1
    background.begin(KEY)
    background.end(KEY, failed=False)
    assert queue.num_requeues(KEY) == 0


async def test_work_runs_at_most_limit_at_once_and_wait_idle_waits_for_all() -> None:
    background, _ = make()
    gate = anyio.Event()
    running = 0
    peak = 0

    async def work() -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await gate.wait()
        running -= 1

    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for i in range(5):
            background.spawn(f"k{i}", work)
        await settle()
        assert peak == 2 and background.in_flight == 5
        done = anyio.Event()

        async def waiter() -> None:
            await background.wait_idle()
            done.set()

        tg.start_soon(waiter)
        await settle()
        assert not done.is_set()
        gate.set()
        with anyio.fail_after(1):
            await done.wait()
        assert background.in_flight == 0 and peak == 2
        tg.cancel_scope.cancel()


async def test_unbounded_work_does_not_queue_behind_the_limit() -> None:
    background, _ = make()  # limit 2
    gate = anyio.Event()
    ran: list[str] = []

    async def quick() -> None:
        ran.append("quick")

    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for i in range(4):
            background.spawn(f"k{i}", gated(gate))  # two run, two wait for a slot
        background.spawn("k0", quick, bounded=False)
        await settle()
        assert ran == ["quick"] and background.backlog() == 4
        gate.set()
        await settle()
        tg.cancel_scope.cancel()


async def test_backlog_counts_spawned_work_until_it_finishes_failed_or_not() -> None:
    background, _ = make()  # at most 2 run at once; the rest wait, and count
    gate = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for n in range(5):
            background.spawn(KEY, gated(gate, fail=n == 0))
        background.spawn("other", gated(gate))
        background.begin(KEY)  # a pass is not work
        await settle()
        assert background.backlog(KEY) == 5 and background.backlog("other") == 1
        assert background.backlog() == 6 and background.backlog("none") == 0
        gate.set()
        await settle()
        assert background.backlog() == 0 and background.backlog(KEY) == 0
        background.end(KEY, failed=False)
        tg.cancel_scope.cancel()


async def test_a_key_is_looked_at_again_once_its_last_work_ends() -> None:
    """The safety net for work whose result no informer event confirms: armed when the
    key's backlog drains, not while it waits."""
    queue = WorkQueue[str]("q", clock=FakeClock())
    background = Background(queue, limit=2, drained_recheck=5.0)
    gates = [anyio.Event(), anyio.Event()]
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for gate in gates:
            background.spawn(KEY, gated(gate))
        gates[0].set()
        await settle()
        assert background.backlog(KEY) == 1 and queue.waiting == 0
        gates[1].set()
        await settle()
        assert background.backlog(KEY) == 0 and queue.waiting == 1
        tg.cancel_scope.cancel()


async def test_waiting_work_starts_in_spawn_order_and_holds_no_task() -> None:
    background, _ = make()
    gates = [anyio.Event() for _ in range(5)]
    started: list[int] = []

    def work(i: int) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            started.append(i)
            await gates[i].wait()

        return run

    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        tasks = len(anyio.get_running_tasks())
        for i in range(5):
            background.spawn(f"k{i % 2}", work(i))
        await settle()
        assert started == [0, 1]
        assert len(anyio.get_running_tasks()) == tasks + 2  # one per running work only
        for i in (1, 0, 2):
            gates[i].set()
            await settle()
        assert started == [0, 1, 2, 3, 4]
        for gate in gates:
            gate.set()
        await settle()
        assert background.backlog() == 0
        tg.cancel_scope.cancel()


async def test_a_stopping_controller_drops_the_work_that_has_not_started() -> None:
    """What has not started is left to the next leader; what runs may finish."""
    background, _ = make()
    gate = anyio.Event()
    started: list[str] = []

    def work(name: str) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            started.append(name)
            await gate.wait()

        return run

    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for i in range(5):
            background.spawn(KEY if i < 3 else "other", work(f"w{i}"))
        await settle()
        assert background.drop_waiting() == 3
        assert background.backlog() == 2 and background.backlog("other") == 0
        assert background.pending(KEY) and not background.pending("other")
        gate.set()
        with anyio.fail_after(1):
            await background.wait_idle()
        assert started == ["w0", "w1"]
        tg.cancel_scope.cancel()


async def test_wait_idle_returns_when_the_background_is_cancelled() -> None:
    """Work still queued when ``run`` is cancelled never runs: nobody may wait for it."""
    background, _ = make()
    gate = anyio.Event()
    done = anyio.Event()

    async def waiter() -> None:
        await background.wait_idle()
        done.set()

    async with anyio.create_task_group() as outer:
        async with anyio.create_task_group() as tg:
            await tg.start(background.run)
            for i in range(5):
                background.spawn(f"k{i}", gated(gate))
            outer.start_soon(waiter)
            await settle()
            assert not done.is_set()
            tg.cancel_scope.cancel()
        with anyio.fail_after(1):
            await done.wait()


async def test_drop_ends_one_keys_work_and_the_others_go_on() -> None:
    """A key's work that is no longer wanted: what waits is forgotten, what runs is
    cancelled, each runs its on_drop once; another key's work is not held behind it,
    and the unbounded work (a status write) is left to finish."""
    background, queue = make()  # limit 2
    gate, other_gate, status_gate = anyio.Event(), anyio.Event(), anyio.Event()
    dropped: list[int] = []
    finished: list[str] = []

    def work(name: str, g: anyio.Event) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            await g.wait()
            finished.append(name)

        return run

    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for i in range(5):  # two run, three wait
            background.spawn(KEY, work(f"mine-{i}", gate), on_drop=lambda i=i: dropped.append(i))
        background.spawn(KEY, work("status", status_gate), bounded=False)
        background.spawn("other", work("other", other_gate))
        await settle()
        assert background.backlog(KEY) == 6 and background.backlog() == 7
        assert background.drop(KEY) == 5
        await settle()
        assert sorted(dropped) == [0, 1, 2, 3, 4], "each once, waiting or running"
        assert background.backlog(KEY) == 1, "the status write is not dropped"
        # the other key's work got a runner at once, not after the dropped ones
        other_gate.set()
        await settle()
        assert finished == ["other"]
        gate.set()  # the dropped ones never run on
        status_gate.set()
        await settle()
        assert finished == ["other", "status"]
        assert background.backlog() == 0 and not background.pending(KEY)
        assert queue.num_requeues(KEY) == 0, "a drop is no failure"
        assert background.drop(KEY) == 0
        tg.cancel_scope.cancel()


async def test_drop_lets_work_whose_write_went_out_finish() -> None:
    """Cancelled on the wire, a create may land with its answer lost: work that has
    committed (its request is going out) is left to finish and report as usual."""
    background, _ = make()
    gate = anyio.Event()
    dropped: list[str] = []
    finished: list[str] = []

    def work(name: str, sent: bool) -> Callable[[], Awaitable[None]]:
        async def run() -> None:
            if sent:
                committed()
            await gate.wait()
            finished.append(name)

        return run

    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        background.spawn(KEY, work("sent", True), on_drop=lambda: dropped.append("sent"))
        background.spawn(KEY, work("waiting", False), on_drop=lambda: dropped.append("waiting"))
        await settle()
        assert background.drop(KEY) == 1
        gate.set()
        await settle()
        tg.cancel_scope.cancel()
    assert dropped == ["waiting"] and finished == ["sent"]


async def test_keys_waiting_for_room_come_back_in_order_as_work_ends() -> None:
    background, queue = make()
    gates = [anyio.Event() for _ in range(5)]
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        for gate in gates:
            background.spawn("other", gated(gate))
        background.wait_for_room("ns/a", 2)
        background.wait_for_room("ns/b", 1)
        background.wait_for_room("ns/a", 2)  # waits already: no second place
        assert background.waiting_for_room == 2 and take_all(queue) == []
        gates[0].set()
        await settle()
        assert take_all(queue) == [], "one ended of a's two"
        gates[1].set()
        await settle()
        assert take_all(queue) == ["ns/a"] and background.waiting_for_room == 1
        gates[2].set()
        await settle()
        assert take_all(queue) == ["ns/b"] and background.waiting_for_room == 0
        gates[3].set()
        await settle()
        background.wait_for_room("ns/c", 2)  # credit earned while nobody waited is gone
        assert take_all(queue) == []
        gates[4].set()
        await settle()
        assert take_all(queue) == ["ns/c"], "the backlog emptied: c comes back"
        tg.cancel_scope.cancel()


async def test_a_key_asking_for_room_when_there_is_no_backlog_comes_back_at_once() -> None:
    background, queue = make()
    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        background.wait_for_room(KEY, 500)
        assert take_all(queue) == [KEY] and background.waiting_for_room == 0
        tg.cancel_scope.cancel()
