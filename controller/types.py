"""The seam between the generic machinery (controller/) and the TFJob logic (reconcile/).

reconcile/ may import this module and controller.errors, nothing else from controller/.
Everything here is a protocol or a small value type: the reconciler sees a read-only
snapshot of the cache, a thin write layer, expectations and an event sink, and never
a watch, a queue or a lease.

It also holds the protocols the machinery's own parts take from each other (an
informer's list/watch source, the event and lease writers), each stated once, in terms
of what the consumer calls.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

#: The cache index of objects by "namespace/uid": their own namespace and the UID of their
#: controller ownerReference (``owned_by``). An ownerReference names no namespace, and
#: anyone who can create an object in one namespace can write any UID into it: a pod in
#: another namespace claiming a job's UID must not count as that job's child, as the
#: garbage collector and upstream's controllers (which list in the owner's namespace)
#: never count it.
CONTROLLER_UID_INDEX = "controller-uid"
#: The cache index of objects by "namespace/name" of their controller ownerReference:
#: finds the children of an owner that is gone from the cache, whatever its UID was.
CONTROLLER_NAME_INDEX = "controller-name"
#: The cache index of objects by their namespace ("" for a cluster-scoped object).
NAMESPACE_INDEX = "namespace"
#: The cache index of pods by the addresses they were given (status.podIP, podIPs).
POD_IP_INDEX = "pod-ip"

#: A Kubernetes object as decoded JSON. Objects handed out by a cache are shared:
#: callers MUST NOT mutate them.
JSON = dict[str, Any]

#: The answers of writes sent together (EventWriter.create_many): each decoded, or the
#: exception its own write would have raised.
Answers = list[JSON | Exception]


def object_key(namespace: str | None, name: str) -> str:
    """The workqueue key of an object: "ns/name", or "name" for cluster-scoped ones."""
    return f"{namespace}/{name}" if namespace else name


def owned_by(namespace: str | None, uid: str) -> str:
    """The CONTROLLER_UID_INDEX value of the children of the owner ``uid`` that live in
    ``namespace``."""
    return object_key(namespace, uid)


def controller_ref(obj: Mapping[str, Any]) -> JSON | None:
    """A copy of the object's controller ownerReference, if it has one."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def split_key(key: str) -> tuple[str, str]:
    namespace, _, name = key.rpartition("/")
    return namespace, name


class Clock(Protocol):
    """Every read of time goes through a clock, so tests can drive it."""

    def now(self) -> datetime:
        """Wall-clock time, timezone-aware UTC (for timestamps written to the API)."""
        ...

    def monotonic(self) -> float:
        """Seconds on a monotonic clock (for local decisions: delays, TTLs, leases)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile returns: done, or done and look again after a delay."""

    requeue_after: float | None = None


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix: logged and counted, never retried."""


class CacheReader(Protocol):
    """Read-only view of one informer's store."""

    def get(self, namespace: str, name: str) -> JSON | None: ...

    def by_index(self, index: str, value: str) -> list[JSON]: ...


# The write layer is small protocols, each one verb of controller.client.kube.ResourceClient,
# composed into what each consumer needs (ObjectWriter, EventWriter, LeaseClient). Each
# states only the parameters its consumers pass; the client has more (see kube.py).


class ObjectCreator(Protocol):
    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON: ...


class ObjectPatcher(Protocol):
    async def patch(
        self,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        content_type: str = "application/merge-patch+json",
    ) -> JSON:
        """A patch of the object, a JSON merge patch unless ``content_type`` says
        otherwise."""
        ...


class ObjectWriter(ObjectCreator, ObjectPatcher, Protocol):
    """The thin write layer for one resource type. Errors are controller.errors types."""

    async def get(self, namespace: str, name: str) -> JSON | None:
        """The object as stored now (None when there is none): whether a write whose
        answer was lost took effect."""
        ...

    async def delete(
        self, namespace: str, name: str, *, uid: str | None = None, propagation: str | None = None
    ) -> None:
        """Delete with an optional UID precondition (so a same-named successor object is
        never deleted by mistake) and propagationPolicy."""
        ...

    async def replace_status(
        self, namespace: str, name: str, body: Mapping[str, Any], *, urgent: bool = True
    ) -> JSON:
        """PUT the status subresource; body carries metadata.resourceVersion, so a
        stale write fails with Conflict (optimistic concurrency). ``urgent=False`` lets
        urgent writes waiting for the client-side rate limit go first."""
        ...

    async def patch_many(
        self, items: Sequence[tuple[str, str, Mapping[str, Any]]], *, content_type: str
    ) -> Answers:
        """``(namespace, name, patch)`` patches sent together on one connection; each
        answer, or the exception its own patch would have raised, in order."""
        ...


