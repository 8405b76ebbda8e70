"""A scripted list/watch source for driving an Informer without a cluster.

Each ``list_page`` call pops the next scripted answer (a ListPage or an exception).
Each ``watch`` call pops the next script: a list of events, exceptions (raised at that
point of the stream) and optionally HANG (block until cancelled) at the end; a script
without HANG ends with a clean close. Calls are recorded with their arguments.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from controller.types import JSON, ListPage

HANG = object()


def pod(name: str, rv: str, ns: str = "ns", **extra: Any) -> JSON:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "resourceVersion": rv}
    meta.update(extra)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta}


def ev(type_: str, obj: JSON) -> JSON:
    return {"type": type_, "object": obj}


def bookmark(rv: str) -> JSON:
    return ev("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": rv}})


class ScriptedSource:
    def __init__(self) -> None:
        self.list_script: deque[ListPage | BaseException] = deque()
        self.watch_script: deque[list[Any]] = deque()
        self.list_calls: list[dict[str, Any]] = []
        self.watch_calls: list[dict[str, Any]] = []
        self.watch_opened = anyio.Event()

    def add_list(self, items: list[JSON], rv: str, continue_token: str | None = None) -> None:
        self.list_script.append(ListPage(items, rv, continue_token))

    def add_list_error(self, exc: BaseException) -> None:
        self.list_script.append(exc)

    def add_watch(self, *steps: Any) -> None:
        self.watch_script.append(list(steps))

    async def list_page(self, namespace: str | None = None, **kwargs: Any) -> ListPage:
        self.list_calls.append({"namespace": namespace, **kwargs})
        await anyio.lowlevel.checkpoint()
        answer = self.list_script.popleft()
        if isinstance(answer, BaseException):
            raise answer
        return answer

    @asynccontextmanager
    async def watch(
        self, namespace: str | None = None, **kwargs: Any
    ) -> AsyncIterator[AsyncIterator[JSON]]:
        self.watch_calls.append({"namespace": namespace, **kwargs})
        steps = self.watch_script.popleft() if self.watch_script else [HANG]

        async def events() -> AsyncIterator[JSON]:
            for step in steps:
                await anyio.lowlevel.checkpoint()
                if step is HANG:
                    await anyio.sleep_forever()
                if isinstance(step, BaseException):
                    raise step
                yield step

        self.watch_opened.set()
        yield events()
