"""The informer against the real apiserver: ordering, list equality, and recovery after
an apiserver restart and after a forced 410 (etcd compacted while not watching)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread
import pytest

from controller import errors
from controller.cache.informer import EventHandler, Informer, strip_managed_fields
from controller.client.api import KubeApi
from controller.client.kube import PODS, ResourceClient
from controller.types import JSON
from tests.conftest import Cluster


def pod_body(name: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "informer-test"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }


class History:
    """Handler calls per object name, as (kind, resourceVersion)."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[tuple[str, int]]] = {}

    def _rec(self, kind: str, obj: JSON) -> None:
        meta = obj["metadata"]
        self.by_name.setdefault(meta["name"], []).append((kind, int(meta["resourceVersion"])))

    def handler(self) -> EventHandler:
        return EventHandler(
            on_add=lambda o: self._rec("add", o),
            on_update=lambda _old, new: self._rec("update", new),
            on_delete=lambda o: self._rec("delete", o),
        )

    def kinds(self, name: str) -> list[str]:
        return [k for k, _ in self.by_name.get(name, [])]


async def eventually(pred: Callable[[], Any], what: str, timeout: float = 30) -> None:
    """Poll a condition until it holds (the informer runs meanwhile)."""
    with anyio.fail_after(timeout):
        while not await _call(pred):  # noqa: ASYNC110 - the condition lives in the apiserver
            await anyio.sleep(0.05)


async def _call(pred: Callable[[], Any]) -> Any:
    result = pred()
    if hasattr(result, "__await__"):
        result = await result
    return result


async def store_matches_list(inf: Informer, client: ResourceClient, namespace: str) -> bool:
    fresh = await client.list(namespace)
    listed = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in fresh.items}
    cached = {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in inf.store.list()}
    return listed == cached


async def gone(client: ResourceClient, namespace: str, name: str) -> bool:
    return await client.get(namespace, name) is None


class GatedSource:
    """Delegates to a ResourceClient; ``watch`` waits while the gate is closed, so a
    test can change the cluster while the informer is certainly not watching."""

    def __init__(self, inner: ResourceClient) -> None:
        self.inner = inner
        self.gate = anyio.Event()
        self.gate.set()
        self.blocked = 0

    async def list_page(self, *args: Any, **kwargs: Any) -> Any:
        return await self.inner.list_page(*args, **kwargs)

    @asynccontextmanager
    async def watch(self, *args: Any, **kwargs: Any) -> AsyncIterator[AsyncIterator[JSON]]:
        if not self.gate.is_set():
            self.blocked += 1
            await self.gate.wait()
        async with self.inner.watch(*args, **kwargs) as events:
            yield events


@asynccontextmanager
async def running_informer(
    source: Any, namespace: str, **kwargs: Any
) -> AsyncIterator[tuple[Informer, History]]:
    inf = Informer(
        source, name="pods", namespace=namespace, transform=strip_managed_fields, **kwargs
    )
    history = History()
    inf.add_handler(history.handler())
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(30):
            await tg.start(inf.run)
        yield inf, history
        tg.cancel_scope.cancel()


async def test_informer_sees_changes_in_order_and_matches_list(
    cluster: Cluster, namespace: str
) -> None:
    async with await KubeApi.from_kubeconfig(cluster.kubeconfig) as api:
        pods = ResourceClient(api, PODS)
        await pods.create(namespace, pod_body("before"))
        async with running_informer(pods, namespace) as (inf, history):
            assert history.kinds("before")[:1] == ["add"], "pre-existing objects arrive as adds"
            for name in ("a", "b", "c"):
                await pods.create(namespace, pod_body(name))
            await pods.patch(namespace, "a", {"metadata": {"labels": {"step": "1"}}})
            await pods.patch(namespace, "a", {"metadata": {"labels": {"step": "2"}}})
            await pods.delete(namespace, "b")
            await eventually(lambda: "delete" in history.kinds("b"), "b deleted")
            await eventually(
                lambda: (
                    (inf.store.get(namespace, "a") or {})
                    .get("metadata", {})
                    .get("labels", {})
                    .get("step")
                    == "2"
                ),
                "a's second patch",
            )
            for name, calls in history.by_name.items():
                kinds = [k for k, _ in calls]
                rvs = [rv for _, rv in calls]
                assert kinds[0] == "add", (name, calls)
                assert "add" not in kinds[1:], (name, calls)
                assert "delete" not in kinds[:-1], (name, calls)
                assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs), (name, calls)
            assert history.kinds("b")[-1] == "delete"
            assert inf.store.get(namespace, "b") is None
            assert all("managedFields" not in o["metadata"] for o in inf.store.list())
            await eventually(lambda: store_matches_list(inf, pods, namespace), "store == LIST")


