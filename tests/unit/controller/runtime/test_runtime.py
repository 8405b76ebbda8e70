from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import anyio.lowlevel
import pytest
import structlog

from controller import errors
from controller.clock import FakeClock
from controller.observability.metrics import Metrics
from controller.queue.ratelimit import default_controller_rate_limiter
from controller.queue.workqueue import WorkQueue
from controller.runtime.background import Background
from controller.runtime.controller import Controller
from controller.runtime.manager import Manager
from controller.types import Result, TerminalError


class ScriptedReconciler:
    """Returns/raises the next scripted outcome; records calls."""

    def __init__(self, *outcomes: Result | BaseException) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[str] = []

    async def reconcile(self, key: str) -> Result:
        self.calls.append(key)
        outcome = self.outcomes.pop(0) if self.outcomes else Result()
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def sample(metrics: Metrics, metric: str, **labels: str) -> float:
    value = metrics.registry.sample(metric, labels)
    return 0.0 if value is None else value


@pytest.mark.parametrize(
    ("outcome", "result", "level", "waiting", "requeues", "errors_total", "terminal_total"),
    [
        pytest.param(Result(), "success", "info", 0, 0, 0, 0, id="success-forgets"),
        pytest.param(
            Result(requeue_after=5.0), "requeue_after", "info", 1, 0, 0, 0, id="requeue-after"
        ),
        pytest.param(
            TerminalError("bad spec"), "error", "error", 0, 0, 1, 1, id="terminal-no-retry"
        ),
        pytest.param(
            errors.Conflict(409, "Conflict", "stale"), "requeue", "debug", 1, 2, 0, 0, id="conflict"
        ),
        pytest.param(ValueError("boom"), "error", "error", 1, 2, 1, 0, id="error-rate-limited"),
    ],
)
async def test_result_contract(
    outcome: Result | BaseException,
    result: str,
    level: str,
    waiting: int,
    requeues: int,
    errors_total: int,
    terminal_total: int,
) -> None:
    clock = FakeClock()
    metrics = Metrics()
    limiter = default_controller_rate_limiter(clock)
    queue = WorkQueue[str]("tfjob", clock=clock, rate_limiter=limiter)
    ctl = Controller(
        "tfjob", ScriptedReconciler(outcome), clock=clock, metrics=metrics, queue=queue
    )
    limiter.when("ns/a")  # one earlier failure: success must forget it
    assert ctl.queue.num_requeues("ns/a") == 1
    with structlog.testing.capture_logs(
        processors=[structlog.contextvars.merge_contextvars]
    ) as logs:
        await ctl.process("ns/a")
    (line,) = [entry for entry in logs if entry["event"] == "reconciled"]
    assert line["log_level"] == level
    assert line["result"] == result
    assert line["key"] == "ns/a"
    assert line["controller"] == "tfjob"
    assert len(line["reconcile_id"]) == 32
    assert line["duration"] >= 0
    assert len(logs) == 1, "one summary line per reconcile"
    assert ctl.queue.waiting == waiting
    assert ctl.queue.num_requeues("ns/a") == requeues
    assert (
        sample(metrics, "controller_runtime_reconcile_total", controller="tfjob", result=result)
        == 1
    )
    assert (
        sample(metrics, "controller_runtime_reconcile_errors_total", controller="tfjob")
        == errors_total
    )
    assert (
        sample(metrics, "controller_runtime_terminal_reconcile_errors_total", controller="tfjob")
        == terminal_total
    )
    assert (
        sample(metrics, "controller_runtime_reconcile_time_seconds_count", controller="tfjob") == 1
    )


class BindingReconciler:
    """Binds a field for the summary line, as the TFJob reconciler does."""

    async def reconcile(self, key: str) -> Result:
        structlog.contextvars.bind_contextvars(outcome=f"done-{key}")
        return Result()


@pytest.mark.parametrize("outer", [{}, {"worker": "w1", "key": "outer"}])
async def test_each_pass_logs_in_a_clean_context_and_leaves_the_callers_as_it_was(
    outer: dict[str, str],
) -> None:
    """A reconcile's own fields are on its summary line and on no other; whatever the
    caller had bound is hidden during the pass and back afterwards."""
    clock = FakeClock()
    ctl = Controller(
        "tfjob", BindingReconciler(), clock=clock, queue=WorkQueue[str]("tfjob", clock=clock)
    )
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(**outer)
    try:
        with structlog.testing.capture_logs(
            processors=[structlog.contextvars.merge_contextvars]
        ) as logs:
            await ctl.process("ns/a")
            assert structlog.contextvars.get_contextvars() == outer
            await ctl.process("ns/b")
        first, second = (e for e in logs if e["event"] == "reconciled")
        assert (first["key"], first["outcome"]) == ("ns/a", "done-ns/a")
        assert (second["key"], second["outcome"]) == ("ns/b", "done-ns/b")
        assert "worker" not in first and "worker" not in second
        assert first["reconcile_id"] != second["reconcile_id"]
        assert structlog.contextvars.get_contextvars() == outer
    finally:
        structlog.contextvars.clear_contextvars()


