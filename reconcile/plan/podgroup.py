"""The PodGroup step of a pass with gang scheduling: the PodGroup first, then the pods."""

from __future__ import annotations

from dataclasses import dataclass

from reconcile.api.models import TFJob
from reconcile.plan.model import PlanConfig, PodGroupWrite, Snapshot
from reconcile.policy.gang import (
    admitted,
    desired_podgroup,
    owned_by,
    phase_of,
    spec_patch,
)


@dataclass(frozen=True)
class GangStep:
    write: PodGroupWrite | None
    pods_allowed: bool
    #: the PodGroup's phase while the gang waits to be admitted (Volcano), else None
    waiting: str | None = None


def gang_step(snap: Snapshot, tfjob: TFJob, config: PlanConfig) -> GangStep | None:
    """The PodGroup first, then the pods: none before it exists, and with Volcano none
    before the scheduler admits it (reconcile.policy.gang)."""
    gang = config.gang
    if gang is None:
        return None
    desired = desired_podgroup(tfjob, gang, snap.priorities)
    existing = snap.podgroup
    if existing is None:
        return GangStep(PodGroupWrite("create", desired), pods_allowed=False)
    if not owned_by(existing, tfjob.uid) or existing.get("metadata", {}).get("deletionTimestamp"):
        # An earlier job's of this name, which the garbage collector is removing, or
        # ours going away (a suspend just undone): its deletion event brings the job
        # back, to make it anew.
        return GangStep(None, pods_allowed=False)
    patch = spec_patch(existing, desired, gang)
    write = PodGroupWrite("patch", patch) if patch is not None else None
    if admitted(gang, existing):
        return GangStep(write, pods_allowed=True)
    return GangStep(write, pods_allowed=False, waiting=phase_of(existing))


def podgroup_delete(snap: Snapshot, config: PlanConfig) -> PodGroupWrite | None:
    """Finished, failed or suspended: the PodGroup goes (upstream), once."""
    pg = snap.podgroup
    if config.gang is None or pg is None or not owned_by(pg, snap.job.uid):
        return None
    if pg.get("metadata", {}).get("deletionTimestamp"):
        return None
    return PodGroupWrite("delete", pg)
