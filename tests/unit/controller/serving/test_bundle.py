"""The CA bundle written to the namespaces that need it, again when it changes."""

from __future__ import annotations

from collections.abc import Mapping
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
        self.changed = anyio.Event()

    async def get(self, namespace: str, name: str) -> JSON | None:
        if namespace in self.refuse:
            raise self.refuse[namespace]
        return self.objects.get((namespace, name))

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        self.objects[(namespace, body["metadata"]["name"])] = dict(body)
        return self._done("create", namespace)

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
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