def test_metrics_label_sets_are_zero_initialised() -> None:
    metrics = Metrics()
    Controller("tfjob", ScriptedReconciler(), metrics=metrics, workers=3)
    text = metrics.registry.expose().decode()
    for result in ("success", "error", "requeue", "requeue_after"):
        assert (
            f'controller_runtime_reconcile_total{{controller="tfjob",result="{result}"}} 0.0'
            in text
        )
    assert 'controller_runtime_reconcile_errors_total{controller="tfjob"} 0.0' in text
    assert 'controller_runtime_max_concurrent_reconciles{controller="tfjob"} 3.0' in text
    for name in (
        "workqueue_depth",
        "workqueue_adds_total",
        "workqueue_retries_total",
        "workqueue_unfinished_work_seconds",
        "workqueue_longest_running_processor_seconds",
    ):
        assert f'{name}{{name="tfjob"}} 0.0' in text


async def test_workqueue_metrics_follow_the_queue() -> None:
    clock = FakeClock()
    metrics = Metrics()
    ctl = Controller("q", ScriptedReconciler(), clock=clock, metrics=metrics)
    q = ctl.queue
    q.add("a")
    q.add("a")  # deduped: not an add
    q.add("b")
    assert sample(metrics, "workqueue_adds_total", name="q") == 2
    assert sample(metrics, "workqueue_depth", name="q") == 2
    clock.advance(2.0)
    assert q.get_nowait() == "a"
    assert sample(metrics, "workqueue_depth", name="q") == 1
    assert sample(metrics, "workqueue_queue_duration_seconds_sum", name="q") == pytest.approx(2.0)
    clock.advance(3.0)
    assert sample(metrics, "workqueue_unfinished_work_seconds", name="q") == pytest.approx(3.0)
    assert sample(
        metrics, "workqueue_longest_running_processor_seconds", name="q"
    ) == pytest.approx(3.0)
    q.done("a")
    assert sample(metrics, "workqueue_work_duration_seconds_sum", name="q") == pytest.approx(3.0)
    assert sample(metrics, "workqueue_unfinished_work_seconds", name="q") == 0
    q.add_after("c", 1.0)
    assert sample(metrics, "workqueue_retries_total", name="q") == 1


class GatedReconciler:
    """Blocks each reconcile until released; tracks concurrency per key."""

    def __init__(self) -> None:
        self.active: dict[str, int] = {}
        self.max_active_per_key = 0
        self.calls: list[str] = []
        self.gate = anyio.Event()
        self.started = anyio.Event()
        self.cancelled = 0

    async def reconcile(self, key: str) -> Result:
        self.calls.append(key)
        self.active[key] = self.active.get(key, 0) + 1
        self.max_active_per_key = max(self.max_active_per_key, self.active[key])
        self.started.set()
        try:
            await self.gate.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled += 1
            raise
        finally:
            self.active[key] -= 1
        return Result()


async def until(pred: Callable[[], bool]) -> None:
    with anyio.fail_after(5):
        while not pred():
            await anyio.wait_all_tasks_blocked()
            if not pred():
                await anyio.lowlevel.checkpoint()


async def test_workers_never_share_a_key_and_readd_reprocesses() -> None:
    rec = GatedReconciler()
    ctl = Controller("c", rec, workers=4)
    async with anyio.create_task_group() as tg:
        await tg.start(ctl.run)
        ctl.enqueue("ns/a")
        await until(lambda: ctl.in_flight == 1)
        ctl.enqueue("ns/a")
        ctl.enqueue("ns/b")
        await until(lambda: ctl.in_flight == 2)
        rec.gate.set()
        await until(lambda: rec.calls.count("ns/a") == 2 and ctl.in_flight == 0)
        ctl.stop_taking_work()
    assert rec.max_active_per_key == 1
    assert sorted(rec.calls) == ["ns/a", "ns/a", "ns/b"]


class FakeElector:
    def __init__(self) -> None:
        self.acquired = anyio.Event()
        self.allow_acquire = anyio.Event()
        self.lose = anyio.Event()
        self.released = 0
        self.observing = False

    async def acquire(self) -> None:
        await self.allow_acquire.wait()
        self.acquired.set()

    async def observe(self) -> None:
        self.observing = True
        try:
            await anyio.sleep_forever()
        finally:
            self.observing = False

    async def hold(self) -> None:
        await self.lose.wait()

    async def release(self) -> None:
        self.released += 1


