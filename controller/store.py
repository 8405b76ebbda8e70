"""An indexed in-memory cache of one resource type, keyed "ns/name".

Contract:
- Objects in the store are shared with every reader: nobody may mutate them (client-go
  ThreadSafeStore: "You must not modify anything returned by Get or List"). The informer
  replaces an object wholesale on every change, so readers holding an old reference keep
  a consistent old snapshot.
- Indexers map an object to zero or more index values; ``by_index`` is O(hits). The
  defaults index by namespace and by the UID of the controller ownerReference, so
  "pods of this TFJob" does not scan all pods.
- ``Store`` implements ``controller.types.CacheReader``. Only the informer writes.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from controller.types import JSON, object_key

IndexFunc = Callable[[JSON], Iterable[str]]

NAMESPACE_INDEX = "namespace"
CONTROLLER_UID_INDEX = "controller-uid"


def key_of(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return object_key(meta.get("namespace"), meta.get("name", ""))


def resource_version_of(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))


def index_by_namespace(obj: JSON) -> list[str]:
    return [(obj.get("metadata") or {}).get("namespace") or ""]


def controller_ref(obj: JSON) -> JSON | None:
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return dict(ref)
    return None


def index_by_controller_uid(obj: JSON) -> list[str]:
    ref = controller_ref(obj)
    return [ref["uid"]] if ref and ref.get("uid") else []


DEFAULT_INDEXERS: Mapping[str, IndexFunc] = {
    NAMESPACE_INDEX: index_by_namespace,
    CONTROLLER_UID_INDEX: index_by_controller_uid,
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
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

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
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]

    def _index(self, key: str, obj: JSON) -> None:
        for name, func in self._indexers.items():
            index = self._indices[name]
            for value in func(obj):
                index.setdefault(value, set()).add(key)

    def upsert(self, obj: JSON) -> JSON | None:
        """Insert or replace; returns the previous object."""
        key = key_of(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self._items[key] = obj
        self._index(key, obj)
        return old

    def delete(self, key: str) -> JSON | None:
        old = self._items.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def replace(self, objs: Iterable[JSON]) -> ReplaceResult:
        """Make the store hold exactly ``objs``; report what changed, so the informer
        can emit deletes for objects that vanished while it was not watching."""
        result = ReplaceResult()
        fresh: dict[str, JSON] = {key_of(o): o for o in objs}
        for key in [k for k in self._items if k not in fresh]:
            old = self.delete(key)
            if old is not None:
                result.deleted.append(old)
        for obj in fresh.values():
            old = self.upsert(obj)
            if old is None:
                result.added.append(obj)
            else:
                result.updated.append((old, obj))
        return result
