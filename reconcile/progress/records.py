"""What is kept of one replica's reports: the last one, and enough recent ones for a rate.

A record belongs to one pod: a report from the index's next pod (a replacement, a gang
restart) starts a new record, and so does a step that went backwards (the program
resumed from a checkpoint), so a rate never spans a restart. A report without metrics
keeps the ones its pod sent last.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from reconcile.progress.wire import Report

#: reports kept for the rate; with the helper's 5 s interval, the last half minute
RATE_SAMPLES = 8
#: samples older than this are not used for the rate
RATE_WINDOW_SECONDS = 120.0


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
    prev: ReplicaRecord | None, who: Reporter, report: Report, at: datetime
) -> ReplicaRecord:
    """The record after ``report`` from ``who`` arrived at ``at``."""
    sample = (at.timestamp(), report.step)
    if (
        prev is None
        or prev.who.pod_uid != who.pod_uid
        or report.step < prev.report.step
        or sample[0] < prev.samples[-1][0]
    ):
        return ReplicaRecord(who, report, at, (sample,))
    if not report.metrics and prev.report.metrics:
        # a report of its step alone (a batch, under a strategy whose batch logs are
        # not the mean) keeps the metrics its pod reported last (an epoch's end)
        report = replace(report, metrics=prev.report.metrics)
    return ReplicaRecord(who, report, at, (*prev.samples[-(RATE_SAMPLES - 1) :], sample))
