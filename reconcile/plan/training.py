"""trainingProgress in the status a running job's pass writes (reconcile.progress).

Laid over whatever the pass decided: a pass that writes anyway carries the latest
progress with it, and one that would write nothing writes progress alone, which the
sync layer paces (``Plan.training_only``). With no report from a current pod (none
yet, or the controller restarted) the stored progress stays as it is.
"""

from __future__ import annotations

from dataclasses import replace

from reconcile.api.status_types import JobStatus
from reconcile.plan.model import Plan, Snapshot
from reconcile.progress.summary import summarize


def with_training(plan: Plan, snap: Snapshot, stored: JobStatus) -> Plan:
    if not snap.training:
        return plan
    live = frozenset(p.uid for p in snap.pods if p.uid)
    progress = summarize(snap.training, live)
    if progress is None:
        return plan
    shown = progress.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    base = plan.status if plan.status is not None else stored.to_json()
    if base.get("trainingProgress") == shown:
        return plan
    return replace(
        plan, status={**base, "trainingProgress": shown}, training_only=plan.status is None
    )
