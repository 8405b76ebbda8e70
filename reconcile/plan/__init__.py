"""compute_plan: everything one reconcile pass decides, as a pure function of a snapshot.

No I/O and no clock reads: the orchestrator (reconcile.sync.tfjob) passes the job as read by
reconcile.api.spec, its owned pods and services and ``now``, and applies the returned Plan
(children first, then the status once, then the events). Running the same snapshot twice
gives the same plan, and a world that has not changed gives ``status=None``: no write.

Order of decisions (each step returns early); the policy itself lives in its own room:
1. managed by another controller → skip; being deleted → skip (the garbage collector owns it);
2. finished (Succeeded/Failed) → only cleanPodPolicy and TTL (reconcile.policy.cleanup); never new
   pods: a finished job is not re-run, whatever happens to its pods;
3. invalid spec → Failed (TFJobFailedValidation) with the field errors, no pods;
4. suspended → delete every pod and service, Suspended=True;
5. otherwise: account every pod into the durable per-index record (policy.restart),
   reach a verdict (policy.verdict), compute the status (policy.status), then either
   finish (cleanup and TTL) or diff the children (policy.children).

Every branch also says which pods' tracking finalizers come off (reconcile.policy.tracking),
judged against the status as stored, never the one this pass computes.
"""

from reconcile.plan.compute import compute_plan
from reconcile.plan.model import Plan, PlanConfig, PodGroupWrite, Snapshot
from reconcile.policy.conditions import EventIntent

__all__ = ["EventIntent", "Plan", "PlanConfig", "PodGroupWrite", "Snapshot", "compute_plan"]
