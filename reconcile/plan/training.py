"""trainingProgress in the status a running job's pass writes (reconcile.progress), with
the replicas flagged as stragglers (reconcile.progress.stragglers) and their events.

Laid over whatever the pass decided: a pass that writes anyway carries the latest
progress with it, and one that would write nothing writes progress alone, which the
sync layer paces (``Plan.training_only``). With no report from a current pod (none
yet, or the controller restarted) the stored progress stays as it is.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import TypeVar

from reconcile.api.status_types import JobStatus, TrainingProgress
from reconcile.plan.model import Plan, Snapshot
from reconcile.progress.stragglers import find_stragglers, straggler_events
from reconcile.progress.summary import summarize

T = TypeVar("T", int, datetime)


def with_training(plan: Plan, snap: Snapshot, stored: JobStatus) -> Plan:
    if not snap.training:
        return plan
    live = frozenset(p.uid for p in snap.pods if p.uid)
    progress = summarize(snap.training, live)
    if progress is None:
        return plan
    progress = kept_marks(progress, stored.training_progress)
    before = stored.training_progress.stragglers if stored.training_progress else []
    threshold = snap.job.watch.straggler_threshold
    records = [r for r in snap.training if r.who.pod_uid in live]
    flagged = find_stragglers(records, before, threshold, snap.now)
    progress = progress.model_copy(update={"stragglers": flagged})
    shown = progress.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    base = plan.status if plan.status is not None else stored.to_json()
    if base.get("trainingProgress") == shown:
        return plan
    events = straggler_events(snap.job.name, before, flagged, threshold)
    return replace(
        plan,
        status={**base, "trainingProgress": shown},
        training_only=plan.status is None,
        events=[*plan.events, *events],
    )


def kept_marks(new: TrainingProgress, stored: TrainingProgress | None) -> TrainingProgress:
    """``new`` with the marks that only move forward taken from ``stored`` where it is
    ahead: the last progress and the furthest step outlive the records (a failover, a
    restart's new pods, which have not got as far)."""
    if stored is None:
        return new
    update = {
        field: kept
        for field, kept in (
            ("last_progress_time", _ahead(stored.last_progress_time, new.last_progress_time)),
            ("furthest_step", _ahead(stored.furthest_step, new.furthest_step)),
        )
        if kept is not None
    }
    return new.model_copy(update=update) if update else new


def _ahead(stored: T | None, new: T | None) -> T | None:
    """``stored`` when it is ahead of ``new`` (or ``new`` has none), else None."""
    return stored if stored is not None and (new is None or stored > new) else None