async def run_manager(manager: Manager, out: list[int]) -> None:
    out.append(await manager.run())


async def test_graceful_stop_drains_in_flight_and_releases() -> None:
    rec = GatedReconciler()
    ctl = Controller("c", rec, workers=2)
    elector = FakeElector()
    elector.allow_acquire.set()
    manager = Manager(controllers=[ctl], elector=elector, handle_signals=False, drain_timeout=30)
    codes: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        await until(lambda: manager.leading)
        ctl.enqueue("ns/a")
        await until(lambda: ctl.in_flight == 1)
        ctl.enqueue("ns/b")  # may or may not start; never after stop
        manager.stop()
        await until(lambda: ctl.queue.shutting_down)
        ctl.enqueue("ns/late")
        rec.gate.set()
    assert codes == [0]
    assert rec.cancelled == 0, "in-flight reconcile finished, not cancelled"
    assert "ns/late" not in rec.calls
    assert elector.released == 1


async def test_drain_timeout_cancels_stuck_reconciles() -> None:
    rec = GatedReconciler()  # never released
    ctl = Controller("c", rec)
    manager = Manager(controllers=[ctl], handle_signals=False, drain_timeout=0.01)
    codes: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        ctl.enqueue("ns/a")
        await until(lambda: ctl.in_flight == 1)
        manager.stop()
    assert codes == [0]
    assert rec.cancelled == 1


async def test_lease_loss_cancels_work_and_exits_non_zero() -> None:
    rec = GatedReconciler()
    ctl = Controller("c", rec)
    elector = FakeElector()
    elector.allow_acquire.set()
    manager = Manager(controllers=[ctl], elector=elector, handle_signals=False, drain_timeout=30)
    codes: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        ctl.enqueue("ns/a")
        await until(lambda: ctl.in_flight == 1)
        elector.lose.set()
    assert codes == [1]
    assert rec.cancelled == 1, "no drain once the lease is gone"
    assert elector.released == 0


async def test_stop_while_waiting_for_lease_never_starts_workers() -> None:
    rec = GatedReconciler()
    ctl = Controller("c", rec)
    elector = FakeElector()  # acquire blocks forever
    manager = Manager(controllers=[ctl], elector=elector, handle_signals=False)
    codes: list[int] = []
    ctl.enqueue("ns/a")
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        await anyio.wait_all_tasks_blocked()
        assert not manager.leading
        manager.stop()
    assert codes == [0]
    assert rec.calls == []


def late_informer(clock: FakeClock) -> Any:
    """An informer whose first list fails: it syncs once ``clock`` passes its backoff."""
    from controller.cache.informer import Informer
    from tests.unit.controller.fake_source import HANG, ScriptedSource, pod

    src = ScriptedSource()
    src.add_list_error(errors.ServerError(503, "", "not yet"))
    src.add_list([pod("a", "1")], "1")
    src.add_watch(HANG)
    return Informer(src, name="pods", clock=clock)


async def test_workers_wait_for_informer_sync() -> None:
    clock = FakeClock()
    informer = late_informer(clock)
    rec = ScriptedReconciler()
    ctl = Controller("c", rec, clock=clock)
    ctl.enqueue("ns/a")
    manager = Manager(informers=[informer], controllers=[ctl], handle_signals=False)
    codes: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        await until(lambda: clock.sleepers == 1)
        assert rec.calls == [] and not manager.caches_synced
        clock.advance(60)
        await until(lambda: rec.calls == ["ns/a"])
        assert manager.caches_synced
        manager.stop()
    assert codes == [0]


async def test_the_lease_is_followed_while_the_caches_sync_then_sought() -> None:
    clock = FakeClock()
    informer = late_informer(clock)
    elector = FakeElector()
    manager = Manager(informers=[informer], elector=elector, handle_signals=False)
    codes: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        await until(lambda: clock.sleepers == 1)  # the informer backing off
        assert elector.observing and not manager.caches_synced
        clock.advance(60)
        await until(lambda: manager.caches_synced)
        await anyio.wait_all_tasks_blocked()
        assert not elector.observing, "following stops once the lease is sought"
        elector.allow_acquire.set()
        await until(lambda: manager.leading)
        manager.stop()
    assert codes == [0]


