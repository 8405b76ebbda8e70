"""What is kept of one replica's reports: the last one, and enough recent ones for a rate.

A record belongs to one pod: a report from the index's next pod (a replacement, a gang
restart) starts a new record, and so does a step that went backwards (the program
resumed from a checkpoint), so a rate never spans a restart. A report without metrics
keeps the ones its pod sent last.

Progress, for the stall deadline (reconcile.progress.stall), is a step that advanced:
``progress_at`` is when this pod's step last rose. A record's first report is progress
only when its step is past the replica's last known one (``baseline``: the previous
record's, or after a failover what the stored status shows), or when none is known at
all (the job's first report): a program that restarts, reports the step it resumed at
and hangs has not progressed, and neither has one that reports the same step forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from reconcile.progress.wire import Report

#: reports kept for the rate; with the helper's 5 s interval, the last half minute
RATE_SAMPLES = 8
#: samples older than this are not used for the rate
RATE_WINDOW_SECONDS = 120.0


Sections = tuple[tuple[float, Mapping[str, float]], ...]


@dataclass(frozen=True, slots=True)
class Reporter:
    """Who sent a report: read from the pod its token was bound to, never from the body."""

    replica_type: str  # as the spec spells it: "Worker", "Chief"
    index: int
    pod_name: str
    pod_uid: str
    node: str


@dataclass(frozen=True, slots=True)
class ReplicaRecord:
    who: Reporter
    report: Report
    at: datetime  # when the controller received it (tz-aware UTC)
    #: (POSIX seconds, step) of this pod's recent reports, oldest first
    samples: tuple[tuple[float, int], ...]
    #: when this pod's step last advanced (see the module docstring)
    progress_at: datetime | None = None
    #: (POSIX seconds, sections) of this pod's recent reports that timed sections
    sections: Sections = ()
    #: POSIX seconds of this record's first report: its warm-up (the first steps build
    #: and compile the graph), which straggler scores leave out
    first: float = 0.0

    @property
    def steps_per_second(self) -> float | None:
        """Over the samples in the window before the last, or None with fewer than two."""
        if len(self.samples) < 2:
            return None
        last_t, last_step = self.samples[-1]
        window = [s for s in self.samples if last_t - s[0] <= RATE_WINDOW_SECONDS]
        first_t, first_step = window[0]
        if last_t <= first_t:
            return None
        return (last_step - first_step) / (last_t - first_t)


def record(
    prev: ReplicaRecord | None,
    who: Reporter,
    report: Report,
    at: datetime,
    baseline: int | None = None,
) -> ReplicaRecord:
    """The record after ``report`` from ``who`` arrived at ``at``; ``baseline`` is the
    replica's step as the stored status shows it, for a first report with no ``prev``."""
    sample = (at.timestamp(), report.step)
    if (
        prev is None
        or prev.who.pod_uid != who.pod_uid
        or report.step < prev.report.step
        or sample[0] < prev.samples[-1][0]
    ):
        known = prev.report.step if prev is not None else baseline
        moved = known is None or report.step > known
        timed: Sections = ((sample[0], report.sections),) if report.sections else ()
        return ReplicaRecord(who, report, at, (sample,), at if moved else None, timed, sample[0])
    if not report.metrics and prev.report.metrics:
        # a report of its step alone (a batch, under a strategy whose batch logs are
        # not the mean) keeps the metrics its pod reported last (an epoch's end)
        report = replace(report, metrics=prev.report.metrics)
    progress_at = at if report.step > prev.report.step else prev.progress_at
    samples = (*prev.samples[-(RATE_SAMPLES - 1) :], sample)
    timed = prev.sections
    if report.sections:
        timed = (*timed[-(RATE_SAMPLES - 1) :], (sample[0], report.sections))
    return ReplicaRecord(who, report, at, samples, progress_at, timed, prev.first)


def known_step(progress: object, replica_type: str, index: int) -> int | None:
    """The replica's step as a stored trainingProgress shows it: its own, when it is
    listed; else the furthest of its type, which no unlisted replica had passed (listed
    are the replicas furthest behind); None when the job has none stored. Read from the
    cached JSON: one number, no model built for it."""
    if not isinstance(progress, dict):
        return None
    by_type = progress.get("replicas")
    entry = by_type.get(replica_type) if isinstance(by_type, dict) else None
    if not isinstance(entry, dict):
        return None
    listed = entry.get("replicas")
    listed = listed if isinstance(listed, list) else []
    for r in listed:
        if isinstance(r, dict) and r.get("index") == index:
            step = r.get("step")
            return step if isinstance(step, int) else None
    reporting = entry.get("reporting")
    if not isinstance(reporting, int) or len(listed) >= reporting:
        return None  # every replica that reported is listed: this one had not
    furthest = entry.get("maxStep")
    return furthest if isinstance(furthest, int) else None
