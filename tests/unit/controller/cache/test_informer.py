from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from controller import errors
from controller.cache.informer import Backoff, EventHandler, Informer, strip_managed_fields
from controller.clock import FakeClock
from controller.types import JSON
from tests.unit.controller.fake_source import HANG, ScriptedSource, bookmark, ev, pod


class Recorder:
    """Records handler calls as ("add"|"update"|"delete", name, rv)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def handler(self) -> EventHandler:
        return EventHandler(
            on_add=lambda o: self._rec("add", o),
            on_update=lambda old, new: self._rec("update", new, old),
            on_delete=lambda o: self._rec("delete", o),
        )

    def _rec(self, kind: str, obj: JSON, old: JSON | None = None) -> None:
        if old is not None:
            assert old["metadata"]["name"] == obj["metadata"]["name"]
        self.calls.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))


def store_rvs(inf: Informer) -> dict[str, str]:
    return {k: inf.store.get_by_key(k)["metadata"]["resourceVersion"] for k in inf.store.keys()}  # type: ignore[index]


async def until(pred: Callable[[], bool]) -> None:
    """Let every task run until nothing can progress, then check the condition."""
    with anyio.fail_after(5):
        while not pred():
            await anyio.wait_all_tasks_blocked()
            if pred():
                return
            await anyio.lowlevel.checkpoint()


@asynccontextmanager
async def running(
    source: ScriptedSource, clock: FakeClock, **kwargs: Any
) -> AsyncIterator[tuple[Informer, Recorder]]:
    inf = Informer(source, name="pods", clock=clock, rng=random.Random(7), page_size=2, **kwargs)
    rec = Recorder()
    inf.add_handler(rec.handler())
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(5):
            await tg.start(inf.run)
        yield inf, rec
        tg.cancel_scope.cancel()


async def test_paginated_list_then_watch_from_list_rv(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("a", "3"), pod("b", "4")], "10", continue_token="tok")
    src.add_list([pod("c", "5")], "11")
    async with running(src, clock) as (inf, rec):
        assert inf.has_synced
        await inf.wait_for_sync()
        assert store_rvs(inf) == {"ns/a": "3", "ns/b": "4", "ns/c": "5"}
        assert sorted(rec.calls) == [("add", "a", "3"), ("add", "b", "4"), ("add", "c", "5")]
        await until(lambda: len(src.watch_calls) == 1)
    assert [(c["limit"], c["continue_token"]) for c in src.list_calls] == [(2, None), (2, "tok")]
    watch = src.watch_calls[0]
    assert watch["resource_version"] == "10", "watch resumes from the first page's RV"
    assert watch["allow_bookmarks"] is True
    assert 300 <= watch["timeout_seconds"] < 600


async def test_watch_events_update_store_then_handlers_in_order(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("a", "3"), pod("b", "4")], "10")
    src.add_watch(
        ev("ADDED", pod("c", "11")),
        ev("MODIFIED", pod("a", "12")),
        ev("MODIFIED", pod("a", "12")),  # same RV: not delivered
        ev("DELETED", pod("b", "13")),
        ev("DELETED", pod("zz", "14")),  # never known: not delivered
        bookmark("20"),
        HANG,
    )
    async with running(src, clock) as (inf, rec):
        await until(lambda: inf.last_sync_resource_version == "20")
        assert rec.calls[2:] == [("add", "c", "11"), ("update", "a", "12"), ("delete", "b", "13")]
        assert store_rvs(inf) == {"ns/a": "12", "ns/c": "11"}
        with pytest.raises(RuntimeError):
            inf.add_handler(EventHandler())  # handlers are fixed once running


async def test_handlers_see_store_already_updated(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([], "1")
    src.add_watch(ev("ADDED", pod("a", "2")), ev("DELETED", pod("a", "3")), HANG)
    inf = Informer(src, name="pods", clock=clock)
    observed: list[tuple[str, bool]] = []
    inf.add_handler(
        EventHandler(
            on_add=lambda o: observed.append(("add", inf.store.get("ns", "a") is not None)),
            on_delete=lambda o: observed.append(("delete", inf.store.get("ns", "a") is not None)),
        )
    )
    async with anyio.create_task_group() as tg:
        await tg.start(inf.run)
        await until(lambda: len(observed) == 2)
        tg.cancel_scope.cancel()
    assert observed == [("add", True), ("delete", False)]


async def test_clean_close_rewatches_from_last_rv_without_backoff(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([], "10")
    src.add_watch(ev("ADDED", pod("a", "11")), bookmark("15"))  # clean close
    async with running(src, clock) as (inf, _):
        await until(lambda: len(src.watch_calls) == 2)
        assert clock.sleepers == 0, "a clean close must not back off"
    assert [c["resource_version"] for c in src.watch_calls] == ["10", "15"]
    assert inf.stats["lists"] == 1


async def test_gone_relists_and_emits_deletes_for_vanished(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("keep", "1"), pod("change", "2"), pod("vanish", "3")], "10")
    src.add_watch(ev("MODIFIED", pod("change", "11")), errors.Gone(410, "Expired", "too old"))
    # relist: "vanish" was deleted and "new" created while we could not watch
    src.add_list([pod("keep", "1"), pod("change", "30"), pod("new", "31")], "40")
    async with running(src, clock) as (inf, rec):
        await until(lambda: len(src.watch_calls) == 2)
        assert inf.stats["relists_on_gone"] == 1
        assert rec.calls[3:] == [
            ("update", "change", "11"),
            ("delete", "vanish", "3"),  # last known state
            ("update", "change", "30"),
            ("add", "new", "31"),
        ]  # "keep" unchanged (same RV) → no update
        assert store_rvs(inf) == {"ns/keep": "1", "ns/change": "30", "ns/new": "31"}
    assert src.watch_calls[1]["resource_version"] == "40"


async def test_disconnect_backs_off_then_resumes_from_last_rv(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([], "10")
    src.add_watch(
        ev("ADDED", pod("a", "11")),
        bookmark("12"),
        errors.ConnectionFailed("connection reset"),
    )
    src.add_watch(ev("ADDED", pod("b", "13")), HANG)
    async with running(src, clock) as (inf, rec):
        await until(lambda: clock.sleepers == 1)
        assert len(src.watch_calls) == 1, "must wait out the backoff first"
        delay = clock.next_deadline() - clock.monotonic()  # type: ignore[operator]
        assert 0.8 <= delay < 1.6
        clock.advance(delay)
        await until(lambda: inf.store.get("ns", "b") is not None)
        assert inf.stats == {"lists": 1, "watches": 2, "relists_on_gone": 0, "watch_errors": 1}
    assert [c["resource_version"] for c in src.watch_calls] == ["10", "12"]
    assert [c[1] for c in rec.calls] == ["a", "b"]


async def test_watch_closed_immediately_is_backed_off(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([], "10")
    src.add_watch()  # closes at once with no events
    async with running(src, clock) as (inf, _):
        await until(lambda: clock.sleepers == 1)
        assert inf.stats["watch_errors"] == 1
        assert len(src.watch_calls) == 1


async def test_failed_list_retries_with_backoff_before_sync(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list_error(errors.ServerError(503, "ServiceUnavailable", "starting"))
    src.add_list([pod("a", "1")], "5")
    inf = Informer(src, name="pods", clock=clock, rng=random.Random(1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(inf.run)
        await until(lambda: clock.sleepers == 1)
        assert not inf.has_synced
        clock.advance(clock.next_deadline() - clock.monotonic())  # type: ignore[operator]
        with anyio.fail_after(5):
            await inf.wait_for_sync()
        assert inf.store.get("ns", "a") is not None
        tg.cancel_scope.cancel()


async def test_expired_continue_token_restarts_list_unpaginated(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("a", "1"), pod("b", "2")], "10", continue_token="tok")
    src.add_list_error(errors.Gone(410, "Expired", "continue token expired"))
    src.add_list([pod("a", "1"), pod("c", "3")], "20")
    async with running(src, clock) as (inf, _):
        assert store_rvs(inf) == {"ns/a": "1", "ns/c": "3"}
        assert inf.last_sync_resource_version == "20"
    assert [(c["limit"], c["continue_token"]) for c in src.list_calls] == [
        (2, None),
        (2, "tok"),
        (0, None),
    ]


async def test_handler_exception_does_not_stop_delivery(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([], "1")
    src.add_watch(ev("ADDED", pod("a", "2")), ev("ADDED", pod("b", "3")), HANG)
    inf = Informer(src, name="pods", clock=clock)
    got: list[str] = []

    def bad(obj: JSON) -> None:
        raise ValueError("boom")

    inf.add_handler(EventHandler(on_add=bad))
    inf.add_handler(EventHandler(on_add=lambda o: got.append(o["metadata"]["name"])))
    async with anyio.create_task_group() as tg:
        await tg.start(inf.run)
        await until(lambda: got == ["a", "b"])
        tg.cancel_scope.cancel()


async def test_transform_applies_to_list_and_watch(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("a", "1", managedFields=[{"manager": "x"}])], "1")
    src.add_watch(ev("ADDED", pod("b", "2", managedFields=[{"manager": "y"}])), HANG)
    async with running(src, clock, transform=strip_managed_fields) as (inf, _):
        await until(lambda: inf.store.get("ns", "b") is not None)
        assert all("managedFields" not in o["metadata"] for o in inf.store.list())


@pytest.mark.parametrize(
    ("gaps", "expected_bases"),
    [
        pytest.param([0] * 7, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0], id="doubles-to-cap"),
        pytest.param([0, 0, 121], [0.8, 1.6, 0.8], id="resets-after-2min-healthy"),
    ],
)
def test_backoff(gaps: list[float], expected_bases: list[float]) -> None:
    clock = FakeClock()
    backoff = Backoff(clock, random.Random(3))
    for gap, base in zip(gaps, expected_bases, strict=True):
        clock.advance(gap)
        delay = backoff.next_delay()
        assert base <= delay < 2 * base


async def test_first_list_goes_to_on_initial_add_later_adds_to_on_add(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("old", "1")], "10")
    src.add_watch(ev("ADDED", pod("watched", "11")), errors.Gone(410, "Expired", "too old"))
    src.add_list([pod("old", "1"), pod("watched", "11"), pod("relisted", "12")], "20")
    seen: list[tuple[str, str]] = []
    inf = Informer(src, name="pods", clock=clock, rng=random.Random(7), page_size=2)
    inf.add_handler(
        EventHandler(
            on_add=lambda o: seen.append(("add", o["metadata"]["name"])),
            on_initial_add=lambda o: seen.append(("initial", o["metadata"]["name"])),
        )
    )
    plain: list[str] = []
    inf.add_handler(EventHandler(on_add=lambda o: plain.append(o["metadata"]["name"])))
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(5):
            await tg.start(inf.run)
        await until(lambda: len(src.watch_calls) == 2)
        tg.cancel_scope.cancel()
    assert seen == [("initial", "old"), ("add", "watched"), ("add", "relisted")]
    assert plain == ["old", "watched", "relisted"], "without on_initial_add: on_add"
