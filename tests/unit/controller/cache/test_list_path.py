"""The informer's hot paths: transforms once per object version, cheap store writes,
the garbage collector paused around bulk allocation, the lean watch line reader."""

from __future__ import annotations

import gc
import random
from typing import Any

import anyio
import pytest

from controller import errors
from controller.cache.informer import EventHandler, Informer, chain_transforms, strip_managed_fields
from controller.cache.store import CONTROLLER_UID_INDEX, NAMESPACE_INDEX, Store
from controller.client.codec import BULK_DECODE_BYTES, decode_json, gc_paused
from controller.clock import FakeClock
from controller.types import JSON
from tests.unit.controller.cache.test_informer import until
from tests.unit.controller.fake_source import HANG, ScriptedSource, ev, pod


def owned(name: str, rv: str, uid: str) -> JSON:
    return pod(name, rv, ownerReferences=[{"uid": uid, "controller": True}])


class CountingTransform:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, obj: JSON) -> JSON:
        meta = obj["metadata"]
        self.seen.append((meta["name"], meta["resourceVersion"]))
        return {"metadata": dict(meta), "transformed": True}


async def test_relist_transforms_only_changed_objects(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("a", "1"), pod("b", "2")], "10")
    src.add_watch(errors.Gone(410, "Expired", "too old"))
    src.add_list([pod("a", "1"), pod("b", "5"), pod("c", "6")], "20")
    src.add_watch(HANG)
    transform = CountingTransform()
    inf = Informer(src, name="pods", clock=clock, rng=random.Random(1), transform=transform)
    updates: list[str] = []
    inf.add_handler(
        EventHandler(on_update=lambda old, new: updates.append(new["metadata"]["name"]))
    )
    async with anyio.create_task_group() as tg:
        await tg.start(inf.run)
        first_a = inf.store.get("ns", "a")
        await until(lambda: inf.last_sync_resource_version == "20")
        tg.cancel_scope.cancel()
    assert transform.seen == [("a", "1"), ("b", "2"), ("b", "5"), ("c", "6")]
    assert inf.store.get("ns", "a") is first_a, "the unchanged object is kept as cached"
    assert all(o["transformed"] for o in inf.store.list())
    assert updates == ["b"]


class SlowServer(ScriptedSource):
    """Pages that take the server a moment (a real sleep: the loop runs on) to make."""

    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.log = log

    async def list_page(self, namespace: str | None = None, **kwargs: Any) -> Any:
        self.log.append(f"ask {kwargs['continue_token'] or 'first'}")
        await anyio.sleep(0.01)
        return await super().list_page(namespace, **kwargs)


async def test_the_next_page_is_asked_for_while_this_one_is_transformed(clock: FakeClock) -> None:
    log: list[str] = []
    src = SlowServer(log)
    src.add_list([pod("a", "1"), pod("b", "2")], "10", continue_token="p2")
    src.add_list([pod("c", "3"), pod("d", "4")], "10", continue_token="p3")
    src.add_list([pod("e", "5")], "10")
    src.add_watch(HANG)

    def transform(obj: JSON) -> JSON:
        log.append(f"transform {obj['metadata']['name']}")
        return obj

    inf = Informer(src, name="pods", clock=clock, page_size=2, transform=transform)
    async with anyio.create_task_group() as tg:
        await tg.start(inf.run)
        tg.cancel_scope.cancel()
    assert sorted(o["metadata"]["name"] for o in inf.store.list()) == ["a", "b", "c", "d", "e"]
    # each page's request is out before the page ahead of it is transformed
    assert log.index("ask p2") < log.index("transform a")
    assert log.index("ask p3") < log.index("transform c")