class EventWriter(ObjectCreator, ObjectPatcher, Protocol):
    """Where controller.runtime.events.EventRecorder writes core/v1 Events: creates them
    (several together with ``create_many``), and patches the count of one it wrote
    before."""

    async def create_many(self, items: Sequence[tuple[str, Mapping[str, Any]]]) -> Answers:
        """``(namespace, body)`` creates sent together; each answer, or the exception its
        own create would have raised, in order. Never raises for one of them."""
        ...


class LeaseClient(ObjectCreator, Protocol):
    """What controller.runtime.leader.LeaseElector reads and writes its Lease with. ``get``
    returns None for a missing object; ``replace`` is a PUT whose body carries
    metadata.resourceVersion (a stale write fails with Conflict)."""

    async def get(self, namespace: str, name: str) -> JSON | None: ...

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON: ...


class Expectations(Protocol):
    """Per-key expectations of our own writes being observed by the informers.

    Rules (client-go's ControllerExpectations, kept here because the order matters):
    - raise expectations *before* issuing the write, so an informer event that races
      ahead of the write's response still finds the expectation to lower;
    - lower them when the informer observes the object, and also for every write that
      failed or was skipped, because no event will ever arrive for it;
    - a key whose expectations are older than the TTL counts as satisfied, so a lost
      event delays a sync, never blocks it forever.
    """

    def satisfied(self, key: str) -> bool: ...

    def expect_creations(self, key: str, count: int) -> None: ...

    def creation_observed(self, key: str) -> None: ...

    def expect_deletions(self, key: str, uids: list[str]) -> None: ...

    def deletion_observed(self, key: str, uid: str) -> None: ...

    def expect_resource_version(self, key: str, resource_version: str) -> None:
        """Read-your-writes: do not act on key until the cache has seen this RV."""
        ...

    def observe_resource_version(self, key: str, resource_version: str) -> None:
        """The cache has seen this RV of key (event handlers call it)."""
        ...

    def delete(self, key: str) -> None: ...


class EventSink(Protocol):
    """Records core/v1 Events about an object. Never blocks and never raises."""

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None: ...


@dataclass(frozen=True, slots=True)
class EventHandler:
    """What an informer calls for each change of its cache. Handlers MUST NOT mutate the
    objects they are given (the cache shares them) and must never block."""

    on_add: Callable[[JSON], None] | None = None
    #: Receives what the first list found (objects older than this process); on_add
    #: when unset. Later relists' adds go to on_add.
    on_initial_add: Callable[[JSON], None] | None = None
    on_update: Callable[[JSON, JSON], None] | None = None
    #: Receives the final state; after a relist, the last state the cache knew.
    on_delete: Callable[[JSON], None] | None = None


@dataclass(frozen=True, slots=True)
class ListPage:
    """One page of a list: its items, the list's resourceVersion, and the token for the
    next page (None on the last)."""

    items: list[JSON]
    resource_version: str
    continue_token: str | None


class PageLister(Protocol):
    async def list_page(
        self,
        namespace: str | None,
        *,
        label_selector: str | None,
        field_selector: str | None,
        limit: int,
        continue_token: str | None,
    ) -> ListPage:
        """One page of a list: at most ``limit`` items (0: all), after ``continue_token``
        (None: the first page, a consistent read)."""
        ...


class ListWatch(PageLister, Protocol):
    """What a controller.cache.informer.Informer lists and watches (a ResourceClient). The
    watch yields raw events ``{"type", "object"}``; a 410 raises errors.Gone."""

    def watch(
        self,
        namespace: str | None,
        *,
        resource_version: str,
        timeout_seconds: int,
        label_selector: str | None,
        field_selector: str | None,
        allow_bookmarks: bool,
        read_timeout: float | None,
    ) -> AbstractAsyncContextManager[AsyncIterator[JSON]]: ...


