"""The job as the planner reads it: parsed, validated and defaulted once, into one value.

``read_job(raw)`` turns a cached TFJob (a shared dict, never mutated) into a frozen
``JobView``: identity, the typed run policy, the previous status, and either the valid,
defaulted ``TFJob`` or the field errors that make it invalid. Every field the planner
uses is read from the view, one way: a valid job's run policy is the defaulted model's;
an invalid job's is parsed leniently, field by field, so a job that fails validation can
still be cleaned up and TTL-deleted by the policy it does state.

``SpecCache`` memoizes the expensive half (pydantic parsing, validation, defaulting) per
job key and UID, keyed by the exact spec, annotations and labels: the cached objects
themselves while the informer hands out the same dicts (no serialization at all), else
their sorted-key JSON bytes; and the stored status as read, while the job's status is
the same object (the informer's objects are never changed in place). A hit is
exactly what ``read_job`` would compute again, so planning stays a pure function of the
snapshot. The reconciler owns one cache and forgets a job when the job is gone.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import ValidationError

from controller.types import JSON
from reconcile.api.defaults import apply_defaults
from reconcile.api.models import RunPolicy, TFJob
from reconcile.api.names import MANAGED_BY_TRAINING_OPERATOR
from reconcile.api.status_types import JobStatus
from reconcile.api.validation import FieldError, check, format_errors
from reconcile.api.watch import NO_WATCH, TrainingWatch, read_watch


@dataclass(frozen=True, slots=True)
class CheckedSpec:
    """The expensive part of reading a job: the defaulted model, or why it is invalid."""

    tfjob: TFJob | None
    errors: tuple[FieldError, ...]
    run_policy: RunPolicy
    #: an invalid job whose every error is a rule upstream did not enforce, defaulted:
    #: what the planner runs when the job was started before we took it over
    tolerated: TFJob | None = None
    #: its stall and restart-guard annotations (reconcile.api.watch)
    watch: TrainingWatch = NO_WATCH


@dataclass(frozen=True, slots=True)
class JobView:
    raw: JSON  # the cached object, for writes (resourceVersion) and events
    name: str
    namespace: str
    uid: str
    generation: int | None
    deleting: bool
    status: JobStatus  # the stored status (empty if there is none, or it is unreadable)
    spec: CheckedSpec
    #: why the stored status cannot be read; the job is then left alone (fail closed)
    status_error: str | None = None

    @property
    def tfjob(self) -> TFJob | None:
        """The parsed, validated and defaulted job; None when the spec is invalid."""
        return self.spec.tfjob

    @property
    def run_policy(self) -> RunPolicy:
        return self.spec.run_policy

    @property
    def watch(self) -> TrainingWatch:
        return self.spec.watch

    @property
    def invalid_message(self) -> str | None:
        return format_errors(self.spec.errors) if self.spec.tfjob is None else None

    @property
    def managed_by_other(self) -> bool:
        managed_by = self.run_policy.managed_by
        return managed_by is not None and managed_by != MANAGED_BY_TRAINING_OPERATOR


def check_spec(raw: Mapping[str, Any]) -> CheckedSpec:
    """Parse, validate and default the job (the status is not part of it: it is ours, and
    a status this version cannot read must not turn the job into a validation failure)."""
    parsed, errors = check({k: v for k, v in raw.items() if k != "status"})
    meta = raw.get("metadata")
    watch, _ = read_watch(meta if isinstance(meta, Mapping) else {})
    if parsed is not None and not errors:
        defaulted = apply_defaults(parsed)
        return CheckedSpec(defaulted, (), defaulted.spec.run_policy or RunPolicy(), watch=watch)
    tolerated = None
    if parsed is not None and all(e.upstream_accepted for e in errors):
        tolerated = apply_defaults(parsed)
    return CheckedSpec(None, tuple(errors), lenient_run_policy(raw), tolerated, watch)


def lenient_run_policy(raw: Mapping[str, Any]) -> RunPolicy:
    """The run policy's readable fields, each parsed on its own (unreadable ones unset)."""
    spec = raw.get("spec")
    policy = spec.get("runPolicy") if isinstance(spec, Mapping) else None
    if not isinstance(policy, Mapping):
        return RunPolicy()
    kept: dict[str, Any] = {}
    for key, value in policy.items():
        try:
            RunPolicy.model_validate({key: value})
        except ValidationError:
            continue
        kept[key] = value
    return RunPolicy.model_validate(kept)


