"""runPolicy.cleanPodPolicy: which pods, and with them which services, a finished job
removes (docs/semantics.md#run-policies).

A *failed* job stops its pods that are still active (Pending or Running) even under
cleanPodPolicy None, as the Kubernetes Job controller does for a failed Job. Upstream
keeps them: an OnFailure pod whose container keeps failing is then restarted by its
kubelet forever, holding its node's GPUs for a job that will never use them. Pods that
have finished are kept, with their services, so their logs stay readable; a succeeded
job keeps upstream's None (its parameter servers are left as they are).
"""

from __future__ import annotations

from collections.abc import Sequence

from controller.types import JSON
from reconcile.api.names import CleanPodPolicy
from reconcile.objects.observed import ObservedPod
from reconcile.objects.pods import LIVE_PHASES, is_terminating, name_of


def effective_policy(policy: str | None, failed: bool) -> str | None:
    """cleanPodPolicy as applied: None on a failed job stops its active pods (Running)."""
    if failed and policy not in (CleanPodPolicy.ALL, CleanPodPolicy.RUNNING):
        return CleanPodPolicy.RUNNING
    return policy


def cleanup_deletions(
    policy: str | None, pods: Sequence[ObservedPod], services: Sequence[JSON]
) -> tuple[list[ObservedPod], list[JSON]]:
    """What cleanPodPolicy removes, pods and their services together.

    Unlike upstream, services are matched to what is *kept*, not to what is deleted in this
    pass: a service whose pod is already gone (or on its way out) is removed too, so a
    failed service delete or a pod removed by someone else leaves nothing behind (#1191).
    """
    if policy == CleanPodPolicy.ALL:
        return (
            [p for p in pods if not p.terminating],
            [s for s in services if not is_terminating(s)],
        )
    if policy != CleanPodPolicy.RUNNING:
        return [], []
    live = [p for p in pods if not p.terminating]
    kept = {p.name for p in live if p.phase not in LIVE_PHASES}
    del_pods = [p for p in live if p.phase in LIVE_PHASES]
    del_svcs = [s for s in services if not is_terminating(s) and name_of(s) not in kept]
    return del_pods, del_svcs