class Spawner(Protocol):
    """Runs work a reconcile pass hands off, so the pass need not hold a worker while it
    waits (implemented by controller.runtime.background.Background).

    The work belongs to the pass that spawned it, and its retries to the workqueue: the
    key's failure history is forgotten only once the pass and all it spawned succeeded,
    and work that fails puts the key back rate-limited (``add_rate_limited``). The work
    itself reports nothing else: it records what it must (events, expectations) and
    raises on failure. When the last of a key's work ends, the key may be looked at again
    after a while (a safety net, set where the spawner is made), so a pass that waits on
    spawned work needs no timer of its own. Never blocks and never raises."""

    def spawn(
        self,
        key: str,
        work: Callable[[], Awaitable[None]],
        *,
        bounded: bool = True,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        """``bounded=False``: not behind the limit on concurrent work (a job's one status
        write must not queue behind thousands of creates), and never dropped.
        ``on_drop`` runs if ``drop`` ends the work before it finished."""
        ...

    def drop(self, key: str) -> int:
        """End the key's bounded work that is no longer wanted: what has not started is
        forgotten, what runs is cancelled; return how much."""
        ...

    def backlog(self, key: str | None = None) -> int:
        """Spawned work not finished yet: ``key``'s, or everyone's."""
        ...

    def wait_for_room(self, key: str, need: int) -> None:
        """Put ``key`` back on the queue once ``need`` pieces of spawned work have ended
        (or none is left), for a pass that found the backlog too full; keys are put back
        in the order they asked, one at a time."""
        ...


class Pacer(Protocol):
    """At most one paced action per key per interval (controller.runtime.pacer.Pacer): a
    reconciler asks before an action worth batching and, told to wait, returns the wait
    as its ``requeue_after``."""

    def delay(self, key: str) -> float:
        """Seconds until the key may act again (0: now)."""
        ...

    def mark(self, key: str) -> None:
        """The key acted now."""
        ...

    def forget(self, key: str) -> None: ...


class SlotGate(Protocol):
    """A rate shared by all keys, each waiting key given a slot of its own
    (controller.runtime.pacer.SlotGate)."""

    def reserve(self, key: str) -> float:
        """0: act now; more: come back in that many seconds, to the slot kept for it."""
        ...

    def held(self, key: str) -> float:
        """Seconds until the slot the key holds (0: none, or due)."""
        ...

    def forget(self, key: str) -> None: ...


class KeyQueue(Protocol):
    """Where event handlers put keys (controller.queue.workqueue.WorkQueue)."""

    def add(self, key: str) -> None: ...

    def add_low(self, key: str) -> None:
        """Add behind every plain add: handed out only while none is queued; a plain add
        meanwhile moves the key up."""
        ...

    def add_after(self, key: str, delay: float) -> None:
        """Add once ``delay`` has passed; of several pending delays the earliest wins, and
        a plain ``add`` meanwhile is not held back."""
        ...


class Reconciler(Protocol):
    async def reconcile(self, key: str) -> Result: ...


# --- reports pushed to the controller (controller.serving) ----------------------------

#: TokenReview's user extra naming the pod a bound service-account token was issued for
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a request: the user the apiserver's TokenReview named."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def first(self, key: str) -> str:
        """The first value of user extra ``key``, or ""."""
        values = self.extra.get(key) or ()
        return values[0] if values else ""

    @property
    def key(self) -> str:
        """What rate limits count by: the pod a bound token names, else the user."""
        return self.first(POD_UID_EXTRA) or self.uid or self.username


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer to a pushed report: 204 (kept), or a refusal and why."""

    status: int
    message: str = ""
    #: the field of the document to blame (400)
    field_name: str = ""
    #: seconds the client should wait before sending again (429, 503)
    retry_after: float | None = None


class ReportSink(Protocol):
    """What receives reports pushed to the controller over HTTPS (the server,
    controller.serving.reports, authenticates them; the sink decides what they mean)."""

    def audience(self, path: str) -> str | None:
        """The audience a token must be reviewed for to report at ``path``; None: no
        such path (404)."""
        ...

    def precheck(
        self, path: str, pod_name: str, pod_uid: str, issued_at: float | None
    ) -> Reply | None:
        """Before any review, from the token's own unverified claims (``issued_at``:
        its ``iat``, epoch seconds): a refusal when no pod of that name and UID may
        report at ``path`` as the caches stand (such a token could never be accepted),
        else None. Only ever refuses."""
        ...

    def accept(self, path: str, caller: Caller, body: bytes) -> Reply:
        """Take a report from ``caller`` (its token reviewed for ``audience(path)``)."""
        ...

    def known_source(self, address: str) -> bool:
        """Whether ``address`` is one reports are expected from (a pod's): its
        connections go before strangers' when the endpoint is pressed."""
        ...

    def unheard(self, at: datetime, why: str) -> None:
        """Reporters may have gone unheard at ``at`` for the server's own sake (its
        slots full, an accept failed, reviews unavailable): no job's silence up to then
        is its own."""
        ...
