"""EventRecorder: core/v1 Events about objects, without ever slowing a reconcile.

Contract (implements controller.types.EventSink; writes through a
controller.types.EventWriter, e.g. ``ResourceClient(api, EVENTS)``):
- ``event(obj, type_, reason, message)`` is synchronous, never blocks and never
  raises. It only records the event in a bounded in-memory buffer; ``run()`` (a
  Manager service) writes them out in the background.
- Repeats of the same (object UID, type, reason, message) are folded: while one is
  still buffered, a repeat only bumps its pending count; once written, a repeat
  PATCHes the existing Event's ``count`` and ``lastTimestamp`` instead of creating a
  new Event (client-go's EventCorrelator does the same). A PATCH that finds the Event
  gone (TTL-expired) creates a fresh one.
- New events go out ``batch_size`` at a time, pipelined on one connection
  (``create_many``, controller.client.http.Pool.pipeline): one send and a few reads for
  twenty events instead of twenty of each, which at 20 QPS were a tenth of the
  controller's CPU. Repeats of written events are patched one at a time.
- When the buffer holds ``buffer_size`` distinct pending events, new ones are
  dropped and counted in ``dropped``: events are advisory and must not cost memory
  or latency under an event storm. Write failures are logged and dropped, not retried.
- Except that a burst of routine events must not crowd out the rare ones: the Normal
  events whose reasons are in ``routine`` (what a controller does as a matter of
  course, such as a create) are the first to go. When the buffer is full, a Warning or
  an event of any other reason takes the place of the oldest routine event still
  pending (the one dropped is counted); a routine event finds no place.
- A namespace that refuses an event because it is being deleted gets no more events
  for ``mute_seconds``: everything in it is going, and the writer (one write at a
  time) must not spend seconds on refusals while other namespaces' events wait.
"""

from __future__ import annotations

import socket
import uuid
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from controller import errors
from controller.clock import SystemClock
from controller.types import JSON, Answers, Clock, EventWriter

log = structlog.get_logger("controller.runtime.events")

MAX_MESSAGE = 1024


EventKey = tuple[str, str, str, str]


@dataclass(slots=True)
class _Pending:
    involved: JSON
    namespace: str
    type_: str
    reason: str
    message: str
    count: int


@dataclass(slots=True)
class _Written:
    namespace: str
    name: str
    count: int


