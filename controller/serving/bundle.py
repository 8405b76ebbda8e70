"""A CA bundle kept as a ConfigMap in every namespace that needs it.

Pods verify the report endpoint with the CA in a ConfigMap of their own namespace (a
projected volume can only read its namespace's). ``want(namespace)`` asks for it there
(called from an informer handler when a namespace's first job is seen); ``run``, a
leader's service, writes what is wanted: a GET, then a create, or a merge patch when
the data differ, and remembers the namespaces that hold the current bundle. When the
bundle changes (``set_bundle``: a rotated CA), every namespace it was written to is
written again. The kubelet refreshes projected ConfigMaps in running pods within about
a minute, so a rotation reaches pods that are already running.

A namespace that holds the bundle is looked at again when it is wanted again (a new
job there) and ``recheck_after`` has passed since it was last looked at: a tenant who
replaced or deleted the ConfigMap has it repaired by their next job.

A namespace that is terminating, that refuses the write (403), or whose ConfigMap
cannot take it (422: one made ``immutable`` by someone else) is given up until it is
wanted again, and ``on_refused(namespace, why)`` is told (the job gets a Warning);
other failures are retried with a backoff of a second doubling to a minute. Nothing
here is ever deleted: the ConfigMap goes with its namespace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import anyio
import structlog
from anyio.abc import TaskStatus

from controller import errors
from controller.types import JSON

log = structlog.get_logger("controller.serving.bundle")

RETRY_MIN, RETRY_MAX = 1.0, 60.0
#: a namespace holding the bundle is looked at again no more often than this
RECHECK_SECONDS = 60.0


class ConfigMaps(Protocol):
    async def get(self, namespace: str, name: str) -> JSON | None: ...

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...

    async def patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON: ...


class BundleDistributor:
    def __init__(
        self,
        configmaps: ConfigMaps,
        name: str,
        key: str,
        bundle: str,
        *,
        labels: Mapping[str, str],
        recheck_after: float = RECHECK_SECONDS,
        on_refused: Callable[[str, str], None] | None = None,
    ) -> None:
        self._client = configmaps
        self.recheck_after = recheck_after
        self.on_refused = on_refused
        self._checked: dict[str, float] = {}  # namespace -> when it last held the bundle
        self.name = name
        self.key = key
        self._bundle = bundle
        self._labels = dict(labels)
        self._wanted: set[str] = set()
        self._done: set[str] = set()  # hold the current bundle
        self._retry: dict[str, float] = {}  # namespace -> its next backoff
        self._due: dict[str, float] = {}  # namespace -> when to try again (anyio time)
        self._wake = anyio.Event()
        self.writes = 0

    @property
    def bundle(self) -> str:
        return self._bundle

    def want(self, namespace: str) -> None:
        if not namespace or namespace in self._wanted:
            return
        if namespace in self._done:
            checked = self._checked.get(namespace)
            if checked is not None and anyio.current_time() - checked < self.recheck_after:
                return
            self._done.discard(namespace)
        self._wanted.add(namespace)
        self._wake.set()

    def set_bundle(self, bundle: str) -> None:
        if bundle == self._bundle:
            return
        self._bundle = bundle
        self._wanted |= self._done
        self._done.clear()
        self._wake.set()

    def holds(self, namespace: str) -> bool:
        return namespace in self._done

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            now = anyio.current_time()
            for namespace, due in list(self._due.items()):
                if due <= now:
                    del self._due[namespace]
                    self._wanted.add(namespace)
            while self._wanted and self._bundle:  # none yet: nothing to write
                namespace = min(self._wanted)
                self._wanted.discard(namespace)
                await self._ensure(namespace)
            wait = min(self._due.values()) - anyio.current_time() if self._due else None
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()

    async def _ensure(self, namespace: str) -> None:
        bundle = self._bundle
        try:
            await self._write(namespace, bundle)
        except errors.ApiError as e:
            if errors.is_namespace_terminating(e):
                return
            if isinstance(e, (errors.Forbidden, errors.Invalid)):
                log.warning("CA bundle not written", namespace=namespace, error=str(e))
                self._retry.pop(namespace, None)
                if self.on_refused is not None:
                    self.on_refused(namespace, str(e))
                return
            delay = self._retry.get(namespace, RETRY_MIN)
            self._retry[namespace] = min(RETRY_MAX, delay * 2)
            log.warning("CA bundle write failed", namespace=namespace, error=str(e), retry_in=delay)
            self._later(namespace, delay)
            return
        self._retry.pop(namespace, None)
        if bundle == self._bundle:
            self._done.add(namespace)
            self._checked[namespace] = anyio.current_time()
        else:
            self._wanted.add(namespace)  # rotated meanwhile

    async def _write(self, namespace: str, bundle: str) -> None:
        current = await self._client.get(namespace, self.name)
        data = {self.key: bundle}
        if current is None:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self.name, "namespace": namespace, "labels": self._labels},
                "data": data,
            }
            try:
                await self._client.create(namespace, body)
                self.writes += 1
            except errors.AlreadyExists:
                await self._write(namespace, bundle)  # someone else's: look at it again
            return
        if (current.get("data") or {}).get(self.key) != bundle:
            await self._client.patch(namespace, self.name, {"data": data})
            self.writes += 1

    def _later(self, namespace: str, delay: float) -> None:
        self._due[namespace] = anyio.current_time() + delay