async def test_a_failed_page_fails_the_list_once_the_pages_before_it_are_stored(
    clock: FakeClock,
) -> None:
    src = ScriptedSource()
    src.add_list([pod("a", "1")], "10", continue_token="p2")
    src.add_list_error(errors.ServerError(500, "", "boom"))
    src.add_list([pod("a", "1"), pod("b", "2")], "11")  # the list again, after a backoff
    src.add_watch(HANG)
    inf = Informer(src, name="pods", clock=clock, rng=random.Random(1), page_size=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(inf.run)
        await until(lambda: clock.sleepers == 1)  # backing off after the failed list
        assert not inf.has_synced and inf.store.list() == []
        clock.advance(60)
        await until(lambda: inf.has_synced)
        tg.cancel_scope.cancel()
    assert sorted(o["metadata"]["name"] for o in inf.store.list()) == ["a", "b"]


async def test_a_transform_that_fails_fails_the_list_with_its_own_error(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([pod("a", "1")], "10", continue_token="p2")
    src.add_list([pod("b", "2")], "10")

    def transform(obj: JSON) -> JSON:
        raise ValueError(f"cannot read {obj['metadata']['name']}")

    inf = Informer(src, name="pods", clock=clock, page_size=1, transform=transform)
    with pytest.raises(ValueError, match="cannot read a"):  # what the "list failed" log says
        await inf._list_all()


async def test_transform_once_per_watch_event(clock: FakeClock) -> None:
    src = ScriptedSource()
    src.add_list([], "1")
    src.add_watch(ev("ADDED", pod("a", "2")), ev("MODIFIED", pod("a", "3")), HANG)
    transform = CountingTransform()
    inf = Informer(src, name="pods", clock=clock, transform=transform)
    async with anyio.create_task_group() as tg:
        await tg.start(inf.run)
        await until(lambda: inf.last_sync_resource_version == "3")
        tg.cancel_scope.cancel()
    assert transform.seen == [("a", "2"), ("a", "3")]


def test_chain_transforms_applies_in_order() -> None:
    def tag(obj: JSON) -> JSON:
        return {**obj, "tags": [*obj.get("tags", []), len(obj.get("tags", []))]}

    assert chain_transforms(tag) is tag
    both = chain_transforms(strip_managed_fields, tag, tag)
    out = both(pod("a", "1", managedFields=[{}]))
    assert "managedFields" not in out["metadata"] and out["tags"] == [0, 1]


def test_store_replace_keyed_first_list_and_diff() -> None:
    s = Store()
    a, b = owned("a", "1", "job-1"), owned("b", "2", "job-1")
    first = s.replace_keyed({"ns/a": a, "ns/b": b})
    assert first.added == [a, b] and not first.updated and not first.deleted
    assert {o["metadata"]["name"] for o in s.by_index(CONTROLLER_UID_INDEX, "ns/job-1")} == {
        "a",
        "b",
    }
    b2, c = owned("b", "3", "job-2"), owned("c", "4", "job-2")
    second = s.replace_keyed({"ns/b": b2, "ns/c": c})
    assert second.deleted == [a] and second.added == [c] and second.updated == [(b, b2)]
    assert s.by_index(CONTROLLER_UID_INDEX, "ns/job-1") == []
    assert {o["metadata"]["name"] for o in s.by_index(CONTROLLER_UID_INDEX, "ns/job-2")} == {
        "b",
        "c",
    }
    assert {o["metadata"]["name"] for o in s.by_index(NAMESPACE_INDEX, "ns")} == {"b", "c"}
    # keeping the very same object: no index churn, still reported as (old, new)
    third = s.replace_keyed({"ns/b": b2, "ns/c": c})
    assert third.updated == [(b2, b2), (c, c)] and not third.added and not third.deleted
    assert len(s.by_index(CONTROLLER_UID_INDEX, "ns/job-2")) == 2


def test_store_reindex_handles_generator_indexers() -> None:
    def labels(obj: JSON) -> Any:
        return (v for v in obj["metadata"].get("labels", {}).values())

    s = Store({"labels": labels})
    s.upsert(pod("a", "1", labels={"x": "1", "y": "2"}))
    s.upsert(pod("a", "2", labels={"x": "1", "y": "3"}))
    assert [o["metadata"]["resourceVersion"] for o in s.by_index("labels", "1")] == ["2"]
    assert s.by_index("labels", "2") == []
    assert len(s.by_index("labels", "3")) == 1
    s.upsert(pod("a", "3", labels={"x": "1", "y": "3"}))  # same values: nothing moves
    assert [o["metadata"]["resourceVersion"] for o in s.by_index("labels", "3")] == ["3"]


def test_gc_paused_restores_state_and_keeps_nothing_frozen() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "the inner pause must not re-enable"
        junk = [{"i": i} for i in range(1000)]
    assert gc.isenabled() and gc.get_freeze_count() == 0
    del junk
    # a cycle made while paused is still collected afterwards
    cycle: list[Any] = []
    with gc_paused():
        cycle.append(cycle)
    del cycle
    assert gc.collect() >= 1
    with pytest.raises(ValueError), gc_paused():
        raise ValueError
    assert gc.isenabled()


def test_gc_paused_leaves_an_application_freeze_alone() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with gc_paused():
            _ = [{} for _ in range(100)]
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()


def test_gc_paused_when_already_disabled() -> None:
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_decode_json_small_and_bulk() -> None:
    small = b'{"a": [1, 2]}'
    assert decode_json(small) == {"a": [1, 2]}
    bulk = b'{"items": [' + b",".join([b'{"x": "%d"}' % i for i in range(20000)]) + b"]}"
    assert len(bulk) >= BULK_DECODE_BYTES
    assert len(decode_json(bulk)["items"]) == 20000
    assert gc.isenabled()