def read_job(
    raw: JSON,
    checked: CheckedSpec | None = None,
    stored: tuple[JobStatus, str | None] | None = None,
) -> JobView:
    """The view of ``raw``; ``checked`` and ``stored``: its spec and its status as read
    already (``JobStatus.read``), else read here."""
    meta = raw.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    generation = meta.get("generation")
    status, status_error = stored if stored is not None else JobStatus.read(raw.get("status"))
    return JobView(
        raw=raw,
        name=str(meta.get("name", "")),
        namespace=str(meta.get("namespace", "")),
        uid=str(meta.get("uid", "")),
        generation=generation
        if isinstance(generation, int) and not isinstance(generation, bool)
        else None,
        deleting=bool(meta.get("deletionTimestamp")),
        status=status,
        spec=checked if checked is not None else check_spec(raw),
        status_error=status_error,
    )


@dataclass(slots=True)
class _Entry:
    uid: str
    #: the spec, annotations and labels objects, kept alive so the identity check below
    #: cannot see a reused id
    spec_obj: tuple[object, object, object]
    spec_bytes: bytes | None
    checked: CheckedSpec
    #: the status object last read for this job, kept alive for the identity check, and
    #: what JobStatus.read made of it
    status_obj: object = None
    status_read: tuple[JobStatus, str | None] | None = None


class SpecCache:
    """``read_job`` with the spec check memoized per job (see the module docstring)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._entries: OrderedDict[str, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def read(self, key: str, raw: JSON) -> JobView:
        meta = raw.get("metadata")
        uid = str(meta.get("uid", "")) if isinstance(meta, Mapping) else ""
        checked = self._checked(key, uid, raw)
        return read_job(raw, checked, self._stored(key, raw.get("status")))

    def _stored(self, key: str, obj: object) -> tuple[JobStatus, str | None]:
        """The stored status as read, read again only when the object changed: between
        two of the job's own status writes its passes see the same status object. The
        reading depends on nothing but the object, which the entry keeps alive, so the
        same object is the same reading whichever job it came with."""
        entry = self._entries.get(key)
        if entry is not None and entry.status_read is not None and entry.status_obj is obj:
            return entry.status_read
        read = JobStatus.read(obj)
        if entry is not None:
            entry.status_obj, entry.status_read = obj, read
        return read

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def _checked(self, key: str, uid: str, raw: JSON) -> CheckedSpec:
        # The model keeps the job's metadata, whose annotations are settings too (whole-
        # gang restart, reconcile.api.watch) and change without the spec changing.
        meta = raw.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        spec = (raw.get("spec"), meta.get("annotations"), meta.get("labels"))
        entry = self._entries.get(key)
        if entry is not None and entry.uid != uid:
            entry = None  # a new job under the same name
        if entry is not None and _same_objects(entry.spec_obj, spec):
            self._entries.move_to_end(key)
            return entry.checked
        try:
            spec_bytes: bytes | None = orjson.dumps(spec, option=orjson.OPT_SORT_KEYS)
        except TypeError:
            spec_bytes = None  # not plain JSON: never cached; check() says what is wrong
        if entry is not None and spec_bytes is not None and entry.spec_bytes == spec_bytes:
            entry.spec_obj = spec
            self._entries.move_to_end(key)
            return entry.checked
        checked = check_spec(raw)
        if spec_bytes is not None:
            self._entries[key] = _Entry(uid, spec, spec_bytes, checked)
            self._entries.move_to_end(key)
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return checked


def _same_objects(held: tuple[object, object, object], now: tuple[object, object, object]) -> bool:
    return held[0] is now[0] and held[1] is now[1] and held[2] is now[2]
