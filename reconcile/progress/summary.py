"""The job's trainingProgress from its replicas' records: a pure function.

Job-level figures are the reporter's: the chief (or master) when it reports, else
worker 0, else the lowest replica that does. The chief of a ParameterServerStrategy job
is the coordinator, the only process that knows the step; in MultiWorkerMirroredStrategy
every worker takes the same steps and worker 0 is the one the callbacks run on.

Per replica type the status stays bounded: counts, the spread of steps and the median
rate, and at most LIST_ALL replicas listed; a type with more lists the LAGGARDS
furthest behind (lowest step, then the oldest report). A 1,000-replica job's
trainingProgress is thus a few kilobytes at most (docs/progress.md#status).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from datetime import datetime, timedelta

from reconcile.api.names import ReplicaType
from reconcile.api.status_types import (
    ReplicaProgress,
    ReplicaTypeProgress,
    TrainingProgress,
    stored_now,
)
from reconcile.progress.records import ReplicaRecord

LIST_ALL = 16
LAGGARDS = 8
#: whose figures the job shows, in order
REPORTER_ORDER = (ReplicaType.CHIEF, ReplicaType.MASTER, ReplicaType.WORKER)


def summarize(
    records: Iterable[ReplicaRecord], live_pods: frozenset[str]
) -> TrainingProgress | None:
    """trainingProgress from the records of pods in ``live_pods`` (UIDs), or None when
    none of them has reported.

    A function of the records alone, not of the time it is computed at: the remaining
    time is counted from the reporter's last report, so a job whose reports stop does
    not get a new status every pass (estimatedCompletionTime says when, absolutely)."""
    live = [r for r in records if r.who.pod_uid in live_pods]
    if not live:
        return None
    lead = _reporter(live)
    rep = lead.report
    total_steps = rep.total_steps or max((r.report.total_steps or 0 for r in live), default=0)
    rate = lead.steps_per_second
    completion = _completion(lead, total_steps, rate)
    remaining = None
    if completion is not None:
        remaining = human_duration(max(0.0, (completion - stored_now(lead.at)).total_seconds()))
    moved = [r.progress_at for r in live if r.progress_at is not None]
    by_type: dict[str, list[ReplicaRecord]] = {}
    for r in live:
        by_type.setdefault(r.who.replica_type, []).append(r)
    return TrainingProgress(
        step=rep.step,
        total_steps=total_steps or None,
        epoch=rep.epoch,
        total_epochs=rep.total_epochs,
        percent=_percent(lead, total_steps),
        steps_per_second=_round(rate),
        estimated_remaining=remaining,
        estimated_completion_time=completion,
        last_report_time=max(r.at for r in live),
        reporter=f"{lead.who.replica_type.lower()}-{lead.who.index}",
        last_progress_time=stored_now(max(moved)) if moved else None,
        furthest_step=mark_step(live),
        metrics={k: _significant(v) for k, v in rep.metrics.items()},
        replicas={t: _type_progress(rs) for t, rs in sorted(by_type.items())},
    )


def _rank(r: ReplicaRecord) -> tuple[int, int, str]:
    t = r.who.replica_type
    order = next((i for i, k in enumerate(REPORTER_ORDER) if k.lower() == t.lower()), 99)
    return order, r.who.index, t


def _reporter(live: list[ReplicaRecord]) -> ReplicaRecord:
    return min(live, key=_rank)


def mark_step(records: Iterable[ReplicaRecord]) -> int | None:
    """The step the job has got to, as one replica cannot misstate it: the lower median
    of the steps of the reporter's replica type (the chief's own, when it reports; the
    workers' middle one otherwise). A replica reporting an absurd step moves it only
    when it is the job's one reporter; an evaluator's own count never drags it."""
    held = list(records)
    if not held:
        return None
    kind = _reporter(held).who.replica_type
    steps = sorted(r.report.step for r in held if r.who.replica_type == kind)
    return steps[(len(steps) - 1) // 2]


def _percent(lead: ReplicaRecord, total_steps: int) -> int | None:
    rep = lead.report
    if rep.final:
        return 100
    if total_steps:
        return min(100, rep.step * 100 // total_steps)
    if rep.total_epochs and rep.epoch is not None:
        return min(100, rep.epoch * 100 // rep.total_epochs)
    return None


def _completion(lead: ReplicaRecord, total_steps: int, rate: float | None) -> datetime | None:
    if lead.report.final:
        return stored_now(lead.at)
    if not total_steps or not rate or rate <= 0:
        return None
    left = max(0, total_steps - lead.report.step) / rate
    if left > 366 * 86400:
        return None  # a rate that low says nothing about when
    return stored_now(lead.at + timedelta(seconds=left))


def _type_progress(records: list[ReplicaRecord]) -> ReplicaTypeProgress:
    steps = sorted(r.report.step for r in records)
    rates = [x for x in (r.steps_per_second for r in records) if x is not None]
    if len(records) <= LIST_ALL:
        shown = records
    else:
        shown = sorted(records, key=lambda r: (r.report.step, r.at))[:LAGGARDS]
    return ReplicaTypeProgress(
        reporting=len(records),
        min_step=steps[0],
        median_step=steps[(len(steps) - 1) // 2],
        max_step=steps[-1],
        median_steps_per_second=_round(statistics.median(rates)) if rates else None,
        last_report_time=max(r.at for r in records),
        replicas=[_replica(r) for r in sorted(shown, key=lambda r: r.who.index)],
    )


def _replica(r: ReplicaRecord) -> ReplicaProgress:
    return ReplicaProgress(
        index=r.who.index,
        step=r.report.step,
        epoch=r.report.epoch,
        steps_per_second=_round(r.steps_per_second),
        last_report_time=r.at,
        node=r.who.node,
    )


def _round(x: float | None) -> float | None:
    return None if x is None else _significant(x, 4)


def _significant(x: float, digits: int = 6) -> float:
    """Fewer digits than a float prints: the status stays short, and a report that moves
    a metric in its 10th digit does not by itself make a status differ."""
    if x == 0 or not math.isfinite(x):
        return 0.0 if not math.isfinite(x) else x
    return float(f"{x:.{digits}g}")


def human_duration(seconds: float) -> str:
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60}m"
    if s >= 60:
        return f"{s // 60}m{s % 60}s"
    return f"{s}s"
