"""The one thin layer that writes: a plan's child creates and deletes, the status, the job.

Rules every write here keeps:
- expectations are raised *before* a write is issued (an informer event may arrive before
  the write's response does) and lowered for every write that fails or finds its object
  already there or gone, because no event will arrive for it;
- deletes carry the object's UID as a precondition, so a same-named successor is safe;
- the status PUT carries the cached resourceVersion, so a stale write fails with Conflict
  and the pass is retried from a fresh cache read;
- each failed child write is reported once: a Warning event (upstream's FailedCreate* /
  FailedDelete*) and a log line; a create refused permanently is also counted towards
  failing the job (reconcile.policy.failures);
- a create refused because the namespace is being deleted is dropped quietly: the job
  goes with the namespace, and for ``TERMINATING_NAMESPACE_SECONDS`` no other create
  is sent there (a large job would otherwise spend a token on each of its pods);
- a create answered AlreadyExists reads the object: this job's own (a create whose
  event is on its way) is no news; anyone else's is a failed create (``NameHeld``)
  naming the holder, counted towards failing the job like a permanent refusal, since a
  name the job's TF_CONFIG points at must not quietly be somebody else's pod or Service;
  a holder already being deleted is waited for (``NameReleasing``), not counted.
Deletes and tracking-finalizer releases run in the pass, concurrently up to a bound (a
release is one UID-preconditioned patch, with no event: it is bookkeeping, not news);
creates are spawned (Spawner) so the pass does not wait on them, and a failed create
raises inside its spawned work.

Here: the status, PodGroup and job writes. The child writes are in child_writes.py, the
AlreadyExists read-back in claims.py.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from controller import errors
from controller.types import (
    EventSink,
    Expectations,
    ObjectWriter,
)
from reconcile.api.spec import JobView
from reconcile.plan import PodGroupWrite
from reconcile.policy import conditions as cond
from reconcile.sync.keys import podgroups_key

log = structlog.get_logger("tfjob")

#: How much of an API error goes into an event message.
MAX_ERROR_MESSAGE = 300


@dataclass
class WriteTally:
    """Counters for the one summary log line of a pass."""

    created: int = 0
    #: creates given to the background (their results arrive after the pass)
    handed_off: int = 0
    #: planned creates left for a later pass (the backlog was full)
    deferred: int = 0
    deleted: int = 0
    #: tracking finalizers removed
    released: int = 0
    failed_writes: int = 0
    status_written: bool = False
    #: the status write was handed to the background with the creates
    status_handed_off: bool = False
    errors: list[BaseException] = field(default_factory=list)


async def write_podgroup(
    writer: ObjectWriter,
    expectations: Expectations,
    events: EventSink,
    key: str,
    job: JobView,
    write: PodGroupWrite,
    outcome: WriteTally,
) -> None:
    """The pass's one PodGroup write. A create or delete is expected (reconcile.sync.keys)
    until the PodGroup informer sees it, so the next pass neither creates it again nor
    lets pods in before it exists."""
    exp_key = podgroups_key(key)
    if write.verb == "create":
        expectations.expect_creations(exp_key, 1)
        try:
            await writer.create(job.namespace, write.body)
        except errors.AlreadyExists:
            expectations.creation_observed(exp_key)  # its informer event comes, or came
        except Exception:
            expectations.creation_observed(exp_key)
            outcome.failed_writes += 1
            raise
        else:
            outcome.created += 1
    elif write.verb == "patch":
        try:
            await writer.patch(job.namespace, job.name, write.body)
        except errors.NotFound:
            return  # deleted meanwhile: its deletion event brings the job back
    else:
        uid = write.body["metadata"]["uid"]
        expectations.expect_deletions(exp_key, [uid])
        try:
            await writer.delete(job.namespace, job.name, uid=uid)
        except (errors.NotFound, errors.Conflict):
            expectations.deletion_observed(exp_key, uid)
            return
        except Exception:
            expectations.deletion_observed(exp_key, uid)
            outcome.failed_writes += 1
            raise
        outcome.deleted += 1
        events.event(
            job.raw,
            cond.NORMAL,
            cond.REASON_DELETED_POD_GROUP,
            cond.msg_deleted_pod_group(job.name),
        )


async def write_status(
    jobs: ObjectWriter,
    expectations: Expectations,
    key: str,
    job: JobView,
    status: Mapping[str, Any],
    *,
    urgent: bool | None = None,
) -> None:
    body = copy.copy(job.raw)
    body["status"] = dict(status)
    # A job's first status (it says Created) is not urgent: in a burst of new jobs those
    # queue on the status budget for seconds, and the writes that report pods running
    # or a job finished go ahead of them. Nor is one that carries training progress
    # alone (the caller says so).
    if urgent is None:
        urgent = bool(job.status.conditions)
    written = await jobs.replace_status(job.namespace, job.name, body, urgent=urgent)
    rv = (written.get("metadata") or {}).get("resourceVersion")
    if rv:
        expectations.expect_resource_version(key, str(rv))


async def delete_job(
    jobs: ObjectWriter, events: EventSink, job: JobView, outcome: WriteTally
) -> bool:
    """Delete the job (ttlSecondsAfterFinished); the garbage collector takes its children.
    True when this call deleted it."""
    try:
        await jobs.delete(job.namespace, job.name, uid=job.uid, propagation="Background")
    except errors.NotFound:
        return False
    except Exception as e:
        events.event(job.raw, cond.WARNING, "FailedDeleteJob", f"Error deleting: {short_error(e)}")
        raise
    outcome.deleted += 1
    events.event(job.raw, cond.NORMAL, cond.REASON_DELETED_JOB, f"Deleted job: {job.name}")
    return True


def short_error(e: BaseException) -> str:
    msg = str(e)
    return msg if len(msg) <= MAX_ERROR_MESSAGE else msg[: MAX_ERROR_MESSAGE - 3] + "..."
