"""An indexed in-memory cache of one resource type, keyed "ns/name".

Contract:
- Objects in the store are shared with every reader: nobody may mutate them (client-go
  ThreadSafeStore: "You must not modify anything returned by Get or List"). The informer
  replaces an object wholesale on every change, so readers holding an old reference keep
  a consistent old snapshot.
- Indexers map an object to zero or more index values; ``by_index`` is O(hits). The
  defaults index by namespace and by the UID and the name of the controller
  ownerReference, each within the object's own namespace, so "pods of this TFJob" (or of
  a TFJob that is gone) scans nothing and never finds another namespace's objects.
- ``Store`` implements ``controller.types.CacheReader``. Only the informer writes.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from controller.types import (
    CONTROLLER_NAME_INDEX,
    CONTROLLER_UID_INDEX,
    JSON,
    NAMESPACE_INDEX,
    object_key,
    owned_by,
)

IndexFunc = Callable[[JSON], Iterable[str]]


def key_of(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return object_key(meta.get("namespace"), meta.get("name", ""))


def resource_version_of(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def index_by_namespace(obj: JSON) -> list[str]:
    return [(obj.get("metadata") or {}).get("namespace") or ""]


def index_by_pod_ip(obj: JSON) -> list[str]:
    """A pod's addresses: ``status.podIP`` and each of ``status.podIPs``."""
    status = obj.get("status") or {}
    out = [status["podIP"]] if isinstance(status.get("podIP"), str) else []
    for entry in status.get("podIPs") or ():
        ip = entry.get("ip") if isinstance(entry, dict) else None
        if isinstance(ip, str) and ip not in out:
            out.append(ip)
    return out


def index_by_controller_uid(obj: JSON) -> list[str]:
    # types.controller_ref without its defensive copy: this runs on every store write
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            uid = ref.get("uid")
            return [owned_by(meta.get("namespace"), uid)] if uid else []
    return []


def index_by_controller_name(obj: JSON) -> list[str]:
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            name = ref.get("name")
            return [object_key(meta.get("namespace"), name)] if name else []
    return []


DEFAULT_INDEXERS: Mapping[str, IndexFunc] = {
    NAMESPACE_INDEX: index_by_namespace,
    CONTROLLER_UID_INDEX: index_by_controller_uid,
    CONTROLLER_NAME_INDEX: index_by_controller_name,
}


@dataclass(slots=True)
class ReplaceResult:
    added: list[JSON] = field(default_factory=list)
    updated: list[tuple[JSON, JSON]] = field(default_factory=list)
    deleted: list[JSON] = field(default_factory=list)


class Store:
    def __init__(self, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._indexers = dict(DEFAULT_INDEXERS if indexers is None else indexers)
        self._items: dict[str, JSON] = {}
        # Each index value's keys are a dict used as an ordered set: a third of the
        # memory of a set for a job's handful of pods (272 bytes for 8 keys, not 728),
        # and ``by_index`` answers in the order the objects were first seen.
        self._indices: dict[str, dict[str, dict[str, None]]] = {
            name: {} for name in self._indexers
        }
        # (index, function) pairs: the write path walks these, with no lookup by name
        self._index_funcs = [(self._indices[name], f) for name, f in self._indexers.items()]

    # ---- reads (CacheReader) ----------------------------------------------------

    def get(self, namespace: str, name: str) -> JSON | None:
        return self._items.get(object_key(namespace, name))

    def get_by_key(self, key: str) -> JSON | None:
        return self._items.get(key)

    def by_index(self, index: str, value: str) -> list[JSON]:
        try:
            keys = self._indices[index].get(value, ())
        except KeyError:
            raise KeyError(f"no index named {index!r}") from None
        return [self._items[k] for k in keys]

    def list(self) -> list[JSON]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[JSON]:
        return iter(list(self._items.values()))

    # ---- writes (informer only) ---------------------------------------------------

    def _unindex(self, key: str, obj: JSON) -> None:
        for index, func in self._index_funcs:
            for value in func(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del index[value]

    def _index(self, key: str, obj: JSON) -> None:
        for index, func in self._index_funcs:
            for value in func(obj):
                keys = index.get(value)
                if keys is None:
                    index[value] = {key: None}
                else:
                    keys[key] = None

    def _reindex(self, key: str, old: JSON, new: JSON) -> None:
        """Move ``key`` from ``old``'s index values to ``new``'s. An update almost never
        changes them (namespace, owner), and then no index is touched."""
        for index, func in self._index_funcs:
            before, after = func(old), func(new)
            if before == after:  # lists or tuples; any other iterable takes the long way
                continue
            for value in before:
                keys = index.get(value)
                if keys is not None:
                    keys.pop(key, None)
                    if not keys:
                        del index[value]
            for value in after:
                keys = index.get(value)
                if keys is None:
                    index[value] = {key: None}
                else:
                    keys[key] = None

    def upsert(self, obj: JSON) -> JSON | None:
        """Insert or replace; returns the previous object."""
        key = key_of(obj)
        old = self._items.get(key)
        self._items[key] = obj
        if old is None:
            self._index(key, obj)
        elif old is not obj:
            self._reindex(key, old, obj)
        return old

    def delete(self, key: str) -> JSON | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def replace(self, objs: Iterable[JSON]) -> ReplaceResult:
        """Make the store hold exactly ``objs``; report what changed, so the informer
        can emit deletes for objects that vanished while it was not watching."""
        return self.replace_keyed({key_of(o): o for o in objs})

    def replace_keyed(self, fresh: Mapping[str, JSON]) -> ReplaceResult:
        """``replace`` for objects already keyed by ``key_of`` (the informer has the keys
        at hand). ``updated`` pairs may hold the very same object twice when the caller
        kept an unchanged cached object."""
        result = ReplaceResult()
        items = self._items
        if not items:  # the first list: everything is an add, nothing to diff
            items.update(fresh)
            for key, obj in fresh.items():
                self._index(key, obj)
            result.added = builtins.list(fresh.values())
            return result
        for key in [k for k in items if k not in fresh]:
            old = self.delete(key)
            if old is not None:
                result.deleted.append(old)
        for key, obj in fresh.items():
            old = items.get(key)
            items[key] = obj
            if old is None:
                self._index(key, obj)
                result.added.append(obj)
            else:
                if old is not obj:
                    self._reindex(key, old, obj)
                result.updated.append((old, obj))
        return result
