"""Child creates the apiserver keeps refusing, and when that ends the job.

A create that fails with a permanent error (controller.errors.is_permanent: 400, 403,
404, 422, such as a quota or LimitRange refusal, or a template field the Pod API
rejects) is retried with the workqueue's backoff, and reported each time (a Warning
event). If a job's creates keep failing so for ``grace_seconds``, and at least
``min_attempts`` times, with no create of the job succeeding in between, the job fails
with reason FailedCreatePod / FailedCreateService and the apiserver's message, and its
cleanPodPolicy applies: a job that can never start does not hold the pods it has.

In memory, per job: a controller restart gives the job a fresh grace period.
"""

from __future__ import annotations

from dataclasses import dataclass

from controller.types import Clock


@dataclass(frozen=True)
class PersistentFailure:
    reason: str  # FailedCreatePod or FailedCreateService
    message: str


@dataclass
class _Record:
    uid: str
    first: float
    attempts: int
    reason: str
    message: str


class CreateFailures:
    def __init__(self, clock: Clock, *, grace_seconds: float, min_attempts: int = 3) -> None:
        self._clock = clock
        self.grace_seconds = grace_seconds
        self.min_attempts = min_attempts
        self._records: dict[str, _Record] = {}

    def failed(self, key: str, uid: str, kind: str, name: str, error: str) -> None:
        """A create of ``kind`` (Pod, Service) named ``name`` failed permanently."""
        reason = f"FailedCreate{kind}"
        message = f"{kind.lower()} {name} could not be created: {error}"
        record = self._records.get(key)
        if record is None or record.uid != uid:
            self._records[key] = _Record(uid, self._clock.monotonic(), 1, reason, message)
            return
        record.attempts += 1
        record.reason, record.message = reason, message

    def created(self, key: str, uid: str) -> None:
        """A create of the job went through: whatever refused it before has changed."""
        record = self._records.get(key)
        if record is not None and record.uid == uid:
            del self._records[key]

    def persistent(self, key: str, uid: str) -> PersistentFailure | None:
        record = self._records.get(key)
        if record is None or record.uid != uid or record.attempts < self.min_attempts:
            return None
        if self._clock.monotonic() - record.first < self.grace_seconds:
            return None
        return PersistentFailure(record.reason, record.message)

    def forget(self, key: str) -> None:
        self._records.pop(key, None)