@pytest.mark.local_only  # restarts the local apiserver
async def test_informer_recovers_after_apiserver_restart(cluster: Cluster, namespace: str) -> None:
    async with await KubeApi.from_kubeconfig(cluster.kubeconfig) as api:
        pods = ResourceClient(api, PODS)
        await pods.create(namespace, pod_body("old"))
        async with running_informer(pods, namespace) as (inf, history):
            watches_before = inf.stats["watches"]
            await anyio.to_thread.run_sync(cluster.restart_apiserver)

            async def create_when_up() -> bool:
                try:
                    await pods.create(namespace, pod_body("new"))
                except errors.AlreadyExists:
                    return True
                except errors.ApiError:
                    return False
                return True

            await eventually(create_when_up, "apiserver accepting writes again", timeout=60)
            await pods.delete(namespace, "old")
            await eventually(lambda: "delete" in history.kinds("old"), "delete after restart", 60)
            await eventually(lambda: inf.store.get(namespace, "new") is not None, "new pod", 60)
            assert inf.stats["watches"] > watches_before, "the watch was re-established"
            await eventually(lambda: store_matches_list(inf, pods, namespace), "store == LIST")


@pytest.mark.local_only  # restarts the local apiserver
async def test_informer_relists_after_410_and_emits_vanished_deletes(
    cluster: Cluster, namespace: str
) -> None:
    async with await KubeApi.from_kubeconfig(cluster.kubeconfig) as api:
        pods = ResourceClient(api, PODS)
        for name in ("vanish", "change"):
            await pods.create(namespace, pod_body(name))
        source = GatedSource(pods)
        # short server-side watch timeouts, so the informer re-watches within seconds
        async with running_informer(source, namespace, min_watch_timeout=2) as (inf, history):
            await eventually(lambda: inf.stats["watches"] >= 1, "first watch")
            source.gate = anyio.Event()  # close: the next re-watch waits here
            # the short server timeout ends the current watch; the informer then waits
            await eventually(lambda: source.blocked == 1, "informer waiting to re-watch")
            stale_rv = inf.last_sync_resource_version

            await pods.delete(namespace, "vanish")
            await eventually(lambda: gone(pods, namespace, "vanish"), "vanish deleted")
            await pods.create(namespace, pod_body("appear"))
            await pods.patch(namespace, "change", {"metadata": {"labels": {"x": "y"}}})
            # The apiserver's watch cache would still serve the stale RV from memory. A
            # restart starts the cache afresh at the current revision, after the changes
            # above; compaction removes the stale RV from etcd too. Only then is a 410
            # certain.
            await anyio.to_thread.run_sync(cluster.restart_apiserver)
            revision = await anyio.to_thread.run_sync(cluster.compact_etcd)
            assert revision > int(stale_rv)

            source.gate.set()
            await eventually(lambda: inf.stats["relists_on_gone"] >= 1, "a relist on 410")
            await eventually(lambda: "delete" in history.kinds("vanish"), "tombstone delete")
            await eventually(lambda: inf.store.get(namespace, "appear") is not None, "appear")
            assert inf.store.get(namespace, "vanish") is None
            labels = inf.store.get(namespace, "change")["metadata"].get("labels", {})  # type: ignore[index]
            assert labels.get("x") == "y"
            await eventually(lambda: store_matches_list(inf, pods, namespace), "store == LIST")
