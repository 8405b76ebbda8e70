"""Typed access to one resource type (group/version/plural) over ``KubeApi``.

Contract:
- ``ResourceClient`` implements the protocols of ``controller.types``: ``ObjectWriter``
  (create, delete with UID/resourceVersion preconditions and propagationPolicy,
  replace_status, patch), ``EventWriter``, ``LeaseClient`` (get, create, replace) and
  the informer's ``ListWatch`` source (``list_page`` and ``watch``).
- ``get`` returns None for 404; every other failure raises a ``controller.errors`` type.
- Objects are plain dicts decoded from JSON. ``list_pages`` is the one pagination loop
  (``limit``/``continue``): ``ResourceClient.list`` and the informer both use it.
- ``watch`` yields raw watch events ``{"type", "object"}``; an ``ERROR`` event is raised
  as the ApiError its Status carries (410 → ``errors.Gone``), so consumers only ever
  see ADDED/MODIFIED/DELETED/BOOKMARK.
- For cluster-scoped resources pass ``namespace=None`` (or "").
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from controller import errors
from controller.client.api import KubeApi
from controller.client.flowcontrol import PRIORITY_HIGH, PRIORITY_NORMAL
from controller.types import JSON, Answers, ListPage, PageLister


@dataclass(frozen=True, slots=True)
class ListResult:
    items: list[JSON]
    resource_version: str


@dataclass(frozen=True, slots=True)
class Resource:
    """Where a resource lives in the API. ``group=""`` is the core group."""

    group: str
    version: str
    plural: str
    namespaced: bool = True
    kind: str = field(default="", compare=False)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


PODS = Resource("", "v1", "pods", kind="Pod")
SERVICES = Resource("", "v1", "services", kind="Service")
EVENTS = Resource("", "v1", "events", kind="Event")
CONFIGMAPS = Resource("", "v1", "configmaps", kind="ConfigMap")
SECRETS = Resource("", "v1", "secrets", kind="Secret")
NAMESPACES = Resource("", "v1", "namespaces", namespaced=False, kind="Namespace")
LEASES = Resource("coordination.k8s.io", "v1", "leases", kind="Lease")


class ResourceClient:
    """``answers=False``: a write that succeeds (create, patch, replace) returns {}, its
    answer's body never decoded: for writers whose callers only need to know that it
    was made, such as a controller's creates of its children and its events. Failures
    are read and raised as ever; reads always return what they read."""

    def __init__(self, api: KubeApi, resource: Resource, *, answers: bool = True) -> None:
        self.api = api
        self.resource = resource
        self.answers = answers
        r = resource
        self._prefix = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        parts = [self._prefix]
        if self.resource.namespaced and namespace:
            parts.append(f"namespaces/{quote(namespace, safe='')}")
        parts.append(self.resource.plural)
        if name is not None:
            parts.append(quote(name, safe=""))
            if subresource:
                parts.append(subresource)
        return "/".join(parts)

    async def get(self, namespace: str | None, name: str) -> JSON | None:
        try:
            return await self.api.request("GET", self.path(namespace, name))
        except errors.NotFound:
            return None

    async def list_page(
        self,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
        continue_token: str | None = None,
        resource_version: str | None = None,
    ) -> ListPage:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit > 0:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        elif resource_version is not None:
            params["resourceVersion"] = resource_version
        body = await self.api.request("GET", self.path(namespace), params=params)
        meta = body.get("metadata") or {}
        items = body.get("items")
        return ListPage(
            # the freshly decoded list itself: copying it would only cost time
            items=items if isinstance(items, list) else [],
            resource_version=str(meta.get("resourceVersion", "")),
            continue_token=meta.get("continue") or None,
        )

    async def list(
        self,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int = 500,
    ) -> ListResult:
        """A consistent list, all pages. The RV is the first page's: every later page
        is served from that same snapshot."""
        items: list[JSON] = []
        rv = ""
        pages = list_pages(self, namespace, label_selector, field_selector, limit)
        async with aclosing(pages):
            async for page in pages:
                items.extend(page.items)
                rv = rv or page.resource_version
        return ListResult(items, rv)

    @asynccontextmanager
    async def watch(
        self,
        namespace: str | None = None,
        *,
        resource_version: str | None = None,
        timeout_seconds: int | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        allow_bookmarks: bool = True,
        read_timeout: float | None = None,
    ) -> AsyncIterator[AsyncIterator[JSON]]:
        params: dict[str, str] = {"watch": "1"}
        if resource_version is not None:
            params["resourceVersion"] = resource_version
        if timeout_seconds is not None:
            params["timeoutSeconds"] = str(timeout_seconds)
        if allow_bookmarks:
            params["allowWatchBookmarks"] = "true"
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        async with self.api.stream(
            self.path(namespace), params=params, read_timeout=read_timeout
        ) as lines:
            yield _checked_events(lines)

    async def create(self, namespace: str, body: Mapping[str, Any]) -> JSON:
        return await self.api.request("POST", self.path(namespace), body=body, decode=self.answers)

    async def create_many(self, items: Sequence[tuple[str, Mapping[str, Any]]]) -> Answers:
        """Creates sent together on one connection (KubeApi.pipeline): for objects nobody
        waits for, such as events."""
        writes = [(self.path(ns), body) for ns, body in items]
        return await self.api.pipeline("POST", writes, decode=self.answers)

    async def patch_many(
        self,
        items: Sequence[tuple[str, str, Mapping[str, Any]]],
        *,
        content_type: str = "application/merge-patch+json",
    ) -> Answers:
        """Patches sent together on one connection (KubeApi.pipeline)."""
        writes = [(self.path(ns, name), body) for ns, name, body in items]
        return await self.api.pipeline(
            "PATCH", writes, content_type=content_type, decode=self.answers
        )

    async def replace(self, namespace: str, name: str, body: Mapping[str, Any]) -> JSON:
        return await self.api.request(
            "PUT", self.path(namespace, name), body=body, decode=self.answers
        )

    async def replace_status(
        self, namespace: str, name: str, body: Mapping[str, Any], *, urgent: bool = True
    ) -> JSON:
        # Urgent (high priority) by default: status is what users and the next reconcile
        # wait on, and must not queue for the client-side rate limit behind other work.
        return await self.api.request(
            "PUT",
            self.path(namespace, name, "status"),
            body=body,
            priority=PRIORITY_HIGH if urgent else PRIORITY_NORMAL,
            decode=self.answers,
        )

    async def patch(
        self,
        namespace: str,
        name: str,
        body: Mapping[str, Any],
        *,
        content_type: str = "application/merge-patch+json",
        subresource: str | None = None,
    ) -> JSON:
        return await self.api.request(
            "PATCH",
            self.path(namespace, name, subresource),
            body=body,
            content_type=content_type,
            decode=self.answers,
        )

    async def delete(
        self,
        namespace: str,
        name: str,
        *,
        uid: str | None = None,
        resource_version: str | None = None,
        propagation: str | None = None,
    ) -> None:
        options: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        preconditions: dict[str, str] = {}
        if uid:
            preconditions["uid"] = uid
        if resource_version:
            preconditions["resourceVersion"] = resource_version
        if preconditions:
            options["preconditions"] = preconditions
        if propagation:
            options["propagationPolicy"] = propagation
        # Normal priority, deliberately: a TTL deletion must not overtake the events
        # recorded about the job before it (they are written at normal priority).
        await self.api.request("DELETE", self.path(namespace, name), body=options)


async def served(api: KubeApi, resource: Resource) -> bool:
    """Whether the apiserver serves ``resource`` (its group version lists it): a
    controller that needs a CRD checks before it starts, rather than failing later."""
    prefix = f"/apis/{resource.group}/{resource.version}" if resource.group else "/api/v1"
    try:
        found = await api.request("GET", prefix)
    except errors.NotFound:
        return False
    return any(r.get("name") == resource.plural for r in found.get("resources") or ())


async def list_pages(
    source: PageLister,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None,
    limit: int,
) -> AsyncGenerator[ListPage, None]:
    """The pages of one list, following continue tokens; ``limit=0`` asks for all at once.
    The next page is requested only when the consumer asks for it, and this generator
    drops its own reference to a page before that request, so a consumer that lets go of
    each page holds one page's objects at a time. Errors (a 410 for an expired continue
    token among them) propagate to the consumer; run it under ``contextlib.aclosing``."""
    token: str | None = None
    while True:
        page = await source.list_page(
            namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            limit=limit,
            continue_token=token,
        )
        token = page.continue_token
        yield page
        del page
        if not token:
            return


async def _checked_events(lines: AsyncIterator[JSON]) -> AsyncIterator[JSON]:
    async for event in lines:
        if event.get("type") == "ERROR":
            status = event.get("object") or {}
            raise errors.error_from_status(int(status.get("code") or 500), status)
        yield event