class EventRecorder:
    def __init__(
        self,
        writer: EventWriter,
        component: str,
        *,
        clock: Clock | None = None,
        host: str | None = None,
        buffer_size: int = 1000,
        cache_size: int = 4096,
        mute_seconds: float = 300.0,
        on_drop: Callable[[str], None] | None = None,
        on_event: Callable[[str, str], None] | None = None,
        routine: frozenset[str] = frozenset(),
        batch_size: int = 20,
    ) -> None:
        self._writer = writer
        self._batch_size = max(1, batch_size)
        self.component = component
        self.host = host if host is not None else socket.gethostname()
        self._clock = clock or SystemClock()
        self._buffer_size = buffer_size
        self._cache_size = cache_size
        self._pending: OrderedDict[EventKey, _Pending] = OrderedDict()
        self._written: OrderedDict[EventKey, _Written] = OrderedDict()
        self._routine = routine
        #: the pending events that may give their place up, oldest first
        self._routine_pending: OrderedDict[EventKey, None] = OrderedDict()
        self._wakeup: anyio.Event | None = None
        self._mute_seconds = mute_seconds
        #: namespaces being deleted, and until when their events are dropped unwritten
        self._muted: dict[str, float] = {}
        self.dropped = 0
        self.written = 0
        #: told why each dropped event was dropped (a metric's counter)
        self._on_drop = on_drop
        #: told the type and reason of every event recorded, repeats included
        self._on_event = on_event

    def _drop(self, why: str) -> None:
        self.dropped += 1
        if self._on_drop is not None:
            self._on_drop(why)

    # ---- EventSink --------------------------------------------------------------

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        try:
            if self._on_event is not None:
                self._on_event(type_, reason)
            self._record(obj, type_, reason, message)
        except Exception:  # an event must never break the caller
            log.exception("event not recorded", reason=reason)

    def _record(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        message = message[:MAX_MESSAGE]
        ident = meta.get("uid") or f"{namespace}/{meta.get('name', '')}"
        key: EventKey = (ident, type_, reason, message)
        pending = self._pending.get(key)
        if pending is not None:
            pending.count += 1
            return
        routine = type_ == "Normal" and reason in self._routine
        if len(self._pending) >= self._buffer_size and (routine or not self._make_room()):
            self._drop("buffer_full")
            return
        involved = {
            "apiVersion": obj.get("apiVersion", ""),
            "kind": obj.get("kind", ""),
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        self._pending[key] = _Pending(involved, namespace, type_, reason, message, 1)
        if routine:
            self._routine_pending[key] = None
        if self._wakeup is not None:
            self._wakeup.set()

    def _make_room(self) -> bool:
        """Drop the oldest pending routine event, if there is one."""
        if not self._routine_pending:
            return False
        key, _ = self._routine_pending.popitem(last=False)
        del self._pending[key]
        self._drop("buffer_full")
        return True

    def _next(self) -> tuple[EventKey, _Pending]:
        key, pending = self._pending.popitem(last=False)
        self._routine_pending.pop(key, None)
        return key, pending

    # ---- background writer ---------------------------------------------------------

    @property
    def backlog(self) -> int:
        return len(self._pending)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await self.flush()
            self._wakeup = anyio.Event()
            await self._wakeup.wait()

    async def flush(self) -> None:
        """Write everything buffered now (and what is buffered meanwhile)."""
        while self._pending:
            await self._write_some()

    async def _write_some(self) -> None:
        """The next pending events, oldest first: repeats of written ones patched one at a
        time, and up to ``batch_size`` new ones created together (one pipelined exchange)."""
        batch: list[tuple[EventKey, _Pending, str, JSON]] = []
        now = self._timestamp()
        while self._pending and len(batch) < self._batch_size:
            key, pending = self._next()
            if self._is_muted(pending.namespace):
                self._drop("namespace_terminating")
            elif key in self._written:
                await self._write(key, pending)
            else:
                name = f"{pending.involved['name'] or 'object'}.{uuid.uuid4().hex[:16]}"
                batch.append((key, pending, name, self._body(pending, name, now)))
        if not batch:
            return
        try:
            answers: Answers = await self._writer.create_many(
                [(p.namespace, body) for _, p, _, body in batch]
            )
        except Exception as exc:  # never raises: each event of the batch fails with it
            answers = [exc] * len(batch)
        for (key, pending, name, _), answer in zip(batch, answers, strict=True):
            if isinstance(answer, Exception):
                self._failed(pending, answer)
            else:
                self._remember(key, pending, name)

    def _timestamp(self) -> str:
        return self._clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")

    def _is_muted(self, namespace: str) -> bool:
        until = self._muted.get(namespace)
        if until is None:
            return False
        if self._clock.monotonic() < until:
            return True
        del self._muted[namespace]
        return False

    async def _write(self, key: EventKey, p: _Pending) -> None:
        """A repeat of a written event (_write_some has checked the namespace's mute)."""
        now = self._timestamp()
        written = self._written.get(key)
        try:
            if written is not None:
                count = written.count + p.count
                try:
                    await self._writer.patch(
                        written.namespace, written.name, {"count": count, "lastTimestamp": now}
                    )
                    written.count = count
                    self._written.move_to_end(key)
                    self.written += 1
                    return
                except errors.NotFound:
                    del self._written[key]  # expired by the apiserver's event TTL
            name = f"{p.involved['name'] or 'object'}.{uuid.uuid4().hex[:16]}"
            await self._writer.create(p.namespace, self._body(p, name, now))
            self._remember(key, p, name)
        except Exception as exc:  # events are advisory: log and drop
            self._failed(p, exc)

    def _body(self, p: _Pending, name: str, now: str) -> JSON:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": p.namespace},
            "involvedObject": p.involved,
            "type": p.type_,
            "reason": p.reason,
            "message": p.message,
            "count": p.count,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component, "host": self.host},
            "reportingComponent": self.component,
            "reportingInstance": self.host,
        }

    def _remember(self, key: EventKey, p: _Pending, name: str) -> None:
        """A created event: its repeats patch it (while it stays in the cache)."""
        self.written += 1
        self._written[key] = _Written(p.namespace, name, p.count)
        if len(self._written) > self._cache_size:
            self._written.popitem(last=False)

    def _failed(self, p: _Pending, exc: Exception) -> None:
        """Events are advisory: a failed write is logged and dropped."""
        terminating = errors.is_namespace_terminating(exc)
        self._drop("namespace_terminating" if terminating else "write_failed")
        if terminating:
            self._muted[p.namespace] = self._clock.monotonic() + self._mute_seconds
            log.debug("namespace terminating: its events muted", namespace=p.namespace)
            return
        log.warning("event write failed", reason=p.reason, error=str(exc))
