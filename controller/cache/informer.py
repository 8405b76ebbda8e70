"""Informer: keep a Store in sync with the apiserver and tell handlers what changed.

State machine (client-go Reflector.ListAndWatch, simplified where noted):
1. LIST, paginated, as a consistent read (no resourceVersion) and replace the store;
   the next page is fetched while the last is transformed.
   Objects that vanished since the last list are reported to handlers as deletes
   carrying their last known state. A page whose continue token expired (410)
   restarts the list unpaginated.
2. WATCH from the list's resourceVersion with allowWatchBookmarks and a random
   timeoutSeconds in [min, 2·min) (spreads apiserver load), plus a client read timeout
   so a half-open connection is noticed. The stored RV advances on every event and
   bookmark; bookmarks carry no object.
3. The watch ends:
   - cleanly (server timeout) → watch again from the last RV at once;
   - 410 Gone → relist (step 1);
   - any other failure, or a clean close under 1s with no events → exponential
     backoff (0.8s doubling to 30s, +0-100% jitter, reset after 2 min of health),
     then watch again from the last RV.

Delivery contract: the store is updated FIRST, then handlers run, synchronously and in
order, on the informer's task. Handlers receive shared objects and MUST NOT mutate
them, MUST NOT block or do I/O (enqueue keys, adjust expectations), and should not
raise (exceptions are logged and swallowed). An update whose resourceVersion did not
change (a relist of an unchanged object) is not delivered. ``has_synced`` turns true
once the first list has been stored and delivered to every handler.

Transforms (``transform=``, e.g. strip managedFields or slim an object to the fields a
controller reads) run once per object version: on every list item and ADDED, MODIFIED or
DELETED event, before the store sees it; a relisted object whose resourceVersion the
store already holds keeps its cached (already transformed) version instead. A transform
may mutate the freshly decoded object it receives or return a new one, and must keep
``metadata.name``, ``namespace`` and ``resourceVersion``.

The list path is the hot one (an initial list or relist of every pod the controller
owns): each page is decoded by one ``orjson.loads`` of the body, then transformed and
stored with the cyclic garbage collector paused (``controller.client.codec.gc_paused``), so
building a cache of N objects costs O(N) rather than O(N) times the rescans of the
growing heap that allocation-triggered collections would do.

The list/watch source is a protocol (``controller.types.ListWatch``), so tests drive
the informer with a scripted one. The pages come from ``controller.client.kube.list_pages``, the
pagination loop ``ResourceClient.list`` uses too.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from contextlib import aclosing
from typing import Any

import anyio
import structlog
from anyio.abc import TaskStatus

from controller import errors
from controller.cache.store import IndexFunc, Store, key_of, resource_version_of
from controller.cache.transforms import Transform as Transform  # re-exported for callers
from controller.cache.transforms import chain_transforms as chain_transforms
from controller.cache.transforms import strip_managed_fields as strip_managed_fields
from controller.client.codec import gc_paused
from controller.client.kube import list_pages
from controller.clock import SystemClock
from controller.types import JSON, Clock, ListPage, ListWatch, object_key
from controller.types import EventHandler as EventHandler  # re-exported for handlers

log = structlog.get_logger("controller.cache.informer")


class Backoff:
    """client-go's reflector backoff: delay ∈ [d, 2d) with d doubling from ``initial``
    to ``cap``; resets once ``reset_after`` seconds pass without a failure."""

    def __init__(
        self,
        clock: Clock,
        rng: random.Random,
        initial: float = 0.8,
        cap: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
    ) -> None:
        self._clock, self._rng = clock, rng
        self._initial, self._cap, self._factor = initial, cap, factor
        self._jitter, self._reset_after = jitter, reset_after
        self._next = initial
        self._last_failure: float | None = None

    def next_delay(self) -> float:
        now = self._clock.monotonic()
        if self._last_failure is not None and now - self._last_failure > self._reset_after:
            self._next = self._initial
        self._last_failure = now
        base = self._next
        self._next = min(self._next * self._factor, self._cap)
        return base + self._rng.random() * self._jitter * base


class _WatchClosedTooSoon(Exception):
    pass


class _ContinueExpired(Exception):
    """A later page of a list answered 410: its continue token expired."""


class Informer:
    def __init__(
        self,
        source: ListWatch,
        *,
        name: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: Mapping[str, IndexFunc] | None = None,
        transform: Transform | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        page_size: int = 500,
        min_watch_timeout: int = 300,
        read_timeout: float | None = None,
    ) -> None:
        self.name = name
        self.store = Store(indexers)
        self._source = source
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._transform = transform
        self._clock = clock or SystemClock()
        self._rng = rng or random.Random()
        self._page_size = page_size
        self._min_watch_timeout = min_watch_timeout
        self._read_timeout = read_timeout
        self._handlers: list[EventHandler] = []
        self._synced: anyio.Event | None = None
        self._has_synced = False
        self._list_seconds = 0.0
        self._rv = ""
        self._log = log.bind(informer=name)
        #: counters for tests and metrics: how often each path ran
        self.stats = {"lists": 0, "watches": 0, "relists_on_gone": 0, "watch_errors": 0}

    # ---- public surface ----------------------------------------------------------

    def add_handler(self, handler: EventHandler) -> None:
        if self._has_synced or self.stats["lists"]:
            raise RuntimeError("add handlers before the informer starts")
        self._handlers.append(handler)

    @property
    def has_synced(self) -> bool:
        return self._has_synced

    async def wait_for_sync(self) -> None:
        if self._has_synced:
            return
        if self._synced is None:
            self._synced = anyio.Event()
        await self._synced.wait()

    @property
    def last_sync_resource_version(self) -> str:
        """The newest RV this informer has seen, from a list, an event or a bookmark."""
        return self._rv

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """List and watch forever. ``task_status.started()`` fires after the first
        successful list, so ``await tg.start(informer.run)`` waits for the cache."""
        backoff = Backoff(self._clock, self._rng)
        need_list = True
        while True:
            if need_list:
                try:
                    await self._list_and_replace()
                except Exception as exc:  # any failure: back off, retry
                    delay = backoff.next_delay()
                    self._log.warning("list failed", error=str(exc), retry_in=round(delay, 3))
                    await self._clock.sleep(delay)
                    continue
                need_list = False
                if not self._has_synced:
                    self._mark_synced()
                    task_status.started()
            try:
                await self._watch()
            except errors.Gone as exc:
                self.stats["relists_on_gone"] += 1
                self._log.info("watch expired, relisting", resource_version=self._rv, err=str(exc))
                need_list = True
            except Exception as exc:  # re-watch from the last RV after backoff
                self.stats["watch_errors"] += 1
                delay = backoff.next_delay()
                self._log.warning(
                    "watch failed",
                    error=f"{type(exc).__name__}: {exc}",
                    resource_version=self._rv,
                    retry_in=round(delay, 3),
                )
                await self._clock.sleep(delay)

    # ---- list ---------------------------------------------------------------------

    async def _list_all(self) -> tuple[dict[str, JSON], str]:
        """Every object, keyed, transformed; and the list's resourceVersion."""
        try:
            return await self._list_pages(self._page_size)
        except _ContinueExpired:
            # the snapshot behind the continue token was compacted away: a fresh
            # unpaginated list is the only way to a consistent view
            self._log.info("list continue token expired, listing without pages")
            return await self._list_pages(0)

    async def _list_pages(self, limit: int) -> tuple[dict[str, JSON], str]:
        """One list, page by page; the RV is the first page's. A 410 on the first page
        propagates; one on a later page (its continue token expired) raises
        _ContinueExpired.

        The next page is asked for while this one is transformed: a task fetches
        and decodes pages and hands each over as it is taken (no buffer, so at most two
        pages are held: one being stored, the next decoded). Fetched in turn, the
        apiserver sat idle while we transformed, and we while it serialized: at 40,000
        pods the list took 14-18 s."""
        fresh: dict[str, JSON] = {}
        rv: str | None = None
        failure: Exception | None = None
        send, receive = anyio.create_memory_object_stream[ListPage | Exception]()

        async def fetch() -> None:
            async with send:
                pages = list_pages(
                    self._source,
                    self._namespace,
                    self._label_selector,
                    self._field_selector,
                    limit,
                )
                async with aclosing(pages):
                    try:
                        async for page in pages:
                            await send.send(page)
                            del page  # the next request goes out without it
                    except Exception as exc:  # raised by the consumer, in its own frame
                        await send.send(exc)

        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(fetch)
            async for item in receive:
                if isinstance(item, Exception):
                    failure = item
                    break
                if rv is None:
                    rv = item.resource_version
                try:
                    self._absorb_page(item.items, fresh)
                except Exception as exc:  # raised below: from inside, a task group's
                    failure = exc  # exception group would hide it from the log
                    tg.cancel_scope.cancel()
                    break
                del item  # the page's raw objects go now, not after the next one
        if isinstance(failure, errors.Gone) and rv is not None:
            raise _ContinueExpired from failure
        if failure is not None:
            raise failure
        return fresh, rv or ""

    def _absorb_page(self, raw: list[JSON], fresh: dict[str, JSON]) -> None:
        """Key and transform one page into ``fresh``. An object the store already holds
        at the same resourceVersion (a relist) keeps its cached version: no second
        transform, no index churn, and no update is delivered for it anyway."""
        transform = self._transform
        cached = self.store.get_by_key
        with gc_paused():
            for obj in raw:
                meta = obj.get("metadata") or {}
                key = object_key(meta.get("namespace"), meta.get("name", ""))
                old = cached(key)
                rv = meta.get("resourceVersion")
                if (
                    old is not None
                    and rv
                    and (old.get("metadata") or {}).get("resourceVersion") == rv
                ):
                    fresh[key] = old
                elif transform is not None:
                    fresh[key] = transform(obj)
                else:
                    fresh[key] = obj

    async def _list_and_replace(self) -> None:
        self.stats["lists"] += 1
        started = self._clock.monotonic()
        fresh, rv = await self._list_all()
        self._list_seconds = self._clock.monotonic() - started
        # client-go's isInInitialList: what the first list finds was there before this
        # process, which a handler may rank below what happens from now on
        initial = not self._has_synced
        with gc_paused():
            result = self.store.replace_keyed(fresh)
        self._rv = rv
        self._log.debug(
            "listed",
            resource_version=rv,
            count=len(fresh),
            added=len(result.added),
            deleted=len(result.deleted),
        )
        for old in result.deleted:
            self._dispatch_delete(old)
        for old, new in result.updated:
            self._dispatch_update(old, new)
        for obj in result.added:
            self._dispatch_add(obj, initial=initial)

    def _mark_synced(self) -> None:
        self._has_synced = True
        if self._synced is not None:
            self._synced.set()
        self._log.info(
            "cache synced",
            count=len(self.store),
            resource_version=self._rv,
            list_seconds=round(self._list_seconds, 3),
        )

    # ---- watch --------------------------------------------------------------------

    async def _watch(self) -> None:
        self.stats["watches"] += 1
        timeout = self._rng.randint(self._min_watch_timeout, 2 * self._min_watch_timeout - 1)
        started = self._clock.monotonic()
        events = 0
        async with self._source.watch(
            self._namespace,
            resource_version=self._rv,
            timeout_seconds=timeout,
            label_selector=self._label_selector,
            field_selector=self._field_selector,
            allow_bookmarks=True,
            read_timeout=self._read_timeout,
        ) as stream:
            async for event in stream:
                events += 1
                self._handle_event(event)
        if events == 0 and self._clock.monotonic() - started < 1.0:
            # an apiserver closing watches at once would otherwise get a hot loop
            raise _WatchClosedTooSoon("watch closed within 1s without events")

    def _handle_event(self, event: JSON) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, dict):
            raise errors.ConnectionFailed(f"malformed watch event: {str(event)[:200]}")
        rv = resource_version_of(obj)
        if kind == "BOOKMARK":
            if rv:
                self._rv = rv
            return
        if kind in ("ADDED", "MODIFIED"):
            if self._transform is not None:
                obj = self._transform(obj)
            old = self.store.upsert(obj)
            if rv:
                self._rv = rv
            if old is None:
                self._dispatch_add(obj)
            else:
                self._dispatch_update(old, obj)
        elif kind == "DELETED":
            if self._transform is not None:
                obj = self._transform(obj)
            old = self.store.delete(key_of(obj))
            if rv:
                self._rv = rv
            if old is not None:
                self._dispatch_delete(obj)
        else:
            self._log.warning("unknown watch event type", type=kind)

    # ---- handler dispatch ---------------------------------------------------------

    def _call(self, what: str, func: Callable[..., None], *args: Any) -> None:
        try:
            func(*args)
        except Exception:  # one bad handler must not stop the informer
            self._log.exception("event handler failed", handler=what)

    def _dispatch_add(self, obj: JSON, *, initial: bool = False) -> None:
        for h in self._handlers:
            on_add = h.on_initial_add if initial and h.on_initial_add is not None else h.on_add
            if on_add is not None:
                self._call("add", on_add, obj)

    def _dispatch_update(self, old: JSON, new: JSON) -> None:
        if resource_version_of(old) == resource_version_of(new):
            return
        for h in self._handlers:
            if h.on_update is not None:
                self._call("update", h.on_update, old, new)

    def _dispatch_delete(self, obj: JSON) -> None:
        for h in self._handlers:
            if h.on_delete is not None:
                self._call("delete", h.on_delete, obj)