class LeaderWriter:
    """A leader service that records its life and what the manager asked of it."""

    def __init__(self, elector: FakeElector) -> None:
        self.elector = elector
        self.log: list[str] = []

    async def run(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        self.log.append("started")
        task_status.started()
        try:
            await anyio.sleep_forever()
        finally:
            self.log.append(f"cancelled (released {self.elector.released})")

    async def flush(self) -> None:
        self.log.append(f"flushed (released {self.elector.released})")


@pytest.mark.parametrize("lose", [False, True], ids=["graceful", "lease-lost"])
async def test_leader_services_run_while_leading_and_never_after_the_lease(lose: bool) -> None:
    ctl = Controller("c", GatedReconciler())
    elector = FakeElector()
    writer = LeaderWriter(elector)
    manager = Manager(
        controllers=[ctl],
        elector=elector,
        handle_signals=False,
        leader_services=[writer.run],
        before_release=writer.flush,
    )
    codes: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        await anyio.wait_all_tasks_blocked()
        assert writer.log == [], "not before leadership"
        elector.allow_acquire.set()
        await until(lambda: writer.log == ["started"])
        if lose:
            elector.lose.set()
        else:
            manager.stop()
    if lose:
        assert codes == [1] and writer.log == ["started", "cancelled (released 0)"]
    else:
        assert codes == [0]
        assert writer.log == ["started", "flushed (released 0)", "cancelled (released 0)"]
        assert elector.released == 1


async def test_a_second_signal_during_the_drain_exits_1_at_once() -> None:
    rec = GatedReconciler()  # never released: the drain would wait its 30 s
    ctl = Controller("c", rec)
    manager = Manager(controllers=[ctl], handle_signals=False, drain_timeout=30)
    codes: list[int] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(run_manager, manager, codes)
        ctl.enqueue("ns/a")
        await until(lambda: ctl.in_flight == 1)
        manager.stop()  # the first signal
        assert manager._root is not None
        manager._root.cancel_scope.cancel()  # what the second signal does
    assert codes == [1]


async def test_describe_and_the_pending_gauges_say_what_waits_for_a_key() -> None:
    """/debug/queue's answer and the two gauges operators read: a key queued, in a pass,
    parked for a requeue, or with background work unfinished."""
    clock = FakeClock()
    metrics = Metrics()
    queue = WorkQueue[str]("p", clock=clock, metrics=metrics.queue("p", clock))
    background: Background[str] = Background(queue)
    ctl = Controller(
        "p", ScriptedReconciler(), clock=clock, metrics=metrics, queue=queue, background=background
    )
    idle = {"key": "ns/a", "queued": False, "processing": False, "requeue_in": None, "spawned": 0}
    assert ctl.describe("ns/a") == idle
    queue.add("ns/a")
    assert ctl.describe("ns/a") == {**idle, "queued": True}
    assert queue.get_nowait() == "ns/a"
    assert ctl.describe("ns/a") == {**idle, "processing": True}
    queue.add("ns/a")  # changed while in its pass: queued again once the pass is done
    assert ctl.describe("ns/a") == {**idle, "processing": True, "queued": True}
    queue.done("ns/a")
    assert ctl.describe("ns/a") == {**idle, "queued": True}

    queue.add_after("ns/b", 3.0)
    clock.advance(1.0)
    assert ctl.describe("ns/b")["requeue_in"] == pytest.approx(2.0)
    assert ctl.describe("ns/a")["requeue_in"] is None
    assert sample(metrics, "workqueue_waiting_items", name="p") == 1

    release = anyio.Event()

    async def create() -> None:
        await release.wait()

    async with anyio.create_task_group() as tg:
        await tg.start(background.run)
        background.spawn("ns/a", create)
        background.spawn("ns/a", create)
        background.spawn("ns/c", create)
        assert ctl.describe("ns/a")["spawned"] == 2
        assert ctl.describe("ns/c")["spawned"] == 1
        assert sample(metrics, "controller_background_work", controller="p") == 3
        release.set()
        await until(lambda: background.backlog() == 0)
        assert ctl.describe("ns/a")["spawned"] == 0
        assert sample(metrics, "controller_background_work", controller="p") == 0
        tg.cancel_scope.cancel()


async def test_a_worker_yields_between_passes_that_never_await() -> None:
    rec = ScriptedReconciler()  # returns at once: a pass with no I/O
    ctl = Controller("c", rec, workers=1)
    beats: list[int] = []

    async def other_task() -> None:
        while len(rec.calls) < 50:
            beats.append(len(rec.calls))
            await anyio.lowlevel.checkpoint()

    for i in range(50):
        ctl.enqueue(f"ns/j{i}")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(other_task)
            await tg.start(ctl.run)
            await other_task()
            ctl.stop_taking_work()
    progress = sorted(set(beats))
    assert len(progress) > 25, f"the loop's other tasks ran between passes: {progress}"
