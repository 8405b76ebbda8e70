"""The TFJob ``.status`` as pydantic models (kubeflow.org/v1 JobStatus plus our extensions).

The upstream JSON names are kept exactly (``conditions``, ``replicaStatuses``, ``startTime``,
``completionTime``, ``lastReconcileTime``); the CRD generator derives the status schema from
these models, so every field the reconciler persists must be declared here.

Extensions, and why they exist (upstream derives everything from the pods that happen to
exist, so pod GC or a controller restart loses history;
docs/semantics.md#upstreams-defects-we-fix):

- ``observedGeneration``: the ``metadata.generation`` this status was computed for.
- per replica type ``restarts``: retries counted against ``runPolicy.backoffLimit`` (our pod
  recreations plus container restarts observed in place), durable across controller restarts.
- per replica type ``disruptions``: pods replaced because something outside the job ended them
  (eviction, preemption, deletion by someone else); they do not count against backoffLimit.
- per replica type ``succeededIndexes`` / ``failedIndexes``: the durable terminal record, in the
  compact interval form of batch/v1 ``completedIndexes`` ("0-2,5"). An index recorded here is
  never re-run, even when its pod has been garbage-collected.
- per replica type ``activeIndexes``: the indexes whose pod was running when this status was
  written, so a pod that vanishes without ever being seen ending (force-deleted, removed
  while the controller was down) is still counted as a disruption.
- per replica type ``indexRetries``: per-index retry state ({failures, lastFailureTime,
  lastPodUID, podUID, containerRestarts}) so the replacement backoff and the restart counter
  are derived from status alone and survive controller restarts without double counting.
- ``trainingProgress``: step, epoch, metrics, rate and ETA as the training processes report
  them, per replica type bounded (docs/progress.md).

Serialisation mirrors Go's ``omitempty``: zero values are left out, timestamps are RFC 3339
at second precision with a ``Z`` suffix (``metav1.Time``).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
)
from pydantic.alias_generators import to_camel


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC at second precision, as metav1.Time marshals."""
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _as_utc_seconds(value: datetime) -> datetime:
    # metav1.Time has second precision; truncating on the way in keeps a parsed status and a
    # freshly computed one comparable field by field.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


def stored_now(now: datetime) -> datetime:
    """``now`` as a stored timestamp will read back: UTC, whole seconds."""
    return _as_utc_seconds(now)


def elapsed_due(stamp: datetime, seconds: int) -> datetime:
    """When ``seconds`` have certainly elapsed since the instant a stored timestamp records.

    Stored timestamps are truncated to the second, so the real instant lies in
    [stamp, stamp + 1 s): measured from the stamp alone, a deadline would fire up to a
    second early (activeDeadlineSeconds 5 failing a job after 4.1 s, a TTL of 3 deleting
    the job 2.1 s after it finished). Adding the one-second tick makes the duration a
    lower bound, overshooting by less than a second.
    """
    return stamp + timedelta(seconds=seconds + 1)


Time = Annotated[
    datetime,
    AfterValidator(_as_utc_seconds),
    PlainSerializer(format_time, return_type=str, when_used="json"),
]


#: A counter in status: never negative (a hand edit that makes one so is unreadable).
Count = Annotated[int, Field(ge=0)]
#: "0-2,5": comma-separated indexes and index ranges (see parse_indexes).
INDEXES_PATTERN = r"^([0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*)?$"
Indexes = Annotated[
    str, Field(pattern=INDEXES_PATTERN, json_schema_extra={"pattern": INDEXES_PATTERN})
]


class _Model(BaseModel):
    model_config = ConfigDict(
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        extra="ignore",
    )


class JobCondition(_Model):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    last_update_time: Time | None = None
    last_transition_time: Time | None = None


