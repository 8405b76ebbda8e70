"""Expectations: do not act on a key until the cache reflects our own writes.

The rules (kept from client-go's ControllerExpectations; the order matters):
- raise expectations BEFORE issuing a write, so an informer event that races ahead of
  the write's response still finds the expectation to lower;
- lower them when the informer observes the result, and also once for every write
  that failed or was skipped, because no event will ever arrive for it;
- a key whose expectations are older than the TTL (5 min) counts as satisfied: it is
  impossible to tell "informer very late" from "event lost", and a lost event must
  delay a sync, never block it forever.

Creations are a counter (the reconciler cannot know the UID before the create answers).
Deletions are tracked by UID, so "deletionTimestamp set" and "object gone" for the
same pod lower the expectation once, and an unrelated pod cannot lower it.

Read-your-writes (KEP-5647 style): ``expect_resource_version(key, rv)`` records the RV
a write returned; handlers call ``observe_resource_version(key, rv)`` for every event
about the key's objects; the key is not satisfied until an observed RV >= the expected
one (compared as integers when both are digits, as etcd revisions are; opaque RVs
only match on equality). Observations are kept even without an expectation, because
the event may arrive before the write's response.

Raising is additive: a second ``expect_creations`` adds to the pending count and
restarts the TTL, so two writes in one sync cannot erase each other's expectation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controller.types import Clock

DEFAULT_TTL = 300.0


def rv_at_least(observed: str | None, expected: str) -> bool:
    if observed is None:
        return False
    if observed.isdigit() and expected.isdigit():
        return int(observed) >= int(expected)
    return observed == expected


@dataclass(slots=True)
class _Record:
    timestamp: float
    adds: int = 0
    deletes: set[str] = field(default_factory=set)
    expected_rv: str | None = None


class ControllerExpectations:
    """Implements controller.types.Expectations."""

    def __init__(self, clock: Clock, ttl: float = DEFAULT_TTL) -> None:
        self._clock = clock
        self._ttl = ttl
        self._records: dict[str, _Record] = {}
        self._observed_rv: dict[str, str] = {}

    def _fulfilled(self, key: str, rec: _Record) -> bool:
        if rec.adds > 0 or rec.deletes:
            return False
        return rec.expected_rv is None or rv_at_least(self._observed_rv.get(key), rec.expected_rv)

    def _expired(self, rec: _Record) -> bool:
        return self._clock.monotonic() - rec.timestamp > self._ttl

    def satisfied(self, key: str) -> bool:
        rec = self._records.get(key)
        if rec is None:
            return True
        if self._fulfilled(key, rec) or self._expired(rec):
            # forget it, so a later raise starts a fresh TTL instead of inheriting one
            del self._records[key]
            return True
        return False

    def _raise(self, key: str) -> _Record:
        rec = self._records.get(key)
        now = self._clock.monotonic()
        if rec is None or self._expired(rec):
            rec = self._records[key] = _Record(timestamp=now)
        rec.timestamp = now
        return rec

    def expect_creations(self, key: str, count: int) -> None:
        if count > 0:
            self._raise(key).adds += count

    def creation_observed(self, key: str) -> None:
        rec = self._records.get(key)
        if rec is not None and rec.adds > 0:
            rec.adds -= 1

    def expect_deletions(self, key: str, uids: list[str]) -> None:
        if uids:
            self._raise(key).deletes.update(uids)

    def deletion_observed(self, key: str, uid: str) -> None:
        rec = self._records.get(key)
        if rec is not None:
            rec.deletes.discard(uid)

    def expect_resource_version(self, key: str, resource_version: str) -> None:
        rec = self._raise(key)
        if rec.expected_rv is None or rv_at_least(resource_version, rec.expected_rv):
            rec.expected_rv = resource_version

    def observe_resource_version(self, key: str, resource_version: str) -> None:
        if not resource_version:
            return
        current = self._observed_rv.get(key)
        if current is None or rv_at_least(resource_version, current):
            self._observed_rv[key] = resource_version

    def delete(self, key: str) -> None:
        self._records.pop(key, None)
        self._observed_rv.pop(key, None)

    def pending(self, key: str) -> tuple[int, frozenset[str], str | None]:
        """(creations, deletion UIDs, expected RV) still outstanding: for logs and tests."""
        rec = self._records.get(key)
        if rec is None:
            return 0, frozenset(), None
        return rec.adds, frozenset(rec.deletes), rec.expected_rv
