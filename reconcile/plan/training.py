"""trainingProgress in the status a running job's pass writes (reconcile.progress).

Laid over whatever the pass decided: a pass that writes anyway carries the latest
progress with it, and one that would write nothing writes progress alone, which the
sync layer paces (``Plan.training_only``). With no report from a current pod (none
yet, or the controller restarted) the stored progress stays as it is.
"""

from __future__ import annotations

from dataclasses import replace

from reconcile.api.status_types import JobStatus, TrainingProgress
from reconcile.plan.model import Plan, Snapshot
from reconcile.progress.summary import summarize


def with_training(plan: Plan, snap: Snapshot, stored: JobStatus) -> Plan:
    if not snap.training:
        return plan
    live = frozenset(p.uid for p in snap.pods if p.uid)
    progress = summarize(snap.training, live)
    if progress is None:
        return plan
    progress = kept_marks(progress, stored.training_progress)
    shown = progress.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    base = plan.status if plan.status is not None else stored.to_json()
    if base.get("trainingProgress") == shown:
        return plan
    return replace(
        plan, status={**base, "trainingProgress": shown}, training_only=plan.status is None
    )


def kept_marks(new: TrainingProgress, stored: TrainingProgress | None) -> TrainingProgress:
    """``new`` with the marks that only move forward taken from ``stored`` where it is
    ahead: the last progress and the furthest step outlive the records (a failover, a
    restart's new pods, which have not got as far)."""
    if stored is None:
        return new
    update: dict[str, object] = {}
    if stored.last_progress_time is not None and (
        new.last_progress_time is None or stored.last_progress_time > new.last_progress_time
    ):
        update["last_progress_time"] = stored.last_progress_time
    if stored.furthest_step is not None and (
        new.furthest_step is None or stored.furthest_step > new.furthest_step
    ):
        update["furthest_step"] = stored.furthest_step
    return new.model_copy(update=update) if update else new