class IndexRetry(_Model):
    """Durable retry state of one (replica type, index)."""

    #: Failures since the backoff was last reset; the replacement delay grows with it.
    failures: Count = 0
    #: When the last counted failure happened; the replacement is due this + backoff.
    last_failure_time: Time | None = None
    #: UID of the last pod whose end (failure or disruption) has been accounted, so the
    #: same pod seen again on a later reconcile is not counted twice.
    last_pod_uid: str | None = Field(default=None, alias="lastPodUID")
    #: The pod whose container restartCounts are folded into restarts so far.
    pod_uid: str | None = Field(default=None, alias="podUID")
    #: The restartCount total of podUID already folded into restarts.
    container_restarts: Count = 0
    #: When the last accounted end (a failure or a disruption) began: a peer's failure
    #: soon after it is named in an event (reconcile.policy.collateral).
    last_end_time: Time | None = None
    #: A straggler being moved (reconcile.progress.moves): the pod the controller
    #: deletes to replace it elsewhere; its end is the controller's doing, never a
    #: failure or a disruption.
    moving_pod_uid: str | None = Field(default=None, alias="movingPodUID")
    #: Nodes this index's pods keep away from: where it straggled (at most 8, the last).
    avoid_nodes: list[str] = Field(default_factory=list)
    #: When it was last moved: once per replica per window.
    moved_at: Time | None = None
    #: Times this index was moved, for its lifetime budget (reconcile.progress.moves).
    moves: Count = 0


class ReplicaStatus(_Model):
    active: Count = 0
    succeeded: Count = 0
    failed: Count = 0
    label_selector: dict[str, Any] | None = None
    selector: str | None = None
    #: Retries counted against runPolicy.backoffLimit: pod recreations after a failure plus
    #: container restarts done in place.
    restarts: Count = 0
    #: Pods replaced because something outside the job ended them (eviction, preemption,
    #: deletion); not counted against backoffLimit.
    disruptions: Count = 0
    #: Stragglers moved to another node (reconcile.progress.moves); not counted against
    #: backoffLimit either.
    moves: Count = 0
    #: Indexes whose pod succeeded, e.g. "0-2,5"; they are never run again.
    succeeded_indexes: Indexes = ""
    #: Indexes that failed for good (restartPolicy Never, or a permanent ExitCode).
    failed_indexes: Indexes = ""
    #: Indexes whose pod was running when this status was written, e.g. "0-3": a pod that
    #: disappears from one of them without having been seen ending is a disruption.
    active_indexes: Indexes = ""
    #: Per-index retry state, keyed by index; only indexes with a history appear.
    index_retries: dict[str, IndexRetry] = Field(default_factory=dict)


class ReplicaProgress(_Model):
    """One replica's last training-progress report (reconcile.progress)."""

    index: Count
    step: Count
    epoch: Count | None = None
    #: over the reports of the last minute
    steps_per_second: float | None = None
    last_report_time: Time | None = None
    node: str = ""


class ReplicaTypeProgress(_Model):
    """The reports of one replica type, summarised: bounded however many replicas."""

    #: replicas whose pod has reported
    reporting: Count = 0
    min_step: Count | None = None
    median_step: Count | None = None
    max_step: Count | None = None
    median_steps_per_second: float | None = None
    last_report_time: Time | None = None
    #: every reporting replica when at most 16 report; else the 8 furthest behind
    replicas: list[ReplicaProgress] = Field(default_factory=list)


class Straggler(_Model):
    """A replica slower than its peers (reconcile.progress.stragglers, docs/stalls.md)."""

    replica_type: str
    index: Count
    pod: str = ""
    pod_uid: str = Field(default="", alias="podUID")
    node: str = ""
    #: its speed as a fraction of its peers' (1: as fast; 0.5: half as fast)
    score: float
    #: what was compared: "section:<name>" (the replicas' self-timed sections) or
    #: "stepRate"
    basis: str
    #: how many peers (replicas of its type) it was compared with
    peers: Count = 0
    #: when it was flagged: the episode began
    since: Time | None = None


