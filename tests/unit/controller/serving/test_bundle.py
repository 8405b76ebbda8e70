"""The CA bundle written to the namespaces that need it, again when it changes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio

from controller import errors
from controller.serving.bundle import BundleDistributor
from controller.types import JSON


class ConfigMaps:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], JSON] = {}
        self.log: list[tuple[str, str]] = []
        self.refuse: dict[str, Exception] = {}
        self.immutable: set[str] = set()
        self.changed = anyio.Event()

    async def get(self, namespace: str, name: str) -> JSON | None:
        if namespace in self.refuse:
            raise self.refuse[namespace]
        return self.objects.get((namespace, name))

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        self.objects[(namespace, body["metadata"]["name"])] = dict(body)
        return self._done("create", namespace)

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        if namespace in self.immutable:
            self.log.append(("refused", namespace))
            self.changed.set()
            raise errors.error_from_status(422, {"message": "field is immutable"})
        self.objects[(namespace, name)] = {**self.objects[(namespace, name)], **body}
        return self._done("patch", namespace)

    def _done(self, verb: str, namespace: str) -> JSON:
        self.log.append((verb, namespace))
        self.changed.set()
        return {}


async def until(cm: ConfigMaps, n: int) -> None:
    with anyio.fail_after(5):
        while len(cm.log) < n:
            cm.changed = anyio.Event()
            await cm.changed.wait()


async def test_written_once_per_namespace_and_again_after_a_rotation() -> None:
    cm = ConfigMaps()
    cm.objects[("b", "ca")] = {"data": {"ca.crt": "old"}}  # someone's stale copy
    d = BundleDistributor(cm, "ca", "ca.crt", "CA1", labels={"app": "x"})
    async with anyio.create_task_group() as tg:
        tg.start_soon(d.run)
        d.want("a")
        d.want("b")
        await until(cm, 2)
        assert sorted(cm.log) == [("create", "a"), ("patch", "b")]
        assert cm.objects[("a", "ca")]["metadata"]["labels"] == {"app": "x"}
        d.want("a")  # already holds it: nothing to do
        d.set_bundle("CA2")
        await until(cm, 4)
        assert {k: v["data"]["ca.crt"] for k, v in cm.objects.items()} == {
            ("a", "ca"): "CA2",
            ("b", "ca"): "CA2",
        }
        assert d.holds("a") and d.holds("b") and d.writes == 4
        tg.cancel_scope.cancel()


async def test_a_refusing_namespace_is_given_up_and_a_failing_one_retried() -> None:
    cm = ConfigMaps()
    cm.refuse["gone"] = errors.error_from_status(403, {"message": "forbidden"})
    cm.refuse["flaky"] = errors.error_from_status(500, {"message": "etcd"})
    d = BundleDistributor(cm, "ca", "ca.crt", "CA", labels={})
    async with anyio.create_task_group() as tg:
        tg.start_soon(d.run)
        d.want("gone")
        d.want("flaky")
        d.want("ok")
        await until(cm, 1)
        del cm.refuse["flaky"]
        await until(cm, 2)  # retried after its backoff
        assert sorted(cm.log) == [("create", "flaky"), ("create", "ok")]
        assert not d.holds("gone")
        tg.cancel_scope.cancel()


@asynccontextmanager
async def tampered(recheck_after: float) -> AsyncIterator[tuple[ConfigMaps, BundleDistributor]]:
    """Namespace a holds the bundle, then a tenant replaces it."""
    cm = ConfigMaps()
    d = BundleDistributor(cm, "ca", "ca.crt", "CA", labels={}, recheck_after=recheck_after)
    async with anyio.create_task_group() as tg:
        tg.start_soon(d.run)
        d.want("a")
        await until(cm, 1)
        cm.objects[("a", "ca")]["data"] = {"ca.crt": "a tenant's own"}
        yield cm, d
        tg.cancel_scope.cancel()


async def test_a_tampered_or_deleted_bundle_is_repaired_when_a_job_is_seen_again() -> None:
    async with tampered(recheck_after=0) as (cm, d):
        d.want("a")  # the namespace's next job
        await until(cm, 2)
        assert cm.log[-1] == ("patch", "a") and cm.objects[("a", "ca")]["data"]["ca.crt"] == "CA"
        del cm.objects[("a", "ca")]
        d.want("a")
        await until(cm, 3)
        assert cm.log[-1] == ("create", "a") and d.holds("a")


async def test_a_namespace_is_looked_at_again_only_after_the_recheck_time() -> None:
    async with tampered(recheck_after=3600) as (_, d):
        for _ in range(100):  # a burst of jobs costs nothing
            d.want("a")
        assert d.holds("a") and not d._wanted


async def test_an_immutable_squatter_is_reported_not_retried_for_ever() -> None:
    cm = ConfigMaps()
    cm.objects[("t", "ca")] = {"data": {"ca.crt": "theirs"}, "immutable": True}
    cm.immutable.add("t")
    told: list[tuple[str, str]] = []
    d = BundleDistributor(
        cm, "ca", "ca.crt", "CA", labels={}, on_refused=lambda ns, why: told.append((ns, why))
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(d.run)
        d.want("t")
        await until(cm, 1)
        assert told == [("t", "422: field is immutable")]
        assert not d.holds("t") and "t" not in d._due and "t" not in d._wanted
        d.want("t")  # the namespace's next job: tried, and reported, once more
        await until(cm, 2)
        assert [ns for ns, _ in told] == ["t", "t"] and "t" not in d._due
        tg.cancel_scope.cancel()