class TrainingProgress(_Model):
    """How far training has got, from the training processes' own reports
    (docs/progress.md). The job-level figures are the reporter's: the chief (or
    master) when it reports, else worker 0."""

    step: Count | None = None
    total_steps: Count | None = None
    epoch: Count | None = None
    total_epochs: Count | None = None
    #: 0-100, from steps (or epochs when no total of steps is known)
    percent: int | None = Field(default=None, ge=0, le=100)
    steps_per_second: float | None = None
    #: "1h4m", "3m20s", "40s": until estimatedCompletionTime, when this was written
    estimated_remaining: str | None = None
    estimated_completion_time: Time | None = None
    last_report_time: Time | None = None
    #: whose figures these are: "chief-0", "worker-0"
    reporter: str = ""
    #: when a replica's step last advanced (or the job first reported): the progress
    #: deadline counts from here, across a failover (docs/stalls.md)
    last_progress_time: Time | None = None
    #: the furthest step the job has reached (the chief's, else the workers' lower
    #: median): restarts that never get past it are restarts without progress
    furthest_step: Count | None = None
    #: replicas slower than their peers, slowest first (at most 16)
    stragglers: list[Straggler] = Field(default_factory=list)
    #: the reporter's named metrics (loss, accuracy, ...)
    metrics: dict[str, float] = Field(default_factory=dict)
    #: by replica type
    replicas: dict[str, ReplicaTypeProgress] = Field(default_factory=dict)


class RestartGuard(_Model):
    """Where the current run of restarts without progress began (docs/stalls.md)."""

    #: the furthest step any replica had reported before the first of them
    since_step: Count = 0
    #: the job's restarts (all replica types') before the first of them
    since_restarts: Count = 0


class JobStatus(_Model):
    conditions: list[JobCondition] = Field(default_factory=list)
    replica_statuses: dict[str, ReplicaStatus] = Field(default_factory=dict)
    start_time: Time | None = None
    completion_time: Time | None = None
    last_reconcile_time: Time | None = None
    #: The metadata.generation of the TFJob this status was computed from.
    observed_generation: int | None = None
    #: Whole-gang restarts (reconcile.policy.gang_restart): the generation of pods that is
    #: current; pods labelled with an earlier one are deleted, and their ends ignored.
    gang_epoch: Count = 0
    #: The training processes' own progress reports, summarised (reconcile.progress).
    training_progress: TrainingProgress | None = None
    #: Restarts in a row that made no progress (reconcile.progress.guard).
    restart_guard: RestartGuard | None = None

    @classmethod
    def read(cls, obj: object) -> tuple[JobStatus, str | None]:
        """Parse a stored status: the status, and why it cannot be read (None when it
        can). No status at all is an empty one; an unreadable one is *not*: it may be
        the record of a finished job, and reading it as empty would re-run the job."""
        if obj is None:
            return cls(), None
        if not isinstance(obj, dict):
            return cls(), f"status: must be an object, not {type(obj).__name__}"
        try:
            return cls.model_validate(obj), None
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in ("status", *first["loc"]))
            return cls(), f"{where}: {first['msg']} (got {first.get('input')!r:.80})"

    @classmethod
    def from_json(cls, obj: object) -> JobStatus:
        """Parse a stored status; anything unreadable counts as "no status yet"."""
        return cls.read(obj)[0]

    def to_json(self) -> dict[str, Any]:
        """The JSON body written to the status subresource (Go ``omitempty`` style)."""
        out: dict[str, Any] = self.model_dump(mode="json", by_alias=True, exclude_defaults=True)
        # The v1 SDK models expect both keys to be present once the job has a status.
        out.setdefault("conditions", [])
        out.setdefault("replicaStatuses", {})
        return out


# --- compact index sets ("0-2,5"), the format of batch/v1 completedIndexes -----------------


def parse_indexes(text: str) -> frozenset[int]:
    """Parse "0-2,5" into {0, 1, 2, 5}; malformed parts are ignored rather than fatal."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        first, sep, last = part.partition("-")
        try:
            lo = int(first)
            hi = int(last) if sep else lo
        except ValueError:
            continue
        if 0 <= lo <= hi:
            out.update(range(lo, hi + 1))
    return frozenset(out)


def format_indexes(indexes: Iterable[int]) -> str:
    """Format {0, 1, 2, 5} as "0-2,5" (sorted, ranges of 2+ collapse to "a-b")."""
    parts: list[str] = []
    run_start: int | None = None
    prev: int | None = None
    for i in sorted(set(indexes)):
        if run_start is None:
            run_start = prev = i
            continue
        assert prev is not None
        if i == prev + 1:
            prev = i
            continue
        parts.append(_run(run_start, prev))
        run_start = prev = i
    if run_start is not None and prev is not None:
        parts.append(_run(run_start, prev))
    return ",".join(parts)


def _run(lo: int, hi: int) -> str:
    return str(lo) if lo == hi else f"{lo}-{hi}"
